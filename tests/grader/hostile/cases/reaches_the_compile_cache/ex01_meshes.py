import os

_reached = []
for _folder in ("__SHARDLAB_COMPILE_CACHE__", os.path.join("__SHARDLAB_COMPILE_CACHE__", "xla")):
    try:
        _reached.append(("listed", _folder, len(os.listdir(_folder))))
    except OSError:
        pass
    try:
        with open(os.path.join(_folder, "planted-by-a-student-cache"), "wb") as _entry:
            _entry.write(b"not a compiled program")
        _reached.append(("wrote", _folder))
    except OSError:
        pass
if _reached:
    raise RuntimeError(f"shardlab-hostile: reached the compile cache: {_reached}")
