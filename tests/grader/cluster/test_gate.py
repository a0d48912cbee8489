"""The grader's gate before jax's coordination service (ex12): jax's own records read exactly, everything else
refused before the service sees it.

The records are jax 0.10's, as its processes write them (captured from runs of ex12's reference). The gate is
tested two ways: with a real jaxlib client in a process of its own (a client whose connection is cut ends its
process, as jax's client does), and frame by frame, to see that a refused request never reaches the service."""

from __future__ import annotations

import gzip
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time

import hpack
import pytest

from grader.cluster import gate as gate_module, records
from grader.cluster.gate import PREFACE, SERVICE, Channel, Gate, Registry
from grader.cluster.records import LocalTopology, Machine, Refused

# The machine of the run the records below were captured in.
MACHINE = Machine(b"vm", "b3217682-2ea3-4325-8710-0097c1362d79")
# Process 1's topology in a run of 2 x 2 devices (jax 0.10's CPU client, captured).
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
    sin_zero: bytes = bytes(8),
) -> bytes:
    """gloo's rendezvous record as jax's gloo writes it: the sockaddr_storage's tail holds whatever the stack did."""
    address = (
        struct.pack("<H", family)
        + struct.pack(">H", port)
        + ip
        + sin_zero
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
    topology = records.record("cpu:local_topology/cpu/1", TOPOLOGY_1, MACHINE)
    assert topology == LocalTopology(1, (2048, 2049))
    assert records.jax_local_topology(1, 2, MACHINE.boot_id) == TOPOLOGY_1
    gloo = records.record("cpu:gloo/0,2048/1", gloo_record(), MACHINE)
    assert (gloo.clique, gloo.rank, gloo.port, gloo.pairs) == ((0, 2048), 1, 40633, (8, 9))
    # what jax leaves as its stack held it goes to the service zeroed, nothing else changed
    assert gloo.canonical == gloo_record(padding=bytes(112))
    whole = records.record(
        "cpu:global_topology/cpu", b"\n" + bytes([len(TOPOLOGY_1)]) + TOPOLOGY_1, MACHINE
    )
    assert whole.nodes == (LocalTopology(1, (2048, 2049)),)


def _device_renamed(topology: bytes) -> bytes:
    return topology.replace(b"CpuDevice(id=2049)", b"CpuDevice(id=2O49)")


@pytest.mark.parametrize(
    "key, value, why",
    [
        ("x/rows/0", b"rows", "jax writes no such key"),
        ("cpu:local_topology/cpu/0", TOPOLOGY_1, "holds the topology of process 1"),
        ("cpu:local_topology/cpu/1", TOPOLOGY_1[:-3], "cut short"),
        ("cpu:gloo/0,0/1", gloo_record(), "names a device twice"),
        ("cpu:gloo/0,2048/2", gloo_record(), "rank 2 of a collective of 2"),
        ("cpu:gloo/0,2048/0", gloo_record(pairs=(8, 9, 10)), "for a collective of 2"),
        ("cpu:gloo/0,2048/0", gloo_record(ip=b"\x0a\x00\x00\x01"), "not a port of 127.0.0.1"),
        ("cpu:gloo/0,2048/0", gloo_record(port=0), "not a port of 127.0.0.1"),
        ("cpu:gloo/0,2048/0", gloo_record(sequence=7), "names a pair"),
        ("cpu:gloo/0,2048/0", gloo_record(host=b"\x00rows"), "not printable"),
        ("cpu:gloo/0,2048/0", gloo_record(pairs=(8, 1 << 40)), "out of gloo's range"),
        ("cpu:gloo/0,2048/0", gloo_record(family=17), "family 17"),
        # the bytes a writer could choose: every one is jax's or refused
        ("cpu:gloo/0,2048/0", gloo_record(host=b"rows-0.25"), "not this machine's"),
        ("cpu:gloo/0,2048/0", gloo_record(ip=b"\x7f\x00\x12\x34"), "not a port of 127.0.0.1"),
        ("cpu:gloo/0,2048/0", gloo_record(sin_zero=b"rows\x00\x00\x00\x00"), "127.0.0.1 or ::1"),
        ("cpu:gloo/0,2048/0", gloo_record(pairs=(9, 8)), "not increasing"),
        ("cpu:local_topology/cpu/1", _device_renamed(TOPOLOGY_1), "not the topology jax writes"),
        (
            "cpu:local_topology/cpu/1",
            TOPOLOGY_1.replace(b"b3217682", b"deadbeef"),
            "not the topology jax writes",
        ),
        ("cpu:local_topology/cpu/1", TOPOLOGY_1 + b"\x22\x04rows", "not the topology jax writes"),
        (
            "cpu:local_topology/cpu/1",
            TOPOLOGY_1.replace(b" \x81\x10", b" \x82\x10").replace(b"2049", b"2050"),
            "not the topology jax writes",
        ),
    ],
)
def test_anything_else_is_refused_with_the_reason(key, value, why):
    with pytest.raises(Refused, match=why):
        records.record(key, value, MACHINE)


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
# what jax writes as process 0 of 2 devices on this machine
TOPOLOGY_0 = records.jax_local_topology(0, 2, Machine.here().boot_id)


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
    gate = Gate(address, path, seen.append, processes=1)
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
        "wrote": {"topology": 0, "devices": [0, 1]},
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
            "from grader.cluster import records; client.key_value_set_bytes("
            "'cpu:local_topology/cpu/1', records.jax_local_topology(1, 2, "
            "records.Machine.here().boot_id))",
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


def request(
    encoder: hpack.Encoder, stream: int, method: str, message: bytes, *, gzipped: bool = False
) -> bytes:
    """A unary gRPC request; gzipped: as jax's client sends a record."""
    headers = encoder.encode(
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", SERVICE + method),
            (":authority", "gate"),
            ("content-type", "application/grpc"),
            *([("grpc-encoding", "gzip")] if gzipped else []),
        ]
    )
    packed = gzip.compress(message) if gzipped else message
    body = bytes([gzipped]) + len(packed).to_bytes(4, "big") + packed
    return frame(1, 0x4, stream, headers) + frame(0, 0x1, stream, body)


