"""Scale check: the real plan step, driven with inputs shaped like what W workers send for N records.

    python benchmarks/scale_check.py --records 1000000000 --workers 10000
    python benchmarks/scale_check.py --records 1000000 --workers 100 --check   # also against all records in one place

What runs is the pipeline's own code, not a copy: ``SummarizeFn.merge_accumulators`` merges the
workers' histograms (each pickled and unpickled, as the runner ships them), ``start_plan``, the
refinement of every bucket where a boundary falls (``refine``, what the pipeline's "Cut" step
calls per bucket, here one bucket after another on this one core), ``plan_shards`` and
``ShardRound.finish``. Nothing else is timed: making the synthetic inputs is not.

Synthetic inputs: worker ``w`` encoded ``N / W`` records of ``--record_bytes`` framed bytes
(+-5%, uniform) with uniform 64-bit key hashes, so its histogram is a multinomial draw over the
65,536 buckets with byte sums to match; a requested bucket's records (those the workers would
send to refine it) are made from the merged histogram: that bucket's count, uniform hashes in
its range, sizes summing to its bytes. Inputs are made one worker / one bucket at a time, so the
process holds what the planner holds, never the records. ``--check`` (up to 2e7 records) makes
explicit records instead, builds the same summaries from them, and asserts that the plan equals
``plan_dataset`` over all records in one place (the centralised baseline, also timed).

The last line is: ``scale: records=N workers=W shards=S plan_seconds=T peak_rss_mb=M task_bytes=B``
(peak_rss_mb: this process's peak RSS; task_bytes: the pickled size of everything the plan step
sends towards shard writers on the shuffle path: the plan, broadcast to the keying step, and one
(shard number, ShardSpec) element per shard).
"""

from __future__ import annotations

import argparse
import math
import pickle
import resource
import sys
import time
from collections.abc import Iterator

import numpy as np

from beam_tfrecord.beam.plan_dataset import SummarizeFn, refine
from beam_tfrecord.beam.shuffle_path import batch_index
from beam_tfrecord.core.cut_planner import plan_dataset, plan_shards, start_plan
from beam_tfrecord.core.sharding import DatasetPlan, ShardingConfig, SplitConfig
from beam_tfrecord.core.summary import BucketGrid, HashHistogram

