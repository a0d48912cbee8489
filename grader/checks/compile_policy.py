"""How hard XLA optimizes what the grader's processes compile: little, except for a program that is timed.

Compiling is about half of what grading costs, and most programs are compiled to be checked, not timed: run
once on small inputs for their values, or read for their collectives, memory and flops. jax's
`jax_disable_most_optimizations` skips LLVM's costly passes (measured: a training step compiles in two
thirds of the time) and leaves XLA's HLO passes alone, so a program's collectives, memory and flops are
those of the fully optimized program (checked by tests/grader/checks/test_compile_policy.py), and its values
those of any correct compilation (IEEE arithmetic, no fast math either way).

A speed measurement compares fully optimized programs: the speedup fixture compiles them inside
`optimized_compiles()`, which drops jax's in-memory caches first, so that a program compiled earlier in the
test for its values is compiled again, optimized, before it is timed. The persistent compile cache keys an
entry by its compile options, so the two forms of a program never meet there.
"""

from __future__ import annotations

import contextlib

FLAG = "jax_disable_most_optimizations"


def compile_quickly() -> None:
    """From now on this process compiles with little optimization (the harness, the worker, a check)."""
    import jax

    jax.config.update(FLAG, True)


@contextlib.contextmanager
def optimized_compiles():
    """Programs compiled inside are fully optimized, those compiled before included (compiled again)."""
    import jax

    quick = jax.config.read(FLAG)
    if quick:
        jax.clear_caches()
        jax.config.update(FLAG, False)
    try:
        yield
    finally:
        if quick:
            jax.config.update(FLAG, True)
