"""The handler of LocalBatchRunner's worker processes: Beam's own, without its hang when a job fails fast or a worker
process dies, and without the periodic flush that loses a bundle's input.

Only LocalBatchRunner's environments (``LOCAL_WORKERS_URN``) use it; every other pipeline keeps Beam's handler.
"""

from __future__ import annotations

import functools
import re
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

from beam_tfrecord.errors import WorkerProcessLostError

LOCAL_WORKERS_URN = "beam_tfrecord:env:local_subprocess:v1"

# How long a channel that broke waits to learn whether its worker process ended: the process is gone (or
# going) when its sockets close, so its end is seen within milliseconds; a channel that broke for another
# reason raises its own error after this.
_END_SEEN_SECONDS = 5.0
# How Beam 2.77's SubprocessSdkWorker.run reports a worker's exit code (its only report of it).
_EXIT_CODE = re.compile(r"return code (-?\d+)")


@functools.cache
def local_workers_urn() -> str:
    """``LOCAL_WORKERS_URN``, its handler registered with Beam's worker handlers (once per process)."""
    import grpc
    from apache_beam.runners.portability import local_job_service
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    # The handlers of one runner's workers (they share its gRPC server), to end together (``close``).
    siblings: weakref.WeakKeyDictionary[Any, weakref.WeakSet[Any]] = weakref.WeakKeyDictionary()

    class LocalWorkerHandler(worker_handlers.SubprocessSdkWorkerHandler):
        """Beam's subprocess worker handler whose ``stop_worker`` also ends a worker that connects late, whose
        data channel sends a bundle's input whole, when the runner closes it, and that fails the job with a
        ``WorkerProcessLostError`` when its worker process ends before the runner stopped it."""

        def __init__(self, worker_command_line: bytes, state: Any, provision_info: Any, grpc_server: Any) -> None:
            super().__init__(worker_command_line, state, provision_info, grpc_server)
            # Beam 2.77's runner gives each worker's data channel a flush every DATA_BUFFER_TIME_LIMIT_MS (1 s),
            # run by a thread while the runner writes a bundle's input into the stream: the thread takes what
            # is written (``get``), sends it, and then empties the stream (``_clear``), so what the runner
            # wrote meanwhile is lost without an error. A bundle whose input takes over a second to write
            # (hundreds of MB: an incremental refresh's kept records) lost elements, a different number each
            # run. Without the time limit the stream is sent when the runner closes it, as Beam's in-process
            # workers and SDK workers do.
            self.data_conn._data_buffer_time_limit_ms = 0
            self._stopping = False
            self._ended = threading.Event()
            self._lost: WorkerProcessLostError | None = None
            self._watch_channels()
            siblings.setdefault(grpc_server, weakref.WeakSet()).add(self)

        # Beam 2.77 ends a worker by closing its control connection, which sends the done marker only to a
        # worker already connected, then joins it. A worker still starting when the job failed (its first
        # bundle failed in another worker) then waits for instructions and the runner for it, for good (seen
        # in test_a_failing_worker_still_fails_the_job). Pushing the marker first ends a late worker at once.
        def stop_worker(self) -> None:
            self._end_soon()
            super().stop_worker()

        # Beam 2.77 runs the worker process from a thread that raises when it exits with an error, and nothing
        # else learns of it: the runner waits for the dead worker's answers for good (a worker killed by the
        # kernel's out-of-memory killer, or dead before it connected). This thread fails those waits.
        def start_worker(self) -> None:
            self.worker = local_job_service.SubprocessSdkWorker(
                self._worker_command_line, self.control_address, self.provision_info, self.worker_id)
            self.worker_thread = threading.Thread(name="run_worker", target=self._run_worker, daemon=True)
            self.worker_thread.start()

        # Beam 2.77 closes a runner's workers one after the other, each waiting for its process to end
        # (~70-100 ms: the harness's end, the launcher's); the first close tells the others to end too, so
        # they end together.
        def close(self) -> None:
            self._stopping = True  # closing its control connection ends the worker: not a loss
            for handler in list(siblings.get(self._grpc_server, ())):
                handler._end_soon()
            if self._lost is not None:
                self.data_conn._exception = None  # the loss (``_lose``), which the job has raised: not the close's
            super().close()

        def _end_soon(self) -> None:
            """Tells the worker to end, without waiting for it: it is being stopped, so its end is not a loss. A
            marker pushed again, to a worker that has ended, is never read."""
            self._stopping = True
            self.control_conn.push(worker_handlers.BeamFnControlServicer._DONE_MARKER)

        def _run_worker(self) -> None:
            exit_code: int | None = 0
            cause: Exception | None = None
            try:
                self.worker.run()
            except Exception as err:  # Beam's RuntimeError naming the exit code, or a process that could not start
                found = _EXIT_CODE.search(str(err)) if isinstance(err, RuntimeError) else None
                exit_code = int(found.group(1)) if found else None
                cause = None if found else err
            finally:
                if not self._stopping:
                    lost = WorkerProcessLostError(self.worker_id, exit_code)
                    lost.__cause__ = cause
                    self._lose(lost)
                self._ended.set()

        def _lose(self, error: WorkerProcessLostError) -> None:
            """Fails every answer the runner waits for from this worker, and every one it asks for from now on
            (``_watch_channels``)."""
            self._lost = error
            for answer in list(self.control_conn._futures_by_id.values()):  # Beam's abort() iterates it live
                answer.abort(error)
            # A bundle's outputs are awaited until the channel closes, which a worker that never connected never
            # does; its error is raised within a second.
            self.data_conn._exception = error

        def _lost_or(self, error: BaseException) -> BaseException:
            """The loss of this worker when its process ended (waiting briefly to learn it), else ``error``."""
            self._ended.wait(_END_SEEN_SECONDS)
            return self._lost if self._lost is not None else error

        def _watch_channels(self) -> None:
            """Has this worker's channels, which Beam makes before its process starts, report its loss: an
            answer asked for after it fails at once, a bundle's outputs cut short raise the loss, and the
            streams from the worker end quietly when they broke with its process (Beam printed three tracebacks
            and a log error for them)."""
            control, data = self.control_conn, self.data_conn
            push, set_answers, set_inputs = control.push, control.set_input, data.set_inputs
            input_elements = data.input_elements

            def push_unless_lost(request: Any) -> Any:
                answer = push(request)
                if answer is not None and self._lost is not None:
                    answer.abort(self._lost)
                return answer

            def input_elements_or_loss(*args: Any, **kwargs: Any) -> Iterator[Any]:
                try:
                    yield from input_elements(*args, **kwargs)
                except RuntimeError as err:  # Beam's "Channel closed prematurely.", or the stream's own error
                    lost = self._lost_or(err)
                    if lost is err:
                        raise
                    raise lost from None

            def set_answers_until_lost(answers: Iterable[Any]) -> None:
                set_answers(self._until_lost(answers))

            def set_inputs_until_lost(elements: Iterable[Any]) -> None:
                set_inputs(self._until_lost(elements))

            # Set on these instances only (Beam calls them through the instance): the runner's other channels
            # keep Beam's methods.
            control.push = push_unless_lost  # type: ignore[method-assign, assignment]
            control.set_input = set_answers_until_lost  # type: ignore[method-assign, assignment]
            data.set_inputs = set_inputs_until_lost  # type: ignore[method-assign, assignment]
            data.input_elements = input_elements_or_loss  # type: ignore[method-assign]

        def _until_lost(self, stream: Iterable[Any]) -> Iterator[Any]:
            """``stream`` (what the worker sends), ending without an error when it broke because the worker
            process ended, or while the runner stops it (an interrupted job)."""
            try:
                yield from stream
            except grpc.RpcError as err:
                if not self._stopping and self._lost_or(err) is err:
                    raise

    worker_handlers.WorkerHandler.register_environment(LOCAL_WORKERS_URN, bytes)(LocalWorkerHandler)
    return LOCAL_WORKERS_URN
