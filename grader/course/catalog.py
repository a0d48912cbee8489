"""The catalog: the one list of exercises. Every other place (tests, markers, points, CLI) derives from it.

An exercise's id is its module name, its tests' folder, its pytest marker and the prefix of its stub's
NotImplementedError, so `grep -r ex04_sharded_layer` finds everything about it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.core.errors import ShardlabError
from grader.course import paths


@dataclass(frozen=True)
class Exercise:
    id: str  # "ex04_sharded_layer": module, test folder and marker
    title: str
    points: int  # the exercise's total; its tests split it (see grader.scoring)
    hint: str
    seeds: str  # where the idea comes from, for course authors
    devices: tuple[int, ...] = (2, 4, 8)  # mesh sizes the hidden tests grade
    # the meshes' shapes, where the hidden tests vary them on one device count ("2x4")
    mesh_shapes: tuple[str, ...] = ()
    bonus: bool = False  # extra credit: its points add to a score but not to the maximum
    part: int = 1  # the course's half, a Part's number (PARTS)
    # Its functions run on a mesh, and each one graded is held to its share: a work rule (the multiply-adds
    # each device executes) and a traffic rule (the bytes each device sends), `shardlab dev-check` says.
    shares: bool = False
    # (function, why): a graded function of such an exercise held to no share, with the reason
    unshared: tuple[tuple[str, str], ...] = ()

    @property
    def number(self) -> str:
        """ "ex04": the tag a stub's NotImplementedError starts with."""
        return self.id.split("_", 1)[0]

    @property
    def module_file(self) -> str:
        return f"{self.id}.py"

    def solution_path(self, root: Path | None = None) -> Path:
        return (root or paths.SOLUTIONS_DIR) / self.module_file

    def stub_path(self, root: Path | None = None) -> Path:
        return (root or paths.EXERCISES_DIR) / self.module_file

    def tests_dir(self, root: Path | None = None) -> Path:
        return (root or paths.EXERCISE_TESTS_DIR) / self.id

    def support_files(self, root: Path | None = None) -> list[Path]:
        """The files the exercise's tests run beside (its conftest.py, a multi-process exercise's
        driver.py), as they exist under `root`'s tests: every student holds them with the visible tests."""
        return [
            self.tests_dir(root) / name
            for name in SUPPORT_FILES
            if (self.tests_dir(root) / name).is_file()
        ]


SUPPORT_FILES = ("conftest.py", "driver.py")

# Why a graded function of an exercise with shares is held to none (Exercise.unshared).
_PLACES = "places the values it is given on the mesh: it computes nothing"
_PURE = "pure Python: it runs on no mesh"


@dataclass(frozen=True)
class Part:
    """A half of the course: its exercises are those whose `part` is its number."""

    number: int
    title: str

    @property
    def exercises(self) -> tuple[Exercise, ...]:
        return tuple(e for e in EXERCISES if e.part == self.number)


PARTS: tuple[Part, ...] = (
    Part(1, "Part 1: meshes to multi-process JAX"),
    Part(2, "Part 2: scaling a model"),
)

EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        id="ex01_meshes",
        title="Devices and meshes",
        points=10,
        hint="jax.make_mesh takes axis_types and devices; a NamedSharding's devices_indices_map tells "
        "which slice of the global array each device holds.",
        seeds="Lab 3; ProJAX; MinText tutorial 1",
    ),
    Exercise(
        id="ex02_sharding_properties",
        title="What a sharding says",
        points=10,
        hint="A dimension split over several mesh axes is divided by the product of their sizes; the "
        "mesh axes a spec does not name are the ones each element is replicated over.",
        seeds='JeanZay tutorial "Sharding Properties"; ProJAX replicate',
    ),
    Exercise(
        id="ex03_computation_follows_data",
        title="Computation follows data",
        points=15,
        hint="Under jit the inputs' shardings decide the program; on an Explicit mesh jax.typeof shows "
        "the sharding in the type, and jax.eval_shape lets you ask JAX without computing.",
        seeds="Lab 3 ways 1-2; ProJAX",
    ),
    Exercise(
        id="ex04_sharded_layer",
        title="One layer, three ways",
        points=20,
        hint="Split the batch, replicate the weights: every row of the output needs only its own row of "
        "x. With features split instead, each device holds a partial product that must be summed.",
        seeds='Lab 3 "Data parallel layer"; design card "sharded layer"',
        shares=True,
        unshared=(
            (
                "layer_explicit",
                "called directly, as its contract allows (it may enter the mesh with jax.set_mesh, "
                "which no traced program can); the same layer is held to its share as layer_auto and "
                "layer_shard_map",
            ),
        ),
    ),
    Exercise(
        id="ex05_collectives",
        title="The collective zoo",
        points=15,
        hint="Inside jax.shard_map each device holds one block; jax.lax.psum, all_gather, psum_scatter, "
        "all_to_all and ppermute each move blocks in one pattern. A ring passes a block to the next "
        "device n - 1 times.",
        seeds="MinText tutorial 1 section 3; jz-tree MPI-style collectives",
        shares=True,
        unshared=(
            (
                "device_ranks",
                "takes no array, only the mesh: there is nothing to trace, so it is called directly and "
                "graded on its values",
            ),
        ),
    ),
    Exercise(
        id="ex06_matmul_cases",
        title="The four cases of a sharded matmul",
        points=15,
        hint="Look at where the contracting dimension lives: split on both operands means partial sums "
        "to add up; split on neither means nothing to communicate; split on one means gathering it.",
        seeds="MinText tutorial 1 sections 3.2-3.5",
        shares=True,
    ),
    Exercise(
        id="ex07_collective_matmul",
        title="Collective matmuls: overlapping communication with compute",
        points=15,
        hint="Instead of gathering all of rhs before multiplying, multiply the block you hold while the "
        "next one travels: n steps of ppermute, each paired with one block's matmul.",
        seeds='JAX shard_map guide (collective matmul); "How to Scale Your Model"',
        shares=True,
    ),
    Exercise(
        id="ex08_data_parallel_training",
        title="Data-parallel MLP training",
        points=20,
        hint="Split the batch, replicate the parameters, and average the gradients over the devices. "
        "Inside shard_map, jax.grad with respect to replicated parameters already sums over devices.",
        seeds='Lab 3 "Neural networks using automatic parallelization"; design card "data-parallel training"',
        shares=True,
        unshared=(
            ("shard_batch", _PLACES),
            ("replicate", _PLACES),
            (
                "train",
                "a loop over its steps that may read each loss as a Python float, as its contract "
                "allows: no one program of it can be traced; each step is held to its share as "
                "train_step and train_step_shard_map",
            ),
        ),
    ),
    Exercise(
        id="ex09_fsdp",
        title="Fully sharded data parallelism",
        points=20,
        hint="Keep only a slice of every weight on each device and gather the whole weight just before "
        "it is used. The gradient of a gathered weight comes back summed over devices; scatter it "
        "so each device keeps the part of the sum that belongs to its slice.",
        seeds="MinText tutorial 2; JAX shard_map guide (FSDP)",
        shares=True,
        unshared=(("shard_params", _PLACES),),
    ),
    Exercise(
        id="ex10_tensor_parallel",
        title="Tensor parallelism on a 2-D mesh",
        points=20,
        hint='Split W1 by columns and W2 by rows over "model": each device then holds a partial sum of '
        'the output, added up over "model" only. The batch is split over "data", so gradients '
        'are averaged over "data" only.',
        seeds='MinText tutorial 3; JAX "Distributed arrays" 4x2 example',
        shares=True,
        unshared=(("shard_mlp_params", _PLACES),),
    ),
    Exercise(
        id="ex11_padded_particles",
        title="Padded, imbalanced per-device data",
        points=20,
        hint="Each device holds a fixed-size buffer and a count of its valid rows: mask what is past the "
        "count. To move rows between devices, sort them into one fixed-size bucket per destination "
        "and exchange the buckets with all_to_all, counts alongside.",
        seeds="jz-tree multi-GPU guide (padded arrays, expanding_shard_map)",
        shares=True,
    ),
    Exercise(
        id="ex12_multi_controller",
        title="One program, several processes",
        points=15,
        hint="Every process runs the same program; jax.distributed.initialize joins them into one set of "
        "devices. An array spread over all processes is built from each process's local rows, and "
        "only a collective can bring its values to every process.",
        seeds='JeanZay tutorial; jz-tree "Multi-host execution"',
        devices=(8,),
    ),
    Exercise(
        id="ex13_comm_costs",
        title="Bonus: what communication costs",
        points=10,
        hint="A collective over n devices moves (n - 1)/n of the data through each device's link; an "
        "all-reduce is a reduce-scatter followed by an all-gather.",
        seeds='"How to Scale Your Model", sharding chapter',
        devices=(8,),
        bonus=True,
    ),
    Exercise(
        id="ex14_pipeline",
        title="Pipeline parallelism",
        points=20,
        hint="Each device holds one stage's layer; at step t stage s works on microbatch t - s, and one "
        "ppermute per step hands every stage's activations to the next. A loop carry that starts the "
        'same everywhere and becomes per-device needs jax.lax.pcast(..., "stage", to="varying"); '
        "give the loop static bounds so its sends can be counted.",
        seeds='MinText workshop; JAX shard_map guide "SPMD pipeline parallelism"; scaling book '
        '"Pipelining"',
        part=2,
        shares=True,
        unshared=(("gpipe_schedule", _PURE), ("bubble_fraction", _PURE)),
    ),
    Exercise(
        id="ex15_expert_parallel",
        title="Experts over devices",
        points=20,
        hint="Move the tokens, not the experts: sort each device's tokens into an (E, capacity, D) buffer, "
        "send it to the experts' owners with one all_to_all and bring the results back with another. "
        "The first capacity tokens per (device, expert) are kept; count the rest.",
        seeds='"How to Scale Your Model" (Transformers, MoE), MaxText moe',
        part=2,
        shares=True,
    ),
    Exercise(
        id="ex16_context_parallel",
        title="Context parallelism: long sequences over devices",
        points=20,
        hint="Keep each device's queries and move the keys and values instead: round a ring, block by "
        "block, with the softmax accumulated online (a running maximum and sum), or with all_to_all "
        "from a split sequence to split heads. A fully masked block must add nothing, not NaN.",
        seeds="scaling book; ring attention; DeepSpeed-Ulysses; MaxText context parallelism",
        part=2,
        shares=True,
        unshared=(("zigzag_order", _PURE),),
    ),
    Exercise(
        id="ex17_zero1_accumulation",
        title="ZeRO-1 and gradient accumulation",
        points=20,
        hint="Sum the microbatches' gradients locally (params pcast to varying first) and reduce once, "
        "after the loop. For ZeRO-1, psum_scatter each gradient so each device gets its rows, run Adam "
        "on its shard of m and v, and all_gather the updated rows.",
        seeds="scaling book ZeRO; CS336 sharded optimizer; MaxText gradient accumulation",
        part=2,
        shares=True,
        unshared=(("zero1_init", _PLACES),),
    ),
    Exercise(
        id="ex18_transformer_block",
        title="A transformer block in 3-D: FSDP, tensor and sequence parallelism",
        points=20,
        hint='Gather the weights over "data" where you use them, gather the sequence over "model" '
        "before attention and the MLP, and send the partial outputs back sequence-split with "
        "psum_scatter: no all-reduce. Their gradients then come back reduce-scattered by themselves. "
        "Remat: jax.checkpoint around the scanned block.",
        seeds="scaling book mixed FSDP and tensor parallelism; MinText tutorial 3; Megatron sequence "
        "parallelism",
        devices=(8,),
        mesh_shapes=("1x8", "2x4", "4x2"),
        part=2,
        shares=True,
        unshared=(("shard_block_params", _PLACES),),
    ),
)

