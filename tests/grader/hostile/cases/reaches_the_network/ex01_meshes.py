import socket

_reached = []
for _address in (("127.0.0.1", int("__SHARDLAB_LISTENER_PORT__")), ("8.8.8.8", 53)):
    try:
        socket.create_connection(_address, timeout=3).close()
        _reached.append(_address)
    except OSError:
        pass
if _reached:
    raise RuntimeError(f"shardlab-hostile: connected to {_reached}")
