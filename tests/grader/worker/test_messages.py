"""The worker channel's messages: each kind declared once, written and read through the same classes, and
a message that is not one of the kinds its reader expects refused as a ProtocolError, after the framing's
bounds (checked before anything is parsed)."""

import os
import threading

import pytest

from grader.worker import codec, framing, messages
from grader.worker.codec_kinds import kinds, kinds_by_tag
from grader.worker.protocol_errors import ProtocolError

EXAMPLES = [
    messages.Call("ex01_meshes.py", codec.encode((1, 2)), codec.encode({}), name="place"),
    messages.Export("ex01_meshes.py", codec.encode(()), codec.encode({"k": 1.5}), ref=3),
    messages.Ready(),
    messages.Imported("ex01_meshes.py"),
    messages.ImportFailed("SyntaxError: invalid syntax"),
    messages.Returned(codec.encode([None, "s", float("nan")])),
    messages.Raised({"type": "ValueError", "base": "ValueError", "message": "no", "frames": []}),
    messages.Program("AAAA", codec.encode((1,))),
    messages.Callback(0, codec.encode(()), codec.encode({})),
    messages.TraceFailed("TypeError: no"),
]
EVERY_KIND = messages.Request | messages.FromWorker | messages.CallbackAnswer


def _through_a_pipe(message, kinds_expected, **read):
    r, w = os.pipe()
    writer = threading.Thread(target=lambda: (messages.write(w, message), os.close(w)))
    writer.start()
    try:
        return messages.read(r, kinds_expected, **read)
    finally:
        writer.join()
        os.close(r)


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_each_kind_is_read_back_as_written(message):
    assert _through_a_pipe(message, EVERY_KIND) == message


def test_each_kind_has_its_own_tag():
    tags = [type(m).__struct_config__.tag for m in EXAMPLES]
    assert len(set(tags)) == len(tags) == len(EXAMPLES)


def _raw(body: bytes, kinds_expected, **read):
    r, w = os.pipe()
    os.write(w, framing.HEADER.pack(len(body)) + body)
    os.close(w)
    try:
        return messages.read(r, kinds_expected, **read)
    finally:
        os.close(r)


MALFORMED = {
    "no kind": b'{"value":1}',
    "an unknown kind": b'{"kind":"surprise"}',
    "an unknown field": b'{"kind":"callback","function":0,"args":null,"kwargs":null,"pad":"x"}',
    "a missing field": b'{"kind":"program","out":null}',
    "a field of the wrong type": b'{"kind":"callback","function":"0","args":null,"kwargs":null}',
    "a bool for an int": b'{"kind":"callback","function":true,"args":null,"kwargs":null}',
    "a kind the reader does not expect": b'{"kind":"call","module":"m","args":null,"kwargs":null}',
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_message_is_a_protocol_error(body):
    with pytest.raises(ProtocolError, match="a malformed message"):
        _raw(body, messages.FromWorker)


def test_the_framings_bounds_come_first():
    with pytest.raises(ProtocolError, match="larger than the limit"):
        _raw(b'{"kind":"surprise"}', messages.FromWorker, limit=5)
    with pytest.raises(ProtocolError, match="in all"):
        _raw(b'{"kind":"surprise"}', messages.FromWorker, budget=framing.Budget(total=10))
    with pytest.raises(ProtocolError, match="nested more than"):
        _raw(b'{"kind":"ok","value":' + b"[" * 1000 + b"]" * 1000 + b"}", messages.FromWorker)


def test_the_codec_defines_each_kind_once():
    tags = [kind.tag for kind in kinds()]
    assert len(set(tags)) == len(tags)
    assert set(kinds_by_tag()) == set(tags)
