"""``croissant.json``: the dataset described in MLCommons Croissant 1.1 (JSON-LD), built from the manifest alone.

What it holds: docs/manifest.md, "Files for other tools"; what ``mlcroissant`` reads of it: docs/reading.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from beam_tfrecord.core.manifest import MANIFEST_FILENAME, Manifest
from beam_tfrecord.core.schema import ClassLabel, DType, Feature, FixedList, Image, Scalar, Tensor, TensorDType, VarList
from beam_tfrecord.interop.self_contained import not_self_contained_reason

CROISSANT_FILENAME = "croissant.json"
CONFORMS_TO = "http://mlcommons.org/croissant/1.1"
# Croissant 1.1's standard @context (as ``mlcroissant`` makes it for 1.1; another one gets a warning).
CONTEXT: Mapping[str, Any] = {
    "@language": "en", "@vocab": "https://schema.org/", "arrayShape": "cr:arrayShape", "citeAs": "cr:citeAs",
    "column": "cr:column", "conformsTo": "dct:conformsTo", "containedIn": "cr:containedIn",
    "cr": "http://mlcommons.org/croissant/", "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"}, "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/", "description": {"@container": "@language"},
    "equivalentProperty": "cr:equivalentProperty", "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract", "field": "cr:field", "fileProperty": "cr:fileProperty", "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet", "format": "cr:format", "includes": "cr:includes", "isArray": "cr:isArray",
    "isLiveDataset": "cr:isLiveDataset", "jsonPath": "cr:jsonPath", "key": "cr:key", "md5": "cr:md5",
    "name": {"@container": "@language"}, "parentField": "cr:parentField", "path": "cr:path",
    "recordSet": "cr:recordSet", "references": "cr:references", "regex": "cr:regex", "repeated": "cr:repeated",
    "replace": "cr:replace", "samplingRate": "cr:samplingRate", "sc": "https://schema.org/",
    "separator": "cr:separator", "source": "cr:source", "subField": "cr:subField", "transform": "cr:transform",
}
_PLAIN_TYPES = {DType.INT64: "cr:Int64", DType.FLOAT32: "cr:Float32", DType.STRING: "sc:Text", DType.BYTES: "sc:Text"}
_TENSOR_TYPES = {TensorDType.BOOL: "sc:Boolean", TensorDType.UINT8: "cr:UInt8", TensorDType.INT8: "cr:Int8",
                 TensorDType.UINT16: "cr:UInt16", TensorDType.INT16: "cr:Int16", TensorDType.INT32: "cr:Int32",
                 TensorDType.INT64: "cr:Int64", TensorDType.FLOAT16: "cr:Float16",
                 TensorDType.FLOAT32: "cr:Float32", TensorDType.FLOAT64: "cr:Float64"}
_SHARDS_ID = "shard-files"


def unsupported_reason(manifest: Manifest) -> str | None:
    """Why no ``croissant.json`` describes this dataset, or None when one does."""
    shared = not_self_contained_reason(manifest)
    if shared is not None:  # its file set matches the shards by name, in the version's directory, every record
        return (f"the version is not self-contained ({shared}); `beam-tfrecord compact ROOT` writes a version "
                "Croissant describes")
    if manifest.schema.sequence_features:
        return "records are tf.train.SequenceExample: Croissant fields have no per-step feature lists"
    return None


def _field(record_set: str, name: str, data_type: str, description: str, **more: Any) -> dict[str, Any]:
    return {"@type": "cr:Field", "@id": f"{record_set}/{name}", "name": name, "description": description,
            "dataType": data_type, **more}


def _example_field(name: str, feature: Feature) -> dict[str, Any]:
    """One feature of the ``examples`` record set, read by column from the shards."""
    source = {"source": {"fileSet": {"@id": _SHARDS_ID}, "extract": {"column": name}}}
    if isinstance(feature, Image):
        shape = "" if feature.shape is None else f" of shape {feature.shape}"
        return _field("examples", name, "sc:ImageObject", f"{feature.format.value} image{shape} (encoded bytes)",
                      **source)
    if isinstance(feature, ClassLabel):
        return _field("examples", name, "cr:Int64", f"class id, 0 to {feature.num_classes - 1}", **source,
                      references={"field": {"@id": f"{name}_names/label"}})
    if isinstance(feature, Tensor):
        return _field("examples", name, _TENSOR_TYPES[feature.dtype],
                      f"{feature.dtype.value} array of shape {feature.shape}, stored as its raw little-endian bytes",
                      **source, isArray=True, arrayShape=",".join(map(str, feature.shape)) or "1")
    if isinstance(feature, Scalar):
        return _field("examples", name, _PLAIN_TYPES[feature.dtype], f"{feature.dtype.value} scalar", **source)
    if isinstance(feature, FixedList):
        return _field("examples", name, _PLAIN_TYPES[feature.dtype], f"{feature.length} {feature.dtype.value} values",
                      **source, isArray=True, arrayShape=str(feature.length))
    if isinstance(feature, VarList):
        return _field("examples", name, _PLAIN_TYPES[feature.dtype], f"any number of {feature.dtype.value} values",
                      **source, isArray=True, arrayShape="-1")
    raise TypeError(f"no Croissant field for {feature!r}")


def _shard_pattern(manifest: Manifest, split: str) -> str:
    """A glob that matches exactly the split's shard names (not their DALI indexes)."""
    first = manifest.split(split).shards[0].filename
    index = first.index("-00000-of-")
    return first[:index] + "-?????" + first[index + len("-00000"):]


