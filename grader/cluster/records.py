"""What jax itself writes to its coordination service in a multi-process run on the CPU, read exactly.

jax 0.10's processes keep three kinds of record in the service's key-value store, and nothing else
(measured on every run of ex12's reference and its alternatives, 2 processes of 4 devices and 4 of 2):

    cpu:local_topology/cpu/<node>    one process's devices (a LocalTopologyProto), written when its backend
                                     starts
    cpu:global_topology/cpu          every process's, in order (a GlobalTopologyProto), written by process 0
    cpu:gloo/<device ids>/<rank>     gloo's rendezvous for a collective over those devices: where the
                                     process holding device ids[rank] listens, and its pairs' numbers

`record(key, value)` reads one of them into a typed value, or raises Refused, naming why, for anything
else: the grader's gate (grader.cluster.gate) lets only these through, so the store cannot carry a
process's rows to another. The parsers are strict about structure and sizes; they do not judge what jax
leaves unspecified (the bytes of a socket address past its port and host, which jax fills with whatever
its stack held).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass

LOCAL_TOPOLOGY = re.compile(r"cpu:local_topology/cpu/(\d{1,4})")
GLOBAL_TOPOLOGY = "cpu:global_topology/cpu"
GLOO = re.compile(r"cpu:gloo/(\d{1,9}(?:,\d{1,9}){1,1023})/(\d{1,4})")
MAX_DEVICES = 1024  # devices in one topology or one collective
MAX_HOSTNAME = 255
GLOO_ADDRESS_BYTES = 136  # gloo's tcp Address: a sockaddr_storage (128 bytes) and a sequence number
MAX_PAIR = 1 << 20  # a pair's number: gloo counts them from 0 in each process
AF_INET, AF_INET6 = 2, 10
VARINT, FIXED64, BYTES, FIXED32 = 0, 1, 2, 5


class Refused(ValueError):
    """Not a record jax writes (the message says why)."""


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


def read_gloo_address(clique: tuple[int, ...], rank: int, data: bytes) -> GlooAddress:
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
    family = struct.unpack_from("<H", data, address_at)[0]
    port = struct.unpack_from(">H", data, address_at + 2)[0]
    if family == AF_INET:
        loopback = data[address_at + 4] == 127
    elif family == AF_INET6:  # ::1, or 127.x as ::ffff:127.x
        ip = data[address_at + 8 : address_at + 24]
        loopback = ip == bytes(15) + b"\x01" or (
            ip[:12] == bytes(10) + b"\xff\xff" and ip[12] == 127
        )
    else:
        raise Refused(f"a gloo record's address of family {family}")
    if not loopback or port == 0:
        raise Refused("a gloo record whose address is not a port of the loopback")
    if struct.unpack_from("<q", data, address_at + 128)[0] != -1:
        raise Refused("a gloo record whose address names a pair (jax's name none)")
    if any(number(at) >= MAX_PAIR for at in range(pairs_at, len(data), 8)):
        raise Refused("a gloo record's pair numbers out of gloo's range")
    return GlooAddress(clique, rank, port)


def record(key: str, value: bytes) -> Record:
    """What jax wrote under `key`: its topology or gloo's rendezvous, read; Refused otherwise."""
    if key == GLOBAL_TOPOLOGY:
        return read_global_topology(value)
    if match := LOCAL_TOPOLOGY.fullmatch(key):
        topology = read_local_topology(value)
        if topology.node != int(match[1]):
            raise Refused(f"{key} holds the topology of process {topology.node}")
        return topology
    if match := GLOO.fullmatch(key):
        clique, rank = tuple(int(d) for d in match[1].split(",")), int(match[2])
        if len(set(clique)) != len(clique):
            raise Refused(f"{key} names a device twice")
        if rank >= len(clique):
            raise Refused(f"{key} names rank {rank} of a collective of {len(clique)}")
        return read_gloo_address(clique, rank, value)
    raise Refused("jax writes no such key (only its topology and gloo's rendezvous)")
