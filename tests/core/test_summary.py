"""Mergeable summaries and the planner's rounds, without Beam: what workers send, merged anyhow, plans
exactly what all records in one place would."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from beam_tfrecord.core.cut_planner import plan_dataset, plan_shards, start_plan
from beam_tfrecord.core.sharding import HASH_SPACE, ShardingConfig, SplitConfig
from beam_tfrecord.core.summary import BUCKET_BITS, BucketGrid, CutTarget, HashHistogram, refine_bucket
from beam_tfrecord.errors import ShardingError

GRID = BucketGrid.with_bounds()


def _records(n: int, seed: int = 0, low: int = 1_000, high: int = 5_000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**64, size=n, dtype=np.uint64), rng.integers(low, high, size=n).astype(np.int64)


@pytest.mark.parametrize("workers", [1, 7, 50])
def test_histograms_of_any_partition_merge_to_the_histogram_of_all(workers):
    hashes, sizes = _records(20_000)
    whole = HashHistogram.of(GRID, hashes, sizes)
    owner = np.random.default_rng(workers).integers(0, workers, size=len(hashes))
    parts = [HashHistogram.of(GRID, hashes[owner == w], sizes[owner == w]) for w in range(workers)]
    merged = HashHistogram.empty(GRID)
    for part in reversed(parts):
        merged.add(pickle.loads(pickle.dumps(part)))
    assert merged == whole
    buckets = (hashes >> np.uint64(64 - BUCKET_BITS)).astype(np.int64)  # the uniform grid: the top 16 bits
    assert np.array_equal(whole.counts, np.bincount(buckets, minlength=GRID.num_buckets))
    assert whole.num_bytes == int(sizes.sum()) and whole.largest == int(sizes.max())


def test_adding_records_in_place_equals_building_the_histogram():
    hashes, sizes = _records(3_000, seed=4)
    assert HashHistogram.empty(GRID).add_records(hashes[:10], sizes[:10]).add_records(
        hashes[10:], sizes[10:]) == HashHistogram.of(GRID, hashes, sizes)


def test_a_small_histogram_travels_sparse():
    hashes, sizes = _records(10)
    assert len(pickle.dumps(HashHistogram.of(GRID, hashes, sizes))) < 64 << 10  # dense arrays: 1 MiB


@pytest.mark.parametrize("make, message", [
    (lambda: HashHistogram.empty(GRID).add(HashHistogram.empty(SplitConfig.parse("a=0.3,b=0.7").bucket_grid())),
     "different bucket grids"),
    (lambda: HashHistogram.of(GRID, np.array([1], np.uint64), np.array([-5])), "framed sizes must be >= 0, got -5"),
    (lambda: HashHistogram.of(GRID, np.array([1, 2], np.uint64), np.array([5])), "2 hashes and 1 sizes"),
], ids=["grids", "negative-size", "lengths"])
def test_bad_histograms_are_typed_errors(make, message):
    with pytest.raises(ShardingError, match=message):
        make()


def test_ratio_split_boundaries_are_bucket_starts():
    splits = SplitConfig.parse("train=0.8,validation=0.1,test=0.1")
    grid = splits.bucket_grid()
    for _, lo, _ in splits.ratio_bounds():
        assert grid.start(grid.index_of_start(lo)) == lo
    assert grid.num_buckets == 2**BUCKET_BITS + 2  # two boundaries fall inside uniform buckets
    assert grid.start(0) == 0 and grid.end(grid.num_buckets - 1) == HASH_SPACE
    hashes, _ = _records(1_000)
    brute = [max(j for j in range(grid.num_buckets) if grid.start(j) <= h) for h in hashes[:50].tolist()]
    assert grid.bucket_of(hashes[:50]).tolist() == brute


BUCKET = 7
LO = GRID.start(BUCKET)
# Records of bucket 7 at offsets 10, 20, 20, 30 (two share a hash) of sizes 100, 50, 70, 40.
HASHES = np.array([LO + 30, LO + 20, LO + 10, LO + 20], np.uint64)
SIZES = np.array([40, 70, 100, 50], np.int64)  # in (hash, size) order: 100, 50, 70, 40


@pytest.mark.parametrize("target, expected", [
    (CutTarget(0, BUCKET, rank=1), (LO + 20, 1, 100)),
    (CutTarget(0, BUCKET, rank=2), (LO + 20, 1, 100)),  # inside equal hashes: moves before them
    (CutTarget(0, BUCKET, rank=3), (LO + 30, 3, 220)),
    (CutTarget(0, BUCKET, rank=0), (LO, 0, 0)),  # at the bucket start: its start hash
    (CutTarget(0, BUCKET, rank=4), (GRID.end(BUCKET), 4, 260)),  # past the last record: the bucket's end
    (CutTarget(0, BUCKET, position2=100), (LO, 0, 0)),  # 2*0+100 >= 100: before the first record
    (CutTarget(0, BUCKET, position2=101), (LO + 20, 1, 100)),  # next midpoint 2*100+50 = 250
    (CutTarget(0, BUCKET, position2=441), (LO + 30, 3, 220)),  # midpoints2 100, 250, 370, 480
    (CutTarget(0, BUCKET, position2=481), (GRID.end(BUCKET), 4, 260)),
], ids=["rank-1", "rank-inside-equal-hashes", "rank-3", "rank-0", "rank-past-end", "position-first",
        "position-second", "position-last", "position-past-end"])
def test_refine_bucket_named_cases(target, expected):
    for order in (np.arange(4), np.array([3, 1, 0, 2])):  # arrival order does not matter
        (cut,) = refine_bucket(GRID, BUCKET, HASHES[order], SIZES[order], [target])
        assert (cut.hash, cut.records_before, cut.bytes_before) == expected


def test_refining_with_records_or_targets_of_another_bucket_is_an_error():
    with pytest.raises(ShardingError, match="records outside bucket 7"):
        refine_bucket(GRID, BUCKET, np.array([GRID.start(9)], np.uint64), np.array([5]), [])
    with pytest.raises(ShardingError, match="cut target 3 is for bucket 8, not 7"):
        refine_bucket(GRID, BUCKET, HASHES, SIZES, [CutTarget(3, 8, rank=0)])


@pytest.mark.parametrize("splits", ["train=0.8,validation=0.1,test=0.1", "train=*,validation=1000,test=500"],
                         ids=["ratio", "count"])
def test_workers_summaries_plan_exactly_what_all_records_plan(splits):
    hashes, sizes = _records(20_000, seed=2)
    config, sharding = SplitConfig.parse(splits), ShardingConfig(target_shard_bytes=2_000_000)
    owner = np.random.default_rng(5).integers(0, 13, size=len(hashes))
    workers = [(hashes[owner == w], sizes[owner == w]) for w in range(13)]
    histogram = HashHistogram.empty(config.bucket_grid())
    for h, s in workers:
        histogram.add(HashHistogram.of(config.bucket_grid(), h, s))

    def answer(planning_round):  # each worker sends its records of each requested bucket
        requests, cuts = planning_round.requests, []
        for bucket in requests.buckets.tolist():
            parts = [(h[requests.grid.bucket_of(h) == bucket], s[requests.grid.bucket_of(h) == bucket])
                     for h, s in workers]
            cuts += refine_bucket(requests.grid, bucket, np.concatenate([p[0] for p in parts]),
                                  np.concatenate([p[1] for p in parts]), requests.targets_of(bucket))
        return cuts

    split_round = start_plan(histogram, config, sharding)
    shard_round = plan_shards(split_round, answer(split_round))
    plan = shard_round.finish(answer(shard_round))
    assert plan == plan_dataset(hashes, sizes, config, sharding)
    assert len(shard_round.targets) == sum(max(c - 1, 0) for c in shard_round.shard_counts)
    assert len(pickle.dumps(shard_round.requests)) < 1 << 20


def test_every_shard_is_within_one_record_of_its_share_and_shards_tile_each_split():
    hashes, sizes = _records(50_000, seed=9, low=200, high=20_000)
    plan = plan_dataset(hashes, sizes, SplitConfig.parse("train=0.7,test=0.3"),
                        ShardingConfig(target_shard_bytes=10**7))
    numbers = plan.shard_numbers(hashes)
    for split in plan.splits:
        share = split.num_record_bytes / len(split.shards)
        assert all(abs(s.num_record_bytes - share) <= int(sizes.max()) for s in split.shards)
        assert [s.hash_lo for s in split.shards[1:]] == [s.hash_hi for s in split.shards[:-1]]
        assert (split.shards[0].hash_lo, split.shards[-1].hash_hi) == (split.hash_lo, split.hash_hi)
    for number, shard in enumerate(plan.shards):
        mine = hashes[numbers == number]
        assert len(mine) == shard.num_records and int(sizes[numbers == number].sum()) == shard.num_record_bytes
        assert mine.min() >= shard.hash_lo and (shard.hash_hi == HASH_SPACE or mine.max() < shard.hash_hi)


def test_records_near_the_cap_never_make_a_shard_over_it():
    hashes, sizes = _records(400, seed=3, low=90_000, high=100_000)
    plan = plan_dataset(hashes, sizes, SplitConfig.single(),
                        ShardingConfig(target_shard_bytes=1_000_000, max_shard_bytes=1_000_000))
    assert max(s.num_record_bytes for s in plan.shards) <= 1_000_000


def test_the_plan_grows_with_shards_not_records():
    small = plan_dataset(*_records(10_000), SplitConfig.single(), ShardingConfig(num_shards=5))
    large = plan_dataset(*_records(200_000), SplitConfig.single(), ShardingConfig(num_shards=5))
    assert abs(len(pickle.dumps(large)) - len(pickle.dumps(small))) < 200
