"""ReadTFRecordDataset: a published dataset's records in a Beam pipeline, as read_numpy gives them, its shards
split into record ranges (checked on small shards with a small split size; the 1 GB case is a benchmark)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from beam_tfrecord import WriteBalancedTFRecord, read_numpy
from beam_tfrecord.beam.read_dataset import (
    RANGES_COUNTER,
    ReadTFRecordDataset,
    RecordOutput,
    RecordRanges,
    read_records,
)
from beam_tfrecord.core import proto
from beam_tfrecord.errors import CorruptShardError, ReaderError, UnknownSplitError
from beam_tfrecord.formats.tfrecord import record_offsets

NUM_RECORDS = 300
SPLIT_BYTES = 500  # about a dozen records: every shard is cut into several ranges


def _example(i: int) -> bytes:
    example = proto.Example()
    example.features.feature["id"].int64_list.value.append(i)
    example.features.feature["text"].bytes_list.value.append(b"t" * (i % 23))
    return example.SerializeToString()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    prefix = str(tmp_path_factory.mktemp("read") / "ds")
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create([_example(i) for i in range(NUM_RECORDS)], reshuffle=False)
             | WriteBalancedTFRecord(prefix, num_shards=2, splits="train=0.8,test=0.2"))
    return prefix


def _id(example: dict) -> int:
    return int(example["id"])


def _serialized_id(record: bytes) -> int:
    return proto.Example.FromString(record).features.feature["id"].int64_list.value[0]


@pytest.mark.parametrize("split", ["train", "test"])
def test_the_direct_runner_reads_read_numpys_records_in_several_ranges(dataset, split):
    expected = sorted(_id(e) for e in read_numpy(dataset, split=split))
    pipeline = beam.Pipeline()
    read = pipeline | ReadTFRecordDataset(dataset, split=split, split_bytes=SPLIT_BYTES)
    serialized = pipeline | "Serialized" >> ReadTFRecordDataset(dataset, split=split, output=RecordOutput.SERIALIZED)
    assert_that(read | beam.Map(_id), equal_to(expected), label="Dicts")
    assert_that(serialized | beam.Map(_serialized_id), equal_to(expected), label="Serialized")
    result = pipeline.run()
    result.wait_until_finish()
    ranges = result.metrics().query(MetricsFilter().with_name(RANGES_COUNTER))["counters"]
    assert sum(c.committed for c in ranges) > 2 * 2  # more ranges than the split's shards (and the unsplit read's)


class _CountBundlesFn(beam.DoFn):
    """Passes elements on, counting the bundles of the stage it is fused into (the read's)."""

    def start_bundle(self) -> None:
        Metrics.counter("test_read_dataset", "bundles").inc()

    def process(self, element):
        yield element


def test_two_worker_processes_read_one_shard_in_more_than_one_bundle(dataset, monkeypatch):
    """The ranges of one shard are spread over bundles (the in-process runner keeps a stage's input in one)."""
    # The worker processes unpickle _CountBundlesFn by reference: they import this module as pytest did.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    expected = sorted(_id(e) for e in read_numpy(dataset, split="train"))
    pipeline = beam.Pipeline(options=PipelineOptions(["--direct_num_workers=2",
                                                      "--direct_running_mode=multi_processing"]))
    ids = (pipeline | ReadTFRecordDataset(dataset, split="train", split_bytes=SPLIT_BYTES)
           | beam.ParDo(_CountBundlesFn()) | beam.Map(_id))
    assert_that(ids, equal_to(expected))
    result = pipeline.run()
    result.wait_until_finish()
    bundles = result.metrics().query(MetricsFilter().with_name("bundles"))["counters"]
    assert sum(c.committed for c in bundles) > 1


def test_dask_reads_the_same_records_from_planned_ranges(dataset, dask_address, tmp_path):
    out = tmp_path / "ids.txt"
    reader = ReadTFRecordDataset(dataset, split_bytes=SPLIT_BYTES)
    assert len(reader.planned_ranges()) > 2

    def write_ids(_, ids):
        out.write_text(",".join(map(str, sorted(ids))))

    pipeline = beam.Pipeline(options=PipelineOptions(["--runner=beam_tfrecord.engine.dask_runner.DaskRunner",
                                                      f"--dask_client_address={dask_address}"]))
    ids = pipeline | reader | beam.Map(_id)
    _ = pipeline | "One" >> beam.Create([None]) | beam.Map(write_ids, beam.pvalue.AsList(ids))
    result = pipeline.run()
    result.wait_until_finish()
    result.client.close()
    assert out.read_text() == ",".join(str(_id(e)) for e in sorted(read_numpy(dataset), key=_id))


def test_a_shard_splits_into_contiguous_ranges_and_a_dynamic_split_reads_each_record_once(dataset):
    task = ReadTFRecordDataset(dataset, split_bytes=SPLIT_BYTES)._tasks[0]  # the first train shard, whole
    provider = RecordRanges()
    whole = provider.initial_restriction(task)
    pieces = list(provider.split(task, whole))
    assert len(pieces) > 2 and pieces[0].start == 0 and pieces[-1].stop == task.shard.num_records
    assert all(a.stop == b.start for a, b in itertools.pairwise(pieces))
    assert provider.restriction_size(task, whole) == pytest.approx(task.shard.num_record_bytes)
    tracker = OffsetRestrictionTracker(OffsetRange(0, task.shard.num_records))
    records = []
    for index, data in read_records(task, 0, task.shard.num_records):
        if not tracker.try_claim(index):
            break
        records.append(data)
        if index == 3:
            primary, residual = tracker.try_split(0.5)  # what a runner does to rebalance
            assert primary.stop == residual.start > 4
    rest = [data for _, data in read_records(task, residual.start, residual.stop)]
    whole_shard = [data for _, data in read_records(task, 0, task.shard.num_records)]
    assert records + rest == whole_shard and len(whole_shard) == task.shard.num_records


def test_a_range_starts_at_its_records_offset(dataset):
    task = ReadTFRecordDataset(dataset)._tasks[0]
    offsets = record_offsets(task.path, task.shard)
    assert len(offsets) == task.shard.num_records and offsets[0] == 0
    middle = [data for _, data in read_records(task, 5, 9)]
    assert middle == [data for _, data in read_records(task, 0, task.shard.num_records)][5:9]


def test_a_damaged_shard_is_a_typed_error_naming_it(tmp_path):
    prefix = str(tmp_path / "bad")
    with beam.Pipeline() as pipeline:
        _ = pipeline | beam.Create([_example(i) for i in range(20)]) | WriteBalancedTFRecord(prefix)
    shard = Path(f"{prefix}-00000-of-00001")
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0xFF  # the last record's data CRC
    shard.write_bytes(bytes(data))
    with pytest.raises(Exception, match=rf"{shard}.*data CRC mismatch") as info:
        with beam.Pipeline() as pipeline:
            _ = pipeline | ReadTFRecordDataset(prefix)
    assert "CorruptShardError" in repr(info.value) or isinstance(info.value, CorruptShardError)
    shard.write_bytes(bytes(data[:40]))
    record_offsets.cache_clear()
    with pytest.raises(CorruptShardError, match=rf"{shard}.*manifest says 20"):
        list(read_records(ReadTFRecordDataset(prefix)._tasks[0], 0, 20))


def test_bad_arguments_are_typed_errors_when_built(dataset):
    with pytest.raises(UnknownSplitError):
        ReadTFRecordDataset(dataset, split="validation")
    with pytest.raises(ReaderError, match="split_bytes must be an int >= 1"):
        ReadTFRecordDataset(dataset, split_bytes=0)
    with pytest.raises(ReaderError, match="output must be a RecordOutput"):
        ReadTFRecordDataset(dataset, output="dicts")  # type: ignore[arg-type]
