"""PrefixShardNames (Beam's file_path_prefix naming) formats and parses with one template; the manifest that uses
it stays as strict as a dataset directory's."""

from __future__ import annotations

import json

import pytest

from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.manifest import Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.naming import PrefixShardNames
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.errors import ManifestError, ShardNameError


@pytest.mark.parametrize("names, split, index, count, expected", [
    (PrefixShardNames("result"), "train", 1, 4, "result-00001-of-00004"),
    (PrefixShardNames("result", suffix=".tfrecord.gz"), "train", 0, 1, "result-00000-of-00001.tfrecord.gz"),
    (PrefixShardNames("result.gz", template=""), "train", 0, 1, "result.gz"),
    (PrefixShardNames("r", template="-SS-of-NN", split_in_name=True), "test", 3, 12, "r-test-03-of-12"),
    (PrefixShardNames("part", template="_SSS"), "train", 7, 9, "part_007"),
    (PrefixShardNames("big"), "train", 123_456, 200_000, "big-123456-of-200000"),  # Beam pads, never cuts
], ids=["default", "suffix", "one-file", "split-in-name", "no-count", "past-five-digits"])
def test_names_format_as_beam_does_and_parse_back(names, split, index, count, expected):
    assert names.format(split, index, count) == expected
    parsed_split, parsed_index, parsed_count = names.parse(expected)
    assert (parsed_split, parsed_index) == ((split if names.split_in_name else None), index)
    assert parsed_count == (count if "N" in names.template or not names.template else None)


@pytest.mark.parametrize("filename", ["result-1-of-4", "result-00001-of-00004x", "result-00004-of-00004",
                                      "result", "other-00000-of-00001", "result-00000-of-00001.gz"])
def test_other_names_are_not_shards_of_the_prefix(filename):
    with pytest.raises(ShardNameError, match="is not a shard name like 'result-00000-of-00001'"):
        PrefixShardNames("result").parse(filename)


@pytest.mark.parametrize("fields, message", [
    (dict(prefix="a/b"), "prefix 'a/b': a shard's file name may hold only"),
    (dict(prefix="..x"), "prefix '..x'"),
    (dict(prefix=""), "prefix must name a file"),
    (dict(prefix="r", suffix="/x"), "suffix '/x'"),
    (dict(prefix="r", template="-of-NNNNN"), "shard_name_template '-of-NNNNN': expected one run of 'S'"),
    (dict(prefix="r", template="-SS-SS"), "shard_name_template '-SS-SS'"),
    (dict(prefix="r", template="-W-V-SSSSS"), "-W-V-SSSSS.: expected .* at most one of .W. or .V."),
], ids=["slash", "dots", "empty", "suffix-slash", "no-index", "two-indexes", "two-windows"])
def test_names_that_are_no_plain_file_are_refused(fields, message):
    with pytest.raises(ShardNameError, match=message):
        PrefixShardNames(**fields)


def _manifest(names: PrefixShardNames, splits=("train",)) -> dict:
    shard_bytes = 16 + 3
    manifest = Manifest(
        dataset_name="data", schema=Schema({"record": Scalar(DType.BYTES)}),
        splits=tuple(SplitInfo(split, (ShardInfo(names.format(split, 0, 1), split, 0, 1, shard_bytes, shard_bytes,
                                                 "00000000"),)) for split in splits),
        compression=Compression.NONE, created_at="2026-11-27T00:00:00+00:00", tool_version="0", command=(),
        num_inputs=len(splits), num_rejected=0, dead_letters=None, salt="s", sharding={}, shard_naming=names)
    return json.loads(manifest.dumps())


def test_a_manifest_with_shard_naming_round_trips():
    names = PrefixShardNames("result", suffix=".tfrecord")
    data = _manifest(names)
    assert data["shard_naming"] == {"prefix": "result", "template": "-SSSSS-of-NNNNN", "suffix": ".tfrecord",
                                    "split_in_name": False}
    assert Manifest.from_json(data).shard_naming == names


@pytest.mark.parametrize("change, message", [
    (lambda d: d["splits"][0]["shards"][0].update(filename="../result-00000-of-00001"), "a plain file name"),
    (lambda d: d["splits"][0]["shards"][0].update(filename="result-00001-of-00002"),
     "'result-00000-of-00001' \\(shard_naming's name of this split, index and count\\)"),
    (lambda d: d["splits"][0]["shards"][0].update(filename="data-train.tfrecord-00000-of-00001"), "shard_naming"),
    (lambda d: d["shard_naming"].update(prefix="../up"), "manifest field 'shard_naming'"),
    (lambda d: d["shard_naming"].update(split_in_name="no"), "manifest field 'shard_naming'"),
    (lambda d: d["shard_naming"].update(extra=1), "manifest field 'shard_naming'"),
], ids=["path-out", "other-index", "directory-name", "prefix-path", "flag-type", "unknown-field"])
def test_a_manifest_naming_shards_by_a_prefix_is_checked_as_strictly(change, message):
    data = _manifest(PrefixShardNames("result"))
    change(data)
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(data)


def test_shard_names_without_the_split_name_one_split():
    data = _manifest(PrefixShardNames("result", split_in_name=True), splits=("train", "test"))
    data["shard_naming"]["split_in_name"] = False
    for split in data["splits"]:
        split["shards"][0]["filename"] = "result-00000-of-00001"
    with pytest.raises(ManifestError, match="shard_naming.split_in_name"):
        Manifest.from_json(data)
