"""The Beam-free parts of exact duplicates (issue 48): content hashes less excluded features, digest files read
by section, groups found in any order, counts by split, the summary line."""

from __future__ import annotations

import numpy as np
import pytest

from beam_tfrecord.core.hashing import key_digests
from beam_tfrecord.core.sample_encoder import SampleEncoder
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.errors import WriterOptionError
from beam_tfrecord.quality.content import ContentHasher, DuplicatesMode
from beam_tfrecord.quality.digest_files import (
    SECTIONS,
    Digests,
    KeyColumn,
    read_sections,
    section_of,
    write_digest_file,
)
from beam_tfrecord.quality.duplicate_counts import DuplicateCounts, count_duplicates, describe_duplicates
from beam_tfrecord.quality.groups import find_groups
from beam_tfrecord.quality.split_groups import ColumnSplitKey, GroupPlacement

SCHEMA = Schema({"path": Scalar(DType.STRING), "pixels": Scalar(DType.BYTES), "label": Scalar(DType.INT64)})


def record(path: str, pixels: bytes, label: int) -> bytes:
    return SampleEncoder(SCHEMA).encode(Sample(path, {"path": path, "pixels": pixels, "label": label}))


def test_the_content_hash_leaves_out_only_the_excluded_features():
    hasher = ContentHasher(["path"])
    assert hasher.digest(record("a.jpg", b"x" * 300, 1)) == hasher.digest(record("b/c.jpg", b"x" * 300, 1))
    assert hasher.digest(record("a.jpg", b"x" * 300, 1)) != hasher.digest(record("a.jpg", b"x" * 300, 2))
    assert ContentHasher().digest(record("a", b"x", 1)) != ContentHasher().digest(record("b", b"x", 1))
    assert len(hasher.digests([record("a", b"", 0)] * 3)) == 48


def test_a_digest_file_read_by_sections_gives_back_every_row_once(tmp_path):
    rng = np.random.default_rng(0)
    n = 5000
    digests = Digests(rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2), rng.integers(0, 2**63, n,
                      dtype=np.uint64), rng.integers(0, 2**63, n, dtype=np.uint64), tuple(f"k{i}é" for i in range(n)))
    path = str(tmp_path / "one.dig")
    write_digest_file(path, digests)
    parts = [read_sections(path, lo, hi) for lo, hi in ((0, 1), (1, 300), (300, SECTIONS))]
    assert sum(map(len, parts)) == n
    assert sorted(k for p in parts for k in p.keys) == sorted(digests.keys)
    assert (section_of(parts[1].hi) >= 1).all() and (section_of(parts[1].hi) < 300).all()
    back = Digests.concatenate(parts)
    by_key = dict(zip(back.keys, zip(back.hi.tolist(), back.lo.tolist(), back.key_hashes.tolist())))
    assert all(by_key[k] == (h, lo, kh) for k, h, lo, kh in zip(digests.keys, digests.hi.tolist(),
                                                                   digests.lo.tolist(), digests.key_hashes.tolist()))


def test_groups_are_the_same_in_any_order_smallest_key_hash_first():
    content = [b"A" * 16, b"B" * 16, b"A" * 16, b"C" * 16, b"A" * 16, b"B" * 16]
    keys = [f"key{i}" for i in range(6)]
    hashes = key_digests(keys, "salt")
    forward = find_groups(Digests.of(b"".join(content), hashes, keys))
    backward = find_groups(Digests.of(b"".join(content[::-1]), hashes[::-1], keys[::-1]))
    assert forward.sizes.tolist() == backward.sizes.tolist() == [3, 2]
    assert forward.keys == backward.keys
    assert sorted(forward.keys[:3]) == ["key0", "key2", "key4"]
    assert forward.key_hashes[:3].tolist() == sorted(forward.key_hashes[:3].tolist())
    assert forward.num_dropped == 3 and len(forward.dropped_key_hashes()) == 3


def test_counts_within_and_across_splits_and_the_summary_line():
    content = b"".join([b"A" * 16] * 3 + [b"B" * 16] * 2 + [b"C" * 16])
    keys = ["a1", "a2", "a3", "b1", "b2", "c1"]
    groups = find_groups(Digests.of(content, key_digests(keys, "s"), keys))
    split = {"a1": 0, "a2": 0, "a3": 2, "b1": 0, "b2": 1, "c1": 2}  # A: train x2 + test; B: train + validation
    by_hash = dict(zip(np.frombuffer(b"".join(key_digests(keys, "s")), ">u8").tolist(), keys))
    counts = count_duplicates(groups, ["train", "validation", "test"],
                              lambda hashes: np.array([split[by_hash[h]] for h in hashes.tolist()]),
                              mode=DuplicatesMode.DROP, excluded=["path"])
    assert (counts.records, counts.groups, counts.dropped) == (5, 2, 3)
    assert counts.within == {"train": 1} and counts.across == {"train/test": 1, "train/validation": 1}
    assert counts.examples["train/train"] == [tuple(sorted(("a1", "a2")))]
    assert counts.summary_line() == ("duplicates: 5 records in 2 groups; across splits: train/test 1, "
                                     "train/validation 1; dropped 3 (one record of each group kept)")
    assert DuplicateCounts.from_json(counts.to_json()) == counts
    lines = describe_duplicates({"duplicates": counts.to_json(), "split_by": "user"})
    assert lines[0] == "splits decided by 'user' (every record of one value in one split)"
    assert lines[1] == counts.summary_line() + " (excluded from the content: path)"


def test_a_mode_out_of_the_three_is_refused_by_name():
    with pytest.raises(WriterOptionError, match=r"duplicates must be one of \['report', 'drop', 'fail'\], got 'keep'"):
        DuplicatesMode.parse("keep")


def test_a_groups_records_land_in_its_split_and_still_spread():
    starts = [0, int(0.6 * 2**64), int(0.8 * 2**64)]
    placement = GroupPlacement(ColumnSplitKey("user"), salt="s", split_starts=starts)
    samples = [Sample(f"row{i}", {"user": f"u{i % 50}"}) for i in range(1000)]
    placed = np.frombuffer(b"".join(placement.digests(samples)), ">u8").astype(np.uint64)
    split = np.searchsorted(np.array(starts, np.uint64), placed, side="right") - 1
    by_user: dict[str, set[int]] = {}
    for sample, s in zip(samples, split.tolist()):
        by_user.setdefault(sample.values["user"], set()).add(s)
    assert all(len(s) == 1 for s in by_user.values()) and {*split.tolist()} == {0, 1, 2}
    assert len(set(placed.tolist())) == 1000  # a group's records still have their own places


def test_keys_are_taken_in_row_order_whether_all_as_long_or_not():
    for keys in (["k2é", "k0é", "k1é"], ["a", "bcd", "", "éé"]):
        taken = KeyColumn.of(keys).take(np.array([2, 0, 1, 2]))
        assert list(taken) == [keys[2], keys[0], keys[1], keys[2]]
        assert taken.ends.tolist() == np.cumsum([len(keys[i].encode()) for i in (2, 0, 1, 2)]).tolist()
