"""One refresh for every source: versions, LATEST, no-op, incremental re-encoding, retention, resume.

A source (``pipelines/refresh_image_dataset.py``, ``refresh_manifest.py``, ``refresh_arrays.py``) gives a
``RefreshSource``: the inputs to fingerprint, and, once a build is due, a ``PreparedSource``: the schema,
its input index of (key, content token) and how to read every input or only the fresh ones. The rest is
here. See docs/operations.md, "Scheduled refresh: versioned dataset roots".
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import hashlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import storage
from beam_tfrecord.core.durations import format_duration, parse_duration
from beam_tfrecord.core.manifest import MANIFEST_FILENAME
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.sharding import SplitConfig
from beam_tfrecord.dataset import load_manifest, version_dir
from beam_tfrecord.engine.dask_cluster import DaskClusterOptions
from beam_tfrecord.engine.local_workers import InputSize, choose_local_workers
from beam_tfrecord.errors import DurationError, InputIndexError
from beam_tfrecord.job import lease
from beam_tfrecord.sources.kept_records import ReadKeptRecords
from beam_tfrecord.versions.append import (
    DEFAULT_MAX_DELETED_FRACTION,
    DEFAULT_MAX_SMALL_SHARDS,
    AppendPlan,
    CompactionPolicy,
    append_plan_from_root,
    check_refresh_schema,
)
from beam_tfrecord.versions.commit import COMMIT_KEY, WRITER_KEY, VersionCommit, describe_commit, writer_metadata
from beam_tfrecord.versions.incremental import REFRESH_KEY, IncrementalPlan, killed_refresh, plan_from_root
from beam_tfrecord.versions.input_index import IndexedInput, InputIndex, encoding_digest, write_input_index
from beam_tfrecord.versions.refresh import (
    DEFAULT_KEEP_VERSIONS,
    DEFAULT_MIN_VERSION_AGE,
    FINGERPRINT_KEY,
    InputFile,
    InputFingerprint,
    RefreshAction,
    RefreshPlan,
    apply_retention,
    list_input_files,
    plan_refresh,
    publish_version,
)
from pipelines.common import (
    DatasetOutputOptions,
    ProgressOptions,
    cleaned_up_when_disk_full,
    job_pipeline,
    make_writer,
    print_how_it_ran,
    progress_for,
    quiet_logging,
)
from pipelines.drift_options import DriftOptions, drift_check, report_drift
from pipelines.job_options import option_actions
from pipelines.source_options import QualityOptions, SchemaOptions, parse_bool, quality_writer_options
from pipelines.watch import WatchOptions, run_watch, watch_plan


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
                            help="rebuild even when the inputs are unchanged, every split rewritten (--force or "
                                 "--force=true)")
        parser.add_argument("--append", type=parse_bool, nargs="?", const=True, default=True,
                            help="list LATEST's shards in the new version instead of writing them again: records of "
                                 "removed and changed inputs go into deletion vectors, new and changed inputs into "
                                 "new shards; a split past --max_small_shards or --max_deleted_fraction is "
                                 "rewritten (--append=false: every split is rewritten, the records of unchanged "
                                 "inputs copied, as before)")
        parser.add_argument("--max_small_shards", type=int, default=DEFAULT_MAX_SMALL_SHARDS,
                            help="rewrite a split holding more shards than this whose records fill less than half "
                                 "of --target_shard_bytes (each append adds at least one)")
        parser.add_argument("--max_deleted_fraction", type=float, default=DEFAULT_MAX_DELETED_FRACTION,
                            help="rewrite a split when more than this fraction of the records in its files is "
                                 "deleted")
        parser.add_argument("--incremental", type=parse_bool, nargs="?", const=True, default=True,
                            help="keep the records of inputs unchanged since LATEST (an image or array file of "
                                 "the same key, size and mtime, or gs:// generation; a manifest row of the same "
                                 "key and content) and encode only new and changed ones; a full build when "
                                 "LATEST cannot lend its records (--incremental=false: always a full build)")


# Options every refresh job refuses, with the reason (a job adds its own).
REFRESH_REJECTED_OPTIONS: dict[str, str] = {
    "output": "the job writes ROOT/versions/<id> under --dataset_root itself",
    "resume": "a refresh resumes a killed refresh of the same inputs and options by itself",
    "near_duplicates": "a refresh's kept records are not images to hash (pipelines.build_image_dataset has it)",
}


def refresh_groups(source: tuple[str, type[PipelineOptions]]) -> tuple[tuple[str, type[PipelineOptions]], ...]:
    """A refresh job's ``--help`` groups around its source's (``("input", ArrayOptions)``)."""
    return (("refresh", RefreshOptions), ("continuous refresh", WatchOptions), ("drift check", DriftOptions), source,
            ("output and sharding", DatasetOutputOptions), ("schema checks", SchemaOptions),
            ("duplicates and splits", QualityOptions), ("progress", ProgressOptions),
            ("Dask cluster", DaskClusterOptions))


def min_version_age(refresh: RefreshOptions) -> datetime.timedelta:
    """``--min_version_age`` as a duration; exits with the reason when the text is not one."""
    try:
        return parse_duration(str(refresh.min_version_age))
    except DurationError as err:
        raise SystemExit(f"--min_version_age: {err}") from err


def validated_refresh(options: PipelineOptions, *, input_flag: str, input_value: str | None,
                      what: str) -> RefreshOptions:
    """The refresh options, after the checks every source shares; exits with the reason otherwise."""
    refresh = options.view_as(RefreshOptions)
    if not refresh.dataset_root:
        raise SystemExit("--dataset_root is required: the versioned dataset root (local path or gs://bucket/dir)")
    if not input_value:
        raise SystemExit(f"{input_flag} is required: {what}")
    if refresh.keep_versions < 1:
        raise SystemExit(f"--keep_versions must be >= 1, got {refresh.keep_versions}")
    min_version_age(refresh)
    return refresh


def recorded_command(options: PipelineOptions, job: str, option_classes: Sequence[type[PipelineOptions]],
                     rejected: Mapping[str, str]) -> list[str]:
    """The job's own non-default options, for the manifest. Runner options (projects, accounts,
    endpoints) are left out, so nothing environment-specific or secret is recorded."""
    given = options.get_all_options(drop_default=True)
    names = [action.dest for cls in option_classes for action in option_actions(cls) if action.dest not in rejected]
    return [job, *(f"--{name}={given[name]}" for name in names if name in given)]


@dataclasses.dataclass(frozen=True)
class PreparedSource:
    """A source ready to build a version.

    Attributes:
        schema: the feature spec.
        feature_transforms: the writer's feature transforms (an image resize).
        metadata: manifest metadata of the source (skipped files...).
        inputs: every input sample's key, path and content token (the version's input index).
        expected_inputs: the samples (and dead letters) the source emits in a full build.
        source_options: the source's options that shape its samples (into the encoding digest).
        read_all: pipeline -> every sample (a full build).
        read_fresh: (pipeline, fresh inputs) -> the samples of those inputs only.
        key_feature: a feature holding the key (the manifest's key column), not compared by ``--duplicates``.
    """

    schema: Schema
    feature_transforms: Mapping[str, Any]
    metadata: Mapping[str, Any]
    inputs: Sequence[IndexedInput]
    expected_inputs: int
    source_options: Mapping[str, Any]
    read_all: Callable[[beam.Pipeline], beam.PCollection]
    read_fresh: Callable[[beam.Pipeline, tuple[IndexedInput, ...]], beam.PCollection]
    key_feature: str | None = None  # a feature that holds the key: left out of the duplicates' content hash


@dataclasses.dataclass(frozen=True)
class RefreshSource:
    """What the driver asks of a source.

    Attributes:
        patterns: globs of every input file, fingerprinted at launch (unchanged: nothing to do).
        command: the command line the manifest records (``recorded_command``).
        prepare: lists and reads what the index needs; called only when a version is built.
    """

    patterns: Sequence[str]
    command: Sequence[str]
    prepare: Callable[[], PreparedSource]


def run_refresh(options: PipelineOptions, source: RefreshSource, *, shared_filesystem: bool) -> RefreshPlan | None:
    """Refreshes ``--dataset_root`` from ``source`` under the root's lease; returns the decision taken. With
    ``--watch``, refreshes every interval until SIGTERM or ``--max_intervals`` (``pipelines/watch.py``) and
    returns the last decision (None: stopped before the first)."""
    refresh = options.view_as(RefreshOptions)
    watching = watch_plan(options, force=bool(refresh.force))
    if watching is None:
        return _refresh_once(options, source, shared_filesystem=shared_filesystem)
    # Each interval on a copy: the writer sets the runner's worker options on the options it is given.
    return run_watch(watching, lambda: _refresh_once(copy.deepcopy(options), source,
                                                     shared_filesystem=shared_filesystem,
                                                     lease_stale_after=watching.lease_ttl, watching=True),
                     root=refresh.dataset_root)


def _refresh_once(options: PipelineOptions, source: RefreshSource, *, shared_filesystem: bool,
                  lease_stale_after: datetime.timedelta = lease.DEFAULT_STALE_AFTER,
                  watching: bool = False) -> RefreshPlan:
    """One refresh under the root's lease. ``watching``: no input file yet is not an error, but nothing to do."""
    refresh = options.view_as(RefreshOptions)
    output = options.view_as(DatasetOutputOptions)
    # One refresh per root at a time: the lease covers deciding, building, pointing LATEST and retention.
    with lease.held(refresh.dataset_root, run_id=uuid.uuid4().hex[:12], break_lock=output.break_lock,
                    stale_after=lease_stale_after):
        return _refresh(options, refresh, output, source, shared_filesystem=shared_filesystem, watching=watching)


def _refresh(options: PipelineOptions, refresh: RefreshOptions, output: DatasetOutputOptions,
             source: RefreshSource, *, shared_filesystem: bool, watching: bool = False) -> RefreshPlan:
    root = refresh.dataset_root
    drift = drift_check(options, watching=watching)
    files = list_input_files(source.patterns)
    fingerprint = InputFingerprint.of(files)
    plan = plan_refresh(root, fingerprint, force=refresh.force)
    if watching and plan.latest is None and fingerprint.num_files == 0:
        print(f"refresh {root}: no input files yet ({', '.join(source.patterns)}); nothing to do")
        return dataclasses.replace(plan, action=RefreshAction.SKIP, reason="no input files yet")
    print(f"refresh {root}: {plan.action.value}: {plan.reason}")
    if plan.action is RefreshAction.ADOPT:  # a finished version never published, or one held for drift
        publish_version(load_manifest(plan.version_dir), root=root, version_id=plan.version_id,
                        keep_versions=refresh.keep_versions, min_version_age=min_version_age(refresh), drift=drift)
        report_drift(root, plan.version_dir, plan.version_id)
    if plan.action is not RefreshAction.BUILD:
        # Also on SKIP: a run killed after moving LATEST may have left old or unfinished versions.
        deleted = apply_retention(root, refresh.keep_versions, min_version_age=min_version_age(refresh))
        if deleted:
            print(f"refresh {root}: retention deleted versions {deleted}")
        return plan

    prepared = source.prepare()
    if plan.latest is not None:  # never new records without a feature LATEST has (one added as column files)
        check_refresh_schema(root, plan.latest, load_manifest(version_dir(root, plan.latest)), prepared.schema)
    encoding = encoding_digest(schema_json=prepared.schema.to_json(), transforms=prepared.feature_transforms,
                               salt=output.salt, source=prepared.source_options)
    index = InputIndex(encoding, tuple(sorted(prepared.inputs, key=lambda i: i.key)))
    appended = _append_plan(plan, index, refresh) if refresh.incremental else None
    # A base without record locations (written before them) lends its records by key hash order instead.
    incremental = _incremental_plan(plan, index) if refresh.incremental and appended is None else None
    base = appended.base_version if appended else incremental.base_version if incremental else None
    # What a killed refresh of the same inputs (index included), base version and options must have had for
    # this one to take over its version (the writer checks the schema, splits, sharding and salt too).
    identity = json.dumps({"inputs": fingerprint.to_json(), "base": base, "append": appended is not None,
                           "command": list(source.command),
                           "index": hashlib.sha256(index.to_bytes()).hexdigest()}, sort_keys=True)
    killed = killed_refresh(root, plan.latest, identity)
    if killed is not None:
        plan = dataclasses.replace(plan, version_id=killed)
        print(f"refresh {root}: resuming version {killed}, which a killed refresh of these inputs left")
    output.output = plan.version_dir
    metadata = {FINGERPRINT_KEY: fingerprint.to_json(), "version_id": plan.version_id, **prepared.metadata,
                WRITER_KEY: writer_metadata(SplitConfig.parse(output.splits), statistics=not output.no_statistics,
                                            dali_index=bool(output.dali_index))}
    if incremental is not None or (appended is not None and appended.rewrites_all):
        metadata[REFRESH_KEY] = (incremental or appended).metadata()  # type: ignore[union-attr]
    commit = appended.commit(plan.version_id) if appended is not None else \
        VersionCommit(plan.version_id, tuple(i.key for i in index.inputs), base_version=base)
    expected_inputs = prepared.expected_inputs if appended is None else _expected_inputs(prepared, appended)
    # A small refresh (an append of a few new inputs: what a watch's interval usually is) runs in one in-memory
    # worker, as a small build does: worker processes would cost more than they save.
    workers = choose_local_workers(options, requested=None, flags=source.command,
                                   input_size=_work_size(files, prepared, incremental, appended, expected_inputs))
    quiet_logging()
    with cleaned_up_when_disk_full(lambda: _delete_if_unfinished(plan)):
        # Before the writer runs: the version is complete only once its manifest is written, index included.
        write_input_index(plan.version_dir, index)
        with progress_for(options, expected_inputs=expected_inputs) as progress_dir, \
                job_pipeline(options) as pipeline:
            writer = make_writer(output, prepared.schema, list(source.command), workers=workers, metadata=metadata,
                                 feature_transforms=dict(prepared.feature_transforms), progress_dir=progress_dir,
                                 shared_filesystem=shared_filesystem, expected_inputs=expected_inputs,
                                 inputs_identity=identity, resume=killed is not None, commit=commit,
                                 **quality_writer_options(options, prepared.schema, key_feature=prepared.key_feature))
            _ = (_read_inputs(pipeline, prepared, incremental, appended)  # Sample | [Sample] | [PrebuiltRecord]
                 | "WriteVersion" >> writer
                 # the published Manifest of the new version: every source moves LATEST here, in one place
                 | "PublishVersion" >> beam.Map(publish_version, root=root, version_id=plan.version_id,
                                                keep_versions=refresh.keep_versions,
                                                min_version_age=min_version_age(refresh), drift=drift))
    report_drift(root, plan.version_dir, plan.version_id)  # raises DriftHeldError when the version was held
    print(f"refresh {root}: published version {plan.version_id} (LATEST updated, keeping {refresh.keep_versions}, "
          f"and older ones for {refresh.min_version_age} after they stopped being LATEST)")
    published = storage.exists(storage.join(plan.version_dir, MANIFEST_FILENAME))  # not when only a job was built
    manifest = load_manifest(plan.version_dir) if published else None
    if manifest is not None and COMMIT_KEY in manifest.metadata:
        print(f"refresh {root}: {describe_commit(manifest.metadata[COMMIT_KEY])}")
    print_how_it_ran(pipeline, writer, manifest, workers_reason=workers.reason)
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


def _append_plan(plan: RefreshPlan, index: InputIndex, refresh: RefreshOptions) -> AppendPlan | None:
    """What the new version keeps of LATEST, deletes and writes (with ``--append=false`` or ``--force``: every split
    rewritten from LATEST's records and the fresh inputs); None when LATEST has no record locations or cannot lend
    (then ``_incremental_plan``, or a full build)."""
    if plan.latest is None:
        return None
    # --append=false and --force rewrite every split (an append of unchanged inputs would list the same shards).
    policy = CompactionPolicy(max_small_shards=refresh.max_small_shards,
                              max_deleted_fraction=refresh.max_deleted_fraction,
                              compact_all=not refresh.append or refresh.force)
    try:
        appended = append_plan_from_root(plan.root, plan.latest, index, policy)
    except InputIndexError as err:
        print(f"refresh {plan.root}: no append: version {plan.latest} cannot lend its shards ({err.reason})")
        return None
    print(f"refresh {plan.root}: {appended.describe()}")
    return appended


def _work_size(files: Sequence[InputFile], prepared: PreparedSource, incremental: IncrementalPlan | None,
               appended: AppendPlan | None, expected_inputs: int | None) -> InputSize:
    """What the writer of this refresh reads: every input (a full build), or the fresh inputs' files and the kept
    records of the shards it rewrites; bytes unknown (None) when a fresh input is not one of the listed files."""
    if incremental is None and appended is None:
        return InputSize(expected_inputs, sum(f.size_bytes for f in files))
    fresh, reuses = (incremental.fresh, incremental.shards) if incremental is not None else \
        (appended.fresh, appended.rewritten)  # type: ignore[union-attr]
    sizes = {f.path: f.size_bytes for f in files}
    paths = {i.path for i in fresh}
    fresh_bytes = sum(sizes[path] for path in paths if path in sizes)
    known = all(path in sizes for path in paths)
    return InputSize(expected_inputs, fresh_bytes + sum(r.shard.num_bytes for r in reuses) if known else None)


def _expected_inputs(prepared: PreparedSource, appended: AppendPlan) -> int | None:
    """The inputs the writer of an append must see: the fresh ones and the records of rewritten splits (None:
    unknown, when the source's count is not one per indexed input)."""
    if prepared.expected_inputs != len(prepared.inputs):
        return None
    return len(appended.fresh) + appended.rewritten_records


def _read_inputs(pipeline: beam.Pipeline, prepared: PreparedSource, incremental: IncrementalPlan | None,
                 appended: AppendPlan | None) -> beam.PCollection:
    """Every sample of the inputs (a full build), or the kept records to write again and the fresh samples."""
    if incremental is None and appended is None:
        return prepared.read_all(pipeline)
    reuses, fresh_inputs = (incremental.shards, incremental.fresh) if incremental is not None else \
        (appended.rewritten, appended.fresh)  # type: ignore[union-attr]
    fresh = prepared.read_fresh(pipeline, fresh_inputs)
    if not reuses:
        return fresh
    kept = pipeline | "ReadKeptRecords" >> ReadKeptRecords(reuses)
    return (kept, fresh) | "KeptAndFresh" >> beam.Flatten()
