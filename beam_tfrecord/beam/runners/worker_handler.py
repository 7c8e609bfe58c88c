"""The handler of LocalBatchRunner's worker processes: Beam's own, without its hang when a job fails fast.

Beam 2.77's ``SubprocessSdkWorkerHandler`` ends a worker by closing its control connection, which
sends the end of the control stream only to a worker that has already connected
(``ControlConnection.close`` pushes its done marker only in the started state), and then waits for
the worker process to end. A worker still starting when the job fails (its first bundle failed in
another worker a moment after both were launched) connects after that, to a control stream that
never ends: the worker waits for instructions and the runner waits for the worker, for good. Seen
once in a full test run (``test_a_failing_worker_still_fails_the_job``: the runner in
``stop_worker``'s join, the second worker in ``SdkHarness.run``, 5 minutes on). This handler pushes
the done marker again before it waits: a worker connecting late reads it at once and ends; a
worker already connected had its marker, and the second one is never read.

LocalBatchRunner's environments get ``LOCAL_WORKERS_URN`` (``local_engine.with_fast_ending_workers``),
so Beam's own handler stays as it is for every other pipeline of the process.
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

        def stop_worker(self) -> None:
            self.control_conn.push(worker_handlers.BeamFnControlServicer._DONE_MARKER)
            super().stop_worker()

    worker_handlers.WorkerHandler.register_environment(LOCAL_WORKERS_URN, bytes)(LocalWorkerHandler)
    return LOCAL_WORKERS_URN