def field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_a_refused_request_never_reaches_the_service():
    client, client_end = socket.socketpair()
    service_end, service = socket.socketpair()
    seen: list[dict] = []
    channel = Channel(
        0,
        _Peer(client_end),
        service_end,
        Registry(),
        seen.append,
        processes=1,
        machine=MACHINE,
    )
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


# ---- gloo's records across records, and the bytes the service gets -----------------------------------


def pb(number: int, payload: bytes) -> bytes:
    return records._varint(number << 3 | 2) + records._varint(len(payload)) + payload


REGISTERED = b"\x19" + struct.pack("<Q", 42) + b"\x28\x00"  # incarnation 42, process 0
HEADER = pb(1, b"\x11" + struct.pack("<Q", 42))
TOPOLOGY = records.jax_local_topology(0, 2, MACHINE.boot_id)  # process 0: devices 0 and 1


def insert(key: str, value: bytes) -> bytes:
    return HEADER + pb(2, pb(1, key.encode()) + pb(2, value))


def gzip_request(encoder: hpack.Encoder, stream: int, method: str, message: bytes) -> bytes:
    """A request as jax's client sends a record: gzip'd."""
    return request(encoder, stream, method, message, gzipped=True)


def session(*writes: tuple[str, bytes]) -> tuple[bytes, bytes, list[dict]]:
    """Process 0 (of one, with devices 0 and 1) registers, then writes each (key, value), gzip'd: what
    it sent, what the service received, and what the gate reported."""
    client, client_end = socket.socketpair()
    service_end, service = socket.socketpair()
    seen: list[dict] = []
    channel = Channel(
        0, _Peer(client_end), service_end, Registry(), seen.append, processes=1, machine=MACHINE
    )
    threading.Thread(target=channel.requests, daemon=True).start()
    encoder = hpack.Encoder()
    sent = PREFACE + request(encoder, 1, "RegisterTask", REGISTERED)
    for n, (key, value) in enumerate(writes):
        sent += gzip_request(encoder, 3 + 2 * n, "InsertKeyValue", insert(key, value))
    try:
        client.sendall(sent)
    except OSError:  # the gate cut it off
        pass
    received = received_by(service)
    client.close()
    service.close()
    return sent, received, seen


def received_by(service: socket.socket, seconds: float = 2.0) -> bytes:
    service.settimeout(seconds)
    received = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = service.recv(1 << 16)
        except TimeoutError:
            break
        if not chunk:
            break
        received += chunk
    return received


def gzip_bodies(received: bytes) -> list[bytes]:
    """The decompressed gRPC messages of every DATA frame the service received."""
    found, at = [], len(PREFACE)
    while at + 9 <= len(received):
        length, kind = int.from_bytes(received[at : at + 3], "big"), received[at + 3]
        payload = received[at + 9 : at + 9 + length]
        if kind == 0 and payload[:1] == b"\x01":
            found.append(gzip.decompress(payload[5:]))
        at += 9 + length
    return found


