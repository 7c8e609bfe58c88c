"""Shard planner: byte balance, hard cap, splits and their stability, all without Beam."""

import itertools

import numpy as np
import pytest

from beam_tfrecord.core.cut_planner import plan_dataset
from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.core.sharding import HASH_SPACE, DatasetPlan, ShardingConfig, SplitConfig, SplitSpec, balance_spread
from beam_tfrecord.errors import ShardingError

SALT = "test"


def _records(n: int, *, seed: int = 0, low: int = 1_000, high: int = 5_000):
    rng = np.random.default_rng(seed)
    keys = [f"sample/{i:06d}" for i in range(n)]
    hashes = np.array([key_hash(k, SALT) for k in keys], dtype=np.uint64)
    return keys, hashes, rng.integers(low, high, size=n).astype(np.int64)


def _membership(plan, keys, hashes):
    """key -> (split, shard index), from the hash ranges alone."""
    out = {}
    for key, h in zip(keys, hashes.tolist()):
        for shard in plan.shards:
            if shard.hash_lo <= h < shard.hash_hi:
                out[key] = (shard.split, shard.index)
    return out


def test_every_record_lands_in_exactly_one_shard_and_counts_add_up():
    keys, hashes, sizes = _records(5_000)
    plan = plan_dataset(hashes, sizes, SplitConfig.single(), ShardingConfig(target_shard_bytes=500_000))
    assert sum(s.num_records for s in plan.shards) == 5_000
    assert sum(s.num_record_bytes for s in plan.shards) == int(sizes.sum())
    assert len(_membership(plan, keys, hashes)) == 5_000
    ranges = [(s.hash_lo, s.hash_hi) for s in plan.shards]
    assert ranges[0][0] == 0 and ranges[-1][1] == HASH_SPACE
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))  # contiguous, no gaps or overlaps


@pytest.mark.parametrize("n, target", [(20_000, 1_000_000), (3_000, 250_000), (50_000, 10_000_000)])
def test_shards_are_balanced_by_bytes_within_5_percent(n, target):
    _, hashes, sizes = _records(n, seed=n)
    plan = plan_dataset(hashes, sizes, SplitConfig.single(), ShardingConfig(target_shard_bytes=target))
    shard_bytes = [s.num_record_bytes for s in plan.shards]
    assert len(shard_bytes) == int(np.ceil(sizes.sum() / target))
    assert max(shard_bytes) <= target + int(sizes.max())  # the target is an aim; the cap is the hard bound
    assert balance_spread(shard_bytes) < 0.05
    assert (max(shard_bytes) - min(shard_bytes)) <= 2 * int(sizes.max())  # within one record of the mean


def test_balance_holds_for_skewed_sizes():
    # Half tiny rows, half big blobs, arriving sorted by size: the hash order still mixes them.
    sizes = np.concatenate([np.full(10_000, 200), np.full(1_000, 50_000)]).astype(np.int64)
    hashes = np.array([key_hash(f"k{i}", SALT) for i in range(len(sizes))], dtype=np.uint64)
    plan = plan_dataset(hashes, sizes, SplitConfig.single(), ShardingConfig(target_shard_bytes=2_000_000))
    assert balance_spread([s.num_record_bytes for s in plan.shards]) < 0.05


def test_hard_cap_is_never_exceeded_and_adds_shards_when_needed():
    _, hashes, sizes = _records(400, low=90_000, high=100_000)
    config = ShardingConfig(target_shard_bytes=1_000_000, max_shard_bytes=1_000_000)
    plan = plan_dataset(hashes, sizes, SplitConfig.single(), config)
    assert max(s.num_record_bytes for s in plan.shards) <= 1_000_000


def test_fixed_shard_count_that_breaks_the_cap_is_an_error():
    _, hashes, sizes = _records(100, low=10_000, high=10_001)
    config = ShardingConfig(target_shard_bytes=100_000, max_shard_bytes=200_000, num_shards=2)
    with pytest.raises(ShardingError, match="2 shards would hold up to"):
        plan_dataset(hashes, sizes, SplitConfig.single(), config)


def test_fixed_shard_count():
    _, hashes, sizes = _records(1_000)
    plan = plan_dataset(hashes, sizes, SplitConfig.single(), ShardingConfig(num_shards=7, target_shard_bytes=10**9))
    assert [s.index for s in plan.shards] == list(range(7))
    assert {s.count for s in plan.shards} == {7}


def test_record_over_cap_is_rejected_by_the_planner():
    config = ShardingConfig(target_shard_bytes=100, max_shard_bytes=100)
    with pytest.raises(ShardingError, match="a record of 101 bytes exceeds max_shard_bytes 100"):
        plan_dataset(np.array([1], np.uint64), np.array([101]), SplitConfig.single(), config)


def test_empty_input_plans_no_shard_that_holds_records_and_one_empty_shard_per_split():
    plan = plan_dataset(np.zeros(0, np.uint64), np.zeros(0, np.int64), SplitConfig.parse("train=0.5,test=0.5"),
                        ShardingConfig())
    assert [s.name for s in plan.splits] == ["train", "test"] and plan.shards == ()
    assert [(s.split, s.index, s.count, s.num_records) for s in plan.empty_shards] == [("train", 0, 1, 0),
                                                                                       ("test", 0, 1, 0)]


