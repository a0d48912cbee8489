"""Answering a JAX sharding error that a Python loop over devices (or over slices of a sharded array)
raises with what to do instead: JAX's own words point to a mesh context or to `.at[...].get`, away from
the shard_map the exercise asks for."""

from __future__ import annotations

import contextlib

# The errors JAX raises when code slices a sharded array by hand or traces outside a mesh context; read
# by their type's name, which a student's module cannot choose (it is JAX's exception).
_SLICING = ("ShardingTypeError",)
_MESH_CONTEXT = "jax.set_mesh"


def _by_hand(exc: BaseException) -> bool:
    return type(exc).__name__ in _SLICING or (
        isinstance(exc, ValueError) and _MESH_CONTEXT in str(exc)
    )


@contextlib.contextmanager
def written_per_device(what: str):
    """Around a call of `what`, a function whose per-device work shard_map should express: a sharding
    error from slicing or looping by hand becomes one failure that says what to do instead."""
    try:
        yield
    except Exception as exc:
        if not _by_hand(exc):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise AssertionError(
            f"{what} raised {type(exc).__name__} ({first[:300]}): it slices or loops over a sharded "
            "array by hand, device by device. Do not loop over devices or index their blocks: write the "
            "work of one device as a function of its own block and wrap it in jax.shard_map(f, "
            "mesh=mesh, in_specs=..., out_specs=...), which runs it on every device's block at once."
        ) from None
