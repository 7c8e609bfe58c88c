"""WriteTFRecordDataset: samples in, a published, size-balanced TFRecord dataset out."""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.beam.batch_input import in_global_window, require_bounded
from beam_tfrecord.beam.duplicates import FindDuplicates, checked_metadata, counted
from beam_tfrecord.beam.fan_in import Encoding, FanInOutputs, FanInSettings, describe_fan_in, resolve_fan_in
from beam_tfrecord.beam.near_duplicates import FindNearDuplicates
from beam_tfrecord.beam.one_group import (
    DEAD,
    DUPLICATES,
    NEAR,
    PLAN,
    SHARD,
    START,
    SUMMARY,
    TaggedStart,
    by_kind,
    tag,
)
from beam_tfrecord.beam.pane_versions import VersionPaneSettings, commit_pane_version
from beam_tfrecord.beam.publish import PublishSettings, publish
from beam_tfrecord.beam.shuffle_path import ShufflePath
from beam_tfrecord.beam.spill_path import RunsResume, SpillPath
from beam_tfrecord.beam.tuning import FanIn, WriterTuning
from beam_tfrecord.beam.windowed_write import WriteWindowedTFRecord
from beam_tfrecord.beam.write_options import VersionRetention, WriterChecks, WriterProvenance
from beam_tfrecord.core.description import DEFAULT_SALT, DatasetDescription
from beam_tfrecord.core.manifest import Manifest, ShardInfo
from beam_tfrecord.core.moved_keywords import refuses_moved_keywords
from beam_tfrecord.core.naming import Compression, FileFormat
from beam_tfrecord.core.record_schema import RecordsSummary, merge_summaries
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.sharding import ShardingConfig, SplitConfig
from beam_tfrecord.encoding.records import FeatureTransform
from beam_tfrecord.engine import (
    local_workers_for,
    runner_name,
    runs_on_direct_runner,
    use_fixed_dask_runner,
    use_local_workers,
)
from beam_tfrecord.engine.worker_placement import require_pipeline_paths
from beam_tfrecord.errors import PipelineInvariantError, RecordSchemaError, WriterOptionError
from beam_tfrecord.quality.content import DuplicatesMode
from beam_tfrecord.quality.duplicate_counts import DUPLICATES_KEY
from beam_tfrecord.quality.near_report import REPORT_KEY, near_duplicate_report
from beam_tfrecord.quality.near_tally import NearTally
from beam_tfrecord.quality.split_groups import SPLIT_BY_KEY, split_key_name
from beam_tfrecord.spill.resume import (
    TEMP_PREFIX,
    ResumePoint,
    ReusedKeys,
    find_resume_point,
    fingerprint,
    reused_keys_of,
    with_reused_shards,
)
from beam_tfrecord.spill.resume import describe as describe_resume
from beam_tfrecord.versions.input_index import encoding_digest

__all__ = ["DEFAULT_SALT", "MOVED_KEYWORDS", "WriteTFRecordDataset"]  # DEFAULT_SALT: its old import path


def _with_inferred_schema(settings: PublishSettings, summaries: Sequence[RecordsSummary]) -> PublishSettings:
    """The settings with the schema the records' summaries give (as they are without any)."""
    summary = merge_summaries(summaries)
    if summary is None:
        return settings
    try:
        schema = summary.schema()
    except RecordSchemaError:
        storage.delete_tree(settings.temp_dir)  # nothing is published; the old dataset, if any, stays
        raise
    settings = dataclasses.replace(settings, description=dataclasses.replace(settings.description, schema=schema))
    return settings.with_metadata({**settings.provenance.metadata,
                                   "schema_inferred": {"from": "records", "raw_payloads": summary.raw}})


