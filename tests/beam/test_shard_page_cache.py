"""A shard the page cache takes without the kernel writing back goes through it; one it does not
take is written with O_DIRECT (``direct_io.page_cache_takes``). The records are the same either way."""

from __future__ import annotations

import random

import pytest

from beam_tfrecord.beam.shards import ShardFileWriter, ShardTarget
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.framing import framed_size, iter_records
from beam_tfrecord.core.runs import make_record_entry
from beam_tfrecord.core.sample_encoder import SampleEncoder
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.core.sharding import ShardSpec
from beam_tfrecord.storage import direct_io
from tests.storage.test_direct_io import needs_o_direct, resident_fraction

SCHEMA = Schema({"blob": Scalar(DType.BYTES)})


@needs_o_direct
@pytest.mark.parametrize("bypass", [True, False], ids=["direct_io-on", "direct_io-off"])
def test_a_shard_the_page_cache_takes_is_written_through_it_with_the_same_records(tmp_path, bypass):
    rng = random.Random(3)
    records = [SampleEncoder(SCHEMA).encode(Sample(f"k{i}", {"blob": rng.randbytes(20_000)})) for i in range(200)]
    entries = [make_record_entry(i, record) for i, record in enumerate(records)]
    num_bytes = sum(framed_size(len(r)) for r in records)  # ~4 MB
    target = ShardTarget(ShardSpec("train", 0, 1, 0, 2**64, len(records), num_bytes),
                         "d-train.tfrecord-00000-of-00001", str(tmp_path / "shard"))
    taken = direct_io.page_cache_takes(num_bytes)  # this machine's state, just before writing
    ShardFileWriter(SCHEMA, Compression.NONE, {}, direct_io=bypass).write(target, entries)
    resident = resident_fraction(target.temp_path)
    if taken or not bypass:
        assert resident == 1.0  # through the page cache: every page is cached
    else:
        assert resident < 0.01  # O_DIRECT: at most the tail block, written buffered
    with open(target.temp_path, "rb") as handle:
        assert list(iter_records(handle, name=target.temp_path)) == records
