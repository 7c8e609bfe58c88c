"""WriteTFRecordDataset: samples in, a published, size-balanced TFRecord dataset out."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.beam.encode_fn import DEAD_LETTERS, EncodeToRunsFn
from beam_tfrecord.beam.records import FeatureTransform
from beam_tfrecord.beam.publish import PublishSettings, publish
from beam_tfrecord.beam.shards import WriteShardFn, shard_tasks
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.core.naming import Compression, ShardName
from beam_tfrecord.core.plan import DatasetPlan, ShardingConfig, SplitConfig, plan_dataset
from beam_tfrecord.core.runs import RunIndex, SpilledRun
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.errors import ShardingError

import numpy as np

KiB = 2**10
MiB = 2**20
DEFAULT_SALT = "beam-tfrecord"
PLAN = "plan"  # PlanShards' tagged output: the DatasetPlan


def _plan(runs: list[RunIndex], splits: SplitConfig, sharding: ShardingConfig) -> DatasetPlan:
    hashes = np.concatenate([r.hashes for r in runs]) if runs else np.zeros(0, np.uint64)
    sizes = np.concatenate([r.framed_sizes for r in runs]) if runs else np.zeros(0, np.int64)
    return plan_dataset(hashes, sizes, splits, sharding)


def _plan_shards(_: None, spilled: list[SpilledRun], splits: SplitConfig, sharding: ShardingConfig, *,
                 dataset_name: str, compression: Compression, shards_dir: str) -> Iterator[Any]:
    """The plan (tagged output ``plan``) and one ShardTask per planned shard (main output).

    Called once, for the single element of a one-element Create; ``spilled`` is every run (a side input).
    """
    runs = [RunIndex.from_bytes(run.path, storage.read_bytes(run.index_path)) for run in spilled]
    plan = _plan(runs, splits, sharding)
    yield beam.pvalue.TaggedOutput(PLAN, plan)
    yield from shard_tasks(plan, runs, dataset_name=dataset_name, compression=compression, shards_dir=shards_dir)


def _publish(plan: DatasetPlan, shard_infos: list, dead_letters: list, settings: PublishSettings) -> Manifest:
    return publish(settings, plan, shard_infos, dead_letters)


class WriteTFRecordDataset(beam.PTransform):
    """Writes samples as a TFRecord dataset of size-balanced shards with a manifest.

    Input: a PCollection of ``Sample`` (or of lists of ``Sample``, for small rows). Output: a
    PCollection holding the published ``Manifest``.

    Stages: encode and spill records into hash-sorted runs (payload written once, memory
    bounded by ``spill_run_bytes`` per worker) -> plan splits and shards from hashes and sizes
    only -> write each shard by merging its slice of every run -> publish (rename shards, write
    the manifest last). No GroupByKey carries payload bytes, so the local runner's in-memory
    shuffle stays small whatever the data size.

    Args:
        output_dir: dataset directory (local or ``gs://``).
        schema: the feature spec.
        dataset_name: the name in shard file names.
        splits: how samples are divided into splits (default: all in ``train``).
        sharding: target size, hard cap, or fixed count of shards.
        compression: shard compression.
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
        temp_dir: where runs and unpublished shards go; default a hidden folder in ``output_dir``.
        command: the command line to record in the manifest.
        metadata: extra facts to record in the manifest.
    """

    def __init__(self, output_dir: str, *, schema: Schema, dataset_name: str = "data",
                 splits: SplitConfig | None = None, sharding: ShardingConfig | None = None,
                 compression: Compression = Compression.NONE, salt: str = DEFAULT_SALT,
                 max_rejected_fraction: float = 0.0,
                 feature_transforms: Mapping[str, FeatureTransform] | None = None,
                 spill_run_bytes: int = 64 * MiB, reread_min_bytes: int = 64 * KiB, direct_io: bool = True,
                 temp_dir: str | None = None,
                 command: Sequence[str] = (), metadata: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if not 0.0 <= max_rejected_fraction <= 1.0:
            raise ShardingError(f"max_rejected_fraction must be in [0, 1], got {max_rejected_fraction}")
        if spill_run_bytes < 1:
            raise ShardingError(f"spill_run_bytes must be >= 1, got {spill_run_bytes}")
        if reread_min_bytes < 0:
            raise ShardingError(f"reread_min_bytes must be >= 0, got {reread_min_bytes}")
        ShardName(dataset_name, "train", 0, 1)  # validates the dataset name early
        unknown = set(feature_transforms or {}) - set(schema.features) - set(schema.sequence_features)
        if unknown:
            raise ShardingError(f"feature_transforms name features not in the schema: {sorted(unknown)}")
        self._output_dir = output_dir
        self._schema = schema
        self._dataset_name = dataset_name
        self._splits = splits or SplitConfig.single()
        self._sharding = sharding or ShardingConfig()
        self._compression = compression
        self._salt = salt
        self._feature_transforms = dict(feature_transforms or {})
        self._spill_run_bytes = spill_run_bytes
        self._reread_min_bytes = reread_min_bytes
        self._direct_io = direct_io
        run_id = uuid.uuid4().hex[:12]
        self._temp_dir = temp_dir or storage.join(output_dir, f".tmp-beam-tfrecord-{run_id}")
        self._publish_settings = PublishSettings(
            output_dir=output_dir, temp_dir=self._temp_dir, run_id=run_id, dataset_name=dataset_name,
            schema=schema, compression=compression, salt=salt, sharding=self._sharding,
            max_rejected_fraction=max_rejected_fraction, command=tuple(command), metadata=dict(metadata or {}))

    def expand(self, samples: beam.PCollection) -> beam.PCollection:
        encoded = samples | "EncodeToRuns" >> beam.ParDo(EncodeToRunsFn(
            self._schema, runs_dir=storage.join(self._temp_dir, "runs"), salt=self._salt,
            max_record_bytes=self._sharding.cap, run_bytes=self._spill_run_bytes,
            feature_transforms=self._feature_transforms, reread_min_bytes=self._reread_min_bytes,
            direct_io=self._direct_io,
        )).with_outputs(DEAD_LETTERS, main="runs")
        # SpilledRun: a run's path and entry count; the planner reads hashes and sizes from its index
        # file. The runs reach the one planner as a side input: a ToList (a global combine with its
        # default-value branch) would add a stage and ~0.1 s of pipeline set-up per job.
        plan_shards = beam.FlatMap(
            _plan_shards, beam.pvalue.AsList(encoded.runs), self._splits, self._sharding,
            dataset_name=self._dataset_name, compression=self._compression,
            shards_dir=storage.join(self._temp_dir, "shards"),
        ).with_outputs(PLAN, main="tasks")
        planned = samples.pipeline | "StartPlan" >> beam.Create([None]) | "PlanShards" >> plan_shards
        plan = planned[PLAN]
        # ShardTask: (shard spec, run slices); spread over workers.
        tasks = planned.tasks | "SpreadTasks" >> beam.Reshuffle()
        shard_infos = tasks | "WriteShards" >> beam.ParDo(
            WriteShardFn(self._schema, self._compression, self._feature_transforms, direct_io=self._direct_io))
        return (
            plan
            | "Publish" >> beam.Map(_publish, beam.pvalue.AsList(shard_infos),
                                    beam.pvalue.AsList(encoded[DEAD_LETTERS]), self._publish_settings)
        )
