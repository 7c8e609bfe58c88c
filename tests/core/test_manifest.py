"""Manifest: JSON round trip, version check, accounting invariant."""

import json

import pytest

from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.manifest import MANIFEST_VERSION, Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.schema import ClassLabel, Image, ImageFormat, Schema
from beam_tfrecord.errors import ManifestError, ManifestVersionError, UnknownSplitError


def _manifest(**changes) -> Manifest:
    shard = ShardInfo("d-train.tfrecord-00000-of-00001.gz", "train", 0, 3, 120, 100, "0a1b2c3d")
    fields = dict(dataset_name="d", schema=Schema({"image": Image(ImageFormat.JPEG), "label": ClassLabel(("a", "b"))}),
                  splits=(SplitInfo("train", (shard,)), SplitInfo("test", ())), compression=Compression.GZIP,
                  created_at="2026-01-01T00:00:00+00:00", tool_version="0.1.0", command=("build", "--x"),
                  num_inputs=4, num_rejected=1, dead_letters="dead_letters.jsonl", salt="s",
                  sharding={"target_shard_bytes": 10}, metadata={"fingerprint": "abc"})
    fields.update(changes)
    return Manifest(**fields)


def test_round_trip():
    manifest = _manifest()
    assert Manifest.loads(manifest.dumps()) == manifest
    assert manifest.num_written == 3 and manifest.split("test").num_records == 0


def test_unknown_version_is_a_typed_error_naming_both_versions():
    data = _manifest().to_json()
    data["version"] = 99
    with pytest.raises(ManifestVersionError) as info:
        Manifest.from_json(data)
    assert info.value.found == 99 and info.value.supported == MANIFEST_VERSION
    assert "99" in str(info.value) and f"version {MANIFEST_VERSION}" in str(info.value)


def test_inputs_must_equal_written_plus_rejected():
    with pytest.raises(ManifestError, match="num_inputs 5 != written 3 \\+ rejected 1"):
        _manifest(num_inputs=5)


@pytest.mark.parametrize("text, error", [
    ("{not json", ManifestError),
    (json.dumps({"version": MANIFEST_VERSION}), ManifestError),
    (json.dumps([1, 2]), ManifestError),
])
def test_malformed_manifests(text, error):
    with pytest.raises(error):
        Manifest.loads(text)


def test_unknown_split_lists_the_known_ones():
    with pytest.raises(UnknownSplitError, match=r"split 'val' is not in this dataset; it has \['train', 'test'\]"):
        _manifest().split("val")


def test_a_manifest_that_is_not_utf8_is_a_manifest_error():
    data = _manifest().dumps().encode()
    with pytest.raises(ManifestError, match="manifest is not valid JSON: 'utf-8' codec can't decode byte 0xf4"):
        Manifest.loads(data[:40] + b"\xf4" + data[41:])


def test_a_damaged_schema_is_a_manifest_error_naming_the_field():
    data = _manifest().to_json()
    data["schema"]["features"]["label"]["kind"] = "{lass_label"
    with pytest.raises(ManifestError, match="manifest field 'schema': "):
        Manifest.from_json(data)
