"""The handler of LocalBatchRunner's worker processes: Beam's own, without its hang when a job fails fast.

Only LocalBatchRunner's environments (``LOCAL_WORKERS_URN``) use it; every other pipeline keeps Beam's handler.
"""

from __future__ import annotations

import functools

LOCAL_WORKERS_URN = "beam_tfrecord:env:local_subprocess:v1"


@functools.cache
def local_workers_urn() -> str:
    """``LOCAL_WORKERS_URN``, its handler registered with Beam's worker handlers (once per process)."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    class LocalWorkerHandler(worker_handlers.SubprocessSdkWorkerHandler):
        """Beam's subprocess worker handler whose ``stop_worker`` also ends a worker that connects late."""

        # Beam 2.77 ends a worker by closing its control connection, which sends the done marker only to a
        # worker already connected, then joins it. A worker still starting when the job failed (its first
        # bundle failed in another worker) then waits for instructions and the runner for it, for good (seen
        # in test_a_failing_worker_still_fails_the_job). Pushing the marker first ends a late worker at once.
        def stop_worker(self) -> None:
            self.control_conn.push(worker_handlers.BeamFnControlServicer._DONE_MARKER)
            super().stop_worker()

    worker_handlers.WorkerHandler.register_environment(LOCAL_WORKERS_URN, bytes)(LocalWorkerHandler)
    return LOCAL_WORKERS_URN
