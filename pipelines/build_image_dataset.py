"""Image folder (root/<label>/<file>) -> TFRecord dataset. ``python -m pipelines.build_image_dataset``.

The image-folder source's build job (declared in ``pipelines/sources/image_folder.py``), kept runnable here.
"""

from __future__ import annotations

from beam_tfrecord.job.process_exit import run_and_exit
from pipelines.common import run_as_command
from pipelines.source_jobs import BuildJob
from pipelines.sources.image_folder import SPEC, ImageFolderOptions

__all__ = ["COMMAND", "ImageFolderOptions", "run"]  # what callers import from here

JOB = BuildJob(SPEC, "python -m pipelines.build_image_dataset")
COMMAND = JOB.command
run = JOB.run

if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=COMMAND.prog))  # ended without the interpreter's teardown
