"""Compression round trips: GZIP and ZLIB shards verify, TensorFlow reads them, contents are equal."""

import os

import apache_beam as beam
import pytest

from beam_tfrecord import (
    Compression,
    DType,
    Scalar,
    Schema,
    ShardingConfig,
    VarList,
    WriteTFRecordDataset,
    load_manifest,
    verify_dataset,
)
from beam_tfrecord.core.samples import Sample

SCHEMA = Schema({"id": Scalar(DType.INT64), "text": Scalar(DType.STRING), "values": VarList(DType.FLOAT32)})
SAMPLES = [Sample(f"s{i}", {"id": i, "text": "lorem ipsum " * (i % 7), "values": [float(i)] * (i % 5)})
           for i in range(500)]


def _write(out: str, compression: Compression) -> None:
    with beam.Pipeline(argv=["--runner=DirectRunner"]) as pipeline:
        _ = pipeline | beam.Create(SAMPLES) | WriteTFRecordDataset(
            out, schema=SCHEMA, compression=compression, sharding=ShardingConfig(target_shard_bytes=8_000))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("compression")
    outs = {}
    for compression in Compression:
        outs[compression] = str(root / (compression.value or "none"))
        _write(outs[compression], compression)
    return outs


@pytest.mark.parametrize("compression", list(Compression), ids=lambda c: c.value or "NONE")
def test_round_trip_through_tensorflow(written, compression):
    import tensorflow as tf

    out = written[compression]
    manifest = load_manifest(out)
    assert manifest.compression is compression
    assert all(s.filename.endswith(compression.suffix) for s in manifest.shards)
    assert verify_dataset(out).num_records == 500
    files = [os.path.join(out, s.filename) for s in manifest.shards]
    spec = {"id": tf.io.FixedLenFeature([], tf.int64), "text": tf.io.FixedLenFeature([], tf.string),
            "values": tf.io.RaggedFeature(tf.float32)}
    read = {}
    for batch in tf.data.TFRecordDataset(files, compression_type=compression.value).batch(100):
        parsed = tf.io.parse_example(batch, spec)
        for i, text, values in zip(parsed["id"].numpy(), parsed["text"].numpy(), parsed["values"].to_list()):
            read[int(i)] = (text.decode(), values)
    assert read == {s.values["id"]: (s.values["text"], s.values["values"]) for s in SAMPLES}


def test_compression_shrinks_shards_but_not_records(written):
    plain = load_manifest(written[Compression.NONE])
    for compression in (Compression.GZIP, Compression.ZLIB):
        packed = load_manifest(written[compression])
        assert packed.num_written == plain.num_written
        assert sum(s.num_bytes for s in packed.shards) < sum(s.num_bytes for s in plain.shards) / 2
        # Balance is planned on uncompressed bytes, so the cut is the same whatever the compression.
        assert [s.num_record_bytes for s in packed.shards] == [s.num_record_bytes for s in plain.shards]


def test_compressed_output_is_deterministic(written, tmp_path):
    again = str(tmp_path / "gzip-again")
    _write(again, Compression.GZIP)
    assert [s.crc32c for s in load_manifest(again).shards] == [s.crc32c for s in
                                                               load_manifest(written[Compression.GZIP]).shards]