MiB = 2**20


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class SyntheticWorkers:
    """What W workers would produce for N records, drawn from distributions (no record is held)."""

    def __init__(self, grid: BucketGrid, records: int, workers: int, record_bytes: int, seed: int) -> None:
        self.grid = grid
        self.records = records
        self.workers = workers
        self.record_bytes = record_bytes
        self.seed = seed
        widths = np.diff(np.append(grid.starts.astype(np.float64), 2.0**64))
        self._probabilities = widths / widths.sum()

    def histograms(self) -> Iterator[bytes]:
        """Each worker's histogram, pickled as the runner would ship it."""
        spread = 0.05 * self.record_bytes / math.sqrt(3)  # std of a uniform +-5%
        for w in range(self.workers):
            rng = np.random.default_rng((self.seed, 0, w))
            n = self.records // self.workers + (1 if w < self.records % self.workers else 0)
            counts = rng.multinomial(n, self._probabilities).astype(np.int64)
            noise = np.rint(rng.standard_normal(len(counts)) * np.sqrt(counts) * spread).astype(np.int64)
            sizes = np.maximum(counts * self.record_bytes + noise, counts)
            histogram = HashHistogram(self.grid, counts, sizes, int(self.record_bytes * 1.05) if n else 0)
            yield pickle.dumps(histogram, protocol=pickle.HIGHEST_PROTOCOL)

    def bucket_parts(self, merged: HashHistogram, bucket: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The records the workers would send to refine ``bucket``: consistent with the merged histogram."""
        rng = np.random.default_rng((self.seed, 1, bucket))
        count, total = int(merged.counts[bucket]), int(merged.sizes[bucket])
        lo, hi = self.grid.start(bucket), self.grid.end(bucket)
        hashes = (lo + rng.random(count) * (hi - lo)).astype(np.uint64)
        hashes = np.clip(hashes, np.uint64(lo), np.uint64(hi - 1))
        sizes = np.full(count, total // max(count, 1), np.int64)
        sizes[: total - int(sizes.sum())] += 1
        return [(hashes, sizes)]


class ExplicitWorkers:
    """Real records, split over W workers (for --check): the same summaries, built from them."""

    def __init__(self, grid: BucketGrid, records: int, workers: int, record_bytes: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.grid = grid
        self.hashes = rng.integers(0, 2**64, size=records, dtype=np.uint64)
        low, high = int(record_bytes * 0.95), int(record_bytes * 1.05)
        self.sizes = rng.integers(low, high + 1, size=records).astype(np.int64)
        self.worker_of = rng.integers(0, workers, size=records)
        self.workers = workers
        self._buckets = grid.bucket_of(self.hashes)

    def histograms(self) -> Iterator[bytes]:
        for w in range(self.workers):
            mine = self.worker_of == w
            yield pickle.dumps(HashHistogram.of(self.grid, self.hashes[mine], self.sizes[mine]))

    def bucket_parts(self, merged: HashHistogram, bucket: int) -> list[tuple[np.ndarray, np.ndarray]]:
        mine = self._buckets == bucket
        return [(self.hashes[mine & (self.worker_of == w)], self.sizes[mine & (self.worker_of == w)])
                for w in range(self.workers) if (mine & (self.worker_of == w)).any()]


def _refine_round(planning_round, workers) -> tuple[list, float, float]:
    """The round's cuts, the seconds spent refining (timed) and making inputs (not timed)."""
    requests = pickle.loads(pickle.dumps(planning_round.requests))  # as the side input ships it
    cuts, refine_s, make_s = [], 0.0, 0.0
    for bucket in requests.buckets.tolist():
        start = time.perf_counter()
        parts = workers.bucket_parts(planning_round.histogram, bucket)
        made = time.perf_counter()
        cuts += refine((bucket, parts), requests)
        refine_s += time.perf_counter() - made
        make_s += made - start
    return cuts, refine_s, make_s


def plan_from_workers(workers, splits: SplitConfig, sharding: ShardingConfig) -> tuple[DatasetPlan, dict]:
    """Runs the plan step on the workers' summaries; returns the plan and where the time went."""
    timings = {"merge": 0.0, "rounds": 0.0, "refine": 0.0, "make_inputs": 0.0}
    combine = SummarizeFn(splits.bucket_grid(), index_of=batch_index)  # only merges here
    merged = None
    for shipped in workers.histograms():
        start = time.perf_counter()
        merged = combine.merge_accumulators([merged, pickle.loads(shipped)])
        timings["merge"] += time.perf_counter() - start
    start = time.perf_counter()
    split_round = start_plan(combine.extract_output(merged), splits, sharding)
    timings["rounds"] += time.perf_counter() - start
    cuts, refine_s, make_s = _refine_round(split_round, workers)
    timings["refine"] += refine_s
    timings["make_inputs"] += make_s
    start = time.perf_counter()
    shard_round = plan_shards(split_round, cuts)
    timings["rounds"] += time.perf_counter() - start
    cuts, refine_s, make_s = _refine_round(shard_round, workers)
    timings["refine"] += refine_s
    timings["make_inputs"] += make_s
    start = time.perf_counter()
    plan = shard_round.finish(cuts)
    timings["rounds"] += time.perf_counter() - start
    timings["refined_buckets"] = len(split_round.requests.buckets) + len(shard_round.requests.buckets)
    timings["refined_records"] = int(sum(merged.counts[b] for b in shard_round.requests.buckets.tolist()))
    return plan, timings


def task_bytes(plan: DatasetPlan) -> int:
    """Pickled size of the plan (broadcast to the keying step) plus one (number, spec) per shard."""
    return len(pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL)) + sum(
        len(pickle.dumps((number, spec), protocol=pickle.HIGHEST_PROTOCOL)) for number, spec in enumerate(plan.shards))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, required=True, help="records in the dataset")
    parser.add_argument("--workers", type=int, required=True, help="workers that encoded them")
    parser.add_argument("--record_bytes", type=int, default=3100, help="mean framed record size")
    parser.add_argument("--target_shard_bytes", type=int, default=128 * MiB)
    parser.add_argument("--splits", default="train=0.8,validation=0.1,test=0.1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="explicit records; compare with plan_dataset (<= 2e7)")
    args = parser.parse_args(argv)
    if args.records < 1 or args.workers < 1:
        parser.error("--records and --workers must be >= 1")
    if args.check and args.records > 20_000_000:
        parser.error("--check holds every record in memory: use it up to 2e7 records")

    splits = SplitConfig.parse(args.splits)
    sharding = ShardingConfig(target_shard_bytes=args.target_shard_bytes)
    grid = splits.bucket_grid()
    maker = ExplicitWorkers if args.check else SyntheticWorkers
    workers = maker(grid, args.records, args.workers, args.record_bytes, args.seed)
    plan, timings = plan_from_workers(workers, splits, sharding)
    plan_seconds = timings["merge"] + timings["rounds"] + timings["refine"]
    peak_rss_mb = _peak_rss_mb()
    shards = len(plan.shards)
    spread = max((max(s.num_record_bytes for s in split.shards) - min(s.num_record_bytes for s in split.shards))
                 for split in plan.splits if split.shards)
    print(f"data: {plan.splits and sum(s.num_record_bytes for s in plan.shards) / 2**30:.1f} GiB framed, "
          f"{shards} shards, largest minus smallest shard of a split: {spread} bytes")
    print(f"time: merge {timings['merge']:.2f} s ({args.workers} histograms), "
          f"planning rounds {timings['rounds']:.2f} s, "
          f"refinement {timings['refine']:.2f} s ({timings['refined_buckets']} buckets, "
          f"{timings['refined_records']:,} records' hashes and sizes; distributed in the pipeline, sequential here); "
          f"making synthetic inputs {timings['make_inputs']:.2f} s (not counted)")
    if args.check:
        start = time.perf_counter()
        baseline = plan_dataset(workers.hashes, workers.sizes, splits, sharding)
        baseline_s = time.perf_counter() - start
        if baseline != plan:
            sys.exit("check FAILED: the plan from the workers' summaries differs from plan_dataset over all records")
        print(f"check: equal to plan_dataset over all {args.records:,} records in one place "
              f"({baseline_s:.2f} s there; summary plan / all-records plan time = {plan_seconds / baseline_s:.2f})")
    print(f"scale: records={args.records} workers={args.workers} shards={shards} plan_seconds={plan_seconds:.2f} "
          f"peak_rss_mb={peak_rss_mb:.0f} task_bytes={task_bytes(plan)}")


if __name__ == "__main__":
    main()
