"""How hard XLA optimizes what a student's worker compiles: little.

The worker compiles the student's functions called directly: run once, on small inputs, for values the
harness compares; never timed (a speed measurement times the harness's own copy of an exported program,
which the harness compiles fully optimized, as it compiles everything). jax's
`jax_disable_most_optimizations` skips LLVM's costly passes (measured: a training step compiles in two
thirds of the time) and leaves XLA's HLO passes alone: the compiled program is the same HLO, so its values
are those of any correct compilation (IEEE arithmetic, no fast math either way), which
tests/grader/checks/test_compile_policy.py checks on the course's programs.
"""

from __future__ import annotations

FLAG = "jax_disable_most_optimizations"


def compile_quickly() -> None:
    """From now on this process compiles with little optimization (a worker, before the student's code)."""
    import jax

    jax.config.update(FLAG, True)
