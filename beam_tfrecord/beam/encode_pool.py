"""A pool of encoding processes inside one DoFn (``encode_processes=N``), for a runner kept in one process.

Each pool process encodes a sample and spills it into a run file, so the shards are byte-identical to encoding in
one process. Limits and lifecycle: docs/command-line.md (``--encode_processes``).
"""

from __future__ import annotations

import multiprocessing.connection
import os
import pickle
import queue
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.internal import pickler
from apache_beam.transforms.window import GlobalWindows

from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.core.runs import SpilledRun
from beam_tfrecord.core.samples import DeadLetter, Stage
from beam_tfrecord.errors import EncodePoolError

TASKS_IN_FLIGHT = 2  # per process: one encoding, one waiting, so no process idles between tasks
_ENCODE, _FINISH, _STOP = b"e", b"f", b"s"


def describe_encode_processes(result: Any) -> str | None:
    """A line for a job's summary when an encoding pool ran (None when none did, or the runner
    reports no counters)."""
    try:
        counters = result.metrics().query(beam.metrics.MetricsFilter().with_name("encode_processes_started"))
    except (AttributeError, NotImplementedError):
        return None
    started = sum(counter.committed or 0 for counter in counters["counters"])
    return f"  encoded in a pool of {started} processes (--encode_processes)" if started else None


class _Process:
    """One process of the pool (a fresh interpreter: ``python -m`` this module), its socket and its
    tasks in flight. Not ``multiprocessing``: its spawn and forkserver modes import the user's
    ``__main__`` again in the child (a script without a main guard would run its pipeline there),
    and fork would copy the runner's threads' locks."""

    def __init__(self, fn_bytes: bytes) -> None:
        ours, theirs = socket.socketpair()
        # Blocking, whatever socket.setdefaulttimeout() says (client libraries set one): a socket
        # with a timeout is non-blocking underneath, and Connection's raw reads then fail with EAGAIN.
        ours.setblocking(True)
        theirs.setblocking(True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))  # the DoFn's modules
        self.process = subprocess.Popen([sys.executable, "-m", __name__, str(theirs.fileno())],
                                        pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, env=env)
        theirs.close()
        self.connection = multiprocessing.connection.Connection(ours.detach())
        self.connection.send_bytes(fn_bytes)
        self.in_flight = 0

    def send(self, kind: bytes, payload: bytes = b"") -> None:
        try:
            self.connection.send_bytes(kind + payload)
        except OSError as err:
            raise EncodePoolError(f"encoding process {self.process.pid} exited (code {self.process.poll()}): "
                                  "it cannot take a task") from err
        self.in_flight += 1

    def receive(self) -> tuple[list[SpilledRun | DeadLetter], int]:
        """(outcomes, samples encoded) of this process's oldest task in flight (blocks until it replies).

        Raises:
            EncodePoolError: the process died, or its task raised an error that could not be sent.
            Exception: what the task raised (with the process's traceback as a note), as it would
                have been raised in this process.
        """
        try:
            status, value, encoded, remote_traceback = pickle.loads(self.connection.recv_bytes())
        except (EOFError, OSError) as err:
            try:
                code = self.process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                code = None
            raise EncodePoolError(f"encoding process {self.process.pid} exited (code {code}) "
                                  "before it finished its task") from err
        self.in_flight -= 1
        if status == "error":
            if isinstance(value, BaseException):
                value.add_note(f"raised in encoding process {self.process.pid}:\n{remote_traceback}")
                raise value
            raise EncodePoolError(f"encoding process {self.process.pid} failed:\n{remote_traceback}")
        return value, encoded

    def stop(self) -> None:
        try:
            self.connection.send_bytes(_STOP)
        except OSError:
            pass
        try:
            self.process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.connection.close()


