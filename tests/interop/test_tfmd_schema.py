"""schema.pbtxt parses into tensorflow-metadata's ``Schema`` and says what the writer enforces.

TFDV itself (``tfdv.validate_statistics``) is not run: the only tensorflow-data-validation wheels
for Python 3.11 on the registry (1.16.x) need tensorflow<2.17, pandas<2, pyarrow<11 and protobuf<6,
which this project's TensorFlow 2.21 stack cannot hold.
"""

from __future__ import annotations

import pathlib

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from beam_tfrecord import load_manifest, read_numpy
from tests.interop.conftest import SCHEMA

FIXED = {"photo": 1, "mask": 1, "label": 1, "count": 1, "score": 1, "caption": 1, "blob": 1, "box": 4,
         "pixels": 1, "depth": 1, "flags": 1}


def _parsed(dataset: str) -> schema_pb2.Schema:
    return text_format.Parse(pathlib.Path(dataset, "schema.pbtxt").read_text(), schema_pb2.Schema())


def test_schema_pbtxt_parses_into_the_tfmd_schema_of_every_feature(tfrecord_dataset):
    schema = _parsed(tfrecord_dataset)
    features = {f.name: f for f in schema.feature}
    assert list(features) == list(SCHEMA.features)
    types = {name: schema_pb2.FeatureType.Name(f.type) for name, f in features.items()}
    assert types == {"photo": "BYTES", "mask": "BYTES", "label": "INT", "count": "INT", "score": "FLOAT",
                     "caption": "BYTES", "blob": "BYTES", "box": "FLOAT", "tags": "BYTES", "ids": "INT",
                     "pixels": "BYTES", "depth": "BYTES", "flags": "BYTES"}
    assert {n: [d.size for d in f.shape.dim] for n, f in features.items() if f.HasField("shape")} == {
        n: [size] for n, size in FIXED.items()}
    assert {n: f.presence.min_fraction for n, f in features.items()} == {
        n: 1.0 if n in FIXED else 0.0 for n in features}
    label = features["label"].int_domain
    assert (label.min, label.max, label.is_categorical) == (0, 2, True)
    assert {n for n, f in features.items() if f.HasField("image_domain")} == {"photo", "mask"}
    assert all(features[n].float_domain.disallow_nan and features[n].float_domain.disallow_inf
               for n in ("score", "box"))


def test_every_record_meets_the_schema(tfrecord_dataset):
    """The records as written hold what the schema says: value counts, class ids in the domain."""
    features = {f.name: f for f in _parsed(tfrecord_dataset).feature}
    manifest = load_manifest(tfrecord_dataset)
    for split in manifest.splits:
        for example in read_numpy(tfrecord_dataset, split=split.name):
            for name in ("count", "score", "label", "box"):
                assert example[name].size == features[name].shape.dim[0].size
            assert features["label"].int_domain.min <= int(example["label"]) <= features["label"].int_domain.max
