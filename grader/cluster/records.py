"""What jax itself writes to its coordination service in a multi-process run on the CPU, read exactly.

jax 0.10's processes keep three kinds of record in the service's key-value store, and nothing else
(measured on every run of ex12's reference and its alternatives, 2 processes of 4 devices and 4 of 2):

    cpu:local_topology/cpu/<node>    one process's devices (a LocalTopologyProto), written when its backend
                                     starts
    cpu:global_topology/cpu          every process's, in order (a GlobalTopologyProto), written by process 0
    cpu:gloo/<device ids>/<rank>     gloo's rendezvous for a collective over those devices: where the
                                     process holding device ids[rank] listens, and its pairs' numbers

`record(key, value, machine)` reads one of them into a typed value, or raises Refused, naming why, for
anything else: the grader's gate (grader.cluster.gate) lets only these through. Every byte a record holds
is what jax writes on this machine or refused, but for what jax's protocol leaves to the writer: a gloo
record's collective, pair numbers and port, which the gate bounds across records (and docs/trust-model.md
counts). A topology is byte for byte the one jax builds for that many devices (its boot id this
machine's); a gloo record names this machine's host name and 127.0.0.1 or ::1, and the bytes of its
socket address that jax leaves as its stack held them are returned zeroed (GlooAddress.canonical),
which is what the gate forwards.
"""

from __future__ import annotations

import re
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LOCAL_TOPOLOGY = re.compile(r"cpu:local_topology/cpu/(\d{1,4})")
GLOBAL_TOPOLOGY = "cpu:global_topology/cpu"
GLOO = re.compile(r"cpu:gloo/(\d{1,9}(?:,\d{1,9}){1,1023})/(\d{1,4})")
MAX_DEVICES = 1024  # devices in one topology or one collective
MAX_HOSTNAME = 255
GLOO_ADDRESS_BYTES = 136  # gloo's tcp Address: a sockaddr_storage (128 bytes) and a sequence number
MAX_PAIR = 1 << 20  # a pair's number: gloo counts them from 0 in each process
AF_INET, AF_INET6 = 2, 10
SOCKADDR_BYTES = {AF_INET: 16, AF_INET6: 28}  # what of the sockaddr_storage the family uses
LOOPBACK = {AF_INET: b"\x7f\x00\x00\x01", AF_INET6: bytes(15) + b"\x01"}
# jax's CPU client numbers a process's devices from node * 2048 (measured: 0..3 and 2048..2051 in 2 x 4)
DEVICE_IDS_PER_NODE = 2048
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
VARINT, FIXED64, BYTES, FIXED32 = 0, 1, 2, 5


class Refused(ValueError):
    """Not a record jax writes (the message says why)."""


@dataclass(frozen=True)
class Machine:
    """What jax writes of the machine it runs on: every process of a run shares it with the gate."""

    host: bytes  # gethostname(), which gloo names as where it listens
    boot_id: str  # the kernel's, which jax puts in a topology

    @classmethod
    def here(cls) -> Machine:
        return cls(socket.gethostname().encode(), BOOT_ID.read_text().strip())


@dataclass(frozen=True)
class LocalTopology:
    node: int
    devices: tuple[int, ...]  # the global ids of the process's devices


@dataclass(frozen=True)
class GlobalTopology:
    nodes: tuple[LocalTopology, ...]


@dataclass(frozen=True)
class GlooAddress:
    """One rank's part of gloo's rendezvous for a collective: the process holding device clique[rank]
    listens on `port` of the loopback."""

    clique: tuple[int, ...]  # the collective's devices (global ids), in rank order
    rank: int
    port: int
    pairs: tuple[int, ...]  # gloo's number for its pair with each rank, in rank order
    canonical: (
        bytes  # the record with the bytes jax leaves unspecified zeroed: what the service gets
    )

    @property
    def device(self) -> int:
        return self.clique[self.rank]


Record = LocalTopology | GlobalTopology | GlooAddress


