"""A shard writer hands its records to the file and to the statistics in blocks (``ShardFileWriter._append_entries``):
the shard, its DALI index and its statistics are the bytes that record-by-record appends give, REFERENCE entries
(rebuilt from their files) interleaved anywhere, summaries ending where ``BYTES_PER_SUMMARY`` ends them."""

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_files import write_random_files

from beam_tfrecord import DType, FileRef, Scalar, Schema
from beam_tfrecord.beam.shard_statistics import STATISTICS_SUFFIX, ShardStatistics
from beam_tfrecord.beam.shards import ShardFileWriter, ShardTarget
from beam_tfrecord.core.dali_index import dali_index_name
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.framing import frame
from beam_tfrecord.core.runs import make_record_entry, make_reference_entry
from beam_tfrecord.core.sample_encoder import SampleEncoder
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.sharding import ShardSpec
from beam_tfrecord.interop.dali import DaliIndexBuilder
from beam_tfrecord.reader.decode.block_decode import BlockDecoder

# A float feature: its sum depends on where each summary ends, so a summary ended elsewhere changes the bytes.
SCHEMA = Schema({"blob": Scalar(DType.BYTES), "x": Scalar(DType.FLOAT32)})
REFERENCE_BYTES = 300_000  # a record this large or larger is a REFERENCE entry, its blob in a file


@pytest.fixture(scope="module")
def blob_files(tmp_path_factory):
    """Blob files of 0.2-1.2 MB, read back by REFERENCE entries (the same files for every example)."""
    return write_random_files(str(tmp_path_factory.mktemp("blob-files")), 8, REFERENCE_BYTES, 1_200_000, seed=5,
                              name="blob-{}.bin")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(200_000, 700_000), min_size=16, max_size=30), references=st.sets(st.integers(0, 29)),
       dali=st.booleans(), seed=st.integers(0, 2**16))
def test_blocks_write_the_bytes_of_records_appended_one_by_one(blob_files, tmp_path_factory, sizes, references,
                                                               dali, seed):
    rng = np.random.default_rng(seed)
    encoder = SampleEncoder(SCHEMA)
    entries, framed = [], []
    for i, size in enumerate(sizes):
        x = float(rng.normal() * 10.0 ** rng.integers(-8, 9))  # magnitudes apart: sums round
        if i in references:
            path = blob_files[i % len(blob_files)]
            with open(path, "rb") as handle:
                record = encoder.encode(Sample(f"k{i}", {"blob": handle.read(), "x": x}))
            sample = Sample(f"k{i}", {"blob": FileRef(path), "x": x})
            entries.append(make_reference_entry(i, len(record) + 16, pickle.dumps(sample)))
        else:
            record = encoder.encode(Sample(f"k{i}", {"blob": rng.bytes(size), "x": x}))
            entries.append(make_record_entry(i, record))
        framed.append(frame(record))
    out = tmp_path_factory.mktemp("shard")
    spec = ShardSpec("train", 0, 1, 0, 2**64, len(framed), sum(map(len, framed)))
    target = ShardTarget(spec, "d-train.tfrecord-00000-of-00001", str(out / "shard"))
    writer = ShardFileWriter(SCHEMA, Compression.NONE, {}, direct_io=False, dali_index=dali, statistics=True)

    info, stats = writer.write(target, entries)

    assert (info.num_records, stats.rebuilt) == (len(framed), len(set(references) & set(range(len(sizes)))))
    with open(target.temp_path, "rb") as handle:
        assert handle.read() == b"".join(framed)
    one_by_one = ShardStatistics(SCHEMA, "train", BlockDecoder(SCHEMA, views=True, absent_lists=True), "unused")
    for record in framed:
        one_by_one.add_framed(record)
    one_by_one.flush()
    with open(target.temp_path + STATISTICS_SUFFIX, "rb") as handle:
        assert handle.read() == pickle.dumps(one_by_one.stats, protocol=pickle.HIGHEST_PROTOCOL)
    if dali:
        index = DaliIndexBuilder()
        for record in framed:
            index.add(len(record))
        with open(dali_index_name(target.temp_path), "rb") as handle:
            assert handle.read() == index.text()
