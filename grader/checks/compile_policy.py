"""How hard XLA optimizes a program nobody times: little.

jax's `jax_disable_most_optimizations` skips LLVM's costly passes (measured: a training step compiles in
two thirds of the time) and leaves XLA's HLO passes alone: the compiled program is the same HLO, so every
fact a rule reads of it (collectives, operands, bytes, memory, the work account) is the same, and its
values are those of any correct compilation (IEEE arithmetic, no fast math either way). Two processes
compile quickly:
- a worker: it compiles the student's functions called directly, run once on small inputs for values the
  harness compares, never timed (a speed measurement times the harness's own copy of an exported program);
- a test process run with `--timing=skip`, where no speed is measured at all.
Every other compiles fully optimized. The flag is part of the compile cache's key: a quick program is never
what a timed run finds in a cache.

The grader's own suite checks the claim on the course's programs: it cross-checks every program its run
of the exercise tests compiles (`cross_check_compiles`; grader.checks.hlo.compiled compiles it the other way
too), so that a program whose quick compile differed would fail there, naming what differs.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

FLAG = "jax_disable_most_optimizations"
_cross_checking = False


def compile_quickly() -> None:
    """From now on this process compiles with little optimization (a worker, before the student's code; a
    test process that times nothing, before its first test)."""
    jax.config.update(FLAG, True)


def cross_check_compiles() -> None:
    """From now on every program grader.checks.hlo.compiled compiles is compiled the other way too (quickly
    when it was optimized, and back), and must be the same program."""
    global _cross_checking
    _cross_checking = True


def cross_checking() -> bool:
    return _cross_checking


def compiled_the_other_way(compile: Callable[[], jax.stages.Compiled]) -> jax.stages.Compiled:
    """`compile()` run with the flag flipped (quickly when this process optimizes fully, and back)."""
    quick = jax.config.read(FLAG)
    jax.config.update(FLAG, not quick)
    try:
        return compile()
    finally:
        jax.config.update(FLAG, quick)
