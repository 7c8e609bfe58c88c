"""WriteTFRecordDataset: samples in, a published, size-balanced TFRecord dataset out."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.beam.encode_fn import EncodeToBatchesFn, EncodeToRunsFn
from beam_tfrecord.beam.entries import EncodedBatch
from beam_tfrecord.beam.planning import PlanDataset, plan_in_one_step
from beam_tfrecord.beam.publish import PublishSettings, publish
from beam_tfrecord.beam.records import FeatureTransform
from beam_tfrecord.beam.shards import (
    WriteShardFromGroupFn,
    WriteShardFromRunsFn,
    entries_by_bucket,
    key_by_shard,
    key_joined_by_shard,
    shards_by_bucket,
    specs_by_number,
)
from beam_tfrecord.core.manifest import Manifest, ShardInfo
from beam_tfrecord.core.naming import Compression, FileFormat, ShardName
from beam_tfrecord.core.plan import DatasetPlan, MiB, ShardingConfig, SplitConfig
from beam_tfrecord.core.runs import SpilledRun
from beam_tfrecord.core.samples import DeadLetter
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.units import KiB
from beam_tfrecord.errors import ShardingError, WriterOptionError

DEFAULT_SALT = "beam-tfrecord"


class FanIn(enum.Enum):
    """How a shard's records come together.

    SPILL: workers spill hash-sorted runs to storage; each shard writer merges its slice of every
        run. For runners whose GroupByKey holds everything in memory (the DirectRunner, Prism, the
        portable runner's embedded job service): memory stays bounded by the run size.
    SHUFFLE: records keyed by shard go through the runner's disk-backed shuffle (Dataflow Shuffle,
        Flink's and Spark's sort-based shuffles, Dask's); a shard writer reads one group.
    AUTO: SPILL on local runners, SHUFFLE on every other.
    """

    AUTO = "auto"
    SPILL = "spill"
    SHUFFLE = "shuffle"

    @classmethod
    def parse(cls, text: str) -> "FanIn":
        try:
            return cls(text.strip().lower())
        except ValueError as err:
            raise WriterOptionError(f"fan_in must be one of {[m.value for m in cls]}, got {text!r}") from err


# Runners whose GroupByKey keeps every buffered element in memory, with no spill to disk.
_IN_MEMORY_SHUFFLE_RUNNERS = frozenset({"DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner",
                                        "FnApiRunner", "PrismRunner", "InteractiveRunner", "TestDirectRunner"})
# Runners that lose what a DoFn emits in finish_bundle (the spill path's last run of a bundle).
_NO_FINISH_BUNDLE_OUTPUT_RUNNERS = frozenset({"DaskRunner"})
# Runners that compute a side input again, from the start of the pipeline, inside every task that
# reads it (Dask: a nested compute of the unoptimised graph); the shuffle path joins instead.
_RECOMPUTED_SIDE_INPUT_RUNNERS = frozenset({"DaskRunner"})


def resolve_fan_in(fan_in: FanIn, pipeline: beam.Pipeline) -> FanIn:
    """The fan-in path for ``pipeline``'s runner (``fan_in`` unless it is AUTO).

    Raises:
        WriterOptionError: SPILL forced on a runner that drops ``finish_bundle`` output (Dask).
    """
    runner = type(pipeline.runner).__name__
    if fan_in is FanIn.SPILL and runner in _NO_FINISH_BUNDLE_OUTPUT_RUNNERS:
        raise WriterOptionError(f"fan_in=spill cannot run on the {runner}: it drops elements a DoFn emits in "
                                "finish_bundle, where a bundle's last spill run is emitted; use fan_in=shuffle")
    if fan_in is not FanIn.AUTO:
        return fan_in
    if runner == "PortableRunner":
        endpoint = pipeline.options.get_all_options().get("job_endpoint")
        return FanIn.SPILL if endpoint in (None, "embed") else FanIn.SHUFFLE
    return FanIn.SPILL if runner in _IN_MEMORY_SHUFFLE_RUNNERS else FanIn.SHUFFLE


def _is_run(element: Any) -> bool:
    return element.__class__ is SpilledRun


def _is_dead_letter(element: Any) -> bool:
    return element.__class__ is DeadLetter


def _dead_letters_of(batch: EncodedBatch) -> tuple[DeadLetter, ...]:
    return batch.dead_letters


def _plan_runs(_: None, runs: list[SpilledRun], splits: SplitConfig, sharding: ShardingConfig
               ) -> Iterable[DatasetPlan | None]:
    """The plan of every run (a side input), or None when nothing was encoded."""
    ordered: list[SpilledRun] = sorted(runs, key=lambda run: run.path)
    yield plan_in_one_step(ordered, splits, sharding) if runs else None


def _shards_of(plan: DatasetPlan | None) -> Iterable[Any]:
    return plan.shards if plan is not None else ()


def _publish(plan: DatasetPlan | None, shard_infos: list[ShardInfo], dead_letters: list[DeadLetter],
             settings: PublishSettings) -> Manifest:
    return publish(settings, plan, shard_infos, dead_letters)


# On the shuffle path publication's inputs arrive as one group (a GroupByKey on one key rather than
# side inputs, which the Dask runner computes again inside each task that reads them): (kind, value).
_START, _PLAN, _SHARD, _DEAD = "start", "plan", "shard", "dead"


def _publish_group(group: tuple[None, Iterable[tuple[str, Any]]], settings: PublishSettings) -> Manifest:
    _, items = group
    found: dict[str, list[Any]] = {_START: [], _PLAN: [], _SHARD: [], _DEAD: []}
    for kind, value in items:
        found[kind].append(value)
    if len(found[_PLAN]) > 1:
        raise ShardingError(f"expected at most one plan, got {len(found[_PLAN])}")
    return _publish(found[_PLAN][0] if found[_PLAN] else None, found[_SHARD], found[_DEAD], settings)


def _tag(kind: str) -> beam.PTransform:
    return beam.Map(lambda value: (None, (kind, value)))


class WriteTFRecordDataset(beam.PTransform):
    """Writes samples as a TFRecord dataset of size-balanced shards with a manifest.

    Input: a PCollection of ``Sample`` (or of lists of ``Sample``, for small rows). Output: a
    PCollection holding the published ``Manifest``.

    Stages: encode -> plan splits and shards from merged summaries (a hash-bucket histogram,
    refined only where a boundary falls; see ``beam_tfrecord.beam.planning``) -> bring each
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
        salt: hash salt; the same salt and keys give the same splits and order.
        max_rejected_fraction: fail (and do not publish) when more than this fraction of inputs
            is rejected; 0.0 fails on any bad sample.
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
        temp_dir: where runs and unpublished shards go; default a hidden folder in ``output_dir``.
        progress_dir: a local folder where the DoFns keep their counts for a live progress display
            (``beam_tfrecord.progress``); only for runners whose workers share this machine.
        command: the command line to record in the manifest.
        metadata: extra facts to record in the manifest.
    """

    def __init__(self, output_dir: str, *, schema: Schema, dataset_name: str = "data",
                 splits: SplitConfig | None = None, sharding: ShardingConfig | None = None,
                 compression: Compression = Compression.NONE, file_format: FileFormat = FileFormat.TFRECORD,
                 salt: str = DEFAULT_SALT,
                 max_rejected_fraction: float = 0.0,
                 feature_transforms: Mapping[str, FeatureTransform] | None = None,
                 spill_run_bytes: int = 64 * MiB, reread_min_bytes: int = 64 * KiB, direct_io: bool = True,
                 fan_in: FanIn = FanIn.AUTO, temp_dir: str | None = None,
                 command: Sequence[str] = (), metadata: Mapping[str, Any] | None = None,
                 progress_dir: str | None = None) -> None:
        super().__init__()
        if not 0.0 <= max_rejected_fraction <= 1.0:
            raise WriterOptionError(f"max_rejected_fraction must be in [0, 1], got {max_rejected_fraction}")
        if spill_run_bytes < 1:
            raise WriterOptionError(f"spill_run_bytes must be >= 1, got {spill_run_bytes}")
        if reread_min_bytes < 0:
            raise WriterOptionError(f"reread_min_bytes must be >= 0, got {reread_min_bytes}")
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
        self._salt = salt
        self._feature_transforms = dict(feature_transforms or {})
        self._spill_run_bytes = spill_run_bytes
        self._reread_min_bytes = reread_min_bytes
        self._direct_io = direct_io
        self._fan_in = fan_in
        self._progress_dir = progress_dir
        run_id = uuid.uuid4().hex[:12]
        self._temp_dir = temp_dir or storage.join(output_dir, f".tmp-beam-tfrecord-{run_id}")
        self._publish_settings = PublishSettings(
            output_dir=output_dir, temp_dir=self._temp_dir, run_id=run_id, dataset_name=dataset_name,
            schema=schema, compression=compression, file_format=file_format, salt=salt, sharding=self._sharding,
            max_rejected_fraction=max_rejected_fraction, command=tuple(command), metadata=dict(metadata or {}),
            splits=self._splits)

    def expand(self, samples: beam.PCollection) -> beam.PCollection:
        if resolve_fan_in(self._fan_in, samples.pipeline) is FanIn.SPILL:
            return self._spill(samples)
        return self._shuffle(samples)

    def _encode_options(self) -> dict[str, Any]:
        return dict(salt=self._salt, max_record_bytes=self._sharding.cap, feature_transforms=self._feature_transforms,
                    reread_min_bytes=self._reread_min_bytes, progress_dir=self._progress_dir)

    def _shard_options(self) -> dict[str, Any]:
        return dict(dataset_name=self._dataset_name, shards_dir=storage.join(self._temp_dir, "shards"),
                    direct_io=self._direct_io, file_format=self._file_format, progress_dir=self._progress_dir)

    def _spill(self, samples: beam.PCollection) -> beam.PCollection:
        encoded = samples | "EncodeToRuns" >> beam.ParDo(EncodeToRunsFn(
            self._schema, runs_dir=storage.join(self._temp_dir, "runs"), run_bytes=self._spill_run_bytes,
            direct_io=self._direct_io, **self._encode_options()))
        # SpilledRun | DeadLetter, told apart by type (one output: see encode_fn's docstring).
        runs = encoded | "Runs" >> beam.Filter(_is_run)
        dead_letters = encoded | "DeadLetters" >> beam.Filter(_is_dead_letter)
        # One step plans from every run's index file (read in turn, never all held): on a local
        # runner a stage per planning round costs more than reading them. Empty input: None.
        plan = (samples.pipeline
                | "StartPlan" >> beam.Create([None])
                | "Plan" >> beam.FlatMap(_plan_runs, beam.pvalue.AsList(runs), self._splits, self._sharding))
        shard_infos = (
            plan
            | "ShardSpecs" >> beam.FlatMap(_shards_of)
            | "SpreadShards" >> beam.Reshuffle()
            # ShardSpec; every run (path and entry count) is a side input: O(shards + runs) in all.
            | "WriteShards" >> beam.ParDo(WriteShardFromRunsFn(self._schema, self._compression,
                                                                 self._feature_transforms, **self._shard_options()),
                                          beam.pvalue.AsList(runs))
        )
        # The plan (None for empty input) meets what was written as side inputs: cheaper here than a join.
        return plan | "Publish" >> beam.Map(_publish, beam.pvalue.AsList(shard_infos),
                                            beam.pvalue.AsList(dead_letters), self._publish_settings)

    def _shuffle(self, samples: beam.PCollection) -> beam.PCollection:
        batches = samples | "Encode" >> beam.ParDo(EncodeToBatchesFn(self._schema, **self._encode_options()))
        # EncodedBatch: the entries and dead letters of one input element.
        dead_letters = batches | "DeadLetters" >> beam.FlatMap(_dead_letters_of)
        side_inputs = type(samples.pipeline.runner).__name__ not in _RECOMPUTED_SIDE_INPUT_RUNNERS
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
        start = samples.pipeline | "StartPublish" >> beam.Create([None])
        return (
            (start | "TagStart" >> _tag(_START), plan | "TagPlan" >> _tag(_PLAN),
             shard_infos | "TagShards" >> _tag(_SHARD), dead_letters | "TagDeadLetters" >> _tag(_DEAD))
            | "Gather" >> beam.Flatten()
            | "ForPublish" >> beam.GroupByKey()  # (None, [(kind, value)]): one group, whatever is empty
            | "Publish" >> beam.Map(_publish_group, self._publish_settings)
        )
