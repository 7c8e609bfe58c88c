"""Scheduled refresh of an image-folder dataset into a versioned root. ``python -m pipelines.refresh_image_dataset``.

Unchanged inputs end the run at once; a killed refresh is resumed by the next run. See docs/operations.md,
"Scheduled refresh: versioned dataset roots".
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import uuid
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import storage
from beam_tfrecord.beam.dask_cluster import DaskClusterOptions
from beam_tfrecord.core.durations import format_duration, parse_duration
from beam_tfrecord.core.manifest import MANIFEST_FILENAME
from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.errors import DurationError, InputIndexError
from beam_tfrecord.job import lease
from beam_tfrecord.job.process_exit import run_and_exit
from beam_tfrecord.sources.image_folder import image_sample
from beam_tfrecord.sources.kept_records import ReadKeptRecords
from beam_tfrecord.versions.incremental import REFRESH_KEY, IncrementalPlan, killed_refresh, plan_from_root
from beam_tfrecord.versions.input_index import (
    InputIndex,
    content_tokens,
    encoding_digest,
    index_inputs,
    write_input_index,
)
from beam_tfrecord.versions.refresh import (
    DEFAULT_KEEP_VERSIONS,
    DEFAULT_MIN_VERSION_AGE,
    FINGERPRINT_KEY,
    RefreshAction,
    RefreshPlan,
    apply_retention,
    commit_version,
    fingerprint_inputs,
    plan_refresh,
    publish_version,
)
from pipelines.build_image_dataset import ImageFolderBuild, ImageFolderOptions
from pipelines.common import (
    DatasetOutputOptions,
    ProgressOptions,
    cleaned_up_when_disk_full,
    job_pipeline,
    make_writer,
    parse_job,
    print_how_it_ran,
    progress_for,
    quiet_logging,
    require_worker_paths,
    run_as_command,
)
from pipelines.job_options import JobCommand, option_actions
from pipelines.source_options import QualityOptions, SchemaOptions, parse_bool, quality_writer_options


class RefreshOptions(PipelineOptions):
    """Where versions live and how many are kept."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dataset_root", help="versioned dataset root: ROOT/LATEST and ROOT/versions/<id>/ "
                                                   "(local path or gs://bucket/dir); readers take ROOT")
        parser.add_argument("--keep_versions", type=int, default=DEFAULT_KEEP_VERSIONS,
                            help="complete versions to keep; older ones are deleted after a new one is published, "
                                 "once they stopped being LATEST at least --min_version_age ago")
        parser.add_argument("--min_version_age", default=format_duration(DEFAULT_MIN_VERSION_AGE),
                            help="keep a version at least this long after it stopped being LATEST, so readers "
                                 "that opened it finish: 24h, 30m, 1h30m, 7d, 90s; 0 deletes at once")
        parser.add_argument("--force", type=parse_bool, nargs="?", const=True, default=False,
                            help="rebuild even when the inputs are unchanged (--force or --force=true)")
        parser.add_argument("--incremental", type=parse_bool, nargs="?", const=True, default=True,
                            help="keep the records of inputs unchanged since LATEST (same key, size and mtime, "
                                 "or gs:// generation) and encode only new and changed ones; a full build when "
                                 "LATEST cannot lend its records (--incremental=false: always a full build)")


# The option classes the job reads, in the order the Flex Template lists them. Options of these
# classes that the job does not take are listed with the reason; passing one is an error.
JOB_OPTION_CLASSES: tuple[type[PipelineOptions], ...] = (
    ImageFolderOptions, SchemaOptions, DatasetOutputOptions, RefreshOptions)
JOB_REJECTED_OPTIONS: dict[str, str] = {
    "output": "the job writes ROOT/versions/<id> under --dataset_root itself",
    "schema": "the schema comes from the class folder names",
    "chunk_size": "images are one sample per Beam element",
    "resume": "a refresh resumes a killed refresh of the same inputs and options by itself",
}


def job_option_actions() -> list[argparse.Action]:
    """The argparse actions of the options a user passes to this job (besides runner options)."""
    return [action for options_class in JOB_OPTION_CLASSES for action in option_actions(options_class)
            if action.dest not in JOB_REJECTED_OPTIONS]


