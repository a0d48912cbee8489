"""The harness's supervisor of one student's worker processes: it starts them confined, forks each from a
fork server (grader.worker.zygote) when it can, sends a worker its requests and reads its answers within
the test's deadline, relays what the student's code prints, and kills and replaces a worker that crashed,
hung or broke the protocol, with everything it started. It suspends them while a test measures speed.

It deals in messages only: what a request means, and what its answer is worth, is the stand-in's
(grader.worker.stand_in); how a worker fails is grader.worker.failures.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from grader.core import wall_cap
from grader.core.processor_time import ProcessorTime
from grader.core.results import TimeoutBy, TimeoutFigures
from grader.sandbox import confinement, processor_wait
from grader.worker import messages
from grader.worker.failures import (
    WorkerBrokeProtocol,
    WorkerCrashed,
    WorkerFailure,
    WorkerFilledDisk,
    WorkerTimeout,
    describe_death,
)
from grader.worker.framing import Budget
from grader.worker.protocol_errors import ProtocolError

STARTUP_SECONDS = 120.0  # a confined Python importing jax (a new zygote)
# a worker forked from a ready zygote: later than this, start a new sandbox
WARM_STARTUP_SECONDS = 10.0
REPLACE_SECONDS = 2.0  # for the zygote to reap a replaced worker's processes, once killed
EXIT_STATUS_SECONDS = 2.0  # for the zygote to report how a worker that closed its pipe ended
OUTPUT_CHARS_PER_CALL = 4000

# False: a replaced worker's whole sandbox is stopped and the next worker starts cold, in a fresh one,
# as if there were no fork server (bench/worker_start.py measures what the fork server saves).
FORK_SERVER = True


def _timeout(what: str, importing: bool, figures: TimeoutFigures | None = None) -> WorkerTimeout:
    """figures: what the test was judged on (None: the wall-clock cap, not measured)."""
    if figures is not None and figures.by is TimeoutBy.PROCESSOR_TIME:
        return WorkerTimeout(
            f"timeout: your code did not finish {what} within the test's limit of {figures.limit:.1f} s "
            "of processor time (an endless loop, or far too much work?)",
            importing,
            figures=figures,
        )
    return WorkerTimeout(
        f"timeout: your code did not finish {what} within the test's wall-clock cap "
        "(waiting for something that never comes, or an endless loop?)",
        importing,
        figures=figures,
    )


def _tree(process) -> list:
    """`process` and its descendants (none if it is None or gone)."""
    if process is None:
        return []
    try:
        return [process, *process.children(recursive=True)] if process.is_running() else []
    except psutil.Error:
        return []


def _ended(process) -> bool:
    """`process` (a psutil.Process; None: not known) has ended (its zygote reaps it at once)."""
    if process is None:
        return False
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _doing(what: str) -> str:
    """What the worker was doing: "importing m.py", "starting the worker" or "running this call"."""
    return f"running {what}" if what == "this call" else what


def _no_callback(message: messages.Callback) -> messages.TraceFailed:
    """A worker just started has run no student code, so no function of the tests was given to it."""
    return messages.TraceFailed("no function of the tests was given to a worker that is starting")


AnswerCallback = Callable[[messages.Callback], messages.CallbackAnswer]

_NOT_SERVING = (
    psutil.STATUS_ZOMBIE,
    psutil.STATUS_DEAD,
    psutil.STATUS_STOPPED,
    psutil.STATUS_TRACING_STOP,
)


# A zygote started by the harness's entry point (grader.grading.child) before the harness imports jax,
# pytest and the tests, so that the two imports overlap: the session takes it over (Worker.take_early).
_EARLY: Worker | None = None


def start_early(
    folder: Path, *, isolation: confinement.Isolation, memory_bytes: int | None
) -> None:
    """Prestart the worker the harness will ask for (its folder, level and memory limit, as the harness's
    session will compute them), as the first thing the harness process does."""
    global _EARLY
    worker = Worker(folder, isolation=isolation, limits=confinement.worker_limits(memory_bytes))
    worker.prestart()
    # kept only once started: a failed start leaves the harness to probe and start its own
    _EARLY = worker


def early_isolation(requested: str) -> confinement.Isolation | None:
    """The level of the early zygote when it is the one `requested`: the grading process chose it and
    proved it (grader.grading.preflight), and the zygote is starting at it, so the harness need not probe
    it again (about 0.2 s of its start)."""
    if _EARLY is not None and _EARLY.isolation.value == requested:
        return _EARLY.isolation
    return None


def stop_early() -> None:
    """Stop an early zygote no session took over (a harness that ended before asking for its worker)."""
    global _EARLY
    early, _EARLY = _EARLY, None
    if early is not None:
        early.stop()


class Worker:
    """One confined worker process serving the student's modules in one folder, started on first use
    (or early: prestart, then warm_up before the first test) and started again after it crashed or hung.

    Workers are forked from a zygote (grader.worker.zygote): a process confined exactly as a worker,
    started once per Worker, that has imported jax and waits to be asked for a worker. A worker that
    crashed, hung or broke the protocol is killed with everything it started (every descendant of the
    zygote, the zygote being a subreaper), and the next is forked at once (warm). A zygote that is gone
    or does not answer is killed with its whole sandbox and a fresh one started (cold); so is every
    replaced worker's sandbox when FORK_SERVER is off."""

    def __init__(
        self,
        folder: Path,
        *,
        isolation: confinement.Isolation,
        limits: confinement.WorkerLimits | None = None,
        scratch: Path | None = None,
    ):
        self.folder = Path(folder).resolve()
        self.isolation = isolation
        self._limits = limits or confinement.WorkerLimits()
        self._scratch = Path(scratch or tempfile.gettempdir())
        self._process = None  # the sandbox: the zygote and every worker it forks
        self._zygote = None  # its psutil.Process, once it said "ready"
        self._worker = None  # the worker's psutil.Process, once it said "ready"
        self._request_w = self._response_r = None  # the worker's pipes (ours ends)
        self._forked = 0  # workers asked of the zygote: numbers its exit reports
        self._ready = False
        self._asked = 0  # requests sent to the worker now serving
        self._output = None  # what the sandbox prints, read back after each call
        # the test's wall-clock cap: time.monotonic() by which the current test must end
        self.deadline = float("inf")
        # the processor time the worker may use in the current test (start_clock), and its count then
        self.cpu_limit, self._cpu_at_start = float("inf"), ProcessorTime()
        # when the current test's clock started, and its sandbox's threads' waiting for a processor since
        self._clock_started, self._waits = time.monotonic(), processor_wait.NoWaits()
        self._cpu_ended = ProcessorTime()  # what the sandboxes stopped before this one used
        self.started_early = False  # taken over from the harness's entry point (take_early)

    @classmethod
    def take_early(
        cls, folder: Path, *, isolation: confinement.Isolation, limits: confinement.WorkerLimits
    ) -> Worker:
        """The worker for `folder` at `isolation` with `limits`: the early one (start_early) when it was
        started for exactly these, else a new one (an early one that differs is stopped)."""
        global _EARLY
        early, _EARLY = _EARLY, None
        wanted = (Path(folder).resolve(), isolation, limits)
        if early is not None and (early.folder, early.isolation, early._limits) == wanted:
            early.started_early = True
            return early
        if early is not None:
            early.stop()
        return cls(folder, isolation=isolation, limits=limits)

    # What the worker now serving may still send, and which worker (self._forked) that is.
    _budget: Budget | None = None
    _budget_of: int = 0

    # --- the processes -------------------------------------------------------------------------

    def prestart(self) -> None:
        """Start the zygote now, without waiting: it imports jax while the harness works."""
        if self._process is None:
            self._start_sandbox()

    def warm_up(self) -> None:
        """Have a worker ready now, its zygote waited for (started if prestart did not), outside any test's
        clock: that start runs no student code (the module is imported by the first request), so no test
        pays for it. A start that fails is not raised here: the first request starts again, within its
        test's time, and reports it."""
        if self._ready:
            return
        # the start's own limit, STARTUP_SECONDS
        deadline, self.deadline = (self.deadline, float("inf"))
        try:
            self._spawn()
        except (WorkerFailure, ProtocolError):
            pass
        finally:
            self.deadline = deadline

    def start_clock(self, cpu_limit: float, deadline: float) -> None:
        """A test's clock starts: the worker may use `cpu_limit` seconds of processor time from now,
        and the test ends at `deadline` (time.monotonic()) whatever it used."""
        self.cpu_limit, self.deadline = cpu_limit, deadline
        self._cpu_at_start = self.processor_time()
        self._clock_started, self._waits = time.monotonic(), processor_wait.Waits(self._pids)

    def _pids(self) -> list[int]:
        """The processes whose waiting the wall-clock cap forgives: the sandbox's (its cgroup's, which none
        can leave; else its process tree and a worker whose zygote has gone), and the harness itself (this
        process), which traces and compiles the worker's programs while the worker waits for its answer."""
        group = self._process.cgroup if self._process is not None else None
        if group is not None:
            return [os.getpid(), *sorted(group.processes())]
        sandbox = processor_wait.tree(self._process.pid if self._process is not None else None)
        worker = processor_wait.tree(self._worker.pid if self._worker is not None else None)
        return list(dict.fromkeys([os.getpid(), *sandbox, *worker]))

    def _figures(self, by: TimeoutBy, waited: float | None = None) -> TimeoutFigures:
        """What the running test is judged on now (`waited`: as just read, else read now)."""
        used = self.processor_time() - self._cpu_at_start
        return TimeoutFigures(
            by=by,
            limit=self.cpu_limit,
            cap=self.deadline - self._clock_started,
            cpu=used.user,
            system=used.system,
            wall=time.monotonic() - self._clock_started,
            waited=self._waits.since() if waited is None else waited,
        )

    def _cap_left(self, deadline: float) -> tuple[float, float | None]:
        """The seconds left before the test's wall-clock cap (`deadline`), its waiting for a processor not
        counted (0: the cap has passed), and that waiting (None: not read, the deadline is still ahead)."""
        left = deadline - time.monotonic()
        if left > 0:
            return left, None
        waited = self._waits.since()
        wall, cap = time.monotonic() - self._clock_started, deadline - self._clock_started
        return max(0.0, cap - wall_cap.counted(wall, waited, cap)), waited

    def processor_time(self) -> ProcessorTime:
        """The processor time the worker's sandboxes have used so far, every process and every sandbox
        since this Worker started counted: as their cgroup counts it, or where there is none, as the
        kernel counts the sandbox's live processes (and the children they waited for). The test's limit
        holds its user time (grader.core.processor_time)."""
        return self._cpu_ended + self._sandbox_cpu(self._process)

    def _sandbox_cpu(self, process) -> ProcessorTime:
        """`process`'s sandbox's processor time: its cgroup's count, or its process tree's and the worker's."""
        if process is None:
            return ProcessorTime()
        counted = process.processor_time()
        if counted is not None:
            return counted
        try:
            processes = _tree(psutil.Process(process.pid))
        except psutil.Error:
            processes = []
        total = ProcessorTime()
        for process in {p: None for p in [*processes, *_tree(self._worker)]}:
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            total += ProcessorTime(
                times.user + times.children_user, times.system + times.children_system
            )
        return total

    def _cpu_used_up(self) -> bool:
        return (self.processor_time() - self._cpu_at_start).user >= self.cpu_limit

    def _start_sandbox(self) -> None:
        workdir = Path(tempfile.mkdtemp(prefix="worker-", dir=self._scratch))
        # Blocking, but never waited on: reads follow select() and nothing is sent or read without MSG_DONTWAIT
        # (a socket with a timeout would wait out the timeout even then).
        control, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        output_path = workdir.parent / f"{workdir.name}.out"
        output = open(output_path, "ab")  # the sandbox appends; we read from our own offset
        self._output, self._read = open(output_path, "rb"), 0
        env = confinement.sandbox_environment(workdir, XLA_FLAGS=os.environ.get("XLA_FLAGS", ""))
        argv = [
            sys.executable,
            "-I",
            "-B",
            "-m",
            "grader.worker.zygote",
            str(zygote_end.fileno()),
            str(self.folder),
        ]
        try:
            process = confinement.spawn_confined(
                argv,
                level=self.isolation,
                workdir=workdir,
                readable=[self.folder],
                env=env,
                pass_fds=(zygote_end.fileno(),),
                limits=self._limits,
                stdout=output,
                pid_1=True,
            )
        except BaseException:
            control.close()
            raise
        finally:
            output.close()
            zygote_end.close()
        self._process, self._control, self._zygote = process, control, None
        self._workdir, self._sandbox_started_at = workdir, time.monotonic()

    def _spawn(self) -> None:
        """A worker that said "ready": forked from the zygote when there is one that answers (warm),
        else from a fresh sandbox (cold)."""
        if self._zygote is not None:
            try:
                return self._fork_worker(
                    min(self.deadline, time.monotonic() + WARM_STARTUP_SECONDS)
                )
            except (WorkerFailure, ProtocolError):
                # the test's time is up, not the zygote's: it is kept
                if time.monotonic() >= self.deadline:
                    raise
                self.stop()
        if self._process is None:
            self._start_sandbox()
        limit = min(self.deadline, self._sandbox_started_at + STARTUP_SECONDS)
        try:
            self._await_zygote(limit)
            self._fork_worker(limit)
        except (WorkerFailure, ProtocolError):
            self.stop()
            raise

    def _await_zygote(self, limit: float) -> None:
        """Wait for the new zygote's "ready" and find it in the sandbox: nothing there has run anything
        but the grader yet, so it is the process at the end of the sandbox's single chain (bwrap, then
        the zygote as the namespace's init; or the zygote itself). Its own word is never taken for its pid."""
        while not select.select(
            [self._control], [], [], max(0.0, min(limit - time.monotonic(), 0.5))
        )[0]:
            if time.monotonic() >= limit:
                raise _timeout("starting the worker", False)
        try:
            message = self._control.recv(64, socket.MSG_DONTWAIT)
        except OSError:
            message = b""
        if message != b"ready":
            try:
                returncode = self._process.popen.wait(timeout=EXIT_STATUS_SECONDS)
            except subprocess.TimeoutExpired:
                returncode = None
            raise WorkerCrashed(f"crashed: {describe_death(returncode)} while starting the worker")
        try:
            process = psutil.Process(self._process.pid)
            while len(children := process.children()) == 1:
                process = children[0]
            found = not children and "grader.worker.zygote" in process.cmdline()
        except psutil.Error:
            found = False
        if not found:
            raise WorkerCrashed(
                "crashed: the worker's sandbox is not as it was started, while starting the worker"
            )
        self._zygote = process

    def _fork_worker(self, limit: float) -> None:
        self._drain_control()
        request_r, request_w = os.pipe()
        response_r, response_w = os.pipe()
        self._forked += 1
        self._request_w, self._response_r = request_w, response_r
        self._started_at, self._imported = time.monotonic(), set()
        self._asked = 0  # requests sent to this worker
        try:
            socket.send_fds(
                self._control,
                [str(self._forked).encode()],
                [request_r, response_w],
                socket.MSG_DONTWAIT,
            )
        except OSError:
            self._discard_worker()
            raise WorkerCrashed(
                "crashed: the worker's zygote ended, while starting the worker"
            ) from None
        finally:
            os.close(request_r)
            os.close(response_w)
        answer = self._receive(limit, "starting the worker", _no_callback)
        if not isinstance(answer, messages.Ready):
            self._discard_worker()
            raise ProtocolError("the worker did not start as expected")
        self._ready = True
        try:  # the zygote's one child (none other has run since the last was cleared): the worker
            children = self._zygote.children()
            self._worker = children[0] if len(children) == 1 else None
        except psutil.Error:
            self._worker = None

    def _drain_control(self) -> None:
        """Drop the zygote's reports of workers already replaced: its queue is short, and a full one
        would lose the report of the next worker's end."""
        while True:
            try:
                if not self._control.recv(64, socket.MSG_DONTWAIT):
                    return
            except OSError:  # BlockingIOError: nothing more
                return

    def _discard_worker(self) -> None:
        """Kill the worker and everything it started; keep the zygote if it reaps them all in time,
        else stop the whole sandbox (the next worker starts cold)."""
        if self._request_w is None:
            return
        for fd in (self._request_w, self._response_r):
            os.close(fd)
        self._request_w = self._response_r = None
        self._ready = False
        if not FORK_SERVER or not self._clear_zygote():
            self.stop()  # it kills self._worker too, which may have left the sandbox's tree with the zygote
            return
        self._worker = None
        # The next worker starts as from a fresh sandbox: an empty folder, and an empty output file
        # (RLIMIT_FSIZE counts every worker's output from zero). Nothing in the sandbox writes now.
        self._relay_output()
        os.truncate(self._output.name, 0)
        self._read = 0
        for entry in os.scandir(self._workdir):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)

    def _clear_zygote(self) -> bool:
        """Kill every descendant of the zygote (it serves one worker at a time, and the orphans of that
        worker's processes came back to it) and wait until it has reaped them all. False when the
        zygote is gone, stopped, or did not reap them in time."""
        zygote, ended = self._zygote, time.monotonic() + REPLACE_SECONDS
        if zygote is None:
            return False
        while time.monotonic() < ended:
            try:
                if not zygote.is_running() or zygote.status() in _NOT_SERVING:
                    return False
                below = zygote.children(recursive=True)
            except psutil.Error:
                return False
            if not below:
                return True
            for process in below:  # zombies included: they are gone once the zygote reaps them
                try:
                    process.kill()
                except psutil.Error:
                    pass
            time.sleep(0.005)
        return False

    def stop(self) -> None:
        """Kill the worker, the zygote and everything in their sandbox."""
        if self._process is None:
            return
        process, self._process = self._process, None
        if self._request_w is not None:
            for fd in (self._request_w, self._response_r):
                os.close(fd)
        self._request_w = self._response_r = None
        # before it is stopped: its cgroup's count goes with it
        self._cpu_ended += self._sandbox_cpu(process)
        worker, self._worker, self._zygote, self._ready = self._worker, None, None, False
        self._control.close()
        # a worker whose zygote was killed is out of the sandbox's tree (not its namespace)
        strays = _tree(worker)
        for stray in strays:
            try:
                stray.kill()
            except psutil.Error:
                pass
        process.kill_tree()
        psutil.wait_procs(strays, timeout=REPLACE_SECONDS)
        self._relay_output()
        self._output.close()
        os.unlink(self._output.name)
        self._output = None
        shutil.rmtree(self._workdir, ignore_errors=True)

    def suspend(self) -> None:
        """Stop the sandbox's processes (while a test measures speed in the harness), until resume()."""
        self._signal_tree("suspend")

    def resume(self) -> None:
        self._signal_tree("resume")

    def _signal_tree(self, action: str) -> None:
        if self._process is None:
            return
        try:
            processes = _tree(psutil.Process(self._process.pid))
        except psutil.Error:
            processes = []
        for process in {p: None for p in [*processes, *_tree(self._worker)]}:
            try:
                getattr(process, action)()
            except psutil.Error:
                pass

    # --- messages ----------------------------------------------------------------------------

    def request(
        self, message: messages.Request, *, answer_callback: AnswerCallback
    ) -> messages.FromWorker:
        """Send one request about its module and return the answer; `answer_callback` answers what the
        worker asks the harness meanwhile (a Callback: a test's function to trace). A crash or a hang raises
        WorkerCrashed or WorkerTimeout saying whether the module was being imported (`.importing`).

        A program that corrupted the worker's memory makes it abort when the C library next checks its
        heap, which can be after its answer: between calls (the worker found ended is replaced before this
        request) or within a later call. So a worker that dies during this request after running earlier
        ones may be dying of one of them: the request is asked once more, of a fresh worker, within the same
        test's time, and only a death there is this call's crash."""
        if self._ready and _ended(self._worker):
            self._discard_worker()
        inherited = (
            self._ready and self._asked > 0
        )  # the worker ran student code before this request
        try:
            return self._ask(message, answer_callback)
        except WorkerCrashed as crash:
            # a worker's death, not a rule of its limits (WorkerFilledDisk); a function the student returned
            # (`ref`) lived in the worker that died, so no other can be asked for it
            if not inherited or type(crash) is not WorkerCrashed or message.ref is not None:
                raise
            print(
                f"(the harness: {crash}; the worker had run earlier requests, so this one was asked again "
                "of a fresh worker)"
            )
        return self._ask(message, answer_callback)

    def _ask(
        self, message: messages.Request, answer_callback: AnswerCallback
    ) -> messages.FromWorker:
        module = message.module
        if not self._ready:
            self._spawn()
        self._asked += 1
        try:
            messages.write(self._request_w, message)
        except BrokenPipeError:
            self._discard_worker()
            raise WorkerCrashed("crashed: the worker ended before it was asked") from None
        what = "this call" if module in self._imported else f"importing {module}"
        try:
            answer = self._receive(self.deadline, what, answer_callback)
            # the worker imported the module (first use): now the call runs
            if isinstance(answer, messages.Imported):
                self._imported.add(module)
                answer = self._receive(self.deadline, "this call", answer_callback)
        finally:
            self._relay_output()
        self._refuse_if_filled(what)
        return answer

    def _refuse_if_filled(self, what: str) -> None:
        """Stop the sandbox, and say so, when the call filled one of its writable places: what it wrote
        there is then dropped with it, and the next worker starts with all of its disk."""
        if self._process is None:
            return
        filled = self._process.filled(self._zygote.pid if self._zygote is not None else None)
        if not filled:
            return
        self.stop()
        raise WorkerFilledDisk(
            f"crashed: your code wrote more than {self._limits.disk_bytes >> 20} MiB to disk ("
            f"{' and '.join(filled)}, the most a worker may hold there) while "
            f"{_doing(what)}; the worker was "
            "stopped and what it wrote deleted",
            what.startswith("importing"),
        )

    def _receive(
        self, deadline: float, what: str, answer_callback: AnswerCallback
    ) -> messages.FromWorker:
        """The worker's answer, its callbacks answered meanwhile. A worker that stops reading the
        programs it asked for costs the harness no more than the test's time."""
        while True:
            message = self._next_message(deadline, what)
            if not isinstance(message, messages.Callback):
                return message
            answer = answer_callback(message)
            # the write then waits for room only until the deadline
            os.set_blocking(self._request_w, False)
            try:
                messages.write(self._request_w, answer, deadline)
            except TimeoutError:
                self._discard_worker()
                raise _timeout(what, what.startswith("importing")) from None

    def _next_message(self, deadline: float, what: str) -> messages.FromWorker:
        importing = what.startswith("importing")
        while True:
            left, waited = self._cap_left(deadline)
            if left <= 0:
                figures = self._figures(TimeoutBy.WALL_CLOCK_CAP, waited)
                self._discard_worker()
                raise _timeout(what, importing, figures)
            readable, _, _ = select.select([self._response_r], [], [], min(left, 0.25))
            if readable:
                break
            # checked every quarter second: an endless loop uses at most that much more
            if self._cpu_used_up():
                figures = self._figures(TimeoutBy.PROCESSOR_TIME)
                self._discard_worker()
                raise _timeout(what, importing, figures)
        if self._budget_of != self._forked:  # a worker started since: a budget of its own
            self._budget, self._budget_of = Budget(), self._forked
        try:
            return messages.read(self._response_r, messages.FromWorker, self._budget)
        except ProtocolError as exc:
            raise self.broke_protocol(what, exc) from None
        except EOFError:
            returncode = self._exit_status()
            self._discard_worker()
            raise WorkerCrashed(
                f"crashed: {describe_death(returncode)} while {_doing(what)}", importing
            ) from None

    def broke_protocol(self, what: str, exc: ProtocolError) -> WorkerBrokeProtocol:
        """Discard the worker (one that breaks the protocol is not asked again) and say why, to be raised."""
        self._discard_worker()
        return WorkerBrokeProtocol(
            f"the worker broke the protocol while {_doing(what)} (did your code write to its "
            f"pipes?): {exc}",
            what.startswith("importing"),
        )

    def _exit_status(self) -> int | None:
        """How the worker that closed its pipe ended, as its zygote reports it (it only words the
        message: the crash itself is the closed pipe). None if the zygote does not say in time."""
        wanted, ended = f"exit {self._forked} ", time.monotonic() + EXIT_STATUS_SECONDS
        try:
            if self._zygote.status() in _NOT_SERVING:
                return None
        except psutil.Error:
            return None
        while select.select([self._control], [], [], max(0.0, ended - time.monotonic()))[0]:
            try:
                message = self._control.recv(64, socket.MSG_DONTWAIT).decode(
                    "ascii", errors="replace"
                )
            except BlockingIOError:
                continue
            except OSError:
                return None
            if not message:  # the zygote is gone
                return None
            if message.startswith(wanted) and message[len(wanted) :].lstrip("-").isdigit():
                return int(message[len(wanted) :])
        return None

    def _relay_output(self) -> None:
        """What the student's code printed during the call, into the test's captured output."""
        if self._output is None:
            return
        self._output.seek(self._read)
        text = self._output.read(OUTPUT_CHARS_PER_CALL + 1)
        self._read = self._output.seek(0, os.SEEK_END)
        if text:
            cut = len(text) > OUTPUT_CHARS_PER_CALL
            sys.stdout.write(
                text[:OUTPUT_CHARS_PER_CALL].decode(errors="replace")
                + ("\n... (cut)\n" if cut else "")
            )
