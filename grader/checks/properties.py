"""Hypothesis settings for graded property-based tests: the same examples on every run (grading is
deterministic), no example database, no deadline (the first call compiles)."""

from hypothesis import HealthCheck, Phase, settings

GRADING = settings(
    derandomize=True,
    database=None,
    deadline=None,
    # `impl` is the same module for every example, so the function-scoped fixture is harmless.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    # No "explain" phase: it costs seconds per failing test and tells a student nothing the example does not.
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
)
