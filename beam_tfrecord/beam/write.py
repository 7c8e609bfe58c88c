"""WriteTFRecordDataset: samples in, a published, size-balanced TFRecord dataset out."""

from __future__ import annotations

import dataclasses
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
from beam_tfrecord.beam.publish import PublishSettings, publish
from beam_tfrecord.beam.shuffle_path import ShufflePath
from beam_tfrecord.beam.spill_path import RunsResume, SpillPath
from beam_tfrecord.beam.tuning import FanIn, WriterTuning
from beam_tfrecord.core.dali_index import unsupported_reason as dali_unsupported_reason
from beam_tfrecord.core.manifest import Manifest, ShardInfo
from beam_tfrecord.core.naming import DEFAULT_FILE_FORMAT, Compression, FileFormat, ShardName
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
from beam_tfrecord.errors import MAX_REJECTED_ARGUMENT, PipelineInvariantError, RecordSchemaError, WriterOptionError
from beam_tfrecord.quality.content import DuplicatesCheck, DuplicatesMode
from beam_tfrecord.quality.duplicate_counts import DUPLICATES_KEY
from beam_tfrecord.quality.near_duplicates import NearDuplicateSettings
from beam_tfrecord.quality.near_report import REPORT_KEY, near_duplicate_report
from beam_tfrecord.quality.near_tally import NearTally
from beam_tfrecord.quality.split_groups import SPLIT_BY_KEY, SplitKeyFn, split_key_name
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

DEFAULT_SALT = "beam-tfrecord"


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
    return dataclasses.replace(settings, schema=schema, metadata={
        **settings.metadata, "schema_inferred": {"from": "records", "raw_payloads": summary.raw}})


def _with_near_duplicates(settings: PublishSettings, near: NearDuplicateSettings | None, found: dict[str, list[Any]],
                          ) -> PublishSettings:
    """The settings with the near-duplicate report in the metadata (when the writer searched for them)."""
    if near is None:
        return settings
    plan = found[PLAN][0] if found[PLAN] else None
    ranges = ([(split.name, split.hash_lo, split.hash_hi) for split in plan.splits] if plan is not None
              else settings.splits.ratio_bounds() if settings.splits.is_ratio else [])
    tally = found[NEAR][0] if found[NEAR] else NearTally()
    report = near_duplicate_report(tally, near, split_ranges=ranges, salt=settings.salt)
    return dataclasses.replace(settings, metadata={**settings.metadata, REPORT_KEY: report})


def _publish_group(group: tuple[None, Iterable[tuple[str, Any]]], settings: PublishSettings,
                   duplicates: DuplicatesCheck | None = None, near: NearDuplicateSettings | None = None) -> Manifest:
    found = by_kind(group, (START, PLAN, SHARD, DEAD, SUMMARY, DUPLICATES, NEAR))
    if len(found[PLAN]) > 1:
        raise PipelineInvariantError("publish", f"expected at most one plan, got {len(found[PLAN])}")
    plan, dropped = (found[PLAN][0] if found[PLAN] else None), 0
    if duplicates is not None:  # counted by split, recorded; or nothing published (``duplicates=fail``)
        counts = counted(duplicates, plan, found[DUPLICATES], split_by=settings.metadata.get(SPLIT_BY_KEY))
        settings = dataclasses.replace(settings, metadata=checked_metadata(
            duplicates, counts, dict(settings.metadata), settings.temp_dir))
        dropped = counts.dropped
    settings = _with_inferred_schema(settings, found[SUMMARY])
    settings = _with_near_duplicates(settings, near, found)
    settings = dataclasses.replace(settings, metadata=with_reused_shards(settings.metadata, settings.temp_dir))
    shard_infos: list[ShardInfo] = found[SHARD]
    return publish(settings, plan, shard_infos, found[DEAD], num_dropped=dropped)


