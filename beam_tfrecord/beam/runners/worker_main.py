"""The local worker processes' entry point: Beam's SDK worker (``sdk_worker_main``), ended at once
when the runner closes its control channel, without the interpreter's teardown.

A worker process that has imported Beam (and gRPC, pandas, pyarrow with it) took 1-3 s to tear its
interpreter down after its last bundle (in C, no Python frame running), and the runner waits for
every worker to exit before ``run()`` returns: a fixed cost of every build with worker processes,
paid with the data already written. When Beam's harness returns, the runner has closed the control
channel: every bundle's results were reported and every DoFn torn down (``teardown``), so nothing is
left but the teardown: ``atexit`` handlers run, then the process ends (``process_exit.run_and_exit``).
A harness that fails raises, and the process exits non-zero with its traceback, as Beam's own does.
``LocalBatchRunner`` starts its worker processes with this module (``local_engine.WORKER_COMMAND``);
nothing imports it (run with ``-m``, it must not be in ``sys.modules`` before).
Measured: ``docs/performance.md#the-fixed-cost-of-a-job``.
"""

from __future__ import annotations

import sys

from beam_tfrecord.job.process_exit import run_and_exit


def main() -> None:
    """Runs Beam's SDK worker harness until the runner closes it."""
    from apache_beam.runners.worker import sdk_worker_main

    from beam_tfrecord.beam.runners.worker_memory import keep_freed_memory

    keep_freed_memory()

    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    run_and_exit(main)
