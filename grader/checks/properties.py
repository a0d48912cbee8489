"""Hypothesis settings for graded property-based tests: the same examples on every run of a student's
(derandomized), no example database, no deadline (the first call compiles). While grading, each test's
examples come from a seed of its own, drawn from the grading's secret and the test's identity
(grader.checks.inputs.property_seed, set by grader.harness.selection before the test runs): a student
who reads the tests cannot foresee them, and no two tests share them."""

from hypothesis import HealthCheck, Phase, settings

GRADING = settings(
    derandomize=True,
    database=None,
    deadline=None,
    # `impl` is the same module for every example, so the function-scoped fixture is harmless.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    # No "explain" phase: it costs seconds per failing test and tells a student nothing the example does not.
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    # The first failure, shrunk, is the verdict and the message: searching on for other distinct failures
    # (and shrinking each) doubled a wrong submission's time in ex13, and their group read as an error.
    report_multiple_bugs=False,
)
