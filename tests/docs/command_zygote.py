"""A fork server for the pages' commands: Beam, TensorFlow and PyTorch imported once, each command in a fork.

The docs test puts ``python`` and ``beam-tfrecord`` shims first on PATH; each sends its argv, folder,
environment and stdin/stdout/stderr to this server, which forks a child that runs the command as a fresh
``python -m``/``-c``/console script would (own process, own exit code, atexit handlers run) but without
paying ~3 s of imports per command. Any other ``python`` invocation runs the real interpreter.
Run: ``python command_zygote.py SOCKET_PATH [MODULE...]`` (prints ``ready`` when it listens), preloading the
modules named (PRELOAD if none); or ``serving(MODULES)``, with ``Job`` for a command a test kills (own session).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import importlib.metadata
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

# What the pages' commands import (measured: 6-8 s of CPU together); imported once, shared by every fork.
PRELOAD = ("apache_beam", "apache_beam.runners.direct.direct_runner", "apache_beam.runners.portability.fn_api_runner",
           "tensorflow", "torch", "pyarrow.parquet", "PIL.Image", "beam_tfrecord", "beam_tfrecord.cli",
           "beam_tfrecord.reader", "pipelines.common")
_SHIM = """#!{python} -IS
import json, os, socket, sys
argv = [{name!r}, *sys.argv[1:]]
if argv[0] == "python" and not (len(argv) > 2 and argv[1] in ("-m", "-c")):
    os.execv({python!r}, [{python!r}, *argv[1:]])
with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as server:
    server.connect({socket_path!r})
    request = {{"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}}
    socket.send_fds(server, [json.dumps(request).encode()], [0, 1, 2])
    sys.exit(int(server.recv(64) or b"255"))
"""


def write_shims(folder: Path, socket_path: str, python: str) -> None:
    """Writes the ``python`` and ``beam-tfrecord`` shims that send their command to the server."""
    for name in ("python", "beam-tfrecord"):
        shim = folder / name
        shim.write_text(_SHIM.format(python=python, name=name, socket_path=socket_path))
        shim.chmod(0o755)


def _run(argv: list[str]) -> None:
    """Runs the command as the interpreter would, in this (forked) process."""
    if argv[0] == "beam-tfrecord":
        (entry,) = importlib.metadata.entry_points(group="console_scripts", name="beam-tfrecord")
        sys.argv = argv
        sys.exit(entry.load()())
    flag, target, *rest = [*argv[1:], ""] if len(argv) == 2 else argv[1:]  # python SCRIPT: no arguments
    if flag == "-m":
        sys.argv, sys.path[0] = [target, *rest], os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif flag == "-c":
        sys.argv, sys.path[0] = ["-c", *rest], ""
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    else:  # python SCRIPT ARGS...
        sys.argv, sys.path[0] = argv[1:], os.path.dirname(os.path.abspath(flag))
        runpy.run_path(flag, run_name="__main__")


def _exit_code(run: Callable[[], object]) -> int:
    """Runs the command; what ``python`` would exit with (an uncaught exception: its traceback, 1)."""
    try:
        run()
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


def _start_child(connection: socket.socket, listener: socket.socket) -> int:
    """Forks; the child takes the shim's stdio, folder and environment, runs its command and exits."""
    message, fds, _, _ = socket.recv_fds(connection, 1 << 22, 3)
    request = json.loads(message)
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        if request.get("session"):  # a Job: its pid first, to kill it by
            connection.send(str(pid).encode())
        return pid
    if request.get("session"):
        os.setsid()  # its own process group: a kill of the group ends what it started too
    listener.close()
    connection.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    code = _exit_code(lambda: _run(request["argv"]))
    # The interpreter's own exit, minus tearing down every module: that would touch, and so copy, the
    # whole heap shared with the server (12 s with TensorFlow and PyTorch loaded).
    threading._shutdown()  # type: ignore[attr-defined]  # waits for non-daemon threads, as the interpreter does
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


class Job:
    """A command (argv as for ``python``) run in a fork of the server at ``socket_path``, in its own session,
    handled as a ``subprocess.Popen``: ``pid`` (to SIGKILL it or its group), ``poll()``, ``wait(timeout)``.
    stdin is /dev/null; stdout and stderr go to ``stdout``, ``stderr`` (file descriptors) if given, else /dev/null."""

    def __init__(self, socket_path: str, argv: list[str], *, stdout: int | None = None,
                 stderr: int | None = None) -> None:
        self.args = argv
        self.returncode: int | None = None
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._server.connect(socket_path)
        request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "session": True}
        with open(os.devnull, "r+b") as null:
            fds = [null.fileno(), *(null.fileno() if fd is None else fd for fd in (stdout, stderr))]
            socket.send_fds(self._server, [json.dumps(request).encode()], fds)
        self.pid = int(self._server.recv(64))

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._server], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self.returncode = int(self._server.recv(64) or b"255")
            self._server.close()
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGKILLs the command and what it started (its session's process group), if any is left."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)


@contextlib.contextmanager
def serving(preload: tuple[str, ...]) -> Iterator[str]:
    """A server that imported ``preload`` (and this repository on its path), for the block; yields its socket."""
    folder = tempfile.mkdtemp(prefix="bt-jobs-")  # short: a socket path has at most 107 characters
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    with open(os.path.join(folder, "server.log"), "wb") as log:
        server = subprocess.Popen([sys.executable, __file__, os.path.join(folder, "socket"), *preload], env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        assert server.stdout is not None and server.stdout.readline() == b"ready\n", \
            Path(folder, "server.log").read_text()
        yield os.path.join(folder, "socket")
    finally:
        os.killpg(server.pid, signal.SIGKILL)  # the server and any command still running
        server.wait()
        shutil.rmtree(folder)


def serve(socket_path: str, preload: tuple[str, ...] = PRELOAD) -> None:
    """Accepts commands until killed; a finished child's exit status goes back to its shim."""
    for name in preload:
        importlib.import_module(name)
    gc.freeze()  # a child's collections then skip (and do not copy) the server's objects
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(socket_path)
    listener.listen(16)
    print("ready", flush=True)
    running: dict[int, socket.socket] = {}
    parent = os.getppid()
    while os.getppid() == parent:  # a test process that died without ending this server ends it too
        if select.select([listener], [], [], 0.02)[0]:
            connection, _ = listener.accept()
            running[_start_child(connection, listener)] = connection
        for pid in list(running):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                connection = running.pop(pid)
                connection.send(str(code if code >= 0 else 128 - code).encode())
                connection.close()


if __name__ == "__main__":
    serve(sys.argv[1], tuple(sys.argv[2:]) or PRELOAD)
