"""Manifest format 3 as untrusted input: column files, renamed and dropped features.

A good manifest round-trips; one without them is written as format 2 (its bytes unchanged), and each hostile field is
refused with a ManifestError naming its JSON path before any file is opened; retention keeps a column file a kept
version lists.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from beam_tfrecord.core.columns import ColumnFile, column_filename
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.manifest import MANIFEST_VERSION, READABLE_MANIFEST_VERSIONS, Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.schema import DType, FixedList, Scalar, Schema
from beam_tfrecord.errors import ManifestVersionError
from beam_tfrecord.versions.retention import shared_files
from tests.core.test_manifest_shared import _refused

BASE = "20260101T000000.000Z-abcdef"  # the version that wrote the base shards
ADD = "20260102T000000.000Z-012345"  # an earlier add whose column file a later version lists
SHARD = "d-train.tfrecord-00000-of-00002"
FIRST = "splits[0].shards[0]"


def _column(name: str, features: tuple[str, ...], **more) -> ColumnFile:
    return ColumnFile(column_filename(BASE, name), features, 4, 64, "0a1b2c3d", **more)


def _manifest(**more) -> Manifest:
    """An add on BASE: both base shards shared, each with a column file of `emb`; the first also one of `score`
    written by ADD; `label` renamed from `y`, `old` dropped."""
    shards = tuple(ShardInfo(f"d-train.tfrecord-{j:05d}-of-00002", "train", j, 4, 80, 80, "0a1b2c3d", stored_in=BASE,
                             columns=(_column(f"d-train.tfrecord-{j:05d}-of-00002", ("emb",)),)
                             + ((_column(SHARD, ("score",), stored_in=ADD),) if j == 0 else ()))
                   for j in range(2))
    schema = Schema({"x": Scalar(DType.INT64), "label": Scalar(DType.INT64), "emb": FixedList(DType.FLOAT32, 4),
                     "score": Scalar(DType.FLOAT32)})
    fields = dict(dataset_name="d", schema=schema, splits=(SplitInfo("train", shards),), compression=Compression.NONE,
                  created_at="2026-01-03T00:00:00+00:00", tool_version="0.1.0", command=("add-features",),
                  num_inputs=8, num_rejected=0, dead_letters=None, salt="s", sharding={},
                  physical_names={"label": "y"}, dropped_features=("old",))
    fields.update(more)
    return Manifest(**fields)  # type: ignore[arg-type]


GOOD = _manifest().to_json()


def _tampered(change) -> dict:
    data = copy.deepcopy(GOOD)
    change(data)
    return data


def _column_field(k: int, key: str, value):
    return lambda data: data["splits"][0]["shards"][0]["columns"][k].__setitem__(key, value)


def test_a_version_with_columns_round_trips_as_format_3():
    manifest = Manifest.loads(_manifest().dumps())
    assert manifest == _manifest() and manifest.version == MANIFEST_VERSION == 3 and READABLE_MANIFEST_VERSIONS[-1] == 3
    shard = manifest.shards[0]
    assert shard.column_for("emb").filename == f"columns/{BASE}-{SHARD}" and shard.column_for("x") is None
    assert shard.column_for("score").stored_in == ADD and not shard.self_contained
    assert manifest.column_features() == {"emb", "score"}
    assert manifest.physical_name("label") == "y" and manifest.physical_name("x") == "x"
    assert GOOD["physical_names"] == {"label": "y"} and GOOD["dropped_features"] == ["old"]
    assert GOOD["splits"][0]["shards"][1]["columns"] == [{
        "filename": f"columns/{BASE}-d-train.tfrecord-00001-of-00002", "features": ["emb"], "num_records": 4,
        "num_bytes": 64, "crc32c": "0a1b2c3d"}]


@pytest.mark.parametrize("change", [dict(physical_names={}), dict(dropped_features=()), "no-columns"],
                         ids=["rename", "drop", "columns"])
def test_each_of_columns_renames_and_drops_alone_makes_format_3_and_not_self_contained(change):
    if change == "no-columns":
        manifest = _manifest(physical_names={}, dropped_features=())
    else:
        manifest = _manifest(**change)
        manifest = dataclasses.replace(manifest, splits=tuple(dataclasses.replace(s, shards=tuple(
            dataclasses.replace(shard, columns=()) for shard in s.shards)) for s in manifest.splits))
    assert manifest.version == 3 and not manifest.self_contained
    assert Manifest.loads(manifest.dumps()) == manifest


def test_a_manifest_without_them_is_written_as_before():
    plain = _manifest(physical_names={}, dropped_features=())
    plain = dataclasses.replace(plain, splits=tuple(dataclasses.replace(s, shards=tuple(
        dataclasses.replace(shard, columns=(), stored_in=None) for shard in s.shards)) for s in plain.splits))
    text = plain.dumps()
    assert plain.version == 2 and json.loads(text)["version"] == 2 and plain.self_contained
    assert "columns" not in text and "physical_names" not in text and "dropped_features" not in text


def test_a_release_reading_format_2_refuses_a_format_3_manifest(monkeypatch):
    import beam_tfrecord.core.manifest as manifest_module
    monkeypatch.setattr(manifest_module, "READABLE_MANIFEST_VERSIONS", (1, 2))
    with pytest.raises(ManifestVersionError):
        Manifest.from_json(GOOD)


@pytest.mark.parametrize("change, field, expected", [
    (_column_field(0, "filename", "emb.tfrecord"), f"{FIRST}.columns[0].filename", "a plain file name under"),
    (_column_field(0, "filename", "columns/../x"), f"{FIRST}.columns[0].filename", "no '..'"),
    (_column_field(0, "filename", "gs://b/columns/x"), f"{FIRST}.columns[0].filename", "under 'columns/'"),
    (_column_field(0, "filename", "/columns/x"), f"{FIRST}.columns[0].filename", "under 'columns/'"),
    (_column_field(0, "filename", "columns/a/b"), f"{FIRST}.columns[0].filename", "under 'columns/'"),
    (_column_field(0, "features", []), f"{FIRST}.columns[0].features", "a non-empty sorted list"),
    (_column_field(0, "features", ["z", "emb"]), f"{FIRST}.columns[0].features", "a non-empty sorted list"),
    (_column_field(0, "features", ["nope"]), f"{FIRST}.columns[0].features", "physical names of features"),
    (_column_field(0, "features", ["label"]), f"{FIRST}.columns[0].features", "physical names of features"),
    (_column_field(1, "features", ["emb"]), f"{FIRST}.columns[1].features",
     "features no other column file of the shard holds (columns[0] holds 'emb')"),
    (_column_field(0, "num_records", 5), f"{FIRST}.columns[0].num_records", "4 (the base shard's num_records"),
    (_column_field(0, "num_records", True), f"{FIRST}.columns[0].num_records", "4 (the base shard's num_records"),
    (_column_field(0, "num_bytes", -1), f"{FIRST}.columns[0].num_bytes", "an integer >= 0"),
    (_column_field(0, "crc32c", "0A1B2C3D"), f"{FIRST}.columns[0].crc32c", "8 lowercase hex digits"),
    (_column_field(1, "stored_in", "../x"), f"{FIRST}.columns[1].stored_in", "the id of a version of this root"),
    (_column_field(0, "extra", 1), f"{FIRST}.columns[0]", "a column object of the fields"),
    (lambda d: d["splits"][0]["shards"][0].__setitem__("columns", []), f"{FIRST}.columns", "a non-empty list"),
    (lambda d: (d.update(version=2), d.pop("physical_names"), d.pop("dropped_features")), f"{FIRST}.columns",
     "no such field in a manifest of format version 2"),
    (lambda d: d.update(physical_names={"label": "x"}), "physical_names.label", "a stored name no other feature has"),
    (lambda d: d.update(physical_names={"nope": "z"}), "physical_names.nope", "a feature of the schema stored under"),
    (lambda d: d.update(physical_names={"label": "label"}), "physical_names.label", "stored under another name"),
    (lambda d: d.update(physical_names={}), "physical_names", "a non-empty object"),
    (lambda d: d.update(physical_names={"label": 3}), "physical_names", "a non-empty object"),
    (lambda d: d.update(dropped_features=["x"]), "dropped_features", "stored names no feature of the schema has"),
    (lambda d: d.update(dropped_features=["y"]), "dropped_features", "('label' is stored as 'y')"),
    (lambda d: d.update(dropped_features=["b", "a"]), "dropped_features", "a non-empty sorted list"),
], ids=["not-under-columns", "parent", "url", "absolute", "sub-folder", "no-features", "unsorted", "unknown-feature",
        "logical-name-of-renamed", "feature-in-two-files", "count-mismatch", "count-bool", "negative-bytes",
        "upper-crc", "stored-in-path", "unknown-field", "empty-list", "format-2", "rename-collides",
        "rename-unknown", "rename-to-itself", "empty-renames", "rename-not-text", "drop-kept", "drop-renamed",
        "drops-unsorted"])
def test_a_bad_column_rename_or_drop_is_refused_naming_its_field(change, field, expected):
    _refused(_tampered(change), field, expected)


def test_renames_and_drops_are_refused_in_a_format_2_manifest():
    data = _tampered(lambda d: d.update(version=2))
    for shard in data["splits"][0]["shards"]:
        del shard["columns"]
    _refused(data, "physical_names", "no such field in a manifest of format version 2")


def test_a_dropped_column_feature_may_stay_in_its_file():
    data = _tampered(lambda d: d.update(dropped_features=["old", "score"]))
    data["schema"]["features"].pop("score")
    assert Manifest.from_json(data).column_features() == {"emb", "score"}


def test_retention_keeps_the_column_files_a_version_lists_in_other_directories():
    second = "d-train.tfrecord-00001-of-00002"
    assert shared_files(_manifest().dumps().encode()) == {
        BASE: {SHARD, second, f"keys/{SHARD}.keys", f"keys/{second}.keys"}, ADD: {f"columns/{BASE}-{SHARD}"}}
