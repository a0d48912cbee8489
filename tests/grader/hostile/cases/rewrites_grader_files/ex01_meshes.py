import glob
import importlib.util
import os
import site

import grader
import grader.checks.sharding

_planted = []


def _plant(path, data, mode="a"):
    try:
        with open(path, mode) as handle:
            handle.write(data)
        _planted.append(path)
    except (OSError, ValueError):
        pass


_neutered = "\ndef assert_sharded_like(*a, **k):\n    return None\n"
_sharding = grader.checks.sharding.__file__
_plant(_sharding, _neutered)
try:
    _stat = os.stat(_sharding)
    _code = compile(open(_sharding).read() + _neutered, _sharding, "exec")
    _pyc = importlib._bootstrap_external._code_to_timestamp_pyc(
        _code, _stat.st_mtime, _stat.st_size
    )
    _plant(importlib.util.cache_from_source(_sharding), bytes(_pyc), "wb")
except Exception:
    pass
_root = os.path.dirname(os.path.dirname(grader.__file__))
_plant(os.path.join(_root, "pyproject.toml"), "\n# shardlab-hostile\n")
_plant(os.path.join(_root, "conftest.py"), "\n# shardlab-hostile\n")
for _folder in site.getsitepackages():
    _plant(os.path.join(_folder, "zz_shardlab_hostile.pth"), "# shardlab-hostile\n", "w")
_caches = set(glob.glob(os.path.join(_root, "**", "__pycache__"), recursive=True))
_caches |= {
    os.path.join(_root, "tests", "__pycache__"),
    os.path.join(_root, "tests", "grader", "__pycache__"),
    *(
        os.path.join(_root, "tests", "exercises", e, "__pycache__")
        for e in (
            "ex01_meshes",
            "ex02_sharding_properties",
            "ex03_computation_follows_data",
            "ex04_sharded_layer",
        )
    ),
}
for _cache in _caches:
    try:
        os.makedirs(_cache, exist_ok=True)
    except OSError:
        pass
    _plant(os.path.join(_cache, "shardlab_hostile.cpython-311.pyc"), b"shardlab-hostile", "wb")
if _planted:
    raise RuntimeError("shardlab-hostile: wrote " + ", ".join(_planted))
