"""croissant.json, read by MLCommons' own ``mlcroissant`` (1.1.1): valid, and its record sets read back.

mlcroissant reads the splits, the class names and the shards (from manifest.json, whose SHA-256 it
checks); it does not read TFRecord, so the ``examples`` record set is checked as a description,
and its reading fails with mlcroissant's own error naming the format.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import pathlib
import shutil

import pytest

from beam_tfrecord import load_manifest
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.interop import INTEROP_FILENAMES, interop_files
from tests.interop.conftest import SCHEMA

mlc = pytest.importorskip("mlcroissant", reason="mlcroissant is not installed (pip install -e '.[test]')")

RECOMMENDED_ONLY = {'[Metadata(data)] Property "http://mlcommons.org/croissant/citeAs" is recommended, but does '
                    'not exist.',
                    '[Metadata(data)] Property "https://schema.org/license" is recommended, but does not exist.'}


def _texts(values) -> list:
    return [v.decode() if isinstance(v, bytes) else v for v in values]


def test_mlcroissant_validates_it_with_no_error(tfrecord_dataset):
    dataset = mlc.Dataset(os.path.join(tfrecord_dataset, "croissant.json"))  # raises ValidationError on errors
    issues = dataset.metadata.ctx.issues
    assert not issues.errors and set(issues.warnings) == RECOMMENDED_ONLY  # a license is the owner's to add
    assert dataset.metadata.conforms_to == ["http://mlcommons.org/croissant/1.1"]


def test_mlcroissant_reads_the_splits_class_names_and_shards(tfrecord_dataset):
    manifest = load_manifest(tfrecord_dataset)
    dataset = mlc.Dataset(os.path.join(tfrecord_dataset, "croissant.json"))
    assert _texts(r["splits/name"] for r in dataset.records("splits")) == [s.name for s in manifest.splits]
    labels = [(int(r["label_names/label"]), r["label_names/name"]) for r in dataset.records("label_names")]
    assert [(i, name) for i, name in labels] == list(enumerate(SCHEMA.features["label"].names))
    shards = [(*_texts([r["shards/filename"], r["shards/split"]]), int(r["shards/num_records"]),
               *_texts([r["shards/crc32c"]])) for r in dataset.records("shards")]
    assert shards == [(s.filename, s.split, s.num_records, s.crc32c) for s in manifest.shards]


def test_the_examples_record_set_describes_every_feature_but_mlcroissant_reads_no_tfrecord(tfrecord_dataset):
    dataset = mlc.Dataset(os.path.join(tfrecord_dataset, "croissant.json"))
    examples = next(r for r in dataset.metadata.record_sets if r.id == "examples")
    fields = {f.name: f for f in examples.fields}
    assert list(fields) == ["split", *SCHEMA.features]
    assert {name: str(fields[name].data_types[0]) for name in ("photo", "label", "count", "score", "pixels")} == {
        "photo": "https://schema.org/ImageObject", "label": "http://mlcommons.org/croissant/Int64",
        "count": "http://mlcommons.org/croissant/Int64", "score": "http://mlcommons.org/croissant/Float32",
        "pixels": "http://mlcommons.org/croissant/UInt8"}
    assert (fields["pixels"].is_array, fields["pixels"].array_shape) == (True, "2,3,2")
    assert (fields["tags"].is_array, fields["tags"].array_shape) == (True, "-1")
    with pytest.raises(mlc.GenerationError) as err:
        next(iter(dataset.records("examples")))
    assert str(err.value.__cause__).startswith(
        "None of the provided encoding formats: application/x-tfrecord for file")


def test_the_shard_file_set_matches_the_shards_and_nothing_else(dali_dataset):
    document = json.loads(pathlib.Path(dali_dataset, "croissant.json").read_text())
    patterns = next(d for d in document["distribution"] if d["@type"] == "cr:FileSet")["includes"]
    matched = sorted(n for n in os.listdir(dali_dataset) if any(fnmatch.fnmatch(n, p) for p in patterns))
    assert matched == sorted(s.filename for s in load_manifest(dali_dataset).shards)  # no .idx file


def test_a_manifest_changed_after_publication_fails_mlcroissant_hash_check(tfrecord_dataset, tmp_path):
    copy = shutil.copytree(tfrecord_dataset, tmp_path / "copy")
    manifest = (copy / "manifest.json").read_text()
    (copy / "manifest.json").write_text(manifest.replace('"salt": "beam-tfrecord"', '"salt": "another"'))
    with pytest.raises(mlc.GenerationError) as err:
        list(mlc.Dataset(str(copy / "croissant.json")).records("shards"))
    assert "is not identical with the reference in the Croissant JSON-LD" in str(err.value.__cause__)


def test_sequence_datasets_get_no_view(tfrecord_dataset):
    manifest = load_manifest(tfrecord_dataset)
    assert set(interop_files(manifest)) == set(INTEROP_FILENAMES)
    sequences = Schema({"id": Scalar(DType.INT64)}, sequence_features={"tokens": Scalar(DType.INT64)})
    assert interop_files(dataclasses.replace(manifest, schema=sequences)) == {}
