"""The grader's gate before jax's coordination service in a multi-process run (ex12).

The processes are told the gate's address; jax's service listens where only the grader's coordinator
can reach it (a UNIX socket: the processes may make none). Each connection through the gate is one
process's gRPC channel (HTTP/2 without TLS). The gate copies the service's answers as they are and reads
every request before the service sees it: a request must be one jax's own client makes, in the process
that made it. Anything else is never forwarded: the gate cuts that connection and says why. Every
record is attributed to the connection that wrote it, which the harness ties to the process holding it
(grader.cluster.run).

The rules, per connection: it registers first, once, as a process no other connection registered as;
every later request speaks as that process (the incarnation in its header); it writes only its own
topology (byte for byte jax's, grader.cluster.records), process 0 also the global one (every process's
as written, in order), and gloo's rendezvous for devices of its own; it never overwrites, increments or
deletes a key; it calls only the service's methods jax uses. What it may read is not limited: every
key in the store is of jax's shapes. A gloo record goes to the service with the bytes jax leaves unspecified
zeroed (rewritten in as many bytes, gzip'd as jax's client sends it); across a process's records its
gloo listens on one port, its pair numbers are new and within what its gloo can have counted out, and
it names at most MAX_CLIQUES collectives, each over published devices. What a writer can still choose
in the store: which collectives (of published devices, in any order) its records name, how its pair
numbers fall between its records, and its port: by count enough to carry a process's rows
(docs/trust-model.md), which no test has shown an attack doing.

Bounds, as gRPC's own: a frame of at most 16 KiB, a header block (HEADERS and its CONTINUATIONs) of at
most 16 KiB, refused as it comes (never held), and at most 16 KiB decoded; a request of at most
MAX_MESSAGE, and at most MAX_HELD bytes of unfinished requests per connection; at most
CONNECTIONS_PER_PROCESS connections per process open at once.

Reported, through `report`: {"registered": process, "connection": n, "port": the client's port};
{"wrote": {"topology": node, "devices": [...]} | {"global": [[devices] per process]} |
{"gloo": {"clique": [...], "rank": r, "port": p}}, "process": process, "connection": n};
{"refused": why, "connection": n, "port": ..., "process": process or None}.
"""

from __future__ import annotations

import socket
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import hpack

from grader.cluster import records
from grader.cluster.records import FIXED64, VARINT, Refused

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, PUSH_PROMISE, CONTINUATION = 0, 1, 3, 5, 9
END_STREAM, END_HEADERS, PADDED, PRIORITY = 0x1, 0x4, 0x8, 0x20
MAX_FRAME = 1 << 14  # HTTP/2's default frame size; jax's requests here are under 1 KiB
# gRPC's own default bound on a request's headers (16 KiB): a header block past it is refused as it
# comes, before the gate holds it (jax's are under 300 bytes)
MAX_HEADER_BLOCK = 1 << 14
MAX_MESSAGE = 1 << 20  # one request, decompressed (a topology of 1024 devices is under 100 KiB)
MAX_OPEN_STREAMS = 256
# what one connection's unfinished requests may hold at once: gRPC's default largest message (4 MiB)
MAX_HELD = 4 << 20
CONNECTIONS_PER_PROCESS = 2  # open at once, on average over the run's processes (jax opens one)
# distinct collectives (gloo's cliques) a process's records may name (ex12's reference: 5 in 2 x 4)
MAX_CLIQUES = 32
SERVICE = "/xla.coordination.CoordinationService/"
# What jax's client asks of the service (jaxlib 0.10's list, less WaitForAllTasks and the error
# reports, which it does not use, and the writes the gate judges below).
READS = frozenset(
    {
        "Heartbeat",
        "PollForError",
        "ShutdownTask",
        "GetKeyValue",
        "TryGetKeyValue",
        "GetKeyValueDir",
        "Barrier",
        "CancelBarrier",
        "GetAliveTasks",
        "WatchTasks",
    }
)
REGISTER, INSERT = "RegisterTask", "InsertKeyValue"


