"""The grader's gate before jax's coordination service (ex12): jax's own records read exactly, everything else
refused before the service sees it.

The records are jax 0.10's, as its processes write them (captured from runs of ex12's reference). The gate is
tested two ways: with a real jaxlib client in a process of its own (a client whose connection is cut ends its
process, as jax's client does), and frame by frame, to see that a refused request never reaches the service."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time

import hpack
import pytest

from grader.cluster import records
from grader.cluster.gate import PREFACE, SERVICE, Channel, Gate, Registry
from grader.cluster.records import GlooAddress, LocalTopology, Refused

# Process 1's topology in a run of 2 x 4 devices (jax 0.10's CPU client, captured).
TOPOLOGY_1 = (
    b"\x08\x01\x12$b3217682-2ea3-4325-8710-0097c1362d79\x1a& \x80\x10B\x03cpuJ\x12CpuDevice(id=2048)"
    b"R\x08cpu:2048\x1a(\x08\x01 \x81\x10B\x03cpuJ\x12CpuDevice(id=2049)R\x08cpu:2049"
)


def gloo_record(
    port: int = 40633,
    pairs=(8, 9),
    host: bytes = b"vm",
    family: int = records.AF_INET,
    ip: bytes = b"\x7f\x00\x00\x01",
    sequence: int = -1,
    padding: bytes = b"\xf0>\xcaU" * 28,
) -> bytes:
    """gloo's rendezvous record as jax's gloo writes it: the sockaddr_storage's tail holds whatever the stack did."""
    address = (
        struct.pack("<H", family)
        + struct.pack(">H", port)
        + ip
        + bytes(8)
        + padding
        + struct.pack("<q", sequence)
    )
    return (
        struct.pack("<Q", len(host))
        + host
        + struct.pack("<Q", len(address))
        + address
        + b"".join(struct.pack("<Q", p) for p in pairs)
    )


def test_jax_s_own_records_are_read():
    assert records.record("cpu:local_topology/cpu/1", TOPOLOGY_1) == LocalTopology(1, (2048, 2049))
    assert records.record("cpu:gloo/0,2048/1", gloo_record()) == GlooAddress((0, 2048), 1, 40633)
    whole = records.record("cpu:global_topology/cpu", b"\n" + bytes([len(TOPOLOGY_1)]) + TOPOLOGY_1)
    assert whole.nodes == (LocalTopology(1, (2048, 2049)),)


@pytest.mark.parametrize(
    "key, value, why",
    [
        ("x/rows/0", b"rows", "jax writes no such key"),
        ("cpu:local_topology/cpu/0", TOPOLOGY_1, "holds the topology of process 1"),
        ("cpu:local_topology/cpu/1", TOPOLOGY_1[:-3], "cut short"),
        ("cpu:gloo/0,0/1", gloo_record(), "names a device twice"),
        ("cpu:gloo/0,2048/2", gloo_record(), "rank 2 of a collective of 2"),
        ("cpu:gloo/0,2048/0", gloo_record(pairs=(8, 9, 10)), "for a collective of 2"),
        ("cpu:gloo/0,2048/0", gloo_record(ip=b"\x0a\x00\x00\x01"), "not a port of the loopback"),
        ("cpu:gloo/0,2048/0", gloo_record(port=0), "not a port of the loopback"),
        ("cpu:gloo/0,2048/0", gloo_record(sequence=7), "names a pair"),
        ("cpu:gloo/0,2048/0", gloo_record(host=b"\x00rows"), "not printable"),
        ("cpu:gloo/0,2048/0", gloo_record(pairs=(8, 1 << 40)), "out of gloo's range"),
        ("cpu:gloo/0,2048/0", gloo_record(family=17), "family 17"),
    ],
)
def test_anything_else_is_refused_with_the_reason(key, value, why):
    with pytest.raises(Refused, match=why):
        records.record(key, value)


# ---- the gate, with a real jaxlib client -------------------------------------------------------------

CLIENT = """
    import sys
    from jaxlib import _jax
    client = _jax.get_distributed_runtime_client(sys.argv[1], 0, init_timeout=20)
    client.connect()
    topology = bytes.fromhex(sys.argv[2])
    {action}
    print("survived", flush=True)
    import os
    os._exit(0)
"""
TOPOLOGY_0 = TOPOLOGY_1.replace(b"\x08\x01\x12$", b"\x12$", 1)  # node 0: the field left out


