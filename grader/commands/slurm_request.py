"""What a course asks of a Slurm cluster (`grade-batch --slurm`), declared once: each field of SlurmRequest
is a grade-batch flag and the #SBATCH line it becomes. Apart from grader.commands.slurm, so that building
shardlab's argument parser (every command, `shardlab check` included) does not import the batch grader."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any


def request(
    default: Any,
    flag: str,
    help: str,
    *,
    sbatch: str | None = None,
    type: Any = str,
    repeated: bool = False,
    metavar: str | None = None,
) -> Any:
    """A field of SlurmRequest: its grade-batch flag and the #SBATCH option it becomes (None: used otherwise)."""
    return field(
        default=default,
        metadata={
            "flag": flag,
            "help": help,
            "sbatch": sbatch,
            "type": type,
            "repeated": repeated,
            "metavar": metavar,
        },
    )


@dataclass(frozen=True)
class SlurmRequest:
    partition: str | None = request(
        None, "--slurm-partition", "the partition the jobs run in", sbatch="--partition"
    )
    account: str | None = request(
        None, "--slurm-account", "the account the jobs are charged to", sbatch="--account"
    )
    time: str | None = request(
        None,
        "--slurm-time",
        "each task's time limit, as sbatch takes it (default: the "
        "grading's --time-limit plus 10 minutes)",
        sbatch="--time",
        metavar="TIME",
    )
    cpus_per_task: int = request(
        2,
        "--slurm-cpus-per-task",
        "cores per student, bound to the task (default 2: "
        "the course's speedup thresholds were set on 2 cores)",
        sbatch="--cpus-per-task",
        type=int,
        metavar="N",
    )
    mem: str | None = request(
        "8G",
        "--slurm-mem",
        "memory per student, as sbatch takes it (default 8G: a "
        "grading's harnesses and workers need about 1-3 GiB, the harness's address space "
        "is 6 GiB)",
        sbatch="--mem",
        metavar="SIZE",
    )
    array_limit: int | None = request(
        None,
        "--slurm-array-limit",
        "students graded at once (the array's %%N; default: as many as the cluster runs)",
        type=int,
        metavar="N",
    )
    sbatch: tuple[str, ...] = request(
        (),
        "--sbatch",
        "one more #SBATCH line for every job, e.g. '--qos=short' (repeatable)",
        repeated=True,
        metavar="OPTION",
    )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SlurmRequest:
        return cls(
            **{
                f.name: tuple(getattr(args, f.name) or ())
                if f.metadata["repeated"]
                else getattr(args, f.name)
                for f in dataclasses.fields(cls)
            }
        )

    def directives(self, default_time: str) -> list[str]:
        """The #SBATCH lines every job of the batch carries."""
        lines = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "time" and value is None:
                value = default_time
            if f.metadata["sbatch"] and value is not None:
                lines.append(f"#SBATCH {f.metadata['sbatch']}={value}")
        return lines + [f"#SBATCH {line}" for line in self.sbatch]


def add_slurm_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("on a Slurm cluster (--slurm)")
    group.add_argument(
        "--slurm",
        action="store_true",
        help="grade as a Slurm job array and a collect job "
        "(from a login node; OUT on a filesystem every node sees)",
    )
    group.add_argument(
        "--wait",
        action="store_true",
        help="with --slurm: wait for the collect job, showing progress",
    )
    group.add_argument(
        "--slurm-dry-run", action="store_true", help="print the job scripts, submit nothing"
    )
    for f in dataclasses.fields(SlurmRequest):
        meta = f.metadata
        if meta["repeated"]:
            group.add_argument(
                meta["flag"],
                dest=f.name,
                action="append",
                default=[],
                metavar=meta["metavar"],
                help=meta["help"],
            )
        else:
            group.add_argument(
                meta["flag"],
                dest=f.name,
                type=meta["type"],
                default=f.default,
                metavar=meta["metavar"],
                help=meta["help"],
            )
