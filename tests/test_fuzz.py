"""Seeded fuzzing (tests/fuzzing.py): mutated shards and manifests are caught by verify, make the NumPy
and PyTorch readers raise CorruptShardError naming the shard, make tf.data raise without yielding
altered data, and never hang or raise untyped errors. benchmarks/fuzz_check.py runs thousands."""

from __future__ import annotations

import fuzzing
import pytest


@pytest.fixture(scope="module")
def fuzz_dataset(tmp_path_factory) -> str:
    return fuzzing.write_fuzz_dataset(str(tmp_path_factory.mktemp("fuzz") / "ds"))


def test_mutated_shards_and_manifests_are_always_caught(fuzz_dataset, tmp_path):
    # 50 cases (each copies the dataset and reads it four ways) reach all 18 mutation kinds with this seed
    # (as 100 cases of seed 11 did; 37 shard and 13 rejected manifest mutations); benchmarks/fuzz_check.py
    # runs thousands.
    tally = fuzzing.run_cases(fuzz_dataset, str(tmp_path), cases=50, seed=25)
    assert tally.failures == []
    assert tally.caught_by_verify == tally.numpy_typed == tally.torch_typed == tally.tf_raised == \
        tally.shards_changed > 30
    assert tally.manifest_rejected + tally.manifest_caught_by_verify + tally.undetectable == \
        tally.changed - tally.shards_changed
    assert tally.manifest_rejected > 10 and len(tally.kinds) == 18


def test_the_light_readers_framing_and_decoding_raise_only_typed_errors(fuzz_dataset):
    cases, failures = fuzzing.fuzz_dataset_bytes(fuzz_dataset, cases=1_000, seed=5)
    assert cases == 1_000 and failures == []