def _with_near_duplicates(settings: PublishSettings, found: dict[str, list[Any]]) -> PublishSettings:
    """The settings with the near-duplicate report in the metadata (when the writer searched for them)."""
    near, description = settings.checks.near_duplicates, settings.description
    if near is None:
        return settings
    plan = found[PLAN][0] if found[PLAN] else None
    ranges = ([(split.name, split.hash_lo, split.hash_hi) for split in plan.splits] if plan is not None
              else description.splits.ratio_bounds() if description.splits.is_ratio else [])
    tally = found[NEAR][0] if found[NEAR] else NearTally()
    report = near_duplicate_report(tally, near, split_ranges=ranges, salt=description.salt)
    return settings.with_metadata({**settings.provenance.metadata, REPORT_KEY: report})


def _publish_group(group: tuple[None, Iterable[tuple[str, Any]]], settings: PublishSettings) -> Manifest:
    found = by_kind(group, (START, PLAN, SHARD, DEAD, SUMMARY, DUPLICATES, NEAR))
    if len(found[PLAN]) > 1:
        raise PipelineInvariantError("publish", f"expected at most one plan, got {len(found[PLAN])}")
    plan, dropped, duplicates = (found[PLAN][0] if found[PLAN] else None), 0, settings.checks.duplicates_check
    if duplicates is not None:  # counted by split, recorded; or nothing published (``duplicates=fail``)
        metadata = settings.provenance.metadata
        counts = counted(duplicates, plan, found[DUPLICATES], split_by=metadata.get(SPLIT_BY_KEY))
        settings = settings.with_metadata(checked_metadata(duplicates, counts, dict(metadata), settings.temp_dir))
        dropped = counts.dropped
    settings = _with_inferred_schema(settings, found[SUMMARY])
    settings = _with_near_duplicates(settings, found)
    settings = settings.with_metadata(with_reused_shards(settings.provenance.metadata, settings.temp_dir))
    shard_infos: list[ShardInfo] = found[SHARD]
    return publish(settings, plan, shard_infos, found[DEAD], num_dropped=dropped)


# The keywords the writer took before its option groups, and where each one went (``TypeError`` names it).
MOVED_KEYWORDS: Mapping[str, str] = {
    **{old: f"description=DatasetDescription({new}=...)" for old, new in (
        ("dataset_name", "name"), ("salt", "salt"), ("dali_index", "dali_index"))},
    **{name: f"checks=WriterChecks({name}=...)" for name in (
        "max_rejected_fraction", "max_rejected_option", "duplicates", "near_duplicates", "split_key_fn")},
    **{name: f"provenance=WriterProvenance({name}=...)" for name in (
        "expected_inputs", "inputs_identity", "resume", "command", "metadata")},
}


def _description_of(description: DatasetDescription | None, schema: Schema | None, given: Mapping[str, Any],
                    ) -> DatasetDescription:
    """The dataset described by ``description``, or by ``schema`` and the shorthands ``given`` (one of the two)."""
    shorthands = {name: value for name, value in given.items() if value is not None}
    if description is None:
        if schema is None:
            raise WriterOptionError("give the dataset's description=DatasetDescription(schema=...) or its schema=")
        return DatasetDescription(schema=schema, **shorthands)
    if not isinstance(description, DatasetDescription):
        raise WriterOptionError(f"description must be a DatasetDescription, got {description!r}")
    if schema is not None or shorthands:
        raise WriterOptionError(f"give {sorted([*(['schema'] if schema is not None else []), *shorthands])} in "
                                "description=DatasetDescription(...) or beside it, not both")
    return description


