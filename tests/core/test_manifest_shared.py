"""Manifest format 2 as untrusted input: shards shared with earlier versions (``stored_in``) and deletion vectors.

Each hostile manifest is refused with a ManifestError naming the field (its JSON path) and what was expected,
before any file is opened; a good one round-trips and a format-1 manifest still loads.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json

import google_crc32c
import pytest
from pyroaring import BitMap

from beam_tfrecord.core.deletions import DeletionVector
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.manifest import MANIFEST_VERSION, Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.errors import ManifestError

EARLIER = "20260101T000000.000Z-abcdef"  # the version that wrote the shared shards


def _shard(index: int, count: int, *, records: int = 4, **more) -> ShardInfo:
    return ShardInfo(f"d-train.tfrecord-{index:05d}-of-{count:05d}", "train", 0, records, 20 * records,
                     20 * records, "0a1b2c3d", **more)


def _manifest() -> Manifest:
    """A version listing two shards of EARLIER (the first with 2 of its 4 records deleted) and one of its own."""
    shards = (_shard(0, 2, stored_in=EARLIER, deletions=DeletionVector.of([1, 3])), _shard(1, 2, stored_in=EARLIER),
              _shard(0, 1, records=3))
    shards = tuple(dataclasses.replace(shard, index=i) for i, shard in enumerate(shards))
    return Manifest(dataset_name="d", schema=Schema({"x": Scalar(DType.INT64)}),
                    splits=(SplitInfo("train", shards),), compression=Compression.NONE,
                    created_at="2026-01-02T00:00:00+00:00", tool_version="0.1.0", command=("refresh",),
                    num_inputs=9, num_rejected=0, dead_letters=None, salt="s", sharding={})


GOOD = _manifest().to_json()
FIRST, SECOND = "splits[0].shards[0]", "splits[0].shards[1]"


def _tampered(change) -> dict:
    data = copy.deepcopy(GOOD)
    change(data)
    return data


def _shard_field(j: int, key: str, value):
    return lambda data: data["splits"][0]["shards"][j].__setitem__(key, value)


def _vector_field(key: str, value):
    return lambda data: data["splits"][0]["shards"][0]["deletions"].__setitem__(key, value)


def _refused(data: dict, field: str, expected: str) -> None:
    with pytest.raises(ManifestError) as info:
        Manifest.from_json(data)
    message = str(info.value)
    assert message.startswith(f"manifest field {field!r}: expected "), message
    assert expected in message, message


def _positional_names(data: dict) -> None:
    """Names each shard by its place in the split, as a version that shares no shard does."""
    shards = data["splits"][0]["shards"]
    for j, shard in enumerate(shards):
        shard["filename"] = f"d-train.tfrecord-{j:05d}-of-{len(shards):05d}"


def test_a_format_1_manifest_still_loads():
    data = _tampered(lambda d: d.update(version=1))
    for shard in data["splits"][0]["shards"]:
        shard.pop("stored_in", None), shard.pop("deletions", None)
    _positional_names(data)
    data["splits"][0]["num_records"] = data["num_written"] = data["num_inputs"] = 11
    manifest = Manifest.from_json(data)
    assert manifest.version == 1 and manifest.self_contained and manifest.num_written == 11


def test_a_shared_version_round_trips_and_counts_live_records():
    manifest = Manifest.loads(_manifest().dumps())
    assert manifest == _manifest() and manifest.version == 2 < MANIFEST_VERSION  # the lowest format that says it
    shard = manifest.shards[0]
    assert (shard.stored_in, shard.num_records, shard.num_live, shard.live_runs()) == (EARLIER, 4, 2, [(0, 1), (2, 1)])
    assert manifest.split("train").num_records == manifest.num_written == 2 + 4 + 3
    assert manifest.num_deleted == 2 and not manifest.self_contained
    assert GOOD["splits"][0]["num_records"] == 9 and GOOD["num_written"] == 9
    assert GOOD["splits"][0]["shards"][0]["deletions"] == DeletionVector.of([1, 3]).to_json()
    assert "stored_in" not in GOOD["splits"][0]["shards"][2] and "deletions" not in GOOD["splits"][0]["shards"][1]


@pytest.mark.parametrize("stored_in", ["../x", "gs://other-bucket/v", "/abs", f"{EARLIER}/../..", 20260101,
                                       "", "20260101T000000.000Z-ABCDEF", None],
                         ids=["parent", "other-bucket", "absolute", "id-then-parent", "number", "empty",
                              "upper-hex", "null"])
def test_stored_in_must_be_a_version_id_of_this_root(stored_in):
    _refused(_tampered(_shard_field(1, "stored_in", stored_in)), f"{SECOND}.stored_in",
             "the id of a version of this root (YYYYMMDDTHHMMSS.mmmZ-xxxxxx; the shard is "
             "ROOT/versions/<id>/<filename>)")


def _bad_base64(data: dict) -> None:
    data["splits"][0]["shards"][0]["deletions"]["roaring"] = "not base64!"


def _other_bitmap(data: dict) -> None:  # another bitmap, its CRC kept: the checksum catches it
    data["splits"][0]["shards"][0]["deletions"]["roaring"] = DeletionVector.of([1]).to_json()["roaring"]


def _not_roaring(data: dict) -> None:  # bytes with a good CRC that are no bitmap
    forged = DeletionVector.of([1, 3]).to_json()
    raw = b"\x00" * 8
    forged.update(roaring=base64.b64encode(raw).decode(), crc32c=f"{google_crc32c.value(raw):08x}")
    data["splits"][0]["shards"][0]["deletions"] = forged


@pytest.mark.parametrize("change, field, expected", [
    (_vector_field("crc32c", "00000000"), f"{FIRST}.deletions.crc32c", "(the CRC32C of the bitmap's bytes)"),
    (_other_bitmap, f"{FIRST}.deletions.crc32c", "(the CRC32C of the bitmap's bytes)"),
    (_bad_base64, f"{FIRST}.deletions.roaring", "base64 ("),
    (_not_roaring, f"{FIRST}.deletions.roaring", "a portable Roaring bitmap ("),
    (_vector_field("roaring", 12), f"{FIRST}.deletions.roaring", "a base64 string"),
    (_vector_field("count", 3), f"{FIRST}.deletions.count", "the bitmap's size (2, at least 1)"),
    (_vector_field("count", "2"), f"{FIRST}.deletions.count", "the bitmap's size (2, at least 1)"),
    (_shard_field(0, "deletions", DeletionVector.of([4]).to_json()), f"{FIRST}.deletions.roaring",
     "positions below the shard's 4 records, got 'position 4'"),
    (_shard_field(0, "deletions", [1, 3]), f"{FIRST}.deletions", "an object of ['count', 'crc32c', 'roaring']"),
    (_shard_field(0, "deletions", None), f"{FIRST}.deletions", "an object of ['count', 'crc32c', 'roaring']"),
    (_vector_field("extra", 1), f"{FIRST}.deletions", "an object of ['count', 'crc32c', 'roaring']"),
], ids=["wrong-crc", "crc-of-another-bitmap", "bad-base64", "not-a-bitmap", "not-a-string", "count-mismatch",
        "count-as-text", "position-past-the-end", "a-list", "null", "unknown-field"])
def test_a_bad_deletion_vector_is_refused_naming_its_field(change, field, expected):
    _refused(_tampered(change), field, expected)


def test_an_empty_deletion_vector_is_refused():
    empty = BitMap().serialize()
    vector = {"roaring": base64.b64encode(empty).decode(), "count": 0, "crc32c": f"{google_crc32c.value(empty):08x}"}
    _refused(_tampered(_shard_field(0, "deletions", vector)), f"{FIRST}.deletions.count",
             "the bitmap's size (0, at least 1), got 0")


def test_shared_fields_are_refused_in_a_format_1_manifest():
    stored = _tampered(lambda d: d.update(version=1))
    del stored["splits"][0]["shards"][0]["deletions"]
    _refused(stored, f"{FIRST}.stored_in", "no such field in a manifest of format version 1")
    deleted = _tampered(lambda d: d.update(version=1))
    for shard in deleted["splits"][0]["shards"]:
        shard.pop("stored_in", None)
    _positional_names(deleted)
    _refused(deleted, f"{FIRST}.deletions", "no such field in a manifest of format version 1")


def test_two_entries_naming_the_same_file_are_refused():
    def twice(data):
        shards = data["splits"][0]["shards"]
        shards[1] = dict(shards[0], index=1)
    _refused(_tampered(twice), f"{SECOND}.filename", "a file no other shard of the split lists")


def test_one_writers_shards_have_one_count():
    _refused(_tampered(_shard_field(1, "filename", "d-train.tfrecord-00001-of-00003")),
             f"{SECOND}.filename", f"a shard count of 2, as the other shards of {EARLIER} in the split have")


def test_a_shared_shard_keeps_its_dataset_split_and_format():
    _refused(_tampered(_shard_field(1, "filename", "e-train.tfrecord-00001-of-00002")), f"{SECOND}.filename",
             "'d-train.tfrecord-00001-of-00002' (its dataset, split, format and compression)")


@pytest.mark.parametrize("key", ["num_records", "num_written"])
def test_a_count_that_includes_deleted_records_is_refused(key):
    def count_deleted(data):
        (data["splits"][0] if key == "num_records" else data)[key] = 11
    path = "splits[0].num_records" if key == "num_records" else "num_written"
    _refused(_tampered(count_deleted), path, "(9)")


def test_a_json_round_trip_keeps_stored_in_and_deletions():
    text = _manifest().dumps()
    again = Manifest.loads(text)
    assert again.dumps() == text and json.loads(text)["splits"][0]["shards"][1]["stored_in"] == EARLIER