def job_option_names() -> list[str]:
    """Names (without ``--``) of the options a user passes to this job."""
    return [action.dest for action in job_option_actions()]


def _recorded_command(options: PipelineOptions) -> list[str]:
    """The job's own non-default options, for the manifest. Runner options (projects, accounts,
    endpoints) are left out, so nothing environment-specific or secret is recorded."""
    given = options.get_all_options(drop_default=True)
    return ["refresh_image_dataset", *(f"--{name}={given[name]}" for name in job_option_names() if name in given)]


def min_version_age(refresh: RefreshOptions) -> datetime.timedelta:
    """``--min_version_age`` as a duration; exits with the reason when the text is not one."""
    try:
        return parse_duration(str(refresh.min_version_age))
    except DurationError as err:
        raise SystemExit(f"--min_version_age: {err}") from err


def _validated(options: PipelineOptions) -> tuple[RefreshOptions, ImageFolderOptions, DatasetOutputOptions]:
    refresh = options.view_as(RefreshOptions)
    source = options.view_as(ImageFolderOptions)
    output = options.view_as(DatasetOutputOptions)
    if not refresh.dataset_root:
        raise SystemExit("--dataset_root is required: the versioned dataset root (local path or gs://bucket/dir)")
    if not source.input:
        raise SystemExit("--input is required: an image folder ROOT/<label>/<file>")
    if refresh.keep_versions < 1:
        raise SystemExit(f"--keep_versions must be >= 1, got {refresh.keep_versions}")
    min_version_age(refresh)
    return refresh, source, output


COMMAND = JobCommand(
    prog="python -m pipelines.refresh_image_dataset",
    description="Refreshes an image-folder dataset into a versioned root: builds ROOT/versions/<id> when the "
                "inputs changed, then moves ROOT/LATEST to it and deletes old versions.",
    groups=(("refresh", RefreshOptions), ("input", ImageFolderOptions),
            ("output and sharding", DatasetOutputOptions), ("schema checks", SchemaOptions),
            ("duplicates and splits", QualityOptions),
            ("progress", ProgressOptions), ("Dask cluster", DaskClusterOptions)),
    refused=tuple(JOB_REJECTED_OPTIONS.items()),
)


def run(argv: Sequence[str] | None = None, *, prog: str | None = None) -> RefreshPlan:
    """Refreshes the dataset (or does nothing when the inputs are unchanged); returns the decision taken."""
    options, _ = parse_job(COMMAND, argv, prog=prog)
    refresh, source, output = _validated(options)
    root = refresh.dataset_root
    shared = require_worker_paths(options, {"--input": source.input, "--dataset_root": root})
    # One refresh per root at a time: the lease covers deciding, building, pointing LATEST and retention.
    with lease.held(root, run_id=uuid.uuid4().hex[:12], break_lock=output.break_lock):
        return _refresh(options, refresh, source, output, shared_filesystem=shared)


