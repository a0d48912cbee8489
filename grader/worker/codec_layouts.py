"""The codec's layouts (grader.worker.codec_kinds): devices, meshes, PartitionSpecs and shardings, as the
fields of their trees and back, each checked against the devices that exist before anything is built."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from grader.worker.protocol_errors import ProtocolError, UnsupportedValue, need, need_int


def device(index) -> Any:
    import jax

    number = need_int(index, "a device id")
    need(number < jax.device_count(), "a device that does not exist")
    return jax.devices()[number]


def encode_mesh(mesh) -> dict:
    return {
        "shape": list(mesh.devices.shape),
        "devices": [int(d.id) for d in mesh.devices.flat],
        "names": [str(n) for n in mesh.axis_names],
        "types": [t.name for t in mesh.axis_types],
    }


def decode_mesh(tree: dict):
    import jax
    from jax.sharding import AxisType, Mesh

    need(isinstance(tree, dict) and tree.get("t") == "mesh", "expected a mesh")
    devices = jax.devices()
    shape = tuple(need_int(d, "a mesh dimension", 1) for d in tree.get("shape", []))
    ids = [need_int(i, "a device id") for i in tree.get("devices", [])]
    names, types = tree.get("names"), tree.get("types")
    need(
        len(ids) == math.prod(shape) and len(set(ids)) == len(ids),
        "a mesh's devices do not fill its shape",
    )
    need(
        all(i < len(devices) for i in ids),
        f"a mesh names a device beyond the {len(devices)} that exist",
    )
    need(
        isinstance(names, list)
        and len(names) == len(shape)
        and all(isinstance(n, str) for n in names)
        and len(set(names)) == len(names),
        "a mesh needs one distinct name per axis",
    )
    need(
        isinstance(types, list)
        and len(types) == len(shape)
        and all(t in AxisType.__members__ for t in types),
        "a mesh needs one axis type per axis",
    )
    grid = np.array([devices[i] for i in ids], dtype=object).reshape(shape)
    return Mesh(grid, tuple(names), axis_types=tuple(AxisType[t] for t in types))


def encode_spec(spec) -> dict:
    entries = []
    for entry in spec:
        if entry is None or isinstance(entry, str):
            entries.append(entry)
        elif isinstance(entry, tuple) and all(isinstance(e, str) for e in entry):
            entries.append(list(entry))
        else:
            raise UnsupportedValue(
                f"a PartitionSpec entry {entry!r} (expected None, an axis name or a tuple of them)"
            )
    return {"v": entries}


def decode_spec(tree: dict):
    from jax.sharding import PartitionSpec

    need(
        isinstance(tree, dict) and tree.get("t") == "spec" and isinstance(tree.get("v"), list),
        "expected a spec",
    )
    entries = []
    for entry in tree["v"]:
        if entry is None or isinstance(entry, str):
            entries.append(entry)
        else:
            need(
                isinstance(entry, list) and all(isinstance(e, str) for e in entry),
                f"a bad spec entry {entry!r}",
            )
            entries.append(tuple(entry))
    return PartitionSpec(*entries)


def named_fields(sharding) -> dict:
    return {
        "mesh": {"t": "mesh", **encode_mesh(sharding.mesh)},
        "spec": {"t": "spec", **encode_spec(sharding.spec)},
    }


def encode_sharding(sharding) -> dict:
    """An array's sharding (untagged, inside its array's tree): a NamedSharding or one device."""
    from jax.sharding import NamedSharding, SingleDeviceSharding

    if isinstance(sharding, NamedSharding):
        return {"kind": "named", **named_fields(sharding)}
    if isinstance(sharding, SingleDeviceSharding):
        return {"kind": "single", "device": int(next(iter(sharding.device_set)).id)}
    raise UnsupportedValue(
        f"an array with a {type(sharding).__name__} (expected a NamedSharding or one device)"
    )


def decode_sharding(tree: dict):
    import jax
    from jax.sharding import NamedSharding, SingleDeviceSharding

    need(isinstance(tree, dict), "expected a sharding")
    if tree.get("kind") == "named":
        return NamedSharding(decode_mesh(tree.get("mesh")), decode_spec(tree.get("spec")))
    if tree.get("kind") == "single":
        number = need_int(tree.get("device"), "a device id")
        need(number < jax.device_count(), "a sharding names a device that does not exist")
        return SingleDeviceSharding(jax.devices()[number])
    raise ProtocolError(f"unknown sharding kind {tree.get('kind')!r}")