_BY_ID = {exercise.id: exercise for exercise in EXERCISES}


class UnknownExercise(ShardlabError, KeyError):
    def __str__(self) -> str:
        known = ", ".join(e.id for e in EXERCISES)
        return f"no exercise {self.args[0]!r} in the catalog (known: {known})"


class UnknownPart(ShardlabError, KeyError):
    def __str__(self) -> str:
        known = ", ".join(str(p.number) for p in PARTS)
        return f"no part {str(self.args[0]).strip()!r} in the catalog (its parts: {known})"


def part(number: int | str) -> Part:
    """A part by its number (2, "2") or its name as a course file writes it ("part 2")."""
    key = str(number).strip().casefold().removeprefix("part").strip()
    for found in PARTS:
        if key == str(found.number):
            return found
    raise UnknownPart(number)


def is_part_name(name: str) -> bool:
    """Whether a course file's exercise item names a part ("part 2") rather than an exercise."""
    return str(name).strip().casefold().startswith("part")


def get(name: str) -> Exercise:
    """An exercise by its id ("ex04_sharded_layer"), its module file name, or its number in any of the ways a
    student types it: "ex04", "ex4", "04" or "4"."""
    key = name.strip().removesuffix(".py")
    if key in _BY_ID:
        return _BY_ID[key]
    digits = key.removeprefix("ex")
    if digits.isdigit() and len(digits) <= 3:
        key = f"ex{int(digits):02d}"
    matches = [e for e in EXERCISES if e.number == key]
    if len(matches) == 1:
        return matches[0]
    raise UnknownExercise(name)


def total_points() -> int:
    """The course's maximum: bonus points add to a score but not to the maximum."""
    return sum(e.points for e in EXERCISES if not e.bonus)
