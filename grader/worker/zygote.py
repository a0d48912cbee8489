"""A worker's zygote: a confined process that has imported everything a worker needs, and forks a
worker, ready at once, each time the harness asks for one.

    python -I -B -m grader.worker.zygote CONTROL_FD MODULES_FOLDER

grader.worker.supervisor.Worker starts it as it would start a worker (same confinement, folder, limits;
one zygote per Worker, so per student). It forces the host devices and imports jax and the
worker's modules, but never starts jax's backend: the backend's thread pools would not survive a fork
(numpy's OpenBLAS pool does: OpenBLAS stops it before a fork). Then it serves its control socket, a
SOCK_SEQPACKET pair:

    harness -> zygote: b"<n>" with two fds, worker n's request-read and response-write pipe ends
    zygote -> harness: b"ready" once imported; b"exit <n> <status>" when worker n has ended

Each worker is a forked child running grader.worker.request_loop.serve on its pipes; it inherits the zygote's
namespaces, limits, user, Landlock domain, session and process group. Under bubblewrap the zygote is
the pid namespace's init (bwrap --as-pid-1), so no worker can kill or stop it; elsewhere one can (same
user), and the next worker then starts cold. The zygote is a child subreaper, so a worker's
double-forked daemon comes back here, where the harness finds it (it kills every descendant of the
zygote when it replaces a worker), and it reaps whatever ends. It runs no student code; the harness
takes nothing it says as more than the wording of a crash (the exit status).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import traceback
from pathlib import Path

from grader.course.devices import force_host_devices
from grader.sandbox.launch import load_libc

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    if load_libc().prctl(option, value, 0, 0, 0) != 0:
        raise OSError(f"prctl({option}, {value}) failed")


def _become_worker(control: socket.socket, fds: list[int], folder: Path) -> None:
    """In the forked child: serve as worker until the harness closes the pipes, then exit (never return
    into the zygote's loop, whatever the student's code raises)."""
    code = 1
    try:
        control.close()
        # the student's subprocesses are their own to wait for
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in any Python
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        _prctl(PR_SET_DUMPABLE, 1)  # as a fresh worker: its own /proc entries readable by itself
        from grader.worker import request_loop

        # What the student's code may look at is the process a worker started on its own would be.
        sys.modules["__main__"] = request_loop
        sys.argv = [request_loop.__file__, str(fds[0]), str(fds[1]), str(folder)]
        code = request_loop.serve(fds[0], fds[1], folder)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def serve_forks(control: socket.socket, folder: Path) -> int:
    workers: dict[int, int] = {}  # pid -> the harness's number for that worker

    def reap(*_) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            number = workers.pop(pid, None)
            # never block here: a harness that does not read loses the wording only
            if number is not None:
                try:
                    control.send(
                        f"exit {number} {os.waitstatus_to_exitcode(status)}".encode(),
                        socket.MSG_DONTWAIT,
                    )
                except OSError:
                    pass

    signal.signal(signal.SIGCHLD, reap)
    # Under bubblewrap the zygote is the sandbox's init, which a worker can signal only through a handler
    # installed here: SIGCHLD's only reaps; Python's SIGINT handler would end the zygote.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control.send(b"ready")
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 64, 2)
        except OSError:
            return 1
        if not message:  # the harness closed its end: the session is over
            return 0
        if len(fds) != 2 or not message.isdigit():
            for fd in fds:
                os.close(fd)
            continue
        # else the child would print the zygote's buffer again
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        # SIGCHLD waits until the pid is recorded: a worker that ends at once still has its status sent.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        try:
            pid = os.fork()
            if pid == 0:
                _become_worker(control, fds, folder)
            workers[pid] = int(message)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            # the worker holds them now; ours would keep its pipes open after it died
            for fd in fds:
                os.close(fd)


def main(argv: list[str]) -> int:
    control = socket.socket(fileno=int(argv[0]))
    control.set_inheritable(False)
    folder = Path(argv[1])
    force_host_devices()
    import jax  # noqa: F401  (no backend: jax.devices() would start threads that a fork loses)
    import numpy  # noqa: F401

    from grader.course import implementations  # noqa: F401
    from grader.worker import request_loop  # noqa: F401

    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    # Not dumpable: a worker (same user) cannot ptrace this process or read its memory, so it cannot
    # change what the next worker starts from. Its children set it back.
    _prctl(PR_SET_DUMPABLE, 0)
    return serve_forks(control, folder)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