@pytest.fixture
def gate(tmp_path):
    """A service for one process behind a gate on a free port; the gate's reports, as they come."""
    from jaxlib import _jax

    path = str(tmp_path / "service.sock")
    service = _jax.get_distributed_runtime_service(f"unix:{path}", 1)
    seen: list[dict] = []
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    gate = Gate(address, path, seen.append)
    threading.Thread(target=gate.serve, daemon=True).start()
    yield address, seen
    gate.listener.close()
    service.shutdown()


def client(address: str, action: str) -> subprocess.CompletedProcess:
    script = textwrap.dedent(CLIENT).format(
        action=textwrap.indent(textwrap.dedent(action), "").strip()
    )
    return subprocess.run(
        [sys.executable, "-c", script, address, TOPOLOGY_0.hex()],
        capture_output=True,
        text=True,
        timeout=60,
    )


def refusals(seen: list[dict]) -> list[str]:
    return [s["refused"] for s in seen if "refused" in s]


def test_jax_s_own_writes_and_reads_pass_and_are_attributed(gate):
    address, seen = gate
    done = client(
        address,
        """
        client.key_value_set_bytes("cpu:local_topology/cpu/0", topology)
        assert client.blocking_key_value_get_bytes("cpu:local_topology/cpu/0", 5000) == topology
    """,
    )
    assert "survived" in done.stdout, done.stderr[-2000:]
    assert refusals(seen) == []
    registered = [s for s in seen if "registered" in s]
    assert [(s["registered"], s["connection"]) for s in registered] == [(0, 0)]
    assert {
        "wrote": {"topology": 0, "devices": [2048, 2049]},
        "process": 0,
        "connection": 0,
    } in seen


@pytest.mark.parametrize(
    "action, why",
    [
        (
            "client.key_value_set('x/rows/0', '1,2,3')",
            "process 0 wrote the key 'x/rows/0' (5 bytes)",
        ),
        (
            "client.key_value_increment('x/rows', 7)",
            "asked the service to IncrementKeyValue, which jax never does",
        ),
        (
            "client.key_value_delete('cpu:local_topology/cpu/0')",
            "asked the service to DeleteKeyValue",
        ),
        (
            "client.key_value_set_bytes('cpu:local_topology/cpu/1', "
            "topology.replace(b'\\x12$', b'\\x08\\x01\\x12$', 1))",
            "process 0 wrote the topology of process 1",
        ),
        (
            "client.key_value_set_bytes('cpu:local_topology/cpu/0', topology, allow_overwrite=True)",
            "overwrite a key",
        ),
    ],
)
def test_a_write_jax_never_makes_cuts_the_process_off(gate, action, why):
    address, seen = gate
    done = client(address, action)
    assert "survived" not in done.stdout
    assert any(why in refusal for refusal in refusals(seen)), (refusals(seen), done.stderr[-2000:])


# ---- the gate, frame by frame ------------------------------------------------------------------------


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


def request(encoder: hpack.Encoder, stream: int, method: str, message: bytes) -> bytes:
    headers = encoder.encode(
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", SERVICE + method),
            (":authority", "gate"),
            ("content-type", "application/grpc"),
        ]
    )
    body = b"\x00" + len(message).to_bytes(4, "big") + message
    return frame(1, 0x4, stream, headers) + frame(0, 0x1, stream, body)


def field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_a_refused_request_never_reaches_the_service():
    client, client_end = socket.socketpair()
    service_end, service = socket.socketpair()
    seen: list[dict] = []
    channel = Channel(0, _Peer(client_end), service_end, Registry(), seen.append)
    threading.Thread(target=channel.requests, daemon=True).start()
    encoder = hpack.Encoder()
    registered = b"\x19" + struct.pack("<Q", 42) + b"\x28\x00"  # incarnation 42, process 0
    header = field(1, b"\x11" + struct.pack("<Q", 42))
    client.sendall(
        PREFACE
        + request(encoder, 1, "RegisterTask", registered)
        + request(
            encoder, 3, "InsertKeyValue", header + field(2, field(1, b"x/rows") + field(2, b"12"))
        )
    )
    service.settimeout(5)
    received = b""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            chunk = service.recv(1 << 16)
        except TimeoutError:
            break
        if not chunk:
            break
        received += chunk
    assert received.startswith(PREFACE) and registered in received  # the registration went through
    assert b"x/rows" not in received, "the refused write reached the service"
    assert [s.get("registered") for s in seen if "registered" in s] == [0]
    assert any("wrote the key 'x/rows'" in s.get("refused", "") for s in seen)
    client.close()
    service.close()


class _Peer:
    """A socketpair's end, with the peer address a TCP client would have."""

    def __init__(self, sock: socket.socket):
        self._sock = sock

    def getpeername(self):
        return ("127.0.0.1", 50000)

    def __getattr__(self, name):
        return getattr(self._sock, name)