def _split_regex(manifest: Manifest) -> str:
    """The regex whose group is the split in a shard's file name (``DATASET-SPLIT.FORMAT-...``; neither
    name holds '-' or '.')."""
    return f"^{manifest.dataset_name}-([A-Za-z0-9_]+)[.]"


def _record_sets(manifest: Manifest) -> list[dict[str, Any]]:
    sets: list[dict[str, Any]] = [{
        "@type": "cr:RecordSet", "@id": "splits", "name": "splits", "dataType": "cr:Split",
        "description": "the dataset's splits", "key": {"@id": "splits/name"},
        "field": [_field("splits", "name", "sc:Text", "split name")],
        "data": [{"splits/name": split.name} for split in manifest.splits],
    }]
    for name, feature in manifest.schema.features.items():
        if isinstance(feature, ClassLabel):
            sets.append({
                "@type": "cr:RecordSet", "@id": f"{name}_names", "name": f"{name}_names", "dataType": "sc:Enumeration",
                "description": f"the classes of feature {name!r}", "key": {"@id": f"{name}_names/label"},
                "field": [_field(f"{name}_names", "label", "cr:Int64", "class id"),
                          _field(f"{name}_names", "name", "sc:Text", "class name")],
                "data": [{f"{name}_names/label": i, f"{name}_names/name": n} for i, n in enumerate(feature.names)],
            })
    shard_fields = (("filename", "sc:Text", "shard file name"), ("split", "sc:Text", "its split"),
                    ("num_records", "cr:Int64", "records in it"), ("crc32c", "sc:Text", "CRC32C of the file"))
    sets.append({
        "@type": "cr:RecordSet", "@id": "shards", "name": "shards", "description": "the shards, from manifest.json",
        "field": [_field("shards", key, data_type, description, source={
            "fileObject": {"@id": MANIFEST_FILENAME}, "extract": {"jsonPath": f"$.splits[*].shards[*].{key}"}})
            for key, data_type, description in shard_fields],
    })
    split_field = _field("examples", "split", "sc:Text", "the record's split (from its shard's name)",
                         source={"fileSet": {"@id": _SHARDS_ID}, "extract": {"fileProperty": "filename"},
                                 "transform": {"regex": _split_regex(manifest)}},
                         references={"field": {"@id": "splits/name"}})
    sets.append({
        "@type": "cr:RecordSet", "@id": "examples", "name": "examples",
        "description": f"the records: tf.train.Example protos in {manifest.file_format.value} shards",
        "field": [split_field, *(_example_field(name, f) for name, f in manifest.schema.features.items())],
    })
    return sets


def croissant_json(manifest: Manifest, manifest_bytes: bytes) -> dict[str, Any]:
    """The Croissant metadata of ``manifest``, whose file holds ``manifest_bytes`` (hashed into it)."""
    split_names = ", ".join(f"{s.name} ({s.num_records} records)" for s in manifest.splits)
    return {
        "@context": dict(CONTEXT),
        "@type": "sc:Dataset",
        "name": manifest.dataset_name,
        "description": (f"{manifest.num_written} records in {len(manifest.shards)} {manifest.file_format.value} "
                        f"shards: {split_names}. Written by beam-tfrecord {manifest.tool_version}; manifest.json "
                        "describes it in full."),
        "conformsTo": CONFORMS_TO,
        "datePublished": manifest.created_at,
        "version": "1.0.0",
        "distribution": [
            {"@type": "cr:FileObject", "@id": MANIFEST_FILENAME, "name": MANIFEST_FILENAME,
             "description": "the dataset's manifest (beam-tfrecord)", "contentUrl": MANIFEST_FILENAME,
             "encodingFormat": "application/json", "sha256": hashlib.sha256(manifest_bytes).hexdigest()},
            {"@type": "cr:FileSet", "@id": _SHARDS_ID, "name": _SHARDS_ID,
             "description": f"the {manifest.file_format.value} shards of every split",
             "encodingFormat": f"application/x-{manifest.file_format.value.replace('_', '-')}",
             "includes": [_shard_pattern(manifest, split.name) for split in manifest.splits]},
        ],
        "recordSet": _record_sets(manifest),
    }
