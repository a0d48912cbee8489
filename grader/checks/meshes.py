"""Meshes for tests: the first devices, explicit axis types, a skip with a reason when too few exist."""

from __future__ import annotations

import math

import jax
import pytest
from jax.sharding import AxisType

_TYPES = {"explicit": AxisType.Explicit, "auto": AxisType.Auto}


def test_mesh(
    shape: tuple[int, ...], names: tuple[str, ...], axis_type: str = "explicit"
) -> jax.sharding.Mesh:
    """A mesh over the first prod(shape) devices with every axis `axis_type` ("explicit" or "auto")."""
    needed = math.prod(shape)
    if needed > jax.device_count():
        pytest.skip(f"needs {needed} devices, this backend has {jax.device_count()}")
    return jax.make_mesh(
        shape, names, axis_types=(_TYPES[axis_type],) * len(shape), devices=jax.devices()[:needed]
    )


test_mesh.__test__ = False  # a helper, not a pytest test