@pytest.mark.parametrize("sizes, filled", [
    pytest.param([5_000], {1}, id="one-record"),
    pytest.param([100, 120, 90], {3}, id="fewer-records-than-shards"),
    pytest.param([100_000] + [100] * 40, {1, 2, 3}, id="one-record-larger-than-a-share"),  # as its hash falls
])
def test_a_fixed_count_always_gives_that_many_shards_the_unfilled_ones_empty(sizes, filled):
    # As WriteToTFRecord(num_shards=4): four files, whatever the records.
    hashes = np.array([key_hash(f"k{i}", "s") for i in range(len(sizes))], np.uint64)
    plan = plan_dataset(hashes, np.array(sizes, np.int64), SplitConfig.single(),
                        ShardingConfig(target_shard_bytes=1_000, max_shard_bytes=10**9, num_shards=4))
    assert len(plan.shards) in filled
    assert [s.index for s in (*plan.shards, *plan.empty_shards)] == [0, 1, 2, 3]
    assert {s.count for s in (*plan.shards, *plan.empty_shards)} == {4}
    assert sum(s.num_records for s in plan.shards) == len(sizes)
    assert all(s.num_records == 0 and s.hash_lo == s.hash_hi for s in plan.empty_shards)
    assert plan.shard_numbers(hashes).tolist() == [plan.shards.index(next(
        s for s in plan.shards if s.hash_lo <= h < s.hash_hi)) for h in hashes.tolist()]


def split_of(key_hash_value: int, plan: DatasetPlan) -> str:
    """The split whose hash range holds a hash."""
    return next(split.name for split in plan.splits if split.hash_lo <= key_hash_value < split.hash_hi)


def test_ratio_splits_match_fractions_and_are_stable_when_samples_are_added():
    keys, hashes, sizes = _records(20_000)
    splits = SplitConfig.parse("train=0.8,validation=0.1,test=0.1")
    config = ShardingConfig(target_shard_bytes=5_000_000)
    before = plan_dataset(hashes, sizes, splits, config)
    counts = {s.name: s.num_records for s in before.splits}
    assert abs(counts["train"] / 20_000 - 0.8) < 0.02 and abs(counts["test"] / 20_000 - 0.1) < 0.02

    more_keys, more_hashes, more_sizes = _records(25_000)  # the same 20k keys plus 5k new ones
    after = plan_dataset(more_hashes, more_sizes, splits, config)
    for key, h in zip(keys, hashes.tolist()):
        assert split_of(h, before) == split_of(h, after), key


def test_count_splits_are_exact():
    _, hashes, sizes = _records(1_000)
    plan = plan_dataset(hashes, sizes, SplitConfig.parse("train=*,validation=100,test=50"),
                        ShardingConfig(target_shard_bytes=200_000))
    assert {s.name: s.num_records for s in plan.splits} == {"train": 850, "validation": 100, "test": 50}


def test_count_splits_needing_more_records_than_exist():
    _, hashes, sizes = _records(10)
    with pytest.raises(ShardingError, match="need 20 records in total, the input has 10"):
        plan_dataset(hashes, sizes, SplitConfig.parse("train=10,test=10"), ShardingConfig())


def test_plan_is_independent_of_input_order():
    _, hashes, sizes = _records(3_000)
    order = np.random.default_rng(1).permutation(3_000)
    config = ShardingConfig(target_shard_bytes=300_000)
    assert plan_dataset(hashes, sizes, SplitConfig.single(), config) == plan_dataset(
        hashes[order], sizes[order], SplitConfig.single(), config)


@pytest.mark.parametrize("text, message", [
    ("train=0.8,test=0.3", "sum to 1"),
    ("train=0.5,train=0.5", "must be unique"),
    ("train=*,test=*", "at most one split"),
    ("train=0.5,test=10", "do not mix"),
    ("train", "expected NAME=FRACTION"),
    ("train=abc", "not a fraction, count or *"),
    ("tr-ain=1.0", "letters, digits and underscores"),
])
def test_bad_split_configs(text, message):
    with pytest.raises(ShardingError, match=message):
        SplitConfig.parse(text)


def test_sharding_config_checks():
    assert ShardingConfig(target_shard_bytes=10).cap == 20
    with pytest.raises(ShardingError, match="must be >= target_shard_bytes"):
        ShardingConfig(target_shard_bytes=10, max_shard_bytes=5)


def test_split_spec_text_round_trip():
    config = SplitConfig((SplitSpec("train", count=None), SplitSpec("test", count=5)))
    assert SplitConfig.parse(config.to_text()) == config


def test_a_hash_outside_the_plan_is_a_pipeline_invariant_error():
    from beam_tfrecord.errors import PipelineInvariantError

    empty = plan_dataset(np.zeros(0, np.uint64), np.zeros(0, np.int64), SplitConfig.parse("train=*"),
                         ShardingConfig(target_shard_bytes=100))
    with pytest.raises(PipelineInvariantError, match=r"pipeline invariant broken at plan: hash 7 is below every "
                                                     r"planned shard \(a bug in beam-tfrecord"):
        empty.shard_numbers(np.array([7], np.uint64))
