"""WriteTFRecordDataset: samples in, a published, size-balanced TFRecord dataset out."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.beam.batch_input import in_global_window, require_bounded
from beam_tfrecord.beam.encode_fn import EncodeToBatchesFn, EncodeToRunsFn, RunsResume
from beam_tfrecord.beam.encode_pool import EncodeInPoolFn
from beam_tfrecord.beam.fan_in import FanIn, describe_fan_in, resolve_fan_in
from beam_tfrecord.beam.plan_dataset import PlanDataset, plan_in_one_step
from beam_tfrecord.beam.publish import PublishSettings, publish
from beam_tfrecord.beam.runners import (
    local_workers_for,
    runs_on_direct_runner,
    traits_of,
    use_fixed_dask_runner,
    use_local_workers,
)
from beam_tfrecord.beam.shards import (
    ShardTask,
    WriteShardFromGroupFn,
    WriteShardFromRunsFn,
    entries_by_bucket,
    key_by_shard,
    key_joined_by_shard,
    shards_by_bucket,
    specs_by_number,
)
from beam_tfrecord.beam.worker_placement import remote_workers_reason, require_shared_paths
from beam_tfrecord.core.dali_index import unsupported_reason as dali_unsupported_reason
from beam_tfrecord.core.manifest import Manifest, ShardInfo
from beam_tfrecord.core.naming import DEFAULT_FILE_FORMAT, Compression, FileFormat, ShardName
from beam_tfrecord.core.record_schema import RecordsSummary, merge_summaries
from beam_tfrecord.core.runs import SpilledRun
from beam_tfrecord.core.samples import DeadLetter
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.sharding import DatasetPlan, ShardingConfig, SplitConfig
from beam_tfrecord.core.units import KiB
from beam_tfrecord.encoding.entries import EncodedBatch
from beam_tfrecord.encoding.records import FeatureTransform
from beam_tfrecord.errors import MAX_REJECTED_ARGUMENT, PipelineInvariantError, RecordSchemaError, WriterOptionError
from beam_tfrecord.input_index import encoding_digest
from beam_tfrecord.spill import DEFAULT_RUN_BYTES, write_catalog
from beam_tfrecord.spill_resume import TEMP_PREFIX, ResumePoint, find_resume_point, fingerprint
from beam_tfrecord.spill_resume import describe as describe_resume

DEFAULT_SALT = "beam-tfrecord"


# Publication's inputs (and the spill path's runs) arrive as one group: a GroupByKey on one key
# rather than side inputs, which the Dask runner computes again inside each task that reads them.
# Elements: (kind, value).
_START, _RUN, _PLAN, _SHARD, _DEAD = "start", "run", "plan", "shard", "dead"
_SUMMARY = "summary"  # RecordsSummary: what the records say about the schema (an ``Encoding`` that infers it)
_KIND_OF_ENCODED = {SpilledRun: _RUN, DeadLetter: _DEAD, RecordsSummary: _SUMMARY}


class Encoding(Protocol):
    """The encode stage for inputs other than ``Sample``s (``WriteBalancedTFRecord``'s serialized records).

    Its DoFns emit what the sample encoders emit (spill path: ``SpilledRun`` and ``DeadLetter``;
    shuffle path: ``EncodedBatch``), and ``RecordsSummary`` values from which the plan step infers
    the published schema (the spill path's DoFn emits them among its runs; ``summarize_batches``
    merges the shuffle path's into one).
    """

    def to_runs_fn(self, *, runs_dir: str, run_bytes: int, direct_io: bool, salt: str,
                   max_record_bytes: int) -> beam.DoFn: ...

    def to_batches_fn(self, *, salt: str, max_record_bytes: int) -> beam.DoFn: ...

    def summarize_batches(self) -> beam.PTransform:
        """The shuffle path's batches -> their merged ``RecordsSummary`` (none for no record)."""


def _by_kind(group: tuple[None, Iterable[tuple[str, Any]]], kinds: tuple[str, ...]) -> dict[str, list[Any]]:
    """The values of a one-key group of ``(kind, value)`` elements, listed by kind (each of ``kinds``)."""
    found: dict[str, list[Any]] = {kind: [] for kind in kinds}
    for kind, value in group[1]:
        found[kind].append(value)
    return found


def _tag_encoded(element: SpilledRun | DeadLetter | RecordsSummary) -> tuple[None, tuple[str, Any]]:
    """Tags what the spill encoder emits by its type (one output: see encode_fn's docstring)."""
    return None, (_KIND_OF_ENCODED[element.__class__], element)


def _dead_letters_of(batch: EncodedBatch) -> tuple[DeadLetter, ...]:
    return batch.dead_letters


@dataclasses.dataclass(frozen=True)
class PlannedRuns:
    """The spill path's plan (None when nothing was encoded), the catalog of the runs it was made
    from, and the dead letters (and merged records summary, when inferring) gathered with them."""

    plan: DatasetPlan | None
    catalog: str | None
    dead_letters: tuple[DeadLetter, ...]
    summary: RecordsSummary | None = None


def _plan_gathered(group: tuple[None, Iterable[tuple[str, Any]]], splits: SplitConfig, sharding: ShardingConfig,
                   runs_dir: str, reused: Sequence[SpilledRun] = ()) -> PlannedRuns:
    """Plans from every run's index file (read in turn, never all held), those of a killed build it
    resumes (``reused``) included, and writes the runs' catalog.

    One step: on the runners the spill path serves, a pipeline stage per planning round costs more
    than reading the small index files.
    """
    found = _by_kind(group, (_START, _RUN, _DEAD, _SUMMARY))
    runs: list[SpilledRun] = [*found[_RUN], *reused]
    dead: list[DeadLetter] = found[_DEAD]
    summary = merge_summaries(found[_SUMMARY])
    if not runs:
        return PlannedRuns(None, None, tuple(dead), summary)
    runs.sort(key=lambda run: run.path)
    return PlannedRuns(plan_in_one_step(runs, splits, sharding), write_catalog(runs_dir, runs), tuple(dead), summary)


def _shard_tasks(planned: PlannedRuns) -> Iterator[tuple[int, ShardTask]]:
    if planned.plan is None or planned.catalog is None:
        return
    for number, spec in enumerate(planned.plan.shards):
        yield number, ShardTask(spec, planned.catalog)


def _plan_of(planned: PlannedRuns) -> DatasetPlan | None:
    return planned.plan


def _dead_letters_planned(planned: PlannedRuns) -> tuple[DeadLetter, ...]:
    return planned.dead_letters


def _summary_planned(planned: PlannedRuns) -> Iterator[RecordsSummary]:
    if planned.summary is not None:
        yield planned.summary


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
    found = _by_kind(group, (_START, _PLAN, _SHARD, _DEAD, _SUMMARY))
    if len(found[_PLAN]) > 1:
        raise PipelineInvariantError("publish", f"expected at most one plan, got {len(found[_PLAN])}")
    settings = _with_inferred_schema(settings, found[_SUMMARY])
    shard_infos: list[ShardInfo] = found[_SHARD]
    return publish(settings, found[_PLAN][0] if found[_PLAN] else None, shard_infos, found[_DEAD])


def _tag(kind: str) -> beam.PTransform:
    return beam.Map(lambda value: (None, (kind, value)))


class WriteTFRecordDataset(beam.PTransform):
    """Writes samples as a TFRecord dataset of size-balanced shards with a manifest.

    Input: a PCollection of ``Sample`` (or of lists of ``Sample``, for small rows). Output: a
    PCollection holding the published ``Manifest``. A batch writer: one dataset of the whole input,
    in whatever windows it comes (re-windowed into the global window); an unbounded input is an
    ``UnboundedInputError`` when the pipeline is built (``beam_tfrecord.beam.batch_input``). On
    Beam's DaskRunner the pipeline runs on ``FIXED_DASK_RUNNER`` (``use_fixed_dask_runner``).

    Stages: encode -> plan splits and shards from merged summaries (a hash-bucket histogram,
    refined only where a boundary falls; see ``beam_tfrecord.beam.plan_dataset``) -> bring each
    shard's records together (``FanIn``) and write it -> publish (rename shards, write the
    manifest last). On local runners records are spilled into hash-sorted runs and merged by
    each shard writer, so no GroupByKey carries payload bytes; on distributed runners they go
    through the runner's shuffle keyed by shard. Both give byte-identical shards.

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
        direct_io: on local Linux filesystems, write spill runs and shards and read runs with
            ``O_DIRECT``, bypassing the page cache (see ``beam_tfrecord.direct_io``); elsewhere,
            and where a filesystem refuses it, ordinary buffered I/O. The bytes are the same.
        fan_in: how a shard's records come together (AUTO: from the runner; see ``FanIn``).
        local_workers: on the DirectRunner, when the pipeline's options leave Beam's default (one
            in-memory worker), the worker processes the writer asks it for (its ``multi_processing``
            mode, on its batch engine, not Prism; see ``beam_tfrecord.beam.runners.use_local_workers``):
            None for every core of this machine (or ``$BEAM_TFRECORD_LOCAL_WORKERS``), 1 to leave
            the runner as it is. Options that choose the runner's parallelism (``direct_num_workers``,
            ``direct_running_mode``, another runner) are kept. Applies to the whole pipeline the
            writer is part of; its errors stay typed (``LocalBatchRunner``).
        encode_processes: an explicit pool of processes that encode samples and spill their runs,
            inside the runner's worker, on the spill path (``beam_tfrecord.beam.encode_pool``): for a
            pipeline that must stay in one runner process. 1 (the default): no pool. More than 1
            needs a runner whose workers run on this machine.
        temp_dir: where runs and unpublished shards go; default a hidden folder in ``output_dir``.
        shared_filesystem: the local ``output_dir`` and ``temp_dir`` are on a filesystem every
            worker mounts at the same path (NFS, a mounted bucket). Without it, a runner whose
            workers may run on other machines (``worker_placement.remote_workers_reason``) refuses
            local paths with ``LocalPathError`` when the pipeline is built.
        expected_inputs: the inputs the caller planned (listed, counted): when given, a job whose
            workers read another number (records written plus rejected) fails with
            ``InputsMismatchError`` and publishes nothing.
        inputs_identity: text that identifies the inputs as they are now (their sizes and update
            times: ``beam_tfrecord.refresh.fingerprint_inputs``). With it a spill build writes
            ``resume.json`` into its temp folder before any run, so that a killed build can be resumed.
        resume: take over the temp folder of a killed build with the same options and
            ``inputs_identity`` (found in ``output_dir``), keep its finished spill runs and encode only
            the samples they do not hold (``beam_tfrecord.spill_resume``); byte-identical to a clean
            build. No such build: a clean one. One made from other inputs or options:
            ``ResumeMismatchError`` (raised here, before any work). Spill path and ``Sample`` inputs only.
        progress_dir: a local folder where the DoFns keep their counts for a live progress display
            (``beam_tfrecord.progress``); only for runners whose workers share this machine.
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
        self._schema = schema
        self._dataset_name = dataset_name
        self._splits = splits or SplitConfig.single()
        self._sharding = sharding or ShardingConfig()
        self._compression = compression
        self._file_format = file_format
        self._dali_index = dali_index
        self._salt = salt
        self._feature_transforms = dict(feature_transforms or {})
        self._spill_run_bytes = spill_run_bytes
        self._reread_min_bytes = reread_min_bytes
        self._direct_io = direct_io
        self._fan_in = fan_in
        self._encode_processes = encode_processes
        self._local_workers = local_workers
        self._progress_dir = progress_dir
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
            return self._spill(samples)
        if self._resume_point is not None:
            raise WriterOptionError(f"resume needs the spill fan-in; the {type(pipeline.runner).__name__} takes the "
                                    "shuffle path (pass fan_in=FanIn.SPILL, --fan_in spill)")
        return self._shuffle(samples)

    def describe_fan_in(self, pipeline: beam.Pipeline) -> str:
        """The job summary's line on the fan-in path this writer takes in ``pipeline`` (``describe_fan_in``)."""
        return describe_fan_in(self._fan_in, pipeline, self._temp_dir)

    def _encode_options(self) -> dict[str, Any]:
        return dict(salt=self._salt, max_record_bytes=self._sharding.cap, feature_transforms=self._feature_transforms,
                    reread_min_bytes=self._reread_min_bytes, progress_dir=self._progress_dir)

    def _shard_options(self) -> dict[str, Any]:
        return dict(dataset_name=self._dataset_name, shards_dir=storage.join(self._temp_dir, "shards"),
                    direct_io=self._direct_io, file_format=self._file_format, progress_dir=self._progress_dir,
                    dali_index=self._dali_index)

    def _encode_to_runs_fn(self, pipeline: beam.Pipeline, runs_dir: str) -> beam.DoFn:
        if self._encoding is not None:  # records are already encoded: no pool (see ``encode_processes``)
            return self._encoding.to_runs_fn(runs_dir=runs_dir, run_bytes=self._spill_run_bytes,
                                             direct_io=self._direct_io, salt=self._salt,
                                             max_record_bytes=self._sharding.cap)
        return self._in_pool_if_asked(pipeline, EncodeToRunsFn(
            self._schema, runs_dir=runs_dir, run_bytes=self._spill_run_bytes, direct_io=self._direct_io,
            resume=self._runs_resume, **self._encode_options()))

    def _encode_to_batches_fn(self) -> beam.DoFn:
        if self._encoding is not None:
            return self._encoding.to_batches_fn(salt=self._salt, max_record_bytes=self._sharding.cap)
        return EncodeToBatchesFn(self._schema, **self._encode_options())

    def _spill(self, samples: beam.PCollection) -> beam.PCollection:
        runs_dir = storage.join(self._temp_dir, "runs")
        encoded = samples | "EncodeToRuns" >> beam.ParDo(self._encode_to_runs_fn(samples.pipeline, runs_dir))
        # SpilledRun | DeadLetter (| RecordsSummary), all gathered in one group. One consumer of what
        # the encoder emits: the Dask runner keeps a finished task's inputs (the samples) referenced
        # until every consumer of its output has run, so a second branch would hold them all.
        start = samples.pipeline | "StartPlan" >> beam.Create([None])
        planned = (
            (start | "TagStartPlan" >> _tag(_START), encoded | "TagEncoded" >> beam.Map(_tag_encoded))
            | "GatherRuns" >> beam.Flatten()
            | "AllRuns" >> beam.GroupByKey()  # (None, [(kind, SpilledRun | DeadLetter)...]): one group, always
            | "Plan" >> beam.Map(_plan_gathered, self._splits, self._sharding, runs_dir,  # PlannedRuns
                                 self._resume_point.runs if self._resume_point else ())
        )
        shard_infos = (
            planned
            | "ShardTasks" >> beam.FlatMap(_shard_tasks)  # (shard number, ShardTask): a spec and the run catalog
            | "ByShard" >> beam.GroupByKey()  # spreads the shards over workers (one small task each)
            | "WriteShards" >> beam.ParDo(WriteShardFromRunsFn(self._schema, self._compression,
                                                                 self._feature_transforms, **self._shard_options()))
        )
        plan = planned | "PlanOf" >> beam.Map(_plan_of)
        dead_letters = planned | "DeadLetters" >> beam.FlatMap(_dead_letters_planned)
        summary = planned | "SummaryOf" >> beam.FlatMap(_summary_planned) if self._encoding is not None else None
        return self._publish(samples.pipeline, plan, shard_infos, dead_letters, summary)

    def _in_pool_if_asked(self, pipeline: beam.Pipeline, encode: EncodeToRunsFn) -> beam.DoFn:
        """``encode``, or a pool running it in several processes (see ``encode_processes``)."""
        processes = self._encode_processes
        if processes == 1:
            return encode
        if not traits_of(pipeline).workers_on_this_machine:
            raise WriterOptionError(f"encode_processes={processes} needs a runner whose workers run on this "
                                    "machine (the DirectRunner); on others leave it unset")
        return EncodeInPoolFn(encode, processes=processes)

    def _shuffle(self, samples: beam.PCollection) -> beam.PCollection:
        batches = samples | "Encode" >> beam.ParDo(self._encode_to_batches_fn())
        # EncodedBatch: the entries and dead letters of one input element.
        dead_letters = batches | "DeadLetters" >> beam.FlatMap(_dead_letters_of)
        side_inputs = not traits_of(samples.pipeline).recomputes_side_inputs
        plan = batches | "Plan" >> PlanDataset(self._splits, self._sharding, side_inputs=side_inputs)
        if side_inputs:
            keyed = batches | "KeyByShard" >> beam.FlatMap(key_by_shard,
                                                           beam.pvalue.AsSingleton(plan, default_value=None))
        else:  # the plan meets the entries in a GroupByKey by hash bucket (a second shuffle of the payload)
            grid = self._splits.bucket_grid()
            keyed = (
                (batches | "EntriesByBucket" >> beam.FlatMap(entries_by_bucket, grid),
                 plan | "ShardsByBucket" >> beam.FlatMap(shards_by_bucket, grid))
                | "GatherBuckets" >> beam.Flatten()
                | "ByBucket" >> beam.GroupByKey()  # (bucket, [BucketShards, entry...])
                | "KeyByShard" >> beam.FlatMap(key_joined_by_shard)
            )
        shard_infos = (
            (keyed, plan | "SpecsByNumber" >> beam.FlatMap(specs_by_number))
            | "GatherShards" >> beam.Flatten()
            | "ByShard" >> beam.GroupByKey()  # (shard number, [ShardSpec, entry...]): the runner moves the payload
            | "WriteShards" >> beam.ParDo(WriteShardFromGroupFn(self._schema, self._compression,
                                                                  self._feature_transforms, **self._shard_options()))
        )
        summary = (batches | "SummarizeRecords" >> self._encoding.summarize_batches()  # one RecordsSummary
                   if self._encoding is not None else None)
        return self._publish(samples.pipeline, plan, shard_infos, dead_letters, summary)

    def _publish(self, pipeline: beam.Pipeline, plan: beam.PCollection, shard_infos: beam.PCollection,
                 dead_letters: beam.PCollection, summary: beam.PCollection | None) -> beam.PCollection:
        start = pipeline | "StartPublish" >> beam.Create([None])
        tagged = [start | "TagStart" >> _tag(_START), plan | "TagPlan" >> _tag(_PLAN),
                  shard_infos | "TagShards" >> _tag(_SHARD), dead_letters | "TagDeadLetters" >> _tag(_DEAD)]
        if summary is not None:
            tagged.append(summary | "TagSummary" >> _tag(_SUMMARY))
        return (
            tuple(tagged)
            | "Gather" >> beam.Flatten()
            | "ForPublish" >> beam.GroupByKey()  # (None, [(kind, value)]): one group, whatever is empty
            | "Publish" >> beam.Map(_publish_group, self._publish_settings)
        )
