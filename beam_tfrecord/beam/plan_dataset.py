"""PlanDataset: the plan from merged summaries, on any runner, without one worker seeing every record.

Empty input gives no plan (publication plans it then). See docs/performance.md, "How a dataset is written".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from beam_tfrecord.core.cut_planner import CutRequests, ShardRound, SplitRound, plan_shards, start_plan
from beam_tfrecord.core.sharding import DatasetPlan, ShardingConfig, SplitConfig
from beam_tfrecord.core.summary import BucketGrid, Cut, CutTarget, HashHistogram, refine_bucket
from beam_tfrecord.errors import PipelineInvariantError

# An index source -> (uint64 hashes, int64 framed sizes) of its records (a module-level function: it is pickled).
IndexOf = Callable[[Any], tuple[np.ndarray, np.ndarray]]


class SummarizeFn(beam.CombineFn):
    """Merges index sources into one ``HashHistogram`` (accumulators are histograms, or None when empty)."""

    def __init__(self, grid: BucketGrid, *, index_of: IndexOf) -> None:
        self._grid = grid
        self._index_of = index_of

    def create_accumulator(self) -> HashHistogram | None:
        return None

    def add_input(self, accumulator: HashHistogram | None, source: Any) -> HashHistogram | None:
        hashes, sizes = self._index_of(source)
        if not len(hashes):
            return accumulator
        return (accumulator or HashHistogram.empty(self._grid)).add_records(hashes, sizes)

    def merge_accumulators(self, accumulators: Iterable[HashHistogram | None]) -> HashHistogram | None:
        merged = None
        for accumulator in accumulators:
            if accumulator is not None:
                merged = accumulator if merged is None else merged.add(accumulator)
        return merged

    def extract_output(self, accumulator: HashHistogram | None) -> HashHistogram | None:
        return accumulator


def records_to_refine(source: Any, requests: CutRequests | None, index_of: IndexOf
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

    def __init__(self, planning_round: beam.PCollection, index_of: IndexOf) -> None:
        super().__init__()
        self._round = planning_round
        self._index_of = index_of

    def expand(self, sources: beam.PCollection) -> beam.PCollection:
        requests = self._round | "Requests" >> beam.Map(lambda r: r.requests)
        return (
            sources
            | "RecordsToRefine" >> beam.FlatMap(records_to_refine,
                                                beam.pvalue.AsSingleton(requests, default_value=None), self._index_of)
            # (bucket, (hashes, sizes)): only buckets where a boundary falls
            | "ByBucket" >> beam.GroupByKey()
            | "Cut" >> beam.FlatMap(refine, beam.pvalue.AsSingleton(requests))
        )


def bucket_records(source: Any, grid: BucketGrid, index_of: IndexOf
                   ) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """(bucket, (hashes, sizes)) of every record of a source, one element per bucket it touches."""
    hashes, sizes = index_of(source)
    buckets = grid.bucket_of(hashes)
    order = np.argsort(buckets, kind="stable")
    hashes, sizes, buckets = hashes[order], sizes[order], buckets[order]
    starts = np.flatnonzero(np.diff(buckets, prepend=-1))
    for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(buckets)]):
        yield int(buckets[a]), (hashes[a:b], sizes[a:b])


def _targets_by_bucket(planning_round: SplitRound | ShardRound) -> Iterator[tuple[int, CutTarget]]:
    return ((target.bucket, target) for target in planning_round.targets)


def _cut_joined(group: tuple[int, Iterable[CutTarget | tuple[np.ndarray, np.ndarray]]], grid: BucketGrid) -> list[Cut]:
    """The cuts of one bucket from its joined group: the round's targets there and its records."""
    bucket, values = group
    targets: list[CutTarget] = []
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    for value in values:
        if isinstance(value, CutTarget):
            targets.append(value)
        else:
            parts.append(value)
    if not targets:
        return []
    hashes = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.uint64)
    sizes = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    return refine_bucket(grid, bucket, hashes, sizes, targets)


def _keyed_by_none(value: object) -> tuple[None, object]:
    return None, value


def _round_and_cuts(group: tuple[None, Iterable[object]]) -> tuple[SplitRound | ShardRound, list[Cut]]:
    _, values = group
    rounds: list[SplitRound | ShardRound] = []
    cuts: list[Cut] = []
    for value in values:
        if isinstance(value, Cut):
            cuts.append(value)
        elif isinstance(value, (SplitRound, ShardRound)):
            rounds.append(value)
        else:
            raise PipelineInvariantError("planning",
                                         f"unexpected {type(value).__name__} among a planning round's values")
    if len(rounds) != 1:
        raise PipelineInvariantError("planning",
                                     f"expected one planning round to join its cuts with, got {len(rounds)}")
    return rounds[0], cuts


