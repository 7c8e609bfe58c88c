"""Small datasets written locally by the real writer, for the remote-read tests (each format and compression).

Every sample carries its key, so a test can compare what a reader gives from ``gs://`` with what it
gives from the local copy. Shards are small (TFRecord: a few KB; ArrayRecord: 128 KiB, its block
size), so that with ``SMALL_READS[variant]`` every shard is several ranges and the read-ahead
crosses shards.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np

from beam_tfrecord import (
    ClassLabel,
    Compression,
    DType,
    Sample,
    Scalar,
    Schema,
    ShardingConfig,
    SplitConfig,
    WriteTFRecordDataset,
)
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.remote_reads import RemoteReads

NUM_SAMPLES = 90
SCHEMA = Schema(features={"key": Scalar(DType.STRING), "blob": Scalar(DType.BYTES),
                          "label": ClassLabel(("a", "b", "c"))})
_TFRECORD_READS = RemoteReads(connections=4, range_bytes=1000, bytes_in_flight=4000)
SMALL_READS = {"tfrecord": _TFRECORD_READS, "tfrecord-gzip": _TFRECORD_READS,
               "array_record": RemoteReads(connections=4, range_bytes=32 << 10, bytes_in_flight=128 << 10)}
VARIANTS = {"tfrecord": (FileFormat.TFRECORD, Compression.NONE),
            "tfrecord-gzip": (FileFormat.TFRECORD, Compression.GZIP),
            "array_record": (FileFormat.ARRAY_RECORD, Compression.NONE)}


def samples() -> list[Sample]:
    rng = np.random.default_rng(3)
    return [Sample(f"s{i:04d}", {"key": f"s{i:04d}", "blob": rng.bytes(100 + i * 7 % 300), "label": i % 3})
            for i in range(NUM_SAMPLES)]


def write_local(out: str, file_format: FileFormat, compression: Compression) -> str:
    with beam.Pipeline() as pipeline:
        _ = (pipeline
             | beam.Create(samples())
             | WriteTFRecordDataset(out, schema=SCHEMA, file_format=file_format, compression=compression,
                                    splits=SplitConfig.parse("train=0.8,test=0.2"),
                                    sharding=ShardingConfig(target_shard_bytes=5_000)))
    return out
