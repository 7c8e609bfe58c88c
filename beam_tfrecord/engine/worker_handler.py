"""The handler of LocalBatchRunner's worker processes: Beam's own, without its hang when a job fails fast and
without the periodic flush that loses a bundle's input.

Only LocalBatchRunner's environments (``LOCAL_WORKERS_URN``) use it; every other pipeline keeps Beam's handler.
"""

from __future__ import annotations

import functools
from typing import Any

LOCAL_WORKERS_URN = "beam_tfrecord:env:local_subprocess:v1"


@functools.cache
def local_workers_urn() -> str:
    """``LOCAL_WORKERS_URN``, its handler registered with Beam's worker handlers (once per process)."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    class LocalWorkerHandler(worker_handlers.SubprocessSdkWorkerHandler):
        """Beam's subprocess worker handler whose ``stop_worker`` also ends a worker that connects late, and whose
        data channel sends a bundle's input whole, when the runner closes it."""

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

        # Beam 2.77 ends a worker by closing its control connection, which sends the done marker only to a
        # worker already connected, then joins it. A worker still starting when the job failed (its first
        # bundle failed in another worker) then waits for instructions and the runner for it, for good (seen
        # in test_a_failing_worker_still_fails_the_job). Pushing the marker first ends a late worker at once.
        def stop_worker(self) -> None:
            self.control_conn.push(worker_handlers.BeamFnControlServicer._DONE_MARKER)
            super().stop_worker()

    worker_handlers.WorkerHandler.register_environment(LOCAL_WORKERS_URN, bytes)(LocalWorkerHandler)
    return LOCAL_WORKERS_URN
