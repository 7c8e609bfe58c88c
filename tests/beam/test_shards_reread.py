"""Large file-backed records are written once: rebuilt from their files by the shard writer.

The output must be byte-identical to spilling every record, and a file that changes between the
two reads must fail the job rather than produce a shard that differs from the plan.
"""

import os
import re

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from random_files import write_random_files

from beam_tfrecord import (
    DType,
    FileRef,
    Scalar,
    Schema,
    ShardingConfig,
    WriterTuning,
    WriteTFRecordDataset,
    load_manifest,
    verify_dataset,
)
from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.beam.shards import ShardFileWriter, ShardTarget
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.framing import framed_size
from beam_tfrecord.core.runs import make_reference_entry
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.sharding import ShardSpec
from beam_tfrecord.errors import InputChangedError, SourceError

SCHEMA = Schema({"blob": Scalar(DType.BYTES), "index": Scalar(DType.INT64)})


@pytest.fixture(scope="module")
def blob_files(tmp_path_factory):
    # some under, most over 64 KiB
    return write_random_files(str(tmp_path_factory.mktemp("blobs")), 60, 1_000, 200_000, seed=3)


def _build(out: str, paths: list[str], reread_min_bytes: int, *, sizes: dict[str, int] | None = None,
           schema: Schema = SCHEMA) -> dict[str, int]:
    """Builds the dataset; ``sizes`` (path -> listed size) are given to the FileRefs when set."""
    sizes = sizes or {}
    pipeline = beam.Pipeline(argv=["--runner=DirectRunner"])
    _ = (pipeline
         | beam.Create([Sample(os.path.basename(p), {"blob": FileRef(p, sizes.get(p)), "index": i})
                        for i, p in enumerate(paths)])
         | WriteTFRecordDataset(out, schema=schema, sharding=ShardingConfig(target_shard_bytes=1_000_000),
                                tuning=WriterTuning(reread_min_bytes=reread_min_bytes)))
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    return {c.key.metric.name: c.committed for c in counters}


@pytest.mark.parametrize("reread_min_bytes", [
    pytest.param(64 * 1024, id="large-records-written-without-a-copy"),
    pytest.param(4 * 1024, id="records-under-64KiB-joined-with-their-framing"),
])
def test_reread_output_equals_spilled_output(blob_files, tmp_path, reread_min_bytes):
    spilled, reread = str(tmp_path / "spilled"), str(tmp_path / "reread")
    _build(spilled, blob_files, reread_min_bytes=0)
    counters = _build(reread, blob_files, reread_min_bytes=reread_min_bytes)
    large = sum(os.path.getsize(p) >= reread_min_bytes for p in blob_files)
    assert counters["records_reread_from_source"] == large > 0
    a, b = load_manifest(spilled), load_manifest(reread)
    assert [(s.filename, s.crc32c) for s in a.shards] == [(s.filename, s.crc32c) for s in b.shards]
    assert len(b.shards) >= 3 and verify_dataset(reread).num_records == 60


def test_listed_sizes_plan_large_files_without_reading_them_first(blob_files, tmp_path):
    spilled, listed = str(tmp_path / "spilled"), str(tmp_path / "listed")
    _build(spilled, blob_files, reread_min_bytes=0)
    counters = _build(listed, blob_files, reread_min_bytes=64 * 1024,
                      sizes={p: os.path.getsize(p) for p in blob_files})
    large = sum(os.path.getsize(p) >= 64 * 1024 for p in blob_files)
    assert counters["records_planned_from_listed_sizes"] == counters["records_reread_from_source"] == large > 0
    a, b = load_manifest(spilled), load_manifest(listed)
    assert [(s.filename, s.crc32c) for s in a.shards] == [(s.filename, s.crc32c) for s in b.shards]


def test_a_wrong_listed_size_fails_the_job_naming_the_sample(blob_files, tmp_path):
    large = next(p for p in blob_files if os.path.getsize(p) >= 64 * 1024)
    sizes = {large: os.path.getsize(large) + 1}  # the listing says one byte more than the file has
    with pytest.raises(Exception, match=f"{os.path.basename(large)}.*its record is .* bytes, .* when planned"):
        _build(str(tmp_path / "out"), blob_files, reread_min_bytes=64 * 1024, sizes=sizes)


def test_listed_sizes_are_not_used_for_features_that_check_content(blob_files, tmp_path):
    """A string feature must be valid UTF-8: its file is read to plan it, so a wrong size is harmless."""
    text = tmp_path / "text.txt"
    text.write_text("é" * 50_000)
    schema = Schema({"blob": Scalar(DType.STRING), "index": Scalar(DType.INT64)})
    counters = _build(str(tmp_path / "out"), [str(text)], reread_min_bytes=64 * 1024, schema=schema,
                      sizes={str(text): 7})
    assert counters.get("records_planned_from_listed_sizes", 0) == 0
    assert counters["records_reread_from_source"] == 1
    assert verify_dataset(str(tmp_path / "out")).num_records == 1


def test_a_file_changed_between_the_two_reads_fails_the_shard(tmp_path):
    source = tmp_path / "source.bin"
    source.write_bytes(b"x" * 100_000)
    sample = Sample("source.bin", {"blob": FileRef(str(source)), "index": 7})
    import pickle

    from beam_tfrecord.core.sample_encoder import SampleEncoder

    record = SampleEncoder(SCHEMA).encode(Sample("source.bin", {"blob": source.read_bytes(), "index": 7}))
    entry = make_reference_entry(5, framed_size(len(record)), pickle.dumps(sample))
    spec = ShardSpec("train", 0, 1, 0, 2**64, 1, framed_size(len(record)))
    target = ShardTarget(spec, "d-train.tfrecord-00000-of-00001", str(tmp_path / "shard"))
    writer = ShardFileWriter(SCHEMA, Compression.NONE, {}, direct_io=True)

    info, stats = writer.write(target, [entry])  # unchanged: the shard is written as planned
    assert (info.num_records, stats.rebuilt) == (1, 1)
    source.write_bytes(b"y" * 90_000)
    changed = framed_size(len(SampleEncoder(SCHEMA).encode(Sample("source.bin", {"blob": b"y" * 90_000, "index": 7}))))
    planned = framed_size(len(record))
    with pytest.raises(InputChangedError, match=f"its record is {changed} bytes, {planned} when planned"):
        writer.write(target, [entry])
    source.unlink()
    with pytest.raises(InputChangedError, match="it was valid when planned, now: .*cannot read"):
        writer.write(target, [entry])


@pytest.mark.parametrize("size", [-1, 2.5, True, "7"], ids=["negative", "float", "bool", "string"])
def test_a_listed_size_must_be_a_byte_count(size):
    expected = f"FileRef 'x.bin': size_bytes must be a byte count >= 0 or None, got {size!r}"
    with pytest.raises(SourceError, match=re.escape(expected)):
        FileRef("x.bin", size)


def test_a_numpy_listed_size_becomes_an_int():
    assert FileRef("x.bin", np.int64(5)).size_bytes == 5 and type(FileRef("x.bin", np.int64(5)).size_bytes) is int
