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

    from beam_tfrecord.engine.worker_setup import prepare_worker_process

    prepare_worker_process()

    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    run_and_exit(main)
