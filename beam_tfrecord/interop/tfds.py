"""TensorFlow Datasets metadata for a dataset: ``dataset_info.json``, ``features.json``, label files.

A view of the manifest alone, in TFDS's JSON form; a dataset TFDS cannot read gets none
(``unsupported_reason``). The feature mapping: docs/manifest.md, "TensorFlow Datasets metadata".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.core.schema import (
    ClassLabel,
    DType,
    Feature,
    FixedList,
    Image,
    ImageFormat,
    Scalar,
    Schema,
    Tensor,
    VarList,
)
from beam_tfrecord.interop.self_contained import not_self_contained_reason

DATASET_INFO_FILENAME = "dataset_info.json"
FEATURES_FILENAME = "features.json"
LABELS_SUFFIX = ".labels.txt"
TFDS_VERSION = "1.0.0"  # TFDS needs a version; a dataset directory here holds exactly one
FILEPATH_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_MODULE = "tensorflow_datasets.core.features"
_TFDS_DTYPE = {DType.INT64: "int64", DType.FLOAT32: "float32", DType.BYTES: "string", DType.STRING: "string"}
_TFDS_IMAGE_FORMATS = {ImageFormat.JPEG: "jpeg", ImageFormat.PNG: "png"}  # others: TFDS sniffs the bytes


def unsupported_reason(manifest: Manifest) -> str | None:
    """Why TFDS cannot read this dataset, or None when it can."""
    if manifest.shard_naming is not None:
        return ("shards are named by a Beam file_path_prefix (PREFIX-SSSSS-of-NNNNN); TFDS reads its own names "
                "(NAME-SPLIT.tfrecord-SSSSS-of-NNNNN): write with output_dir= for TFDS")
    shared = not_self_contained_reason(manifest)
    if shared is not None:
        return (f"the version is not self-contained ({shared}): TFDS would read only its own directory's files, "
                "every record of them; `beam-tfrecord compact ROOT` writes a version it reads")
    if manifest.schema.sequence_features:
        return ("records are tf.train.SequenceExample: TFDS parses tf.train.Example only (its Sequence feature "
                "stores the steps flattened inside an Example)")
    if manifest.compression is not Compression.NONE:
        return f"TFDS reads uncompressed TFRecord shards only; these are {manifest.compression.name}"
    bad = [name for name, feature in manifest.schema.features.items()
           if isinstance(feature, ClassLabel) and ("/" in name or name in (".", ".."))]
    if bad:
        return f"class label features {bad} cannot name a TFDS label file ('<feature>.labels.txt')"
    return None


def _dims(shape: tuple[int | None, ...]) -> dict[str, Any]:
    return {"dimensions": [str(-1 if d is None else d) for d in shape]} if shape else {}


def _tensor(shape: tuple[int | None, ...], dtype: str, encoding: str = "none") -> dict[str, Any]:
    return {"pythonClassName": f"{_MODULE}.tensor_feature.Tensor",
            "tensor": {"shape": _dims(shape), "dtype": dtype, "encoding": encoding}}


def feature_json(feature: Feature) -> dict[str, Any]:
    """One feature as TFDS's ``Feature`` proto in JSON."""
    if isinstance(feature, Image):
        image: dict[str, Any] = {"shape": _dims(feature.shape or (None, None, None)), "dtype": "uint8"}
        # TFDS ties a named encoding to known channels; with any channels it sniffs the bytes instead.
        if feature.format in _TFDS_IMAGE_FORMATS and feature.shape is not None:
            image["encodingFormat"] = _TFDS_IMAGE_FORMATS[feature.format]
        return {"pythonClassName": f"{_MODULE}.image_feature.Image", "image": image}
    if isinstance(feature, ClassLabel):
        return {"pythonClassName": f"{_MODULE}.class_label_feature.ClassLabel",
                "classLabel": {"numClasses": str(feature.num_classes)}}
    if isinstance(feature, Tensor):
        return _tensor(feature.shape, feature.dtype.value, "bytes")
    if isinstance(feature, Scalar):
        return _tensor((), _TFDS_DTYPE[feature.dtype])
    if isinstance(feature, FixedList):
        return _tensor((feature.length,), _TFDS_DTYPE[feature.dtype])
    if isinstance(feature, VarList):
        return _tensor((None,), _TFDS_DTYPE[feature.dtype])
    raise TypeError(f"no TFDS feature for {feature!r}")


def features_json(schema: Schema) -> dict[str, Any]:
    """The schema's features as TFDS's ``FeaturesDict`` in JSON (the content of features.json)."""
    return {"pythonClassName": f"{_MODULE}.features_dict.FeaturesDict",
            "featuresDict": {"features": {name: feature_json(f) for name, f in schema.features.items()}}}


def _supervised_keys(features: Mapping[str, Feature]) -> dict[str, Any] | None:
    """(image, label) for ``as_supervised=True`` when there is exactly one of each."""
    images = [n for n, f in features.items() if isinstance(f, Image)]
    labels = [n for n, f in features.items() if isinstance(f, ClassLabel)]
    if len(images) != 1 or len(labels) != 1:
        return None
    return {"tuple": {"items": [{"featureKey": images[0]}, {"featureKey": labels[0]}]}}


def dataset_info_json(manifest: Manifest) -> dict[str, Any]:
    """TFDS's ``DatasetInfo`` in JSON (the content of dataset_info.json)."""
    info: dict[str, Any] = {
        "name": manifest.dataset_name,
        "version": TFDS_VERSION,
        "description": (f"Written by beam-tfrecord {manifest.tool_version} at {manifest.created_at}. "
                        "manifest.json in this directory describes it in full."),
        "fileFormat": manifest.file_format.value,
        "splits": [{"name": split.name, "numBytes": str(split.num_bytes),
                    "shardLengths": [str(s.num_records) for s in split.shards],
                    "filepathTemplate": FILEPATH_TEMPLATE}
                   for split in manifest.splits],
    }
    supervised = _supervised_keys(manifest.schema.features)
    if supervised is not None:
        info["supervisedKeys"] = supervised
    return info


def tfds_files(manifest: Manifest) -> dict[str, bytes]:
    """File name -> contents of TFDS's metadata for ``manifest``; empty when TFDS cannot read it."""
    if unsupported_reason(manifest) is not None:
        return {}
    files = {
        DATASET_INFO_FILENAME: json.dumps(dataset_info_json(manifest), indent=2, sort_keys=True) + "\n",
        FEATURES_FILENAME: json.dumps(features_json(manifest.schema), indent=2, sort_keys=True) + "\n",
    }
    for name, feature in manifest.schema.features.items():
        if isinstance(feature, ClassLabel):
            files[name + LABELS_SUFFIX] = "".join(f"{label}\n" for label in feature.names)
    return {name: text.encode("utf-8") for name, text in files.items()}


def write_tfds_files(dataset_dir: str, manifest: Manifest) -> None:
    """Writes TFDS's metadata of a published dataset (``dataset_info.json`` last).

    The same manifest always gives the same bytes, so this is safe to repeat: publishing writes
    them just after the manifest, and a step that finds a manifest a crash left without them (a
    re-executed publish, a refresh adopting a finished version) writes them again.
    """
    files = tfds_files(manifest)
    for name in sorted(files, key=lambda n: n == DATASET_INFO_FILENAME):
        storage.write_bytes_atomic(storage.join(dataset_dir, name), files[name])