# ---- protobuf's wire format ---------------------------------------------------------------------------


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """The (field number, wire type, value) of a protobuf message: varints as ints, fixed64 and fixed32
    as unsigned ints, length-delimited fields as bytes. Refused on anything malformed."""
    at, end = 0, len(data)

    def varint() -> int:
        nonlocal at
        value = 0
        for shift in range(0, 70, 7):
            if at >= end:
                raise Refused("a protobuf message cut short")
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise Refused("a protobuf varint over 10 bytes")

    while at < end:
        key = varint()
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Refused("a protobuf field numbered 0")
        if wire == VARINT:
            yield number, wire, varint()
        elif wire in (FIXED64, FIXED32):
            size = 8 if wire == FIXED64 else 4
            if at + size > end:
                raise Refused("a protobuf message cut short")
            yield number, wire, int.from_bytes(data[at : at + size], "little")
            at += size
        elif wire == BYTES:
            size = varint()
            if at + size > end:
                raise Refused("a protobuf message cut short")
            yield number, wire, data[at : at + size]
            at += size
        else:
            raise Refused(f"a protobuf field of wire type {wire}")


def field(data: bytes, number: int, wire: int, default=None):
    """The last value of field `number` (protobuf's rule for a repeated scalar field read as one)."""
    found = default
    for n, w, value in fields(data):
        if n == number:
            if w != wire:
                raise Refused(f"field {number} has wire type {w}, not {wire}")
            found = value
    return found


# ---- the records ------------------------------------------------------------------------------------


def read_local_topology(data: bytes) -> LocalTopology:
    """A LocalTopologyProto: its node id (field 1) and its devices (field 3, each a DeviceProto whose
    global id is field 4); a field left out is 0, as protobuf has it."""
    node, devices = 0, []
    for number, wire, value in fields(data):
        if number == 1:
            if wire != VARINT:
                raise Refused("a topology's node id is not a varint")
            node = value
        elif number == 3:
            if wire != BYTES:
                raise Refused("a topology's device is not a message")
            devices.append(field(value, 4, VARINT, 0))
    if len(devices) > MAX_DEVICES or len(set(devices)) != len(devices):
        raise Refused(f"a topology of {len(devices)} devices, {len(set(devices))} of them distinct")
    return LocalTopology(node, tuple(devices))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if not value:
            return bytes(out + bytes([byte]))
        out.append(byte | 0x80)


def _field(number: int, wire: int, value: int | bytes) -> bytes:
    if wire == VARINT:
        return _varint(number << 3 | VARINT) + _varint(value) if value else b""
    return _varint(number << 3 | BYTES) + _varint(len(value)) + value


def jax_local_topology(node: int, devices: int, boot_id: str) -> bytes:
    """The LocalTopologyProto jax 0.10's CPU client writes for process `node` with `devices` devices, byte
    for byte (fields at 0 left out, as protobuf does): its node id, the boot id, and each device's local
    ordinal (1), global id (4), vendor (8), name (9) and kind (10)."""
    listed = b""
    for ordinal in range(devices):
        device = node * DEVICE_IDS_PER_NODE + ordinal
        listed += _field(
            3,
            BYTES,
            _field(1, VARINT, ordinal)
            + _field(4, VARINT, device)
            + _field(8, BYTES, b"cpu")
            + _field(9, BYTES, f"CpuDevice(id={device})".encode())
            + _field(10, BYTES, f"cpu:{device}".encode()),
        )
    return _field(1, VARINT, node) + _field(2, BYTES, boot_id.encode()) + listed


def jax_global_topology(nodes: list[bytes]) -> bytes:
    """The GlobalTopologyProto process 0's jax writes: every process's topology, as written, in order."""
    return b"".join(_field(1, BYTES, node) for node in nodes)


def read_global_topology(data: bytes) -> GlobalTopology:
    nodes = []
    for number, wire, value in fields(data):
        if number != 1 or wire != BYTES:
            raise Refused(
                f"a global topology holds field {number}, which is not a process's topology"
            )
        nodes.append(read_local_topology(value))
    if len(nodes) > MAX_DEVICES:
        raise Refused(f"a global topology of {len(nodes)} processes")
    return GlobalTopology(tuple(nodes))