def _cuts_from(sources: Sequence[Any], requests: CutRequests, index_of: IndexOf) -> list[Cut]:
    """A round's cuts, from sources read one after another (each source's index read once)."""
    if not requests.targets:
        return []
    parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {int(b): [] for b in requests.buckets.tolist()}
    for source in sources:
        for bucket, part in records_to_refine(source, requests, index_of):
            parts[bucket].append(part)
    empty = (np.zeros(0, np.uint64), np.zeros(0, np.int64))
    return [cut for bucket, found in parts.items() for cut in refine((bucket, found or [empty]), requests)]


def plan_in_one_step(sources: Sequence[Any], splits: SplitConfig, sharding: ShardingConfig, *,
                     index_of: IndexOf) -> DatasetPlan:
    """The same plan as ``PlanDataset``, made by one worker that streams through the sources' indexes.

    For the spill path, whose runs are all on one machine anyway: a pipeline stage per planning
    round costs more there than reading the small index files. Memory: the histogram plus the
    records of the buckets where a boundary falls (16 bytes each; ~56 MB at 1e8 records), never
    every record at once.
    """
    grid = splits.bucket_grid()
    histogram = HashHistogram.empty(grid)
    for source in sources:
        histogram.add(HashHistogram.of(grid, *index_of(source)))
    split_round = start_plan(histogram, splits, sharding)
    shard_round = plan_shards(split_round, _cuts_from(sources, split_round.requests, index_of))
    return shard_round.finish(_cuts_from(sources, shard_round.requests, index_of))


def _joined_step(group: tuple[None, Iterable[object]], step):
    return step(*_round_and_cuts(group))


def _plan_shards(split_round: SplitRound, cuts: list[Cut]) -> ShardRound:
    return plan_shards(split_round, cuts)


def _finish(shard_round: ShardRound, cuts: list[Cut]) -> DatasetPlan:
    return shard_round.finish(cuts)


class PlanDataset(beam.PTransform):
    """Index sources -> one ``DatasetPlan`` (none for empty input), from merged histograms and refined buckets.

    Args:
        splits: how records are divided into splits.
        sharding: shard sizing.
        index_of: an index source -> its records' (hashes, sizes) (a module-level function).
        side_inputs: True: each round's requests reach the workers as a side input, and only the
            records of requested buckets are shuffled. False (for runners whose side inputs are
            recomputed per task, like Dask's): every record's hash and size is shuffled by bucket and
            joined with the round's targets by a GroupByKey; rounds meet their cuts the same way.
    """

    def __init__(self, splits: SplitConfig, sharding: ShardingConfig, *, index_of: IndexOf,
                 side_inputs: bool = True) -> None:
        super().__init__()
        self._index_of = index_of
        self._splits = splits
        self._sharding = sharding
        self._side_inputs = side_inputs

    def expand(self, sources: beam.PCollection) -> beam.PCollection:
        grid = self._splits.bucket_grid()
        summarize = SummarizeFn(grid, index_of=self._index_of)
        histogram = sources | "Summarize" >> beam.CombineGlobally(summarize).without_defaults()
        split_round = (histogram
                       | "DropEmpty" >> beam.Filter(lambda h: h is not None)
                       | "StartPlan" >> beam.Map(start_plan, self._splits, self._sharding))
        records = None if self._side_inputs else sources | "ByBucket" >> beam.FlatMap(bucket_records, grid,
                                                                                   self._index_of)
        if self._splits.is_ratio:  # ratio splits are unions of buckets: nothing to refine
            shard_round = split_round | "PlanShards" >> beam.Map(_plan_shards, [])
        else:
            split_cuts = self._refine("RefineSplits", split_round, sources, records, grid)
            shard_round = self._then("PlanShards", split_round, split_cuts, _plan_shards)
        shard_cuts = self._refine("RefineShards", shard_round, sources, records, grid)
        return self._then("FinishPlan", shard_round, shard_cuts, _finish)

    def _refine(self, label: str, planning_round: beam.PCollection, sources: beam.PCollection,
                records: beam.PCollection | None, grid: BucketGrid) -> beam.PCollection:
        if records is None:
            return sources | label >> _RefineRound(planning_round, self._index_of)
        targets = planning_round | f"{label}Targets" >> beam.FlatMap(_targets_by_bucket)
        return (
            (records, targets)
            | f"{label}Gather" >> beam.Flatten()
            # (bucket, [(hashes, sizes) | CutTarget])
            | f"{label}ByBucket" >> beam.GroupByKey()
            | f"{label}Cut" >> beam.FlatMap(_cut_joined, grid)
        )

    def _then(self, label: str, planning_round: beam.PCollection, cuts: beam.PCollection, step) -> beam.PCollection:
        if self._side_inputs:
            return planning_round | label >> beam.Map(step, beam.pvalue.AsList(cuts))
        return (
            (planning_round, cuts)
            | f"{label}Gather" >> beam.Flatten()
            | f"{label}Key" >> beam.Map(_keyed_by_none)
            | f"{label}Join" >> beam.GroupByKey()  # (None, [round, Cut...])
            | label >> beam.Map(_joined_step, step)
        )