def test_a_gloo_record_reaches_the_service_with_nothing_of_the_writer_s_choosing():
    written = gloo_record(pairs=(0, 1), host=MACHINE.host)
    sent, received, seen = session(
        ("cpu:local_topology/cpu/0", TOPOLOGY), ("cpu:gloo/0,1/0", written)
    )
    assert refusals(seen) == []
    canonical = gloo_record(pairs=(0, 1), host=MACHINE.host, padding=bytes(112))
    stored = gzip_bodies(received)
    assert insert("cpu:gloo/0,1/0", canonical) in stored
    assert not any(written in message for message in stored)
    assert len(received) == len(sent)  # in as many bytes: the peers' flow control is unchanged


@pytest.mark.parametrize(
    "writes, why",
    [
        (
            [
                ("cpu:gloo/0,1/0", gloo_record(pairs=(0, 1))),
                ("cpu:gloo/0,1/1", gloo_record(pairs=(2, 3), port=40634)),
            ],
            "its gloo listens on one",
        ),
        (
            [
                ("cpu:gloo/0,1/0", gloo_record(pairs=(0, 1))),
                ("cpu:gloo/0,1/1", gloo_record(pairs=(1, 2))),
            ],
            "pair number it had written before",
        ),
        (
            [("cpu:gloo/0,1/0", gloo_record(pairs=(0, 4)))],
            "past the 4 its gloo can have counted out",
        ),
        (
            [("cpu:gloo/0,7/0", gloo_record(pairs=(0, 1)))],
            "devices no process's jax published ([7])",
        ),
        ([("cpu:global_topology/cpu", pb(1, TOPOLOGY) + pb(1, TOPOLOGY))], "every one of the 1"),
    ],
)
def test_gloo_records_across_records_are_jax_s_or_refused(writes, why):
    _, received, seen = session(("cpu:local_topology/cpu/0", TOPOLOGY), *writes)
    assert any(why in refusal for refusal in refusals(seen)), refusals(seen)
    # the refused write never reached the service
    assert insert(*writes[-1]) not in gzip_bodies(received)


def test_only_so_many_collectives_per_process(monkeypatch):
    monkeypatch.setattr(gate_module, "MAX_CLIQUES", 1)
    _, _, seen = session(
        ("cpu:local_topology/cpu/0", TOPOLOGY),
        ("cpu:gloo/0,1/0", gloo_record(pairs=(0, 1))),
        ("cpu:gloo/1,0/1", gloo_record(pairs=(2, 3))),
    )
    assert any("over 1 collectives" in refusal for refusal in refusals(seen)), refusals(seen)


# ---- what one connection can make the gate hold ------------------------------------------------------


def cut_off(sent: bytes) -> tuple[bytes, list[dict]]:
    """A connection sending `sent` after the preface: what reached the service, what the gate said."""
    client, client_end = socket.socketpair()
    service_end, service = socket.socketpair()
    seen: list[dict] = []
    channel = Channel(
        0, _Peer(client_end), service_end, Registry(), seen.append, processes=1, machine=MACHINE
    )
    threading.Thread(target=channel.requests, daemon=True).start()
    try:
        client.sendall(PREFACE + sent)
    except OSError:  # cut off before it had sent it all
        pass
    received = received_by(service)
    client.close()
    service.close()
    return received, seen


def headers_opening(encoder: hpack.Encoder, stream: int) -> bytes:
    """A request's HEADERS frame without END_HEADERS: a header block that continues."""
    block = encoder.encode([(":method", "POST"), (":path", SERVICE + "Heartbeat")])
    return frame(1, 0, stream, block)


@pytest.mark.parametrize(
    "continuation, count, why",
    [
        (1 << 20, 256, "an HTTP/2 frame of 1048576 bytes"),  # the red team's: 256 MiB of one block
        (1 << 14, 64, "a header block over 16384 bytes"),
    ],
)
def test_a_header_block_past_grpc_s_bound_is_refused_unheld(continuation, count, why):
    tail = frame(9, 0, 1, b"a" * continuation)
    received, seen = cut_off(headers_opening(hpack.Encoder(), 1) + tail * count)
    assert any(why in refusal for refusal in refusals(seen)), refusals(seen)
    assert received == PREFACE  # none of it went on


def test_unfinished_requests_hold_at_most_grpc_s_largest_message():
    encoder, sent = hpack.Encoder(), b""
    for stream in range(1, 13, 2):  # six requests of 1 MiB, none ending
        sent += request(encoder, stream, "Heartbeat", b"")[: -(9 + 5)]  # the headers only
        sent += frame(0, 0, stream, bytes(1 << 14)) * 64
    received, seen = cut_off(sent)
    assert any("holding over 4194304 bytes" in refusal for refusal in refusals(seen))
    assert len(received) < 1 << 16  # headers only: no request's data went on