@refuses_moved_keywords(MOVED_KEYWORDS)
class WriteTFRecordDataset(beam.PTransform):
    """Writes samples as a TFRecord dataset of size-balanced shards, published with a manifest.

    Input: a bounded PCollection of ``Sample`` (or of lists of ``Sample``, for small rows), in any
    windows (written as one dataset). Output: a PCollection holding the published ``Manifest``.
    The same inputs and arguments give the same bytes on every runner and fan-in path.

    Args:
        output_dir: dataset directory (local or an object store's URL).
        schema, splits, sharding, compression, file_format: shorthands for a ``description`` of these
            (the others at their defaults); give them or ``description``, not both.
        description: the dataset written (``DatasetDescription``: name, schema, splits, sharding,
            compression, file format, salt, statistics, DALI indexes).
        feature_transforms: per-feature functions applied before validation (decode, resize...).
        encoding: the encode stage for inputs that are not ``Sample``s (``Encoding``): the published
            schema is the records', and the description's only an empty dataset's.
        checks: what is checked before publication (``WriterChecks``: rejected samples, exact and near
            duplicates, groups kept in one split).
        provenance: what the manifest records of the build (``WriterProvenance``: inputs counted, their
            identity for ``resume``, the command, metadata).
        tuning: how the write runs (``WriterTuning``); it never changes the bytes written.

    Raises:
        TypeError: for a keyword that moved into an option group, naming its new home (``MOVED_KEYWORDS``).
        WriterOptionError, ShardNameError: at construction, for arguments out of range or at odds.
        ResumeMismatchError: at construction, when the build to resume had other inputs or options.
        UnboundedInputError, LocalPathError: when the pipeline is built (see ``WriterTuning``).
    """

    def __init__(self, output_dir: str, *, schema: Schema | None = None, splits: SplitConfig | None = None,
                 sharding: ShardingConfig | None = None, compression: Compression | None = None,
                 file_format: FileFormat | None = None, description: DatasetDescription | None = None,
                 feature_transforms: Mapping[str, FeatureTransform] | None = None, encoding: Encoding | None = None,
                 checks: WriterChecks | None = None, provenance: WriterProvenance | None = None,
                 tuning: WriterTuning | None = None) -> None:
        super().__init__()
        description = _description_of(description, schema, dict(
            splits=splits, sharding=sharding, compression=compression, file_format=file_format))
        for name, value, kind in (("checks", checks, WriterChecks), ("provenance", provenance, WriterProvenance),
                                  ("tuning", tuning, WriterTuning)):
            if value is not None and not isinstance(value, kind):
                raise WriterOptionError(f"{name} must be a {kind.__name__}, got {value!r}")
        tuning, checks = tuning or WriterTuning(), checks or WriterChecks()
        provenance = provenance or WriterProvenance()
        self._check_together(description, feature_transforms or {}, encoding, checks, provenance, tuning)
        metadata = dict(provenance.metadata)
        if checks.split_key_fn is not None:
            metadata[SPLIT_BY_KEY] = split_key_name(checks.split_key_fn)
        self._output_dir, self._tuning, self._encoding = output_dir, tuning, encoding
        self._feature_transforms = dict(feature_transforms or {})
        resume_text = None if provenance.inputs_identity is None else fingerprint({
            "inputs": provenance.inputs_identity, "dataset_name": description.name,
            "splits": repr(description.splits), "sharding": repr(description.sharding),
            "compression": description.compression.value, "file_format": description.file_format.value,
            # not a byte of the dataset, but of the spilled runs a resumed build keeps
            "reread_min_bytes": tuning.reread_min_bytes, "encoding": encoding_digest(
                schema_json=description.schema.to_json(), transforms=self._feature_transforms,
                salt=description.salt)})
        self._resume_point = self._resume_point_of(output_dir, provenance.resume, resume_text)
        duplicates = checks.duplicates_check
        if duplicates is not None and self._resume_point is not None:
            if duplicates.mode is not DuplicatesMode.REPORT:
                raise WriterOptionError(f"duplicates={duplicates.mode.value!r} needs a build that is not resumed "
                                        "(a resumed one encodes only part of its records)")
            metadata[DUPLICATES_KEY] = {"skipped": "a resumed build encodes part of its records"}
            checks = dataclasses.replace(checks, duplicates=None)
        run_id = self._resume_point.run_id if self._resume_point else uuid.uuid4().hex[:12]
        self._temp_dir = tuning.temp_dir or storage.join(output_dir, f"{TEMP_PREFIX}{run_id}")
        self._runs_resume = None if resume_text is None or encoding is not None else RunsResume(
            self._temp_dir, resume_text, self._resume_point.hashes_path if self._resume_point else None)
        if self._resume_point is not None:
            metadata["resumed"] = self._resume_point.metadata()
        self._checks = checks
        self._fan_in_settings = FanInSettings(
            description=description, tuning=tuning, temp_dir=self._temp_dir,
            feature_transforms=self._feature_transforms, encoding=encoding, checks=checks)
        self._publish_settings = PublishSettings(
            output_dir=output_dir, temp_dir=self._temp_dir, run_id=run_id, description=description, checks=checks,
            provenance=dataclasses.replace(provenance, metadata=metadata))

    @staticmethod
    def _check_together(description: DatasetDescription, feature_transforms: Mapping[str, FeatureTransform],
                        encoding: Encoding | None, checks: WriterChecks, provenance: WriterProvenance,
                        tuning: WriterTuning) -> None:
        """The checks that need two option groups (each group checked its own fields when made)."""
        schema = description.schema
        if checks.drops_duplicates and tuning.shard_writers != 1:
            raise WriterOptionError("duplicates='drop' writes each shard whole: leave shard_writers at 1")
        if checks.split_key_fn is not None and (not description.splits.is_ratio or provenance.resume):
            raise WriterOptionError("split_key_fn keeps groups whole in ratio splits (NAME=FRACTION), without resume")
        unknown = set(feature_transforms) - set(schema.features) - set(schema.sequence_features)
        if unknown:
            raise WriterOptionError(f"feature_transforms name features not in the schema: {sorted(unknown)}")
        near = checks.near_duplicates
        if near is not None and (encoding is not None or near.feature not in schema.features):
            raise WriterOptionError(f"near_duplicates: feature {near.feature!r} is not an image feature of "
                                    f"the schema {sorted(schema.features)} (or the inputs are not Samples)")

    def _resume_point_of(self, output_dir: str, resume: bool, text: str | None) -> ResumePoint | None:
        """The killed build to resume (None: a clean build), checked against the other options."""
        if not resume:
            return None
        if (text is None or self._encoding is not None or self._tuning.temp_dir is not None
                or self._tuning.fan_in is FanIn.SHUFFLE):
            raise WriterOptionError("resume needs inputs_identity, Sample inputs (not WriteBalancedTFRecord's "
                                    "records), the default temp_dir and the spill fan-in")
        return find_resume_point(output_dir, text)

    def reused_keys(self) -> ReusedKeys | None:
        """The samples a resumed build reuses, for a source that can leave them out unread (None: not resuming)."""
        return reused_keys_of(self._resume_point, self._fan_in_settings.description.salt)

    def describe_resume(self) -> str | None:
        """The job summary's line on what this build reused from a killed one (None: nothing)."""
        return describe_resume(self._resume_point) if self._resume_point is not None else None

    @property
    def temp_dir(self) -> str:
        """Where this writer's runs and unpublished shards go (a job deletes it when the disk fills)."""
        return self._temp_dir

    def expand(self, samples: beam.PCollection) -> beam.PCollection:
        pipeline = samples.pipeline
        require_pipeline_paths(pipeline, {"output_dir": self._output_dir, "temp_dir": self._temp_dir},
                               shared_filesystem=self._tuning.shared_filesystem,
                               declare="tuning=WriterTuning(shared_filesystem=True)")
        if not samples.is_bounded and self._encoding is None:  # Samples: each pane one append version
            return samples | "WritePanes" >> self._pane_versions()
        require_bounded(samples, writer=type(self).__name__)
        if self._publish_settings.provenance.retention is not None:
            raise WriterOptionError("provenance.retention: keeps the versions an unbounded input's panes commit; a "
                                    "bounded input writes one dataset (a refresh's --keep_versions keeps a root's "
                                    "versions)")
        samples = in_global_window(samples)  # one dataset of every window (see beam_tfrecord.beam.batch_input)
        if runs_on_direct_runner(samples.pipeline):
            workers = local_workers_for(samples.pipeline.options, requested=self._tuning.local_workers)
            use_local_workers(samples.pipeline, workers)
        use_fixed_dask_runner(samples.pipeline)
        if resolve_fan_in(self._tuning.fan_in, samples.pipeline) is FanIn.SPILL:
            outputs = samples | "Spill" >> SpillPath(
                self._fan_in_settings, resume=self._runs_resume,
                reused_runs=self._resume_point.runs if self._resume_point else ())
        elif self._resume_point is not None:
            raise WriterOptionError(f"resume needs the spill fan-in; the {runner_name(pipeline)} takes the "
                                    "shuffle path (pass WriterTuning(fan_in=FanIn.SPILL), --fan_in spill)")
        else:
            outputs = samples | "Shuffle" >> ShufflePath(self._fan_in_settings)
        description, near_settings = self._fan_in_settings.description, self._checks.near_duplicates
        near = None if near_settings is None or outputs.signature_files is None else (
            outputs.signature_files | "NearDuplicates" >> FindNearDuplicates(
                near_settings, salt=description.salt, splits=description.splits))  # one NearTally
        return self._publish(samples.pipeline, outputs, near)

    def _pane_versions(self) -> WriteWindowedTFRecord:
        """An unbounded input's write (``pane_versions``): each fired pane of the input's windows one append
        version of the root ``output_dir``; the checks that need the whole input are refused."""
        checks, provenance = self._checks, self._publish_settings.provenance
        given = [name for name, value in (("duplicates", checks.duplicates), ("near_duplicates",
                                          checks.near_duplicates), ("split_key_fn", checks.split_key_fn),
                                          ("resume", provenance.resume or None)) if value is not None]
        if given:
            raise WriterOptionError(f"{', '.join(given)}: an unbounded input (a streaming write, each pane an append "
                                    "version) is written without these (see docs/streaming.md)")
        settings = VersionPaneSettings(
            root=self._output_dir, description=self._fan_in_settings.description,
            feature_transforms=self._feature_transforms, max_rejected_fraction=checks.max_rejected_fraction,
            metadata=provenance.metadata, command=tuple(provenance.command),
            retention=provenance.retention or VersionRetention())
        return WriteWindowedTFRecord(functools.partial(commit_pane_version, settings=settings),
                                     triggering_frequency=None)

    def describe_fan_in(self, pipeline: beam.Pipeline) -> str:
        """The job summary's line on the fan-in path this writer takes in ``pipeline`` (``describe_fan_in``)."""
        return describe_fan_in(self._tuning.fan_in, pipeline, self._temp_dir)

    def _publish(self, pipeline: beam.Pipeline, outputs: FanInOutputs,
                 near: beam.PCollection | None) -> beam.PCollection:
        tagged = [pipeline | "StartPublish" >> TaggedStart(), outputs.plan | "TagPlan" >> tag(PLAN),
                  outputs.shard_infos | "TagShards" >> tag(SHARD), outputs.dead_letters | "TagDeadLetters" >> tag(DEAD)]
        if outputs.summary is not None:
            tagged.append(outputs.summary | "TagSummary" >> tag(SUMMARY))
        if near is not None:
            tagged.append(near | "TagNearDuplicates" >> tag(NEAR))
        if outputs.duplicate_groups is not None:
            tagged.append(outputs.duplicate_groups | "TagDuplicates" >> tag(DUPLICATES))
        elif outputs.digest_files is not None:
            tagged.append(outputs.digest_files | "FindDuplicates" >> FindDuplicates()
                          | "TagDuplicates" >> tag(DUPLICATES))
        return (
            tuple(tagged)
            | "Gather" >> beam.Flatten()
            | "ForPublish" >> beam.GroupByKey()  # (None, [(kind, value)]): one group, whatever is empty
            | "Publish" >> beam.Map(_publish_group, self._publish_settings)
        )