def _refresh(options: PipelineOptions, refresh: RefreshOptions, source: ImageFolderOptions,
             output: DatasetOutputOptions, *, shared_filesystem: bool) -> RefreshPlan:
    root = refresh.dataset_root
    fingerprint = fingerprint_inputs([source.input.rstrip("/") + "/*/*"])
    plan = plan_refresh(root, fingerprint, force=refresh.force)
    print(f"refresh {root}: {plan.action.value}: {plan.reason}")
    if plan.action is not RefreshAction.BUILD:
        if plan.action is RefreshAction.ADOPT:
            commit_version(root, plan.version_id)
        # Also on SKIP: a run killed after moving LATEST may have left old or unfinished versions.
        deleted = apply_retention(root, refresh.keep_versions, min_version_age=min_version_age(refresh))
        if deleted:
            print(f"refresh {root}: retention deleted versions {deleted}")
        return plan

    build = ImageFolderBuild.of(source, check_decode=options.view_as(SchemaOptions).check_decode)
    index = index_inputs(build.listing.images, content_tokens(source.input),
                         encoding_digest(schema_json=build.schema.to_json(), transforms=build.feature_transforms,
                                         salt=output.salt))
    incremental = _incremental_plan(plan, index) if refresh.incremental else None
    # What a killed refresh of the same inputs, base version and options must have had for this one to
    # take over its version (the writer checks the schema, splits, sharding and salt too).
    identity = json.dumps({"inputs": fingerprint.to_json(), "base": incremental.base_version if incremental else None,
                           "command": _recorded_command(options)}, sort_keys=True)
    killed = killed_refresh(root, plan.latest, identity)
    if killed is not None:
        plan = dataclasses.replace(plan, version_id=killed)
        print(f"refresh {root}: resuming version {killed}, which a killed refresh of these inputs left")
    output.output = plan.version_dir
    metadata = {FINGERPRINT_KEY: fingerprint.to_json(), "version_id": plan.version_id, **build.metadata}
    if incremental is not None:
        metadata[REFRESH_KEY] = incremental.metadata()
    quiet_logging()
    with cleaned_up_when_disk_full(lambda: _delete_if_unfinished(plan)):
        # Before the writer runs: the version is complete only once its manifest is written, index included.
        write_input_index(plan.version_dir, index)
        with progress_for(options, expected_inputs=len(index.inputs)) as progress_dir, \
                job_pipeline(options) as pipeline:
            writer = make_writer(output, build.schema, _recorded_command(options), metadata=metadata,
                                 feature_transforms=build.feature_transforms, progress_dir=progress_dir,
                                 shared_filesystem=shared_filesystem, expected_inputs=len(index.inputs),
                                 inputs_identity=identity, resume=killed is not None,
                                 **quality_writer_options(options, build.schema))
            _ = (_read_inputs(pipeline, source.input, build, incremental)  # Sample | [PrebuiltRecord, ...]
                 | "WriteVersion" >> writer
                 # the published Manifest of the new version
                 | "PublishVersion" >> beam.Map(publish_version, root=root, version_id=plan.version_id,
                                                keep_versions=refresh.keep_versions,
                                                min_version_age=min_version_age(refresh)))
    print(f"refresh {root}: published version {plan.version_id} (LATEST updated, keeping {refresh.keep_versions}, "
          f"and older ones for {refresh.min_version_age} after they stopped being LATEST)")
    published = storage.exists(storage.join(plan.version_dir, MANIFEST_FILENAME))  # not when only a job was built
    print_how_it_ran(pipeline, writer, load_manifest(plan.version_dir) if published else None)
    return plan


def _delete_if_unfinished(plan: RefreshPlan) -> None:
    """Deletes the version being built if it has no manifest (a complete one is adopted by the next run)."""
    if not storage.exists(storage.join(plan.version_dir, MANIFEST_FILENAME)):
        storage.delete_tree(plan.version_dir)


def _incremental_plan(plan: RefreshPlan, index: InputIndex) -> IncrementalPlan | None:
    """What LATEST lends to the new version, or None (a full build) when it cannot lend anything."""
    if plan.latest is None:
        return None
    try:
        incremental = plan_from_root(plan.root, plan.latest, index)
    except InputIndexError as err:
        print(f"refresh {plan.root}: full build: version {plan.latest} cannot lend its records ({err.reason})")
        return None
    print(f"refresh {plan.root}: incremental from {plan.latest}: {incremental.reused_records} records kept, "
          f"{len(incremental.fresh)} inputs to encode, {incremental.removed_records} records removed")
    return incremental


def _read_inputs(pipeline: beam.Pipeline, folder: str, build: ImageFolderBuild,
                 incremental: IncrementalPlan | None) -> beam.PCollection:
    """Every sample of the folder (a full build), or the base's kept records and the fresh samples."""
    if incremental is None:
        return pipeline | "ReadImageFolder" >> build.read(folder)
    kept = pipeline | "ReadKeptRecords" >> ReadKeptRecords(incremental.shards)
    fresh = (pipeline
             | "FreshInputs" >> beam.Create([(i.key, i.path) for i in incremental.fresh])
             | "FreshSamples" >> beam.MapTuple(image_sample)
             | "SpreadFresh" >> beam.Reshuffle())
    return (kept, fresh) | "KeptAndFresh" >> beam.Flatten()


if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=COMMAND.prog))  # ended without the interpreter's teardown