def read_gloo_address(
    clique: tuple[int, ...], rank: int, data: bytes, machine: Machine
) -> GlooAddress:
    """gloo's rendezvous record (gloo::rendezvous's Rank): the hostname and the tcp Address, each behind its
    length (8 bytes, little-endian), then one 8-byte number per pair (one per member of the collective)."""

    def number(at: int) -> int:
        if at + 8 > len(data):
            raise Refused("a gloo record cut short")
        return struct.unpack_from("<Q", data, at)[0]

    host_length = number(0)
    if host_length > MAX_HOSTNAME:
        raise Refused(f"a gloo record's hostname of {host_length} bytes")
    address_at = 8 + host_length + 8
    if number(8 + host_length) != GLOO_ADDRESS_BYTES:
        raise Refused("a gloo record whose address is not gloo's tcp address")
    pairs_at = address_at + GLOO_ADDRESS_BYTES
    if len(data) != pairs_at + 8 * len(clique):
        raise Refused(
            f"a gloo record of {len(data)} bytes for a collective of {len(clique)}: it should hold "
            f"{pairs_at + 8 * len(clique)}"
        )
    host = data[8 : 8 + host_length]
    if not all(0x21 <= byte < 0x7F for byte in host):
        raise Refused("a gloo record's hostname is not printable")
    if host != machine.host:
        raise Refused(
            f"a gloo record names the host {host.decode()!r}, not this machine's "
            f"({machine.host.decode()!r}, which gloo names)"
        )
    family = struct.unpack_from("<H", data, address_at)[0]
    port = struct.unpack_from(">H", data, address_at + 2)[0]
    if family not in SOCKADDR_BYTES:
        raise Refused(f"a gloo record's address of family {family}")
    # sockaddr_in: the address, then 8 bytes of zeros; sockaddr_in6: flow info, address, scope id
    used = data[address_at + 4 : address_at + SOCKADDR_BYTES[family]]
    expected = (
        LOOPBACK[AF_INET] + bytes(8)
        if family == AF_INET
        else bytes(4) + LOOPBACK[AF_INET6] + bytes(4)
    )
    if used != expected or port == 0:
        raise Refused(
            "a gloo record whose address is not a port of 127.0.0.1 or ::1, as gloo writes it"
        )
    if struct.unpack_from("<q", data, address_at + 128)[0] != -1:
        raise Refused("a gloo record whose address names a pair (jax's name none)")
    pairs = tuple(number(at) for at in range(pairs_at, len(data), 8))
    if any(pair >= MAX_PAIR for pair in pairs):
        raise Refused("a gloo record's pair numbers out of gloo's range")
    # one thread of gloo's numbers a rank's pairs in rank order, from the process's one counter
    if any(a >= b for a, b in zip(pairs, pairs[1:], strict=False)):
        raise Refused("a gloo record's pair numbers are not increasing, as gloo numbers them")
    tail_at = address_at + SOCKADDR_BYTES[family]
    canonical = data[:tail_at] + bytes(address_at + 128 - tail_at) + data[address_at + 128 :]
    return GlooAddress(clique, rank, port, pairs, canonical)


def record(key: str, value: bytes, machine: Machine) -> Record:
    """What jax wrote under `key` on `machine`: its topology or gloo's rendezvous, read; Refused otherwise
    (the global topology is read here and compared with what each process wrote by the gate)."""
    if key == GLOBAL_TOPOLOGY:
        return read_global_topology(value)
    if match := LOCAL_TOPOLOGY.fullmatch(key):
        topology = read_local_topology(value)
        if topology.node != int(match[1]):
            raise Refused(f"{key} holds the topology of process {topology.node}")
        if value != jax_local_topology(topology.node, len(topology.devices), machine.boot_id):
            raise Refused(
                f"{key} is not the topology jax writes for {len(topology.devices)} devices on this "
                f"machine (a field, a device's id or name, or the boot id differs)"
            )
        return topology
    if match := GLOO.fullmatch(key):
        clique, rank = tuple(int(d) for d in match[1].split(",")), int(match[2])
        if len(set(clique)) != len(clique):
            raise Refused(f"{key} names a device twice")
        if rank >= len(clique):
            raise Refused(f"{key} names rank {rank} of a collective of {len(clique)}")
        return read_gloo_address(clique, rank, value, machine)
    raise Refused("jax writes no such key (only its topology and gloo's rendezvous)")
