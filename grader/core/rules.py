"""The kinds of rule a test grades, declared on the test with `@pytest.mark.rules("values", "layouts")`.

They are what a student's own check must sample: `shardlab dev-check` fails when hidden tests grade a
function on a kind of rule (or reward a branch of it, grader.harness.graded) that no visible test of that
function checks, so a design an exercise forbids fails in `shardlab check` before it costs points at
grading."""

from __future__ import annotations

from enum import StrEnum

from grader.core.errors import ShardlabError


class Rule(StrEnum):
    VALUES = "values"  # the numbers equal a reference's, within the tolerance
    LAYOUTS = "layouts"  # an output's sharding: its spec, mesh and each device's block
    ERRORS = "errors"  # a bad input raises the error the docstring names
    PROPERTIES = "properties"  # a law that holds on drawn inputs (monotonic, free on one device)
    COLLECTIVES = "collectives"  # the collectives of the compiled program, their kinds and groups
    MEMORY = "memory"  # XLA's per-device memory figures of the compiled program
    FLOPS = "flops"  # XLA's per-device flop count of the compiled program
    WORK = "work"  # the multiply-adds each device executes, within its share of the work
    TRAFFIC = (
        "traffic"  # the bytes each device sends through collectives, within a bound of the shapes
    )
    SPEEDUP = "speedup"  # a timed speedup over a baseline, above a threshold
    TRAINING = "training"  # several training steps behave like a single device's
    JOINS = "joins"  # the processes join one cluster through jax.distributed


# What a reader of the README's table needs to know of each kind.
DESCRIPTIONS: dict[Rule, str] = {
    Rule.VALUES: "values equal a reference's",
    Rule.LAYOUTS: "output shardings",
    Rule.ERRORS: "the error a bad input raises",
    Rule.PROPERTIES: "laws on drawn inputs",
    Rule.COLLECTIVES: "collectives of the compiled program",
    Rule.MEMORY: "XLA's per-device memory",
    Rule.FLOPS: "XLA's per-device flops",
    Rule.WORK: "each device's executed multiply-adds, within its share",
    Rule.TRAFFIC: "each device's bytes sent through collectives, within a bound",
    Rule.SPEEDUP: "timed speedup",
    Rule.TRAINING: "training over several steps",
    Rule.JOINS: "processes joining one cluster",
}


class UnknownRule(ShardlabError, ValueError):
    def __str__(self) -> str:
        return f"unknown kind of rule {self.args[0]!r} (known: {', '.join(Rule)})"


def rules_of(names) -> tuple[Rule, ...]:
    """The kinds a `rules` marker names, in the Rule enum's order, each once."""
    try:
        named = {Rule(name) for name in names}
    except ValueError:
        raise UnknownRule(
            next(name for name in names if name not in {rule.value for rule in Rule})
        ) from None
    return tuple(rule for rule in Rule if rule in named)
