"""WriteTFRecordDataset: samples in, a published, size-balanced TFRecord dataset out."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.beam.batch_input import in_global_window, require_bounded
from beam_tfrecord.beam.fan_in import (
    Encoding,
    FanIn,
    FanInOutputs,
    FanInSettings,
    describe_fan_in,
    resolve_fan_in,
)
from beam_tfrecord.beam.one_group import DEAD, PLAN, SHARD, START, SUMMARY, TaggedStart, by_kind, tag
from beam_tfrecord.beam.publish import PublishSettings, publish
from beam_tfrecord.beam.runners import (
    local_workers_for,
    runs_on_direct_runner,
    use_fixed_dask_runner,
    use_local_workers,
)
from beam_tfrecord.beam.shuffle_path import ShufflePath
from beam_tfrecord.beam.spill_path import RunsResume, SpillPath
from beam_tfrecord.beam.worker_placement import remote_workers_reason, require_shared_paths
from beam_tfrecord.core.dali_index import unsupported_reason as dali_unsupported_reason
from beam_tfrecord.core.manifest import Manifest, ShardInfo
from beam_tfrecord.core.naming import DEFAULT_FILE_FORMAT, Compression, FileFormat, ShardName
from beam_tfrecord.core.pieces import DEFAULT_MIN_PIECE_BYTES, ShardWriters
from beam_tfrecord.core.record_schema import RecordsSummary, merge_summaries
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.sharding import ShardingConfig, SplitConfig
from beam_tfrecord.core.units import KiB
from beam_tfrecord.encoding.records import FeatureTransform
from beam_tfrecord.errors import MAX_REJECTED_ARGUMENT, PipelineInvariantError, RecordSchemaError, WriterOptionError
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
from beam_tfrecord.spill.run_files import DEFAULT_RUN_BYTES
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


def _publish_group(group: tuple[None, Iterable[tuple[str, Any]]], settings: PublishSettings) -> Manifest:
    found = by_kind(group, (START, PLAN, SHARD, DEAD, SUMMARY))
    if len(found[PLAN]) > 1:
        raise PipelineInvariantError("publish", f"expected at most one plan, got {len(found[PLAN])}")
    settings = _with_inferred_schema(settings, found[SUMMARY])
    settings = dataclasses.replace(settings, metadata=with_reused_shards(settings.metadata, settings.temp_dir))
    shard_infos: list[ShardInfo] = found[SHARD]
    return publish(settings, found[PLAN][0] if found[PLAN] else None, shard_infos, found[DEAD])


class WriteTFRecordDataset(beam.PTransform):
    """Writes samples as a TFRecord dataset of size-balanced shards with a manifest.

    Input: a PCollection of ``Sample`` (or of lists of ``Sample``, for small rows). Output: a
    PCollection holding the published ``Manifest``. A batch writer: one dataset of the whole input,
    in whatever windows it comes (re-windowed into the global window); an unbounded input is an
    ``UnboundedInputError`` when the pipeline is built (``beam_tfrecord.beam.batch_input``). On
    Beam's DaskRunner the pipeline runs on ``FIXED_DASK_RUNNER`` (``use_fixed_dask_runner``).

    Stages: one fan-in path (``FanIn``: encode, plan splits and shards from a hash-bucket
    histogram, bring each shard's records together and write it) -> publish (rename shards, write
    the manifest last). On local runners ``spill_path.SpillPath`` merges hash-sorted spilled runs,
    so no GroupByKey carries payload bytes; on distributed runners ``shuffle_path.ShufflePath``
    keys records by shard through the runner's shuffle. Both give byte-identical shards.

    Args:
        output_dir: dataset directory (local or ``gs://``).
        schema: the feature spec.
        dataset_name: the name in shard file names.
        splits: how samples are divided into splits (default: all in ``train``).
        sharding: target size, hard cap, or fixed count of shards.
        compression: shard compression (TFRecord only; ArrayRecord compresses inside the format).
        file_format: TFRECORD, or ARRAY_RECORD for shards with random access by index (needs the
            ``array-record`` package); the same records in the same shards either way.
        dali_index: also write each shard's NVIDIA DALI index (``<shard>.idx``, listed in the
            manifest; ``beam_tfrecord.core.dali_index``), so DALI reads the dataset without a pre-pass.
            Uncompressed TFRecord shards only (``WriterOptionError`` otherwise).
        salt: hash salt; the same salt and keys give the same splits and order.
        max_rejected_fraction: fail (and do not publish) when more than this fraction of inputs
            is rejected; 0.0 fails on any bad sample.
        max_rejected_option: how the caller sets ``max_rejected_fraction``, as the
            ``RejectedSamplesError``'s hint spells it: this argument (``MAX_REJECTED_ARGUMENT``) or a
            job's flag (``MAX_REJECTED_FLAG``).
        feature_transforms: per-feature functions applied before validation (decode, resize...).
        spill_run_bytes: records buffered per worker before a sorted run is written (while it is
            written, the next run fills: up to twice this much per worker).
        reread_min_bytes: file-backed records at least this large are not spilled: their shard
            writer reads the files again (validated the same way, checked against the planned
            size), so the payload is written once. 0 spills everything. Not used with
            ``feature_transforms``.
        direct_io: write spill runs and shards and read runs with ``O_DIRECT`` (no page cache;
            ``beam_tfrecord.storage.direct_io``) on local Linux filesystems that accept it, buffered I/O
            elsewhere; the bytes are the same.
        fan_in: how a shard's records come together (AUTO: from the runner; see ``FanIn``).
        shard_writers: the writers the spill fan-in's shard phase keeps busy: when the plan has fewer
            shards than this (or a shard much larger than the rest), it cuts such shards into pieces by
            hash sub-range, written in parallel and joined (``beam.shard_pieces``); the bytes are the
            same. None or 1 (the default): one writer per shard, measured faster on a local disk, where
            the phase is bound by the disk, not a worker's CPU (docs/performance.md). The shuffle fan-in
            always writes a shard whole. Uncompressed TFRecord shards only: compressed and ArrayRecord
            shards are written whole.
        min_piece_bytes: no shard is cut into pieces smaller than this.
        local_workers: DirectRunner worker processes (its batch engine's ``multi_processing`` mode, not
            Prism; ``runners.use_local_workers``) when the options leave Beam's one in-memory worker:
            None for every core (or ``$BEAM_TFRECORD_LOCAL_WORKERS``), 1 leaves the runner as it is.
            Options that set the parallelism (``direct_num_workers``, ``direct_running_mode``, another
            runner) win. Applies to the whole pipeline; its errors stay typed (``LocalBatchRunner``).
        encode_processes: a pool of processes inside the runner's worker that encode samples and spill
            runs (spill path, ``beam.encode_pool``), for a pipeline that must stay in one runner
            process; 1: none. More than 1 needs a runner whose workers run on this machine.
        temp_dir: where runs and unpublished shards go; default a hidden folder in ``output_dir``.
            On another filesystem than ``output_dir`` (or local with a ``gs://`` output), the
            shards are copied into place when published instead of renamed.
        shared_filesystem: the local ``output_dir`` and ``temp_dir`` are on a filesystem every
            worker mounts at the same path (NFS, a mounted bucket). Without it, a runner whose
            workers may run on other machines (``worker_placement.remote_workers_reason``) refuses
            local paths with ``LocalPathError`` when the pipeline is built.
        expected_inputs: the inputs the caller planned (listed, counted): when given, a job whose
            workers read another number (records written plus rejected) fails with
            ``InputsMismatchError`` and publishes nothing.
        inputs_identity: text that identifies the inputs as they are now (their sizes and update
            times: ``beam_tfrecord.versions.refresh.fingerprint_inputs``). With it a spill build writes
            ``resume.json`` into its temp folder before any run, so that a killed build can be resumed.
        resume: take over the temp folder of a killed build with the same options and
            ``inputs_identity`` (found in ``output_dir``), keep its finished spill runs and encode only
            the samples they do not hold (``beam_tfrecord.spill.resume``); byte-identical to a clean
            build. No such build: a clean one. One made from other inputs or options:
            ``ResumeMismatchError`` (raised here, before any work). Spill path and ``Sample`` inputs only.
        progress_dir: a local folder where the DoFns keep their counts for a live progress display
            (``beam_tfrecord.job.progress``); only for runners whose workers share this machine.
        command: the command line to record in the manifest.
        metadata: extra facts to record in the manifest.
        encoding: the encode stage for inputs that are not ``Sample``s (see ``Encoding``); its
            records' summaries give the published schema, and ``schema`` only names the shard
            writers' (unused: such inputs have no file-backed records) and an empty dataset's.
    """

    def __init__(self, output_dir: str, *, schema: Schema, dataset_name: str = "data",
                 splits: SplitConfig | None = None, sharding: ShardingConfig | None = None,
                 compression: Compression = Compression.NONE, file_format: FileFormat = DEFAULT_FILE_FORMAT,
                 dali_index: bool = False, salt: str = DEFAULT_SALT,
                 max_rejected_fraction: float = 0.0, max_rejected_option: str = MAX_REJECTED_ARGUMENT,
                 feature_transforms: Mapping[str, FeatureTransform] | None = None,
                 spill_run_bytes: int = DEFAULT_RUN_BYTES, reread_min_bytes: int = 64 * KiB, direct_io: bool = True,
                 fan_in: FanIn = FanIn.AUTO, local_workers: int | None = None, encode_processes: int = 1,
                 shard_writers: int | None = None, min_piece_bytes: int = DEFAULT_MIN_PIECE_BYTES,
                 temp_dir: str | None = None, shared_filesystem: bool = False, expected_inputs: int | None = None,
                 inputs_identity: str | None = None, resume: bool = False,
                 command: Sequence[str] = (), metadata: Mapping[str, Any] | None = None,
                 progress_dir: str | None = None, encoding: Encoding | None = None) -> None:
        super().__init__()
        if not 0.0 <= max_rejected_fraction <= 1.0:
            raise WriterOptionError(f"max_rejected_fraction must be in [0, 1], got {max_rejected_fraction}")
        if spill_run_bytes < 1:
            raise WriterOptionError(f"spill_run_bytes must be >= 1, got {spill_run_bytes}")
        if reread_min_bytes < 0:
            raise WriterOptionError(f"reread_min_bytes must be >= 0, got {reread_min_bytes}")
        if encode_processes < 1:
            raise WriterOptionError(f"encode_processes must be >= 1, got {encode_processes}")
        if local_workers is not None and local_workers < 1:
            raise WriterOptionError(f"local_workers must be >= 1, got {local_workers}")
        shard_phase = ShardWriters(1 if shard_writers is None else shard_writers, min_piece_bytes)  # checks both
        if expected_inputs is not None and expected_inputs < 0:
            raise WriterOptionError(f"expected_inputs must be >= 0, got {expected_inputs}")
        if dali_index and dali_unsupported_reason(compression, file_format) is not None:
            raise WriterOptionError(f"dali_index: {dali_unsupported_reason(compression, file_format)}")
        if not isinstance(fan_in, FanIn):
            raise WriterOptionError(f"fan_in must be a FanIn, got {fan_in!r}")
        # Validates the dataset name, and the format with the compression, early (ShardNameError).
        ShardName(dataset_name, "train", 0, 1, compression, file_format)
        unknown = set(feature_transforms or {}) - set(schema.features) - set(schema.sequence_features)
        if unknown:
            raise WriterOptionError(f"feature_transforms name features not in the schema: {sorted(unknown)}")
        self._output_dir = output_dir
        self._splits = splits or SplitConfig.single()
        self._sharding = sharding or ShardingConfig()
        self._feature_transforms = dict(feature_transforms or {})
        self._spill_run_bytes = spill_run_bytes
        self._fan_in = fan_in
        self._encode_processes = encode_processes
        self._local_workers = local_workers
        self._encoding = encoding
        self._shared_filesystem = shared_filesystem
        resume_text = None if inputs_identity is None else fingerprint({
            "inputs": inputs_identity, "dataset_name": dataset_name, "splits": repr(self._splits),
            "sharding": repr(self._sharding), "compression": compression.value, "file_format": file_format.value,
            "reread_min_bytes": reread_min_bytes, "encoding": encoding_digest(
                schema_json=schema.to_json(), transforms=self._feature_transforms, salt=salt)})
        self._resume_point = self._resume_point_of(output_dir, resume, resume_text, temp_dir)
        run_id = self._resume_point.run_id if self._resume_point else uuid.uuid4().hex[:12]
        self._temp_dir = temp_dir or storage.join(output_dir, f"{TEMP_PREFIX}{run_id}")
        self._runs_resume = None if resume_text is None or encoding is not None else RunsResume(
            self._temp_dir, resume_text, self._resume_point.hashes_path if self._resume_point else None)
        if self._resume_point is not None:
            metadata = {**(metadata or {}), "resumed": self._resume_point.metadata()}
        self._fan_in_settings = FanInSettings(
            schema=schema, splits=self._splits, sharding=self._sharding, dataset_name=dataset_name,
            compression=compression, file_format=file_format, salt=salt, feature_transforms=self._feature_transforms,
            reread_min_bytes=reread_min_bytes, direct_io=direct_io, temp_dir=self._temp_dir,
            progress_dir=progress_dir, encoding=encoding, dali_index=dali_index, shard_writers=shard_phase)
        self._publish_settings = PublishSettings(
            output_dir=output_dir, temp_dir=self._temp_dir, run_id=run_id, dataset_name=dataset_name,
            schema=schema, compression=compression, file_format=file_format, salt=salt, sharding=self._sharding,
            max_rejected_fraction=max_rejected_fraction, command=tuple(command), metadata=dict(metadata or {}),
            splits=self._splits, expected_inputs=expected_inputs, max_rejected_option=max_rejected_option,
            dali_index=dali_index)

    def _resume_point_of(self, output_dir: str, resume: bool, text: str | None,
                         temp_dir: str | None) -> ResumePoint | None:
        """The killed build to resume (None: a clean build), checked against the other options."""
        if not resume:
            return None
        if text is None or self._encoding is not None or temp_dir is not None or self._fan_in is FanIn.SHUFFLE:
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
        require_shared_paths({"output_dir": self._output_dir, "temp_dir": self._temp_dir},
                             remote_reason=remote_workers_reason(type(pipeline.runner).__name__, pipeline.options),
                             shared_filesystem=self._shared_filesystem, declare="shared_filesystem=True")
        require_bounded(samples, writer=type(self).__name__)
        samples = in_global_window(samples)  # one dataset of every window (see beam_tfrecord.beam.batch_input)
        if runs_on_direct_runner(samples.pipeline):
            workers = local_workers_for(samples.pipeline.options, requested=self._local_workers)
            use_local_workers(samples.pipeline, workers)
        use_fixed_dask_runner(samples.pipeline)
        if resolve_fan_in(self._fan_in, samples.pipeline) is FanIn.SPILL:
            outputs = samples | "Spill" >> SpillPath(
                self._fan_in_settings, run_bytes=self._spill_run_bytes, encode_processes=self._encode_processes,
                resume=self._runs_resume, reused_runs=self._resume_point.runs if self._resume_point else ())
        elif self._resume_point is not None:
            raise WriterOptionError(f"resume needs the spill fan-in; the {type(pipeline.runner).__name__} takes the "
                                    "shuffle path (pass fan_in=FanIn.SPILL, --fan_in spill)")
        else:
            outputs = samples | "Shuffle" >> ShufflePath(self._fan_in_settings)
        return self._publish(samples.pipeline, outputs)

    def describe_fan_in(self, pipeline: beam.Pipeline) -> str:
        """The job summary's line on the fan-in path this writer takes in ``pipeline`` (``describe_fan_in``)."""
        return describe_fan_in(self._fan_in, pipeline, self._temp_dir)

    def _publish(self, pipeline: beam.Pipeline, outputs: FanInOutputs) -> beam.PCollection:
        tagged = [pipeline | "StartPublish" >> TaggedStart(), outputs.plan | "TagPlan" >> tag(PLAN),
                  outputs.shard_infos | "TagShards" >> tag(SHARD), outputs.dead_letters | "TagDeadLetters" >> tag(DEAD)]
        if outputs.summary is not None:
            tagged.append(outputs.summary | "TagSummary" >> tag(SUMMARY))
        return (
            tuple(tagged)
            | "Gather" >> beam.Flatten()
            | "ForPublish" >> beam.GroupByKey()  # (None, [(kind, value)]): one group, whatever is empty
            | "Publish" >> beam.Map(_publish_group, self._publish_settings)
        )
