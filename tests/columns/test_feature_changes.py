"""Drops, renames and the stored names of added features, on manifests alone (no job): each refusal names the
features, and a chain of changes keeps every stored name distinct."""

from __future__ import annotations

import pytest

from beam_tfrecord.core.schema import DType, Scalar, Schema, VarList
from beam_tfrecord.errors import ColumnsError, FeatureNameError
from beam_tfrecord.versions.add_features import added_names
from beam_tfrecord.versions.feature_changes import changed_manifest, drop, rename
from tests.core.test_manifest_columns import BASE, _manifest

NEXT = "20260104T000000.000Z-fedcba"


def _changed(change, manifest=None):
    return changed_manifest(manifest or _manifest(), BASE, NEXT, change, command=("test",), indexes=BASE)


def test_a_drop_lists_the_stored_name_and_a_rename_maps_the_new_name_to_it():
    dropped = _changed(drop(["label"]))  # label is stored as y
    assert dropped.dropped_features == ("old", "y") and "label" not in dropped.schema.features
    assert dropped.physical_names == {}
    renamed = _changed(rename({"emb": "embedding", "label": "target"}))
    assert renamed.physical_names == {"embedding": "emb", "target": "y"}
    assert set(renamed.schema.features) == {"embedding", "target", "x", "score"}
    back = _changed(rename({"target": "label"}), renamed)
    assert back.physical_names == {"embedding": "emb", "label": "y"}  # label is stored as y still
    assert all(s.stored_in == BASE for s in renamed.shards) and renamed.metadata["columns"]["action"] == "rename"


@pytest.mark.parametrize("change, error, message", [
    (drop(["nope"]), FeatureNameError, "cannot drop ['nope']: not features of the dataset"),
    (rename({"nope": "z"}), FeatureNameError, "cannot rename ['nope']: not features of the dataset"),
    (rename({"emb": "x"}), FeatureNameError, "cannot rename to ['x']: each new name must be one no other feature has"),
    (rename({"emb": "z", "x": "z"}), FeatureNameError, "each new name must be one no other feature has"),
    (drop(["x", "label", "emb", "score"]), ColumnsError, "cannot drop every feature of the dataset"),
], ids=["drop-unknown", "rename-unknown", "rename-to-taken", "rename-two-to-one", "drop-all"])
def test_a_change_the_version_cannot_take_is_refused_naming_the_features(change, error, message):
    with pytest.raises(error, match=message.replace("[", r"\[").replace("]", r"\]")):
        _changed(change)


def test_an_added_name_never_reuses_a_stored_one():
    base = _manifest()  # stores x, y (label), emb, score; old dropped
    added = Schema({"old": VarList(DType.FLOAT32), "y": Scalar(DType.INT64), "new": Scalar(DType.INT64)})
    assert added_names(base, added, replace=False, token="abc123") == (
        {"old": "old__abc123", "y": "y__abc123", "new": "new"}, ())
    assert added_names(base, Schema({"label": Scalar(DType.INT64)}), replace=True, token="abc123") == (
        {"label": "label"}, ("y",))
    with pytest.raises(FeatureNameError, match="sequence features cannot be added"):
        added_names(base, Schema({}, {"steps": Scalar(DType.INT64)}), replace=False, token="abc123")
