"""Scheduled refresh of an image-folder dataset into a versioned root. ``python -m pipelines.refresh_image_dataset``.

Unchanged inputs end the run at once; a killed refresh is resumed by the next run. See docs/operations.md,
"Scheduled refresh: versioned dataset roots".
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.job.process_exit import run_and_exit
from beam_tfrecord.sources.image_folder import image_sample
from beam_tfrecord.versions.input_index import IndexedInput, content_tokens, index_inputs
from beam_tfrecord.versions.refresh import RefreshAction, RefreshPlan
from pipelines.build_image_dataset import ImageFolderBuild, ImageFolderOptions
from pipelines.common import DatasetOutputOptions, parse_job, require_worker_paths, run_as_command
from pipelines.drift_options import DriftOptions
from pipelines.job_options import JobCommand, option_actions
from pipelines.refresh_driver import (
    REFRESH_REJECTED_OPTIONS,
    PreparedSource,
    RefreshOptions,
    RefreshSource,
    min_version_age,
    recorded_command,
    refresh_groups,
    run_refresh,
    validated_refresh,
)
from pipelines.source_options import QualityOptions, SchemaOptions

__all__ = ["COMMAND", "RefreshAction", "RefreshOptions", "min_version_age", "run"]  # what callers import from here


# The option classes the job reads, in the order the Flex Template lists them. Options of these
# classes that the job does not take are listed with the reason; passing one is an error.
JOB_OPTION_CLASSES: tuple[type[PipelineOptions], ...] = (
    ImageFolderOptions, SchemaOptions, DatasetOutputOptions, RefreshOptions, DriftOptions, QualityOptions)
JOB_REJECTED_OPTIONS: dict[str, str] = {
    **REFRESH_REJECTED_OPTIONS,
    "schema": "the schema comes from the class folder names",
    "chunk_size": "images are one sample per Beam element",
}


def job_option_actions() -> list[argparse.Action]:
    """The argparse actions of the options a user passes to this job (besides runner options)."""
    return [action for options_class in JOB_OPTION_CLASSES for action in option_actions(options_class)
            if action.dest not in JOB_REJECTED_OPTIONS]


def job_option_names() -> list[str]:
    """Names (without ``--``) of the options a user passes to this job."""
    return [action.dest for action in job_option_actions()]


def _recorded_command(options: PipelineOptions) -> list[str]:
    return recorded_command(options, "refresh_image_dataset", JOB_OPTION_CLASSES, JOB_REJECTED_OPTIONS)


COMMAND = JobCommand(
    prog="python -m pipelines.refresh_image_dataset",
    description="Refreshes an image-folder dataset into a versioned root: builds ROOT/versions/<id> when the "
                "inputs changed, then moves ROOT/LATEST to it and deletes old versions.",
    groups=refresh_groups(("input", ImageFolderOptions)),
    refused=tuple(JOB_REJECTED_OPTIONS.items()),
)


def run(argv: Sequence[str] | None = None, *, prog: str | None = None) -> RefreshPlan:
    """Refreshes the dataset (or does nothing when the inputs are unchanged); returns the decision taken."""
    options, _ = parse_job(COMMAND, argv, prog=prog)
    source = options.view_as(ImageFolderOptions)
    refresh = validated_refresh(options, input_flag="--input", input_value=source.input,
                                what="an image folder ROOT/<label>/<file>")
    shared = require_worker_paths(options, {"--input": source.input, "--dataset_root": refresh.dataset_root})
    check_decode = options.view_as(SchemaOptions).check_decode
    return run_refresh(options, RefreshSource(
        patterns=[source.input.rstrip("/") + "/*/*"], command=_recorded_command(options),
        prepare=lambda: _prepare(source.input, ImageFolderBuild.of(source, check_decode=check_decode))),
        shared_filesystem=shared)


def _prepare(folder: str, build: ImageFolderBuild) -> PreparedSource:
    """The image folder as the refresh driver reads it: an input per image, its token from the listing."""
    index = index_inputs(build.listing.images, content_tokens(folder), "")
    return PreparedSource(
        schema=build.schema, feature_transforms=build.feature_transforms, metadata=build.metadata,
        inputs=index.inputs, expected_inputs=len(index.inputs), source_options={},
        read_all=lambda pipeline: pipeline | "ReadImageFolder" >> build.read(folder),
        read_fresh=_read_fresh)


def _read_fresh(pipeline: beam.Pipeline, fresh: tuple[IndexedInput, ...]) -> beam.PCollection:
    return (pipeline
            | "FreshInputs" >> beam.Create([(i.key, i.path) for i in fresh])
            | "FreshSamples" >> beam.MapTuple(image_sample)
            | "SpreadFresh" >> beam.Reshuffle())


if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=COMMAND.prog))  # ended without the interpreter's teardown