def _serve(connection: multiprocessing.connection.Connection) -> None:
    """A pool process: runs ``EncodeToRunsFn`` on the elements it is sent, one bundle at a time.

    A reader thread drains the pipe into a queue, so the parent's send never waits on this
    process's reply (no deadlock on full pipes). The pipe closing (the parent died) ends the
    process at once: what it was writing is in an unpublished temp folder.
    """
    fn: beam.DoFn = pickler.loads(connection.recv_bytes())
    fn.setup()
    tasks: queue.SimpleQueue[bytes] = queue.SimpleQueue()

    def read() -> None:
        while True:
            try:
                tasks.put(connection.recv_bytes())
            except (EOFError, OSError):
                os._exit(1)

    threading.Thread(target=read, daemon=True, name="encode-pool-reader").start()
    in_bundle = False
    while True:
        message = tasks.get()
        kind, payload = message[:1], message[1:]
        if kind == _STOP:
            fn.teardown()
            return
        try:
            outcomes: list[Any] = []
            encoded = 0
            if kind == _ENCODE:
                if not in_bundle:
                    fn.start_bundle()
                    in_bundle = True
                element = pickle.loads(payload)
                outcomes = list(fn.process(element))
                inputs = len(element) if isinstance(element, list) else 1
                encoded = inputs - sum(type(outcome) is DeadLetter for outcome in outcomes)
            elif in_bundle:  # _FINISH: this bundle's runs are on storage when the reply is sent
                fn.finish_bundle()
                in_bundle = False
            reply = pickle.dumps(("ok", outcomes, encoded, None), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as err:  # sent to the parent, which fails the bundle with it
            in_bundle = False
            try:
                reply = pickle.dumps(("error", err, 0, traceback.format_exc()))
            except Exception:
                reply = pickle.dumps(("error", None, 0, traceback.format_exc()))
        connection.send_bytes(reply)


def _pickled(element: Any) -> bytes | None:
    """``element`` pickled by value, or None when it cannot be (it is then encoded in the DoFn's process)."""
    try:
        return pickle.dumps(element, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None


class EncodeInPoolFn(beam.DoFn):
    """``EncodeToRunsFn`` in a pool of processes, each encoding and spilling runs.

    Input and output as ``EncodeToRunsFn`` (``SpilledRun`` and ``DeadLetter``). Outcomes of tasks
    still in flight when a bundle ends are emitted from ``finish_bundle``: the pool runs only on
    local runners, which keep them (the Dask runner, which drops them, is not one).

    Args:
        encode: the DoFn to run in each process (and in this one while every process is busy).
        processes: the pool's size (>= 2).
    """

    def __init__(self, encode: beam.DoFn, *, processes: int) -> None:
        self._encode = encode
        self._processes = processes
        self._started = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "encode_processes_started")
        self._encoded = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "samples_encoded")
        self._runs = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "spill_runs")
        self._rejected = {stage: beam.metrics.Metrics.counter(METRICS_NAMESPACE, f"samples_rejected_{stage.value}")
                          for stage in Stage}

    def setup(self) -> None:
        self._pool: list[_Process] = []
        self._fn_bytes = pickler.dumps(self._encode)  # before its setup: what each process unpickles and sets up
        self._encode.setup()

    def start_bundle(self) -> None:
        self._encode.start_bundle()
        if not self._pool:
            self._pool = [_Process(self._fn_bytes) for _ in range(self._processes)]
            self._started.inc(self._processes)

    def process(self, element: Any) -> Iterator[SpilledRun | DeadLetter]:
        yield from self._receive_ready()
        idlest = min(self._pool, key=lambda p: p.in_flight)
        if idlest.in_flight < TASKS_IN_FLIGHT and (payload := _pickled(element)) is not None:
            idlest.send(_ENCODE, payload)
            return
        # Every pool process has work queued (this process takes a share rather than wait), or the
        # element cannot be pickled by value.
        yield from self._encode.process(element)

    def _receive_ready(self) -> Iterator[SpilledRun | DeadLetter]:
        """Outcomes of the tasks that have finished (without waiting)."""
        busy = {p.connection: p for p in self._pool if p.in_flight}
        ready = multiprocessing.connection.wait(list(busy), timeout=0)
        for connection in ready:
            yield from self._counted(busy[connection].receive())  # type: ignore[index]

    def _counted(self, reply: tuple[list[SpilledRun | DeadLetter], int]) -> Iterator[SpilledRun | DeadLetter]:
        """Counts what a pool process did (its own counters do not reach the runner)."""
        outcomes, encoded = reply
        self._encoded.inc(encoded)
        for outcome in outcomes:
            if type(outcome) is DeadLetter:
                self._rejected[outcome.stage].inc()
            elif type(outcome) is SpilledRun:  # not a digest file (``beam.duplicates``)
                self._runs.inc()
            yield outcome

    def finish_bundle(self) -> Iterator[Any]:
        self._encode.finish_bundle()
        for process in self._pool:
            process.send(_FINISH)
        for process in self._pool:
            while process.in_flight:
                for outcome in self._counted(process.receive()):
                    yield GlobalWindows.windowed_value(outcome)

    def teardown(self) -> None:
        for process in getattr(self, "_pool", ()):
            process.stop()
        self._pool = []
        self._encode.teardown()


if __name__ == "__main__":  # a pool process: ``_Process`` starts it with its socket's descriptor
    _serve(multiprocessing.connection.Connection(int(sys.argv[1])))
