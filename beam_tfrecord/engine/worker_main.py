"""The local worker processes' entry point: Beam's SDK worker, ended without the interpreter's teardown.

Run with ``-m`` only (``local_engine.WORKER_COMMAND``); nothing imports it. Why: docs/performance.md,
"The fixed cost of a job".
"""

from __future__ import annotations

import sys

from beam_tfrecord.job.process_exit import run_and_exit


def main() -> None:
    """Runs Beam's SDK worker harness until the runner closes it."""
    from apache_beam.runners.worker import sdk_worker_main

    from beam_tfrecord.engine.state_sampling import sample_states_often
    from beam_tfrecord.engine.worker_memory import freeze_start_heap, keep_freed_memory
    from beam_tfrecord.engine.worker_stderr import drop_typed_error_tracebacks, end_quietly_on_interrupt

    keep_freed_memory()
    drop_typed_error_tracebacks()
    end_quietly_on_interrupt()
    freeze_start_heap()
    sample_states_often()

    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    run_and_exit(main)