class Refusal(Exception):
    """A request the gate does not forward (why, for the student)."""


@dataclass
class Stream:
    method: str
    encoding: str
    # its frames since its headers, until its request ends
    held: list[bytes] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    padded: bool = False  # a DATA frame of it was padded (jax's never are)


@dataclass
class Registry:
    """What every connection of the run has claimed, shared by the gate's threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    # process -> the connection that registered it
    tasks: dict[int, int] = field(default_factory=dict)
    # process -> its topology's devices
    devices: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # process -> its topology, as written (the global topology must be theirs, in order)
    topologies: dict[int, bytes] = field(default_factory=dict)
    # process -> the one port its gloo listens on
    gloo_ports: dict[int, int] = field(default_factory=dict)
    # process -> the pair numbers its gloo records used, and how many pairs they named in all
    pairs: dict[int, set[int]] = field(default_factory=dict)
    # process -> the collectives its gloo records named
    cliques: dict[int, set[tuple[int, ...]]] = field(default_factory=dict)
    connections: int = 0  # open now


@dataclass(frozen=True)
class GrpcMessage:
    at: int  # where its bytes (after the 5-byte prefix) start in the request's body
    raw: bytes  # as sent
    compressed: bool
    message: bytes  # decompressed


def grpc_messages(body: bytes, encoding: str) -> list[GrpcMessage]:
    """The length-prefixed messages of a gRPC request's body, decompressed."""
    messages, at = [], 0
    while at < len(body):
        if at + 5 > len(body):
            raise Refusal("a gRPC message cut short")
        compressed, size = body[at], int.from_bytes(body[at + 1 : at + 5], "big")
        raw = message = bytes(body[at + 5 : at + 5 + size])
        if len(message) != size or compressed not in (0, 1):
            raise Refusal("a malformed gRPC message")
        if compressed:
            if encoding not in ("gzip", "deflate"):
                raise Refusal(f"a gRPC message compressed as {encoding!r}")
            inflate = zlib.decompressobj(
                16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
            )
            try:
                message = inflate.decompress(message, MAX_MESSAGE + 1)
            except zlib.error as exc:
                raise Refusal(f"a gRPC message that does not decompress ({exc})") from None
            if len(message) > MAX_MESSAGE or inflate.unconsumed_tail:
                raise Refusal(f"a gRPC message over {MAX_MESSAGE} bytes")
        messages.append(GrpcMessage(at + 5, raw, bool(compressed), message))
        at += 5 + size
    return messages


