"""Local worker processes forked from this one instead of started as fresh interpreters.

A worker runs Beam's own harness either way; where forking is unsafe (other threads) it starts fresh.
Why and how: docs/performance.md, "Every core by default".
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shlex
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator

from beam_tfrecord.engine.worker_setup import prepare_worker_process
from beam_tfrecord.formats.array_record import riegeli_runs_here
from beam_tfrecord.job.fork_quiet import threads_held_quiet

FORK_WORKERS_ENV = "BEAM_TFRECORD_FORK_WORKERS"
_REQUEST_LIMIT = 16 << 20  # bytes of one launcher's request (its environment): far above any real one
_REAP_SECONDS = 0.02  # how soon the fork server notices a worker ended (its launcher then exits)

# The launcher Beam runs for each worker (``python -S``: no site-packages, only the standard library).
_LAUNCHER = """\
import json, os, signal, socket, sys
if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # Ctrl-C: ended quietly, as its worker is
    signal.signal(signal.SIGINT, signal.SIG_DFL)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(json.dumps({"env": dict(os.environ), "cwd": os.getcwd()}).encode() + b"\\n")
answer = b""
while not answer.endswith(b"\\n"):
    chunk = s.recv(64)
    if not chunk:
        break
    answer += chunk
code = int(answer) if answer.strip() else 1
if code < 0:  # the worker was killed: the launcher ends by the same signal, which the runner then reports
    try:
        signal.signal(-code, signal.SIG_DFL)
    except (OSError, ValueError):
        pass
    os.kill(os.getpid(), -code)
sys.exit(code if code >= 0 else 128 - code)
"""


# Native threads that gRPC starts once a channel or server has existed in a process (grpcio 1.8x).
_GRPC_THREADS = ("grpc", "event_engine", "lifeguard", "default-executo", "resolver-execu", "timer_manager")


def _safe_to_fork(other_threads: list[str]) -> bool:
    """Whether this process runs no other Python thread but quiet ones, held idle while the fork is
    taken (``other_threads``, from ``fork_quiet.threads_held_quiet``: none can hold a lock the fork would
    copy held), gRPC has not started its threads (a forked child could not use gRPC then) and riegeli has
    not started its cleaner (a forked child could not use ArrayRecord). Native threads of libraries that
    handle ``fork`` themselves (jemalloc, OpenBLAS) do not matter."""
    if other_threads or riegeli_runs_here():
        return False
    try:
        tasks = os.listdir("/proc/self/task")
        names = []
        for task in tasks:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
    except OSError:
        return False
    return not any(name.startswith(_GRPC_THREADS) for name in names)


def fork_workers_enabled() -> bool:
    """Whether local worker processes may be forked from this one: a system with ``fork`` and
    ``/proc`` (Linux), and not turned off by ``$BEAM_TFRECORD_FORK_WORKERS=0``."""
    return (hasattr(os, "fork") and sys.platform.startswith("linux")
            and os.environ.get(FORK_WORKERS_ENV, "1").strip().lower() not in ("0", "false", "no", "off"))


class WorkerForkServer:
    """A copy of this process that forks Beam worker processes on request (see the module's doc)."""

    def __init__(self) -> None:
        self._folder = tempfile.mkdtemp(prefix="beam-tfrecord-workers-")
        self.address = os.path.join(self._folder, "fork-server")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.address)
        listener.listen(64)
        alive_read, alive_write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the fork server
            code = 1
            try:
                os.close(alive_write)
                _serve(listener, alive_read)
                code = 0
            finally:
                os._exit(code)
        os.close(alive_read)
        listener.close()
        self.pid = pid
        self._alive = alive_write

    @property
    def launch_command(self) -> str:
        """The shell command line that starts one worker through this server (``exec``: the runner sees the
        launcher's exit, which is the worker's, with no shell between)."""
        return "exec " + " ".join(shlex.quote(part) for part in (sys.executable, "-S", "-c", _LAUNCHER, self.address))

    def running(self) -> bool:
        """Whether the fork server is still there to fork workers."""
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return pid == 0

    def close(self) -> None:
        """Ends the fork server (workers it forked end with their launchers) and removes its socket."""
        if self._alive >= 0:
            os.close(self._alive)
            self._alive = -1
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
        shutil.rmtree(self._folder, ignore_errors=True)


@contextlib.contextmanager
def worker_fork_server() -> Iterator[WorkerForkServer | None]:
    """A fork server for the workers of one pipeline run, closed when the run ends; None where
    workers cannot be forked safely (other threads already run, no ``fork``, turned off).

    One per run, not per process: it holds a copy of this process as it was when made, which a
    long-lived process (a notebook) should not keep after the run that needed it."""
    with threads_held_quiet() as other_threads:  # the progress display's thread waits until the fork is taken
        server = WorkerForkServer() if fork_workers_enabled() and _safe_to_fork(other_threads) else None
    try:
        yield server
    finally:
        if server is not None:
            server.close()


def _serve(listener: socket.socket, alive: int) -> None:
    """The fork server's loop: a worker forked for each launcher that connects, its exit code sent
    back when it ends; returns once the process that made the server closes its pipe or dies."""
    waiting: dict[int, socket.socket] = {}  # worker pid -> its launcher's connection
    while True:
        ready, _, _ = select.select([listener.fileno(), alive], [], [], _REAP_SECONDS)
        if alive in ready:  # EOF: the parent closed the pipe or died
            return
        if listener.fileno() in ready:
            connection, _ = listener.accept()
            request = _read_request(connection)
            if request is None:
                connection.close()
            else:
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    os.close(alive)
                    for other in waiting.values():  # other workers' launchers: their EOF is not this worker's
                        other.close()
                    _run_worker(connection, request)  # never returns
                waiting[pid] = connection
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            if pid not in waiting:
                continue
            connection = waiting.pop(pid)
            try:
                connection.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
            except OSError:
                pass  # the launcher is gone
            connection.close()


def _read_request(connection: socket.socket) -> dict | None:
    """A launcher's request (environment and working folder), or None if it was cut short."""
    data = b""
    while not data.endswith(b"\n") and len(data) < _REQUEST_LIMIT:
        chunk = connection.recv(1 << 16)
        if not chunk:
            return None
        data += chunk
    try:
        request = json.loads(data)
    except ValueError:
        return None
    return request if isinstance(request, dict) and isinstance(request.get("env"), dict) else None


def _run_worker(connection: socket.socket, request: dict) -> None:
    """In the forked worker: this launcher's environment, then Beam's worker harness; exits the process."""
    code = 1
    try:
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in request["env"].items()})
        os.chdir(str(request.get("cwd") or "/"))
        threading.Thread(target=_exit_with_launcher, args=(connection,), daemon=True).start()
        root = logging.getLogger()
        for handler in list(root.handlers):  # a fresh worker logs only through the runner
            root.removeHandler(handler)
        from apache_beam.runners.worker import sdk_worker_main

        prepare_worker_process()
        sdk_worker_main.main([])
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # reported as a fresh worker would report it, then its exit code
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _exit_with_launcher(connection: socket.socket) -> None:
    """Ends this worker when its launcher ends (it never sends after its request: EOF or an error)."""
    try:
        connection.recv(1)
    except OSError:
        pass
    os._exit(1)
