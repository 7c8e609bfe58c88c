"""NumPy files (.npy / .npz) -> TFRecord dataset. ``python -m pipelines.build_from_arrays``.

The arrays source's build job (declared in ``pipelines/sources/arrays.py``), kept runnable here.
"""

from __future__ import annotations

from beam_tfrecord.job.process_exit import run_and_exit
from pipelines.common import run_as_command
from pipelines.source_jobs import BuildJob
from pipelines.sources.arrays import SPEC, ArrayOptions

__all__ = ["COMMAND", "ArrayOptions", "run"]  # what callers import from here

JOB = BuildJob(SPEC, "python -m pipelines.build_from_arrays")
COMMAND = JOB.command
run = JOB.run

if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=COMMAND.prog))  # ended without the interpreter's teardown
