"""PlanDataset: the plan from merged summaries, on any runner, without one worker seeing every record.

Element shapes, in order: index sources (``SpilledRun`` of the spill path, whose hashes and sizes
are in its index file, or ``EncodedBatch`` of the shuffle path) -> one ``HashHistogram``,
merged by a ``CombineFn`` across workers -> ``SplitRound`` -> ``(bucket, (hashes, sizes))`` of the
few buckets where a boundary falls, grouped by bucket -> ``Cut``s -> ``ShardRound`` -> the same for
shard boundaries -> one ``DatasetPlan``. Empty input gives no plan (publication plans it then).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import apache_beam as beam
import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.beam.entries import EncodedBatch
from beam_tfrecord.core.plan import (CutRequests, DatasetPlan, ShardingConfig, ShardRound, SplitConfig,
                                     SplitRound, plan_shards, start_plan)
from beam_tfrecord.core.runs import RunIndex, SpilledRun
from beam_tfrecord.core.summary import BucketGrid, Cut, HashHistogram, refine_bucket

IndexSource = SpilledRun | EncodedBatch


def index_of(source: IndexSource) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 hashes, int64 framed sizes) of a source's records."""
    if isinstance(source, EncodedBatch):
        return source.index()
    index = RunIndex.from_bytes(source.path, storage.read_bytes(source.index_path))
    return index.hashes, index.framed_sizes


class SummarizeFn(beam.CombineFn):
    """Merges index sources into one ``HashHistogram`` (accumulators are histograms, or None when empty)."""

    def __init__(self, grid: BucketGrid) -> None:
        self._grid = grid

    def create_accumulator(self) -> HashHistogram | None:
        return None

    def add_input(self, accumulator: HashHistogram | None, source: IndexSource) -> HashHistogram | None:
        return self.merge_accumulators([accumulator, HashHistogram.of(self._grid, *index_of(source))])

    def merge_accumulators(self, accumulators: Iterable[HashHistogram | None]) -> HashHistogram | None:
        merged = None
        for accumulator in accumulators:
            if accumulator is not None:
                merged = accumulator if merged is None else merged.add(accumulator)
        return merged

    def extract_output(self, accumulator: HashHistogram | None) -> HashHistogram | None:
        return accumulator


def records_to_refine(source: IndexSource, requests: CutRequests | None
                      ) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """(bucket, (hashes, sizes)) of the source's records in each requested bucket."""
    if requests is None or not requests.targets:
        return
    hashes, sizes = index_of(source)
    buckets = requests.grid.bucket_of(hashes)
    wanted = np.isin(buckets, requests.buckets)
    if not wanted.any():
        return
    hashes, sizes, buckets = hashes[wanted], sizes[wanted], buckets[wanted]
    order = np.argsort(buckets, kind="stable")
    hashes, sizes, buckets = hashes[order], sizes[order], buckets[order]
    starts = np.flatnonzero(np.diff(buckets, prepend=-1))
    for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(buckets)]):
        yield int(buckets[a]), (hashes[a:b], sizes[a:b])


def refine(group: tuple[int, Iterable[tuple[np.ndarray, np.ndarray]]], requests: CutRequests) -> list[Cut]:
    """The cuts in one bucket, from its records as every worker sent them."""
    bucket, parts = group
    parts = list(parts)
    hashes = np.concatenate([p[0] for p in parts])
    sizes = np.concatenate([p[1] for p in parts])
    return refine_bucket(requests.grid, bucket, hashes, sizes, requests.targets_of(bucket))


class _RefineRound(beam.PTransform):
    """Index sources -> the ``Cut``s a planning round asks for (gathered by bucket through a shuffle)."""

    def __init__(self, planning_round: beam.PCollection) -> None:
        super().__init__()
        self._round = planning_round

    def expand(self, sources: beam.PCollection) -> beam.PCollection:
        requests = self._round | "Requests" >> beam.Map(lambda r: r.requests)
        return (
            sources
            | "RecordsToRefine" >> beam.FlatMap(records_to_refine, beam.pvalue.AsSingleton(requests, default_value=None))
            # (bucket, (hashes, sizes)): only buckets where a boundary falls
            | "ByBucket" >> beam.GroupByKey()
            | "Cut" >> beam.FlatMap(refine, beam.pvalue.AsSingleton(requests))
        )


def _plan_shards(split_round: SplitRound, cuts: list[Cut]) -> ShardRound:
    return plan_shards(split_round, cuts)


def _finish(shard_round: ShardRound, cuts: list[Cut]) -> DatasetPlan:
    return shard_round.finish(cuts)


class PlanDataset(beam.PTransform):
    """Index sources -> one ``DatasetPlan`` (none for empty input). See the module docstring."""

    def __init__(self, splits: SplitConfig, sharding: ShardingConfig) -> None:
        super().__init__()
        self._splits = splits
        self._sharding = sharding

    def expand(self, sources: beam.PCollection) -> beam.PCollection:
        histogram = sources | "Summarize" >> beam.CombineGlobally(SummarizeFn(self._splits.bucket_grid())
                                                                   ).without_defaults()
        split_round = (histogram
                       | "DropEmpty" >> beam.Filter(lambda h: h is not None)
                       | "StartPlan" >> beam.Map(start_plan, self._splits, self._sharding))
        if self._splits.is_ratio:  # ratio splits are unions of buckets: nothing to refine
            shard_round = split_round | "PlanShards" >> beam.Map(_plan_shards, [])
        else:
            split_cuts = sources | "RefineSplits" >> _RefineRound(split_round)
            shard_round = split_round | "PlanShards" >> beam.Map(_plan_shards, beam.pvalue.AsList(split_cuts))
        shard_cuts = sources | "RefineShards" >> _RefineRound(shard_round)
        return shard_round | "FinishPlan" >> beam.Map(_finish, beam.pvalue.AsList(shard_cuts))
