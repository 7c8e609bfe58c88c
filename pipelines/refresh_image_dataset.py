"""Scheduled refresh of an image-folder dataset into a versioned root. ``python -m pipelines.refresh_image_dataset``.

The image-folder source's refresh job (``pipelines/source_jobs.py``), kept runnable here; its options are the
Flex Template's parameters (``deploy/dataflow``). See docs/operations.md, "Scheduled refresh".
"""

from __future__ import annotations

import argparse

from beam_tfrecord.job.process_exit import run_and_exit
from beam_tfrecord.versions.refresh import RefreshAction
from pipelines.common import run_as_command
from pipelines.refresh_driver import RefreshOptions, min_version_age
from pipelines.source_jobs import RefreshJob
from pipelines.sources.image_folder import SPEC

__all__ = ["COMMAND", "RefreshAction", "RefreshOptions", "min_version_age", "run"]  # what callers import from here

JOB = RefreshJob(SPEC, "python -m pipelines.refresh_image_dataset")
COMMAND = JOB.command
run = JOB.run


def job_option_actions() -> list[argparse.Action]:
    """The argparse actions of the options a user passes to this job (besides runner options)."""
    return JOB.option_actions()


def job_option_names() -> list[str]:
    """Names (without ``--``) of the options a user passes to this job."""
    return [action.dest for action in job_option_actions()]


if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=COMMAND.prog))  # ended without the interpreter's teardown
