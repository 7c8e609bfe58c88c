"""CSV / JSONL / Parquet manifest -> TFRecord dataset. ``python -m pipelines.build_from_manifest``.

The manifest source's build job (declared in ``pipelines/sources/manifest.py``), kept runnable here.
"""

from __future__ import annotations

from beam_tfrecord.job.process_exit import run_and_exit
from pipelines.common import run_as_command
from pipelines.source_jobs import BuildJob
from pipelines.sources.manifest import SPEC, ManifestFormat, ManifestOptions, rows_at_most

__all__ = ["COMMAND", "ManifestFormat", "ManifestOptions", "rows_at_most", "run"]  # what callers import from here

JOB = BuildJob(SPEC, "python -m pipelines.build_from_manifest")
COMMAND = JOB.command
run = JOB.run

if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=COMMAND.prog))  # ended without the interpreter's teardown
