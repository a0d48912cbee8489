"""The small parts of grading: the harness's event stream and the timing lock."""

import os
import threading
import time

import msgspec
import pytest

from grader.harness import events, timing_lock


def test_events_travel_as_json_lines_and_the_variable_is_removed(monkeypatch):
    read, write = os.pipe()
    monkeypatch.setenv(events.EVENTS_FD, str(write))
    stream = events.EventStream.from_environment()
    assert stream.active and events.EVENTS_FD not in os.environ

    def send_both():
        stream.send(events.Finished({"nodeid": "a", "category": "passed"}))
        stream.send(events.Started("b" * 100_000))  # longer than a pipe takes at once
        os.close(write)

    sender = threading.Thread(target=send_both)
    sender.start()
    raw = b""
    while chunk := os.read(read, 1 << 16):
        raw += chunk
    os.close(read)
    sender.join(5)
    assert (
        raw.split(b"\n")[0] == b'{"e": "result", "result": {"nodeid": "a", "category": "passed"}}'
    )
    assert events.parse(raw) == [
        events.Finished({"nodeid": "a", "category": "passed"}),
        events.Started("b" * 100_000),
    ]


def test_a_line_that_is_no_event_is_refused():
    """The harness is the grader's own code: a line it should not write stops grading, never passes."""
    for line in (
        b'{"e": "start"}',
        b'{"e": "start", "nodeid": "a", "extra": 1}',
        b'{"e": "finished"}',
    ):
        with pytest.raises(msgspec.ValidationError):
            events.parse(line)


def test_a_plain_run_has_no_stream(monkeypatch):
    monkeypatch.delenv(events.EVENTS_FD, raising=False)
    stream = events.EventStream.from_environment()
    assert not stream.active
    stream.send(events.Started("a"))  # does nothing, raises nothing


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
    assert log == [
        "first start",
        "first end",
        "measure start",
        "measure end",
        "second start",
        "second end",
    ]


def test_a_speedup_test_measures_alone_but_compiles_beside_others(monkeypatch, tmp_path):
    """A speedup test holds the lock shared like any test; only its measurement waits for the others'
    running tests to end and keeps new ones out, and its clock starts again once it is alone."""
    monkeypatch.setenv(timing_lock.LOCK_DIR, str(tmp_path))
    log, setting_up = [], threading.Event()

    def speedup_test():
        with timing_lock.hold(exclusive=False):
            log.append("speedup test compiles")
            setting_up.set()
            time.sleep(0.2)
            with timing_lock.alone(lambda: log.append("clock restarted")):
                log.append("measure start")
                time.sleep(0.2)
                log.append("measure end")
            log.append("speedup test checks")

    def ordinary(name, hold_for):
        with timing_lock.hold(exclusive=False):
            log.append(f"{name} start")
            time.sleep(hold_for)
            log.append(f"{name} end")

    tester = threading.Thread(target=speedup_test)
    tester.start()
    setting_up.wait(5)
    beside = threading.Thread(target=ordinary, args=("beside", 0.4))
    beside.start()  # runs while the speedup test compiles, and holds the measurement back
    time.sleep(0.3)
    later = threading.Thread(target=ordinary, args=("later", 0.0))
    later.start()  # comes while the measurement waits: it waits for the measurement
    for thread in (tester, beside, later):
        thread.join(5)
    assert log.index("beside start") < log.index("measure start")
    assert log.index("beside end") < log.index("clock restarted") < log.index("measure start")
    assert log.index("measure end") < log.index("later start")


def test_without_the_variable_nothing_is_locked(monkeypatch):
    monkeypatch.delenv(timing_lock.LOCK_DIR, raising=False)
    with timing_lock.hold(exclusive=True), timing_lock.hold(exclusive=True):
        with timing_lock.alone():
            pass
