"""The grader's gate before jax's coordination service in a multi-process run (ex12).

The processes are told the gate's address; jax's service listens where only the grader's coordinator
can reach it (a UNIX socket: the processes may make none). Each connection through the gate is one
process's gRPC channel (HTTP/2 without TLS). The gate copies the service's answers as they are and reads
every request before the service sees it: a request must be one jax's own client makes, in the process
that made it. Anything else is never forwarded: the gate cuts that connection and says why. So the
service's key-value store holds only jax's own records (grader.cluster.records) and cannot carry
a process's rows to another; and every record is attributed to the connection that wrote it, which the
harness ties to the process holding it (grader.cluster.run).

The rules, per connection: it registers first, once, as a process no other connection registered as;
every later request speaks as that process (the incarnation in its header); it writes only its own
topology (process 0 also the global one) and gloo's rendezvous for devices of its own; it never
overwrites, increments or deletes a key; it calls only the service's methods jax uses. What it may
read is not limited: every key in the store is jax's.

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
MAX_FRAME = 1 << 20  # HTTP/2's default is 16 KiB; gRPC's requests here are under 1 KiB
MAX_MESSAGE = 1 << 20  # one request, decompressed (a topology of 1024 devices is under 100 KiB)
MAX_OPEN_STREAMS = 256
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


@dataclass
class Registry:
    """What every connection of the run has claimed, shared by the gate's threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    # process -> the connection that registered it
    tasks: dict[int, int] = field(default_factory=dict)
    # process -> its topology's devices
    devices: dict[int, tuple[int, ...]] = field(default_factory=dict)


def grpc_messages(body: bytes, encoding: str) -> list[bytes]:
    """The length-prefixed messages of a gRPC request's body, decompressed."""
    messages, at = [], 0
    while at < len(body):
        if at + 5 > len(body):
            raise Refusal("a gRPC message cut short")
        compressed, size = body[at], int.from_bytes(body[at + 1 : at + 5], "big")
        message = bytes(body[at + 5 : at + 5 + size])
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
        messages.append(message)
        at += 5 + size
    return messages


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
    ):
        self.number, self.client, self.upstream = number, client, upstream
        self.registry, self.report = registry, report
        self.port = client.getpeername()[1]
        self.decoder = hpack.Decoder()
        # whatever size the client's encoder announces
        self.decoder.max_allowed_table_size = 1 << 16
        self.streams: dict[int, Stream] = {}
        # (stream, flags, fragment, frames)
        self.block: tuple[int, int, bytearray, list[bytes]] | None = None
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

    def _fill(self, buffer: bytearray, size: int) -> bool:
        while len(buffer) < size:
            chunk = self.client.recv(1 << 16)
            if not chunk:
                return False
            buffer += chunk
        return True

    def close(self) -> None:
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
            held.held.append(frame)
            if len(held.body) > MAX_MESSAGE + 5:
                raise Refusal(f"a request over {MAX_MESSAGE} bytes")
            return self._end(stream) if flags & END_STREAM else b""
        if kind == RST_STREAM:  # what it held of that stream never goes
            self.streams.pop(stream, None)
        return frame

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
            held.held.append(frames)
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
        """The request on `stream` is whole: judge it; its frames go to the service only if it passes."""
        request = self.streams.pop(stream)
        for message in grpc_messages(request.body, request.encoding) or [b""]:
            self._judge(request.method, message)
        return b"".join(request.held)

    # -- requests -------------------------------------------------------------------------------------

    def _judge(self, method: str, message: bytes) -> None:
        try:
            if method == REGISTER:
                self._register(message)
                return
            if self.task is None:
                raise Refusal(f"it asked the service to {method} before registering")
            header = records.field(message, 1, records.BYTES)
            incarnation = None if header is None else records.field(header, 2, FIXED64)
            if incarnation is not None and incarnation != self.incarnation:
                raise Refusal(f"process {self.task} spoke to the service as another process")
            if method == INSERT:
                self._insert(message)
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

    def _insert(self, message: bytes) -> None:
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
            found = records.record(key, value)
        except Refused as exc:
            raise Refusal(
                f"process {self.task} wrote the key {_shown(raw_key)} ({len(value)} bytes) to the "
                f"coordination service's key-value store: {exc}"
            ) from None
        task = self.task
        with self.registry.lock:
            if isinstance(found, records.LocalTopology):
                if found.node != task:
                    raise Refusal(f"process {task} wrote the topology of process {found.node}")
                self.registry.devices[task] = found.devices
                wrote = {"topology": found.node, "devices": list(found.devices)}
            elif isinstance(found, records.GlobalTopology):
                if task != 0:
                    raise Refusal(
                        f"process {task} wrote the global topology, which only process 0's jax writes"
                    )
                wrote = {"global": [list(node.devices) for node in found.nodes]}
            else:
                if found.device not in self.registry.devices.get(task, ()):
                    raise Refusal(
                        f"process {task} wrote gloo's rendezvous for device {found.device}, which is "
                        f"not one of the devices its jax published"
                    )
                wrote = {
                    "gloo": {"clique": list(found.clique), "rank": found.rank, "port": found.port}
                }
        self.report({"wrote": wrote, "process": task, "connection": self.number})


class Gate:
    """Listens at `address` ("127.0.0.1:port") and passes each connection's requests, judged, to the
    service at the UNIX socket `service_path`."""

    def __init__(self, address: str, service_path: str, report: Callable[[dict], None]):
        host, port = address.rsplit(":", 1)
        self.listener = socket.create_server((host, int(port)))
        self.service_path, self.report = service_path, report
        self.registry = Registry()

    def serve(self) -> None:
        """Accept connections until the process ends (a daemon thread each way per connection)."""
        number = 0
        while True:
            client, _ = self.listener.accept()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.service_path)
            except OSError:
                client.close()
                upstream.close()
                continue
            channel = Channel(number, client, upstream, self.registry, self.report)
            number += 1
            threading.Thread(target=channel.requests, daemon=True).start()
            threading.Thread(target=channel.answers, daemon=True).start()
