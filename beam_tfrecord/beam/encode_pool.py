"""Every core of this machine for the encoding stage, inside one DoFn: a pool of encoding processes.

Why a pool of our own rather than the DirectRunner's ``multi_processing`` mode: a library
transform cannot change the runner a user's pipeline runs on, and with worker processes the
runner passes every element between processes (measured: ~9 s of CPU per million small
records). Here a process of the pool encodes a sample *and spills its entry into a run file*
(``EncodeToRunsFn`` runs whole inside it), so no record crosses a process boundary: what goes
in is the sample (a path, for images), what comes back is a run's name or a dead letter.

Output is byte-identical to encoding in one process: runs are sorted by hash and merged by the
shard writers, whatever process wrote them (see ``core/runs.py``).

Lifecycle: ``EncodeInPoolFn`` encodes in its own process at first; once it has spent
``POOL_AFTER_SECONDS`` encoding (a job big enough to repay the processes' start-up) it starts
the pool (fresh interpreters, see ``_Process``) and sends it every further element, provided
encoding costs at least ``MIN_ENCODE_TO_PICKLE`` times pickling (measured meanwhile: small rows
do not repay the pool, images do). ``finish_bundle`` has each process finish its runs (their
files are on storage before the bundle counts, as in one process).

Limits: only on runners whose workers run on this machine (the pool's processes write the same
temp folder); an element that cannot be pickled is encoded in the DoFn's own process. A pool
process that dies (killed, out of memory) fails the bundle with ``EncodePoolError``; a killed
runner process takes its pool with it (each process exits when its pipe closes).

While every pool process has work queued, the DoFn's own process encodes the next element
itself rather than wait: it covers the pool's start-up (a fresh interpreter imports Beam) and
uses what the runner leaves of its core.
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
import time
import traceback
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.internal import pickler
from apache_beam.transforms.window import GlobalWindows

from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.beam.encode_fn import EncodeToRunsFn
from beam_tfrecord.core.runs import SpilledRun
from beam_tfrecord.core.samples import DeadLetter, Stage
from beam_tfrecord.errors import EncodePoolError

POOL_AFTER_SECONDS = 1.0  # encoding time in the DoFn's own process before the pool starts (automatic size)
# Automatic size only: the pool starts when encoding an element costs at least this many times
# pickling it (the runner's process pickles every element it sends; a pool process unpickles it).
# Measured on 2 cores (benchmarks/write_benchmark.py --cpus 1,2, image_folder_build.py): small
# rows (encode ~14 us, pickle ~6 us per record) ran 0.79x as fast with the pool as without;
# resized images (encode ~1 ms, pickle a path ~2 us) 1.13x as fast.
MIN_ENCODE_TO_PICKLE = 4.0
TASKS_IN_FLIGHT = 2  # per process: one encoding, one waiting, so no process idles between tasks
_ENCODE, _FINISH, _STOP = b"e", b"f", b"s"


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity: ``taskset`` and containers' cpusets count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def describe_encode_processes(result: Any) -> str | None:
    """A line for a job's summary: how many processes encoded, read from a finished run's
    counters (None when the runner reports no counters)."""
    try:
        counters = result.metrics().query(beam.metrics.MetricsFilter().with_name("encode_processes_started"))
    except (AttributeError, NotImplementedError):
        return None
    started = sum(counter.committed or 0 for counter in counters["counters"])
    if started:
        return f"  encoded in {started} processes (the encoding pool; --encode_processes=1: in the runner's worker)"
    return ("  encoded in the runner's worker(s), no encoding pool (on the DirectRunner without --runner or "
            "--direct_* options it starts after a second of encoding, where encoding a sample costs at least "
            f"{MIN_ENCODE_TO_PICKLE:g}x sending it)")


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
    fn: EncodeToRunsFn = pickler.loads(connection.recv_bytes())
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
    """``EncodeToRunsFn`` on every core: in a pool of processes, each encoding and spilling runs.

    Input and output as ``EncodeToRunsFn`` (``SpilledRun`` and ``DeadLetter``). Outcomes of tasks
    still in flight when a bundle ends are emitted from ``finish_bundle``: the pool runs only on
    local runners, which keep them (the Dask runner, which drops them, is not one).

    Args:
        encode: the DoFn to run in each process (and in this one before the pool starts).
        processes: the pool's size; None for every core this process may use (``available_cores``),
            started after ``POOL_AFTER_SECONDS`` of encoding; a number starts that many at once.
            With one core (or ``processes=1``) everything is encoded in this process.
    """

    def __init__(self, encode: EncodeToRunsFn, *, processes: int | None) -> None:
        self._encode = encode
        self._processes = processes
        self._started = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "encode_processes_started")
        self._encoded = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "samples_encoded")
        self._runs = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "spill_runs")
        self._rejected = {stage: beam.metrics.Metrics.counter(METRICS_NAMESPACE, f"samples_rejected_{stage.value}")
                          for stage in Stage}

    def setup(self) -> None:
        self._size = self._processes if self._processes is not None else available_cores()
        self._pool: list[_Process] = []
        self._local_seconds = 0.0
        self._pickle_seconds = 0.0  # pickling the elements encoded here before the pool's start was decided
        self._pool_decided = self._size <= 1
        self._fn_bytes = pickler.dumps(self._encode)  # before its setup: what each process unpickles and sets up
        self._encode.setup()

    def start_bundle(self) -> None:
        self._encode.start_bundle()

    def _start_pool(self) -> None:
        self._pool = [_Process(self._fn_bytes) for _ in range(self._size)]
        self._started.inc(self._size)

    def _wants_pool(self) -> bool:
        """Whether to send the next element to the pool (started here when it is time).

        An explicit size starts at once. The automatic size waits for ``POOL_AFTER_SECONDS`` of
        encoding here, then starts only if encoding cost at least ``MIN_ENCODE_TO_PICKLE`` times
        pickling (else every element stays in this process: the pool would be slower).
        """
        if not self._pool_decided and (self._processes is not None or self._local_seconds >= POOL_AFTER_SECONDS):
            self._pool_decided = True
            if self._processes is not None or self._local_seconds >= MIN_ENCODE_TO_PICKLE * self._pickle_seconds:
                self._start_pool()
        return bool(self._pool)

    def process(self, element: Any) -> Iterator[SpilledRun | DeadLetter]:
        if self._wants_pool():
            yield from self._receive_ready()
            idlest = min(self._pool, key=lambda p: p.in_flight)
            if idlest.in_flight < TASKS_IN_FLIGHT and (payload := _pickled(element)) is not None:
                idlest.send(_ENCODE, payload)
                return
        # No pool yet, every pool process has work queued (this process takes a share rather than
        # wait: it also covers the pool's start-up), or the element cannot be pickled by value.
        if not self._pool_decided:  # what sending this element to the pool would have cost here
            start = time.perf_counter()
            _pickled(element)
            self._pickle_seconds += time.perf_counter() - start
        start = time.perf_counter()
        yield from self._encode.process(element)
        self._local_seconds += time.perf_counter() - start

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
            else:
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
