"""Ray Data: ``ray.data.read_tfrecords`` arguments for a dataset's split, its schema from ``schema.pbtxt``.

Without a schema Ray infers each feature's type from the records, and a one-element list becomes a
scalar: a variable-length list holding one value in some records and more in others fails to read
("Types mismatch: int64 != list<item: int64>"). With ``tf_schema`` (the dataset's ``schema.pbtxt``
parsed) every feature is a list of its declared type. Ray reads ``tf.train.Example`` only.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from beam_tfrecord import storage
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.dataset import open_dataset
from beam_tfrecord.errors import ReaderError
from beam_tfrecord.interop.self_contained import require_self_contained
from beam_tfrecord.interop.tfmd_schema import SCHEMA_FILENAME

_ARROW_COMPRESSION = {Compression.NONE: None, Compression.GZIP: "gzip"}  # ZLIB: no Arrow stream codec


def ray_read_args(path: str, *, split: str = "train") -> dict[str, Any]:
    """``paths`` and ``tf_schema`` (and, for GZIP shards, ``arrow_open_stream_args``) for
    ``ray.data.read_tfrecords``, for one split's shards in manifest order.

    Raises:
        ReaderError: the records are SequenceExamples, the shards are ZLIB-compressed, or the dataset
            has no ``schema.pbtxt`` (written before it existed).
        NotSelfContainedError: the version shares shards with earlier ones or deletes records (Ray reads every
            record of the files it is given): ``beam-tfrecord compact ROOT`` first.
    """
    dataset = open_dataset(path)
    require_self_contained(dataset, reader="Ray Data's read_tfrecords")
    manifest = dataset.manifest
    if manifest.schema.sequence_features:
        raise ReaderError(f"{path!r}: records are tf.train.SequenceExample; Ray's read_tfrecords reads "
                          "tf.train.Example only")
    if manifest.compression not in _ARROW_COMPRESSION:
        raise ReaderError(f"{path!r}: {manifest.compression.name} shards; Ray reads uncompressed or GZIP ones")
    schema_path = storage.join(dataset.directory, SCHEMA_FILENAME)
    if not storage.exists(schema_path):
        raise ReaderError(f"{path!r}: no {SCHEMA_FILENAME} (written by versions before it); publish it again")
    args: dict[str, Any] = {
        "paths": [dataset.shard_path(s) for s in manifest.split(split).shards],
        "tf_schema": text_format.Parse(storage.read_bytes(schema_path).decode("utf-8"), schema_pb2.Schema()),
    }
    if _ARROW_COMPRESSION[manifest.compression] is not None:
        args["arrow_open_stream_args"] = {"compression": _ARROW_COMPRESSION[manifest.compression]}
    return args
