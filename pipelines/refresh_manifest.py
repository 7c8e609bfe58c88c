"""Scheduled refresh of a CSV / JSONL / Parquet manifest dataset. ``python -m pipelines.refresh_manifest``.

The manifest source's refresh job (``pipelines/source_jobs.py``), kept runnable here; ``beam-tfrecord refresh`` runs
it too. See docs/operations.md, "Scheduled refresh".
"""

from __future__ import annotations

from beam_tfrecord.job.process_exit import run_and_exit
from pipelines.common import run_as_command
from pipelines.source_jobs import RefreshJob
from pipelines.sources.manifest import SPEC

JOB = RefreshJob(SPEC, "python -m pipelines.refresh_manifest")
COMMAND = JOB.command
run = JOB.run

if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=COMMAND.prog))  # ended without the interpreter's teardown