GATE_UNDER_ATTACK = """
    import socket, sys, threading, time
    from grader.cluster.gate import Gate
    service = socket.socket(socket.AF_UNIX)
    service.bind(sys.argv[1])
    service.listen()
    held = []  # the service's ends, kept open
    threading.Thread(target=lambda: [held.append(service.accept()) for _ in range(100)], daemon=True).start()
    gate = Gate("127.0.0.1:0", sys.argv[1], lambda seen: print(seen, flush=True), processes=2)
    print(gate.listener.getsockname()[1], flush=True)
    threading.Thread(target=gate.serve, daemon=True).start()
    time.sleep(60)
"""


def peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_red_team_s_header_block_costs_the_gate_no_memory(tmp_path):
    """Attack (d): one header block of 256 CONTINUATION frames of 1 MiB. Measured on the gate before
    its bounds: its peak resident memory grew by over 0.5 GiB; now by less than a frame."""
    gate = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(GATE_UNDER_ATTACK), str(tmp_path / "s.sock")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(gate.stdout.readline())
        before = peak_kib(gate.pid)
        with socket.create_connection(("127.0.0.1", port), timeout=20) as attacker:
            block = frame(9, 0, 1, b"a" * (1 << 20))
            try:
                attacker.sendall(PREFACE + headers_opening(hpack.Encoder(), 1))
                for _ in range(256):
                    attacker.sendall(block)
            except OSError:  # cut off
                pass
        said = gate.stdout.readline()
        grown = peak_kib(gate.pid) - before
        print(f"the gate's peak resident memory grew by {grown} KiB")
        assert "an HTTP/2 frame of 1048576 bytes" in said
        assert grown < 16 << 10
    finally:
        gate.kill()
        gate.wait()


def test_a_gloo_record_on_ipv6_s_loopback_is_read_and_its_tail_zeroed():
    address = (
        struct.pack("<H", records.AF_INET6)
        + struct.pack(">H", 40633)
        + bytes(4)  # flow info
        + bytes(15)
        + b"\x01"
        + bytes(4)  # scope id
        + b"\xf0" * 100
        + struct.pack("<q", -1)
    )
    value = struct.pack("<Q", 2) + b"vm" + struct.pack("<Q", len(address)) + address
    value += struct.pack("<QQ", 4, 5)
    gloo = records.record("cpu:gloo/0,2048/1", value, MACHINE)
    assert (gloo.port, gloo.pairs) == (40633, (4, 5))
    assert gloo.canonical == value.replace(b"\xf0" * 100, bytes(100))
    scoped = (
        value[: 8 + 2 + 8 + 24] + b"\x07" + value[8 + 2 + 8 + 25 :]
    )  # a scope id of its choosing
    with pytest.raises(Refused, match="127.0.0.1 or ::1"):
        records.record("cpu:gloo/0,2048/1", scoped, MACHINE)


def test_only_so_many_connections_at_once(tmp_path):
    service = socket.socket(socket.AF_UNIX)
    service.bind(str(tmp_path / "s.sock"))
    service.listen()
    held: list = []
    threading.Thread(
        target=lambda: [held.append(service.accept()) for _ in range(10)], daemon=True
    ).start()
    seen: list[dict] = []
    gate = Gate("127.0.0.1:0", str(tmp_path / "s.sock"), seen.append, processes=1)
    threading.Thread(target=gate.serve, daemon=True).start()
    port = gate.listener.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3)]
    clients[2].settimeout(5)
    assert clients[2].recv(1) == b""  # the third is closed at once
    assert any("over 2 connections at once" in refusal for refusal in refusals(seen))
    clients[0].close()  # one goes: another may come
    time.sleep(0.5)
    again = socket.create_connection(("127.0.0.1", port), timeout=5)
    again.settimeout(0.5)
    with pytest.raises(TimeoutError):
        again.recv(1)  # held open, waiting for its preface
    assert sum("over 2 connections" in refusal for refusal in refusals(seen)) == 1
    for sock in (*clients, again):
        sock.close()
    gate.listener.close()


def test_a_header_block_that_decodes_past_grpc_s_bound_is_refused():
    """Small on the wire, large decoded: one 3000-byte header put in HPACK's table, then named ten times
    (a byte each): about 30 KiB decoded, past gRPC's 16 KiB (and under hpack's own default, 64 KiB)."""
    encoder = hpack.Encoder()
    block = encoder.encode([(":method", "POST"), (":path", SERVICE + "Heartbeat")])
    block += encoder.encode([("x-rows", "r" * 3000)])  # a literal, indexed at 62
    block += bytes([0x80 | 62]) * 10
    assert len(block) < 4096
    received, seen = cut_off(frame(1, 0x4, 1, block))
    assert any("OversizedHeaderListError" in refusal for refusal in refusals(seen)), refusals(seen)
    assert received == PREFACE