class WriteTFRecordDataset(beam.PTransform):
    """Writes samples as a TFRecord dataset of size-balanced shards, published with a manifest.

    Input: a bounded PCollection of ``Sample`` (or of lists of ``Sample``, for small rows), in any
    windows (written as one dataset). Output: a PCollection holding the published ``Manifest``.
    The same inputs and arguments give the same bytes on every runner and fan-in path.

    Args:
        output_dir: dataset directory (local or ``gs://``).
        schema: the feature spec.
        dataset_name: the name in shard file names.
        splits: how samples are divided into splits (default: all in ``train``).
        sharding: target size, hard cap, or fixed count of shards.
        compression: shard compression (TFRecord only; ArrayRecord compresses inside the format).
        file_format: TFRECORD, or ARRAY_RECORD for random access by index (needs ``array-record``).
        dali_index: also write each shard's NVIDIA DALI index (``<shard>.idx``, listed in the
            manifest); uncompressed TFRecord shards only.
        salt: hash salt; the same salt and keys give the same splits and order.
        max_rejected_fraction: fail, publishing nothing, when more than this fraction of inputs is
            rejected; 0.0 fails on any bad sample.
        max_rejected_option: how ``RejectedSamplesError`` names that fraction (this argument or a flag).
        feature_transforms: per-feature functions applied before validation (decode, resize...).
        expected_inputs: the inputs the caller counted: if the workers read another number
            (written plus rejected), the job fails with ``InputsMismatchError`` and publishes nothing.
        inputs_identity: text that identifies the inputs as they are now (sizes, update times); with
            it a killed build can be resumed.
        resume: take over a killed build of the same options and ``inputs_identity`` in ``output_dir``
            and keep its finished work (same bytes as a clean build; none found: a clean build).
            ``Sample`` inputs, the spill fan-in and the default ``temp_dir`` only.
        command: the command line to record in the manifest.
        metadata: extra facts to record in the manifest.
        encoding: the encode stage for inputs that are not ``Sample``s (``Encoding``): the published
            schema is the records', and ``schema`` only an empty dataset's.
        tuning: how the write runs (memory, processes, I/O, temp folder; ``WriterTuning``). It never
            changes the bytes written.
        near_duplicates: search the images of ``NearDuplicateSettings.feature`` for near duplicates and
            report them in the manifest's metadata ("near_duplicates"); None (the default): no search.
        duplicates: check exact duplicates (records equal but for their key and the excluded features):
            ``"report"`` counts them (manifest ``duplicates``), ``"fail"`` publishes nothing
            (``DuplicatesFoundError``), ``"drop"`` keeps the record of smallest key hash of each group (the
            others are counted, ``Manifest.num_dropped``); a ``DuplicatesCheck`` also names features to
            exclude. None: no check.
        split_key_fn: a sample -> its group's value (a user or patient id; ``ColumnSplitKey("user")``): the
            splits hash it instead of the key, so every record of a group lands in one split (ratio splits).

    Raises:
        WriterOptionError, ShardNameError: at construction, for arguments out of range or at odds.
        ResumeMismatchError: at construction, when the build to resume had other inputs or options.
        UnboundedInputError, LocalPathError: when the pipeline is built (see ``WriterTuning``).
    """

    def __init__(self, output_dir: str, *, schema: Schema, dataset_name: str = "data",
                 splits: SplitConfig | None = None, sharding: ShardingConfig | None = None,
                 compression: Compression = Compression.NONE, file_format: FileFormat = DEFAULT_FILE_FORMAT,
                 dali_index: bool = False, salt: str = DEFAULT_SALT,
                 max_rejected_fraction: float = 0.0, max_rejected_option: str = MAX_REJECTED_ARGUMENT,
                 feature_transforms: Mapping[str, FeatureTransform] | None = None,
                 expected_inputs: int | None = None, inputs_identity: str | None = None, resume: bool = False,
                 command: Sequence[str] = (), metadata: Mapping[str, Any] | None = None,
                 encoding: Encoding | None = None, tuning: WriterTuning | None = None,
                 near_duplicates: NearDuplicateSettings | None = None,
                 duplicates: DuplicatesCheck | DuplicatesMode | str | None = None,
                 split_key_fn: SplitKeyFn | None = None) -> None:
        super().__init__()
        if tuning is not None and not isinstance(tuning, WriterTuning):
            raise WriterOptionError(f"tuning must be a WriterTuning, got {tuning!r}")
        tuning = tuning or WriterTuning()
        if duplicates is not None and not isinstance(duplicates, DuplicatesCheck):
            duplicates = DuplicatesCheck(DuplicatesMode.parse(duplicates))
        if duplicates is not None and duplicates.mode is DuplicatesMode.DROP and tuning.shard_writers != 1:
            raise WriterOptionError("duplicates='drop' writes each shard whole: leave shard_writers at 1")
        self._duplicates = duplicates
        if split_key_fn is not None:
            if not callable(split_key_fn):
                raise WriterOptionError(f"split_key_fn must be callable (a sample -> its group), got {split_key_fn!r}")
            if not (splits or SplitConfig.single()).is_ratio or resume:
                raise WriterOptionError("split_key_fn keeps groups whole in ratio splits (NAME=FRACTION), "
                                        "without resume")
            metadata = {**(metadata or {}), SPLIT_BY_KEY: split_key_name(split_key_fn)}
        if not 0.0 <= max_rejected_fraction <= 1.0:
            raise WriterOptionError(f"max_rejected_fraction must be in [0, 1], got {max_rejected_fraction}")
        if expected_inputs is not None and expected_inputs < 0:
            raise WriterOptionError(f"expected_inputs must be >= 0, got {expected_inputs}")
        if dali_index and dali_unsupported_reason(compression, file_format) is not None:
            raise WriterOptionError(f"dali_index: {dali_unsupported_reason(compression, file_format)}")
        # Validates the dataset name, and the format with the compression, early (ShardNameError).
        ShardName(dataset_name, "train", 0, 1, compression, file_format)
        unknown = set(feature_transforms or {}) - set(schema.features) - set(schema.sequence_features)
        if unknown:
            raise WriterOptionError(f"feature_transforms name features not in the schema: {sorted(unknown)}")
        if near_duplicates is not None and (encoding is not None or near_duplicates.feature not in schema.features):
            raise WriterOptionError(f"near_duplicates: feature {near_duplicates.feature!r} is not an image feature of "
                                    f"the schema {sorted(schema.features)} (or the inputs are not Samples)")
        if near_duplicates is not None and split_key_fn is not None:
            raise WriterOptionError("near_duplicates places each image in its split by its key: it does not "
                                    "follow split_key_fn yet (drop one of the two)")
        self._near_duplicates = near_duplicates
        self._output_dir = output_dir
        self._tuning = tuning
        self._splits = splits or SplitConfig.single()
        self._sharding = sharding or ShardingConfig()
        self._feature_transforms = dict(feature_transforms or {})
        self._encoding = encoding
        resume_text = None if inputs_identity is None else fingerprint({
            "inputs": inputs_identity, "dataset_name": dataset_name, "splits": repr(self._splits),
            "sharding": repr(self._sharding), "compression": compression.value, "file_format": file_format.value,
            # not a byte of the dataset, but of the spilled runs a resumed build keeps
            "reread_min_bytes": tuning.reread_min_bytes, "encoding": encoding_digest(
                schema_json=schema.to_json(), transforms=self._feature_transforms, salt=salt)})
        self._resume_point = self._resume_point_of(output_dir, resume, resume_text)
        if duplicates is not None and self._resume_point is not None:
            if duplicates.mode is not DuplicatesMode.REPORT:
                raise WriterOptionError(f"duplicates={duplicates.mode.value!r} needs a build that is not resumed "
                                        "(a resumed one encodes only part of its records)")
            metadata = {**(metadata or {}), DUPLICATES_KEY: {"skipped": "a resumed build encodes part of its records"}}
            duplicates = self._duplicates = None
        run_id = self._resume_point.run_id if self._resume_point else uuid.uuid4().hex[:12]
        self._temp_dir = tuning.temp_dir or storage.join(output_dir, f"{TEMP_PREFIX}{run_id}")
        self._runs_resume = None if resume_text is None or encoding is not None else RunsResume(
            self._temp_dir, resume_text, self._resume_point.hashes_path if self._resume_point else None)
        if self._resume_point is not None:
            metadata = {**(metadata or {}), "resumed": self._resume_point.metadata()}
        # Records that arrive serialized have their schema only once published: summarized by feature name.
        self._with_statistics = tuning.statistics
        self._fan_in_settings = FanInSettings(
            schema=schema, splits=self._splits, sharding=self._sharding, dataset_name=dataset_name,
            compression=compression, file_format=file_format, salt=salt, feature_transforms=self._feature_transforms,
            reread_min_bytes=tuning.reread_min_bytes, direct_io=tuning.direct_io, temp_dir=self._temp_dir,
            progress_dir=tuning.progress_dir, encoding=encoding, dali_index=dali_index,
            shard_writers=tuning.shard_phase, duplicates=duplicates, split_key_fn=split_key_fn,
            statistics=self._with_statistics,
            near_feature=None if near_duplicates is None else near_duplicates.feature)
        self._publish_settings = PublishSettings(
            output_dir=output_dir, temp_dir=self._temp_dir, run_id=run_id, dataset_name=dataset_name,
            schema=schema, compression=compression, file_format=file_format, salt=salt, sharding=self._sharding,
            max_rejected_fraction=max_rejected_fraction, command=tuple(command), metadata=dict(metadata or {}),
            splits=self._splits, expected_inputs=expected_inputs, max_rejected_option=max_rejected_option,
            dali_index=dali_index, statistics=self._with_statistics)

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
        return reused_keys_of(self._resume_point, self._fan_in_settings.salt)

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
        require_bounded(samples, writer=type(self).__name__)
        samples = in_global_window(samples)  # one dataset of every window (see beam_tfrecord.beam.batch_input)
        if runs_on_direct_runner(samples.pipeline):
            workers = local_workers_for(samples.pipeline.options, requested=self._tuning.local_workers)
            use_local_workers(samples.pipeline, workers)
        use_fixed_dask_runner(samples.pipeline)
        if resolve_fan_in(self._tuning.fan_in, samples.pipeline) is FanIn.SPILL:
            outputs = samples | "Spill" >> SpillPath(
                self._fan_in_settings, run_bytes=self._tuning.spill_run_bytes,
                encode_processes=self._tuning.encode_processes,
                resume=self._runs_resume, reused_runs=self._resume_point.runs if self._resume_point else ())
        elif self._resume_point is not None:
            raise WriterOptionError(f"resume needs the spill fan-in; the {runner_name(pipeline)} takes the "
                                    "shuffle path (pass WriterTuning(fan_in=FanIn.SPILL), --fan_in spill)")
        else:
            outputs = samples | "Shuffle" >> ShufflePath(self._fan_in_settings)
        near = None if self._near_duplicates is None or outputs.signature_files is None else (
            outputs.signature_files | "NearDuplicates" >> FindNearDuplicates(
                self._near_duplicates, salt=self._fan_in_settings.salt, splits=self._splits))  # one NearTally
        return self._publish(samples.pipeline, outputs, near)

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
            | "Publish" >> beam.Map(_publish_group, self._publish_settings, self._duplicates, self._near_duplicates)
        )