def gzip_of_size(data: bytes, size: int) -> bytes | None:
    """`data` gzip'd in exactly `size` bytes (the header's extra field filling what is left), or None if
    it does not fit: a rewritten request keeps its length, so the peers' flow control stays as it was."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    stream = deflate.compress(data) + deflate.flush()
    extra = size - (12 + len(stream) + 8)  # the header with its extra field's length, the trailer
    if not 0 <= extra < 1 << 16:
        return None
    header = (
        b"\x1f\x8b\x08\x04" + bytes(4) + b"\x00\xff" + extra.to_bytes(2, "little") + bytes(extra)
    )
    trailer = zlib.crc32(data).to_bytes(4, "little") + (len(data) & 0xFFFFFFFF).to_bytes(
        4, "little"
    )
    return header + stream + trailer


def _shown(key: bytes | str) -> str:
    text = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
    text = "".join(c if c.isprintable() else "?" for c in text)
    return repr(text if len(text) <= 80 else text[:80] + "...")


class Channel:
    """One connection: the client's requests read and judged on this thread, the service's answers copied
    back on another."""

    def __init__(
        self,
        number: int,
        client: socket.socket,
        upstream: socket.socket,
        registry: Registry,
        report: Callable[[dict], None],
        *,
        processes: int,
        machine: records.Machine,
    ):
        self.number, self.client, self.upstream = number, client, upstream
        self.registry, self.report = registry, report
        self.processes, self.machine = processes, machine
        self.port = client.getpeername()[1]
        # a header list decoded past gRPC's bound is refused as it is decoded (an HPACK block that
        # names one large table entry many times)
        self.decoder = hpack.Decoder(max_header_list_size=MAX_HEADER_BLOCK)
        # whatever size the client's encoder announces
        self.decoder.max_allowed_table_size = 1 << 16
        self.streams: dict[int, Stream] = {}
        # (stream, flags, fragment, frames)
        self.block: tuple[int, int, bytearray, list[bytes]] | None = None
        self.holding = 0  # bytes of frames held for unfinished requests
        self.closed = False
        self.task: int | None = None
        self.incarnation: int | None = None

    # -- the two directions ---------------------------------------------------------------------------

    def answers(self) -> None:
        try:
            while chunk := self.upstream.recv(1 << 16):
                self.client.sendall(chunk)
        except OSError:
            pass
        self.close()

    def requests(self) -> None:
        buffer = bytearray()
        try:
            if not self._fill(buffer, len(PREFACE)) or bytes(buffer[: len(PREFACE)]) != PREFACE:
                raise Refusal("it does not speak HTTP/2 as gRPC does")
            self.upstream.sendall(PREFACE)
            del buffer[: len(PREFACE)]
            while self._fill(buffer, 9):
                length = int.from_bytes(buffer[:3], "big")
                if length > MAX_FRAME:
                    raise Refusal(f"an HTTP/2 frame of {length} bytes")
                if not self._fill(buffer, 9 + length):
                    break
                frame = bytes(buffer[: 9 + length])
                del buffer[: 9 + length]
                out = self._frame(frame)
                if out:
                    self.upstream.sendall(out)
        except Refusal as refusal:
            self.report(
                {
                    "refused": f"{refusal}",
                    "connection": self.number,
                    "port": self.port,
                    "process": self.task,
                }
            )
        # Refused: a header out of place
        except (hpack.HPACKError, Refused, UnicodeDecodeError) as exc:
            self.report(
                {
                    "refused": f"it broke the HTTP/2 protocol ({type(exc).__name__}: {exc})"[:300],
                    "connection": self.number,
                    "port": self.port,
                    "process": self.task,
                }
            )
        except OSError:  # the client went away, or the service did
            pass
        self.close()
        # only this thread reads it: what the client still sends is refused by the kernel, not held
        self.client.close()

    def _fill(self, buffer: bytearray, size: int) -> bool:
        while len(buffer) < size:
            chunk = self.client.recv(1 << 16)
            if not chunk:
                return False
            buffer += chunk
        return True

    def close(self) -> None:
        with self.registry.lock:  # both directions close it: counted once
            self.registry.connections -= not self.closed
            self.closed = True
        for sock in (self.client, self.upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- frames ---------------------------------------------------------------------------------------

    def _frame(self, frame: bytes) -> bytes:
        """What of this frame (and of frames held before it) goes to the service now."""
        kind, flags, stream = frame[3], frame[4], int.from_bytes(frame[5:9], "big") & 0x7FFFFFFF
        payload = frame[9:]
        if self.block is not None:  # a header block continues: nothing else may come between
            opened, first_flags, fragment, frames = self.block
            if kind != CONTINUATION or stream != opened:
                raise Refusal("an HTTP/2 header block broken off")
            if len(fragment) + len(payload) > MAX_HEADER_BLOCK:
                raise Refusal(f"a header block over {MAX_HEADER_BLOCK} bytes (gRPC's own bound)")
            fragment += payload
            frames.append(frame)
            if flags & END_HEADERS:
                self.block = None
                return self._headers(opened, first_flags, bytes(fragment), b"".join(frames))
            return b""
        if kind == HEADERS:
            body = self._unpadded(payload, flags)
            if flags & PRIORITY:
                body = body[5:]
            if len(body) > MAX_HEADER_BLOCK:
                raise Refusal(f"a header block over {MAX_HEADER_BLOCK} bytes (gRPC's own bound)")
            if flags & END_HEADERS:
                return self._headers(stream, flags, body, frame)
            self.block = (stream, flags, bytearray(body), [frame])
            return b""
        if kind == CONTINUATION:
            raise Refusal("an HTTP/2 continuation of nothing")
        if kind == PUSH_PROMISE:
            raise Refusal("a push promise, which only a server sends")
        if kind == DATA:
            held = self.streams.get(stream)
            if held is None:
                raise Refusal("data on a stream it never opened")
            held.body += self._unpadded(payload, flags)
            held.padded |= bool(flags & PADDED)
            self._hold(held, frame)
            if len(held.body) > MAX_MESSAGE + 5:
                raise Refusal(f"a request over {MAX_MESSAGE} bytes")
            return self._end(stream) if flags & END_STREAM else b""
        if kind == RST_STREAM:  # what it held of that stream never goes
            dropped = self.streams.pop(stream, None)
            self.holding -= 0 if dropped is None else sum(map(len, dropped.held))
        return frame

    def _hold(self, stream: Stream, frames: bytes) -> None:
        if self.holding + len(frames) > MAX_HELD:
            raise Refusal(f"unfinished requests holding over {MAX_HELD} bytes at once")
        stream.held.append(frames)
        self.holding += len(frames)

    @staticmethod
    def _unpadded(payload: bytes, flags: int) -> bytes:
        if not flags & PADDED:
            return payload
        if not payload or payload[0] >= len(payload):
            raise Refusal("an HTTP/2 frame padded past its end")
        return payload[1 : len(payload) - payload[0]]

    def _headers(self, stream: int, flags: int, block: bytes, frames: bytes) -> bytes:
        # always: the service decodes every block
        headers = dict(self.decoder.decode(block, raw=False))
        held = self.streams.get(stream)
        if held is not None:  # trailers after data: they end the request
            self._hold(held, frames)
            return self._end(stream) if flags & END_STREAM else b""
        path = headers.get(":path", "")
        method = path[len(SERVICE) :] if path.startswith(SERVICE) else None
        if method not in READS | {REGISTER, INSERT}:
            raise Refusal(
                f"it called {_shown(path)}, which jax's client never calls"
                if method is None
                else f"it asked the service to {method}, which jax never does"
            )
        if len(self.streams) >= MAX_OPEN_STREAMS:
            raise Refusal(f"over {MAX_OPEN_STREAMS} requests at once")
        self.streams[stream] = Stream(method, headers.get("grpc-encoding", "identity"))
        if flags & END_STREAM:
            return frames + self._end(stream)
        return frames

    def _end(self, stream: int) -> bytes:
        """The request on `stream` is whole: judge it; its frames go to the service only if it passes,
        with every record as the gate read it (GlooAddress.canonical)."""
        request = self.streams.pop(stream)
        self.holding -= sum(map(len, request.held))
        body = bytearray(request.body)
        for found in grpc_messages(request.body, request.encoding) or [
            GrpcMessage(0, b"", False, b"")
        ]:
            rewritten = self._judge(request.method, found.message)
            if rewritten is not None and rewritten[0] != rewritten[1]:
                raw = self._rewritten(request, found, *rewritten)
                body[found.at : found.at + len(raw)] = raw
        if body == request.body:
            return b"".join(request.held)
        # the same frames, each carrying as many bytes: the peers' flow control stays as it was
        out, at = [], 0
        for frame in request.held:
            if frame[3] == DATA:
                size = len(frame) - 9
                frame = frame[:9] + bytes(body[at : at + size])
                at += size
            out.append(frame)
        return b"".join(out)

    @staticmethod
    def _rewritten(request: Stream, found: GrpcMessage, written: bytes, canonical: bytes) -> bytes:
        """The message's bytes, as sent, with the record `written` in it replaced by `canonical`, in as
        many bytes (jax's client sends a gloo record gzip'd, unpadded)."""
        message = found.message
        if request.padded or message.count(written) != 1 or len(canonical) != len(written):
            raise Refusal("it wrote a gloo record in a padded request, which jax never sends")
        message = message.replace(written, canonical)
        if not found.compressed:
            return message
        raw = gzip_of_size(message, len(found.raw)) if request.encoding == "gzip" else None
        if raw is None:
            raise Refusal(
                f"it wrote a gloo record compressed as {request.encoding!r} in {len(found.raw)} bytes, "
                f"which the gate cannot rewrite in as many"
            )
        return raw

    # -- requests -------------------------------------------------------------------------------------

    def _judge(self, method: str, message: bytes) -> tuple[bytes, bytes] | None:
        """Refusal unless jax's client makes this request here; for a gloo record, (its value as
        written, as the service gets it)."""
        try:
            if method == REGISTER:
                self._register(message)
                return None
            if self.task is None:
                raise Refusal(f"it asked the service to {method} before registering")
            header = records.field(message, 1, records.BYTES)
            incarnation = None if header is None else records.field(header, 2, FIXED64)
            if incarnation is not None and incarnation != self.incarnation:
                raise Refusal(f"process {self.task} spoke to the service as another process")
            return self._insert(message) if method == INSERT else None
        except Refused as exc:
            raise Refusal(f"its {method} request is not one jax makes: {exc}") from None

    def _register(self, message: bytes) -> None:
        task = records.field(message, 5, VARINT, 0)
        incarnation = records.field(message, 3, FIXED64)
        if self.task is not None:
            if (task, incarnation) == (self.task, self.incarnation):
                return  # a retry of the same registration
            raise Refusal(f"process {self.task} registered again, as process {task}")
        with self.registry.lock:
            earlier = self.registry.tasks.setdefault(task, self.number)
        if earlier != self.number:
            raise Refusal(
                f"a connection registered as process {task}, which another connection had registered as"
            )
        self.task, self.incarnation = task, incarnation
        self.report({"registered": task, "connection": self.number, "port": self.port})

    def _insert(self, message: bytes) -> tuple[bytes, bytes] | None:
        entry = records.field(message, 2, records.BYTES)
        if entry is None:
            raise Refusal(f"process {self.task} wrote nothing")
        if any(
            number != 1 and number != 2 and value for number, _, value in records.fields(message)
        ):
            raise Refusal(
                f"process {self.task} asked the service to overwrite a key, which jax never does"
            )
        raw_key = records.field(entry, 1, records.BYTES, b"")
        key, value = raw_key.decode("utf-8"), records.field(entry, 2, records.BYTES, b"")
        try:
            found = records.record(key, value, self.machine)
        except Refused as exc:
            raise Refusal(
                f"process {self.task} wrote the key {_shown(raw_key)} ({len(value)} bytes) to the "
                f"coordination service's key-value store: {exc}"
            ) from None
        task, registry = self.task, self.registry
        rewritten = None
        with registry.lock:
            if isinstance(found, records.LocalTopology):
                if found.node != task:
                    raise Refusal(f"process {task} wrote the topology of process {found.node}")
                registry.devices[task], registry.topologies[task] = found.devices, value
                wrote = {"topology": found.node, "devices": list(found.devices)}
            elif isinstance(found, records.GlobalTopology):
                if task != 0:
                    raise Refusal(
                        f"process {task} wrote the global topology, which only process 0's jax writes"
                    )
                nodes = [registry.topologies.get(node) for node in range(self.processes)]
                if None in nodes or value != records.jax_global_topology(nodes):
                    raise Refusal(
                        f"process 0 wrote a global topology that is not every one of the "
                        f"{self.processes} processes' topologies as they wrote them, in order"
                    )
                wrote = {"global": [list(node.devices) for node in found.nodes]}
            else:
                self._gloo(found)
                rewritten = (value, found.canonical)
                wrote = {
                    "gloo": {"clique": list(found.clique), "rank": found.rank, "port": found.port}
                }
        self.report({"wrote": wrote, "process": task, "connection": self.number})
        return rewritten

    def _gloo(self, found: records.GlooAddress) -> None:
        """What a gloo record holds across records (the registry's lock held): a device of the writer's,
        in a collective of published devices; the writer's one gloo port; pair numbers new in this
        process and within what its gloo has counted out."""
        task, registry = self.task, self.registry
        own = registry.devices.get(task, ())
        if found.device not in own:
            raise Refusal(
                f"process {task} wrote gloo's rendezvous for device {found.device}, which is "
                f"not one of the devices its jax published"
            )
        published = {device for devices in registry.devices.values() for device in devices}
        if not published.issuperset(found.clique):
            raise Refusal(
                f"process {task} wrote gloo's rendezvous for a collective over devices no process's jax "
                f"published ({sorted(set(found.clique) - published)[:8]})"
            )
        cliques = registry.cliques.setdefault(task, set())
        if found.clique not in cliques and len(cliques) >= MAX_CLIQUES:
            raise Refusal(
                f"process {task} wrote gloo's rendezvous for over {MAX_CLIQUES} collectives"
            )
        if registry.gloo_ports.setdefault(task, found.port) != found.port:
            raise Refusal(
                f"process {task} wrote gloo's rendezvous at port {found.port}, and before at "
                f"{registry.gloo_ports[task]}: its gloo listens on one"
            )
        used = registry.pairs.setdefault(task, set())
        if used.intersection(found.pairs):
            raise Refusal(f"process {task} wrote a gloo pair number it had written before")
        # gloo counts a process's pairs out from 0, each rank's thread in turn: its numbers are below
        # the pairs counted so far, this record's, and those of its other devices' ranks in flight
        bound = len(used) + len(found.pairs) * len(own)
        if max(found.pairs) >= bound:
            raise Refusal(
                f"process {task} wrote gloo pair number {max(found.pairs)}, past the {bound} its gloo "
                f"can have counted out"
            )
        cliques.add(found.clique)
        used.update(found.pairs)


class Gate:
    """Listens at `address` ("127.0.0.1:port") and passes each connection's requests, judged, to the
    service at the UNIX socket `service_path`."""

    def __init__(
        self, address: str, service_path: str, report: Callable[[dict], None], *, processes: int
    ):
        host, port = address.rsplit(":", 1)
        self.listener = socket.create_server((host, int(port)))
        self.service_path, self.report = service_path, report
        self.processes, self.machine = processes, records.Machine.here()
        self.registry = Registry()

    def serve(self) -> None:
        """Accept connections until the process ends (a daemon thread each way per connection)."""
        number = 0
        while True:
            client, peer = self.listener.accept()
            with self.registry.lock:
                full = self.registry.connections >= CONNECTIONS_PER_PROCESS * self.processes
                self.registry.connections += not full
            if full:
                self.report(
                    {
                        "refused": f"over {CONNECTIONS_PER_PROCESS * self.processes} connections at once",
                        "connection": None,
                        "port": peer[1],
                        "process": None,
                    }
                )
                client.close()
                continue
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.service_path)
            except OSError:
                client.close()
                upstream.close()
                with self.registry.lock:
                    self.registry.connections -= 1
                continue
            channel = Channel(
                number,
                client,
                upstream,
                self.registry,
                self.report,
                processes=self.processes,
                machine=self.machine,
            )
            number += 1
            threading.Thread(target=channel.requests, daemon=True).start()
            threading.Thread(target=channel.answers, daemon=True).start()
