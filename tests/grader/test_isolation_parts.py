"""The small parts of isolation: the signed event stream and the timing lock."""

import os
import threading
import time

from grader import events, timing_lock


def test_only_lines_signed_with_the_key_are_accepted():
    key = b"k" * 32
    read, write = os.pipe()
    stream = events.EventStream(write, key)
    stream.send({"e": "result", "nodeid": "a", "category": "passed"})
    os.write(write, b'{"e": "result", "nodeid": "b", "category": "passed"}\t' + b"0" * 64 + b"\n")
    os.write(write, b"garbage without a tab\n")
    os.close(write)
    raw = os.read(read, 1 << 16)
    os.close(read)
    parsed, rejected = events.parse(key, raw)
    assert parsed == [{"e": "result", "nodeid": "a", "category": "passed"}]
    assert rejected == 2


def test_the_key_is_read_once_and_the_variables_removed(monkeypatch):
    key_read, key_write = os.pipe()
    os.write(key_write, b"secret")
    os.close(key_write)
    monkeypatch.setenv(events.EVENTS_FD, "1")
    monkeypatch.setenv(events.KEY_FD, str(key_read))
    stream = events.EventStream.from_environment()
    assert stream.active and stream.key == b"secret"
    assert events.EVENTS_FD not in os.environ and events.KEY_FD not in os.environ


def test_a_plain_run_has_no_stream(monkeypatch):
    monkeypatch.delenv(events.EVENTS_FD, raising=False)
    stream = events.EventStream.from_environment()
    assert not stream.active
    stream.send({"e": "start"})   # does nothing, raises nothing


def test_a_measurement_waits_for_running_tests_and_blocks_new_ones(monkeypatch, tmp_path):
    monkeypatch.setenv(timing_lock.LOCK_DIR, str(tmp_path))
    log, measuring = [], threading.Event()

    def ordinary(name, hold_for):
        with timing_lock.hold(exclusive=False):
            log.append(f"{name} start")
            time.sleep(hold_for)
            log.append(f"{name} end")

    def measurement():
        with timing_lock.hold(exclusive=True):
            measuring.set()
            log.append("measure start")
            time.sleep(0.2)
            log.append("measure end")

    first = threading.Thread(target=ordinary, args=("first", 0.3))
    first.start()
    time.sleep(0.05)
    timer = threading.Thread(target=measurement)
    timer.start()
    time.sleep(0.05)
    second = threading.Thread(target=ordinary, args=("second", 0.0))
    second.start()
    for thread in (first, timer, second):
        thread.join(5)
    assert log == ["first start", "first end", "measure start", "measure end", "second start", "second end"]


def test_without_the_variable_nothing_is_locked(monkeypatch):
    monkeypatch.delenv(timing_lock.LOCK_DIR, raising=False)
    with timing_lock.hold(exclusive=True), timing_lock.hold(exclusive=True):
        pass
