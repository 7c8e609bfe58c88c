"""WriteBalancedTFRecord, the drop-in for beam.io.WriteToTFRecord: serialized records in, a dataset out.

One shared set of builds (module fixture): the same 600 serialized Examples written on the
DirectRunner by both fan-in paths, from ``tf.train.Example`` protos, and on the DaskRunner
(the session's LocalCluster of 2 worker processes, tests/conftest.py; the spill path it picks).
Every build must give the same shards, and the inferred schema must let every reader (NumPy,
tf.data, PyTorch, TFDS) read back exactly the records written.
"""

from __future__ import annotations

import os
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from statistics_checks import assert_statistics_match_records

from beam_tfrecord import (
    DType,
    FixedList,
    Payload,
    Scalar,
    Schema,
    VarList,
    WriteBalancedTFRecord,
    WriterTuning,
    load_manifest,
    read_numpy,
    verify_dataset,
)
from beam_tfrecord.beam.write import FanIn
from beam_tfrecord.core import proto
from beam_tfrecord.core.framing import iter_records
from beam_tfrecord.errors import RecordSchemaError, RejectedSamplesError, ShardingError, WriterOptionError
from beam_tfrecord.statistics import read_statistics
from pipelines.common import job_pipeline

NUM_RECORDS = 600
SPLITS = "train=0.8,test=0.2"
TARGET_SHARD_BYTES = 6_000
INFERRED = Schema({
    "id": Scalar(DType.INT64), "score": Scalar(DType.FLOAT32, allow_non_finite=True),
    "embedding": FixedList(DType.FLOAT32, 4, allow_non_finite=True), "tokens": VarList(DType.INT64),
    "text": Scalar(DType.BYTES), "maybe": VarList(DType.INT64)})


def _values(i: int) -> dict:
    """Record i's features: every kind; fixed and variable lengths; features absent from some records."""
    return {"id": [i], "score": [i / 8], "embedding": [i, i + 0.5, -i, 0.25], "text": [f"row {i}".encode()],
            **({"tokens": list(range(i % 5))} if i % 5 else {}), **({"maybe": [i]} if i % 3 == 0 else {})}


def _example(i: int) -> proto.Example:
    example = proto.Example()
    for name, values in _values(i).items():
        feature = example.features.feature[name]
        kind = (feature.bytes_list if isinstance(values[0], bytes) else
                feature.float_list if name in ("score", "embedding") else feature.int64_list)
        kind.value.extend(values)
    return example


RECORDS = [_example(i).SerializeToString(deterministic=True) for i in range(NUM_RECORDS)]


def _write(out: str, records: list, *, options: list[str] | None = None, **writer_options) -> None:
    with job_pipeline(PipelineOptions(options or [])) as pipeline:
        _ = (pipeline
             | beam.Create(records, reshuffle=False)
             | WriteBalancedTFRecord(output_dir=out, **{"splits": SPLITS, "target_shard_bytes": TARGET_SHARD_BYTES,
                                             **writer_options}))


@pytest.fixture(scope="module")
def builds(tmp_path_factory, dask_address) -> dict[str, str]:
    import tensorflow as tf

    root = tmp_path_factory.mktemp("balanced")
    dask = ["--runner=beam_tfrecord.engine.dask_runner.DaskRunner", f"--dask_client_address={dask_address}"]
    plans = {
        "direct-spill": dict(records=RECORDS, tuning=WriterTuning(fan_in=FanIn.SPILL, spill_run_bytes=20_000)),
        "direct-shuffle": dict(records=RECORDS, tuning=WriterTuning(fan_in=FanIn.SHUFFLE)),
        "tf-protos": dict(records=[tf.train.Example.FromString(r) for r in RECORDS]),
        "dask-spill": dict(records=RECORDS, options=dask, tuning=WriterTuning(spill_run_bytes=20_000)),
        # (Dask with fan_in=SHUFFLE gives the same shards too, but its joins cost ~40 s of fixed overhead
        # here, for samples as for records: tests/runners/test_runner_parity.py covers that path.)
    }
    built = {}
    for name, plan in plans.items():
        built[name] = str(root / name)
        _write(built[name], **plan)
    return built


def _fingerprint(out: str) -> list[tuple[str, int, int, str]]:
    return [(s.filename, s.num_records, s.num_bytes, s.crc32c) for s in load_manifest(out).shards]


def _expected(ids) -> dict[int, dict]:
    return {i: _values(i) for i in ids}


def _as_lists(example: dict) -> dict:
    """A read example as {name: list of values}, the absent-or-empty variable features dropped."""
    out = {}
    for name, value in example.items():
        values = np.asarray(value).reshape(-1).tolist()
        if values:
            out[name] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def _split_ids(out: str, split: str) -> list[int]:
    return [e["id"].item() for e in read_numpy(out, split=split)]


@pytest.mark.parametrize("build", ["direct-spill", "dask-spill"])
def test_statistics_pb_is_that_of_the_records_under_the_schema_inferred_at_publish(builds, build):
    """Summarized by feature name while the shards are written, made the inferred schema's at publish: the same
    as computed from the records read back; a record without a feature counts as missing it."""
    assert_statistics_match_records(builds[build])
    statistics = read_statistics(builds[build])
    for split in ("train", "test"):
        features = {f.path.step[0]: f for f in next(d for d in statistics.datasets if d.name == split).features}
        ids = _split_ids(builds[build], split)
        assert [features[n].num_stats.common_stats.num_missing for n in ("maybe", "tokens", "id")] == [
            sum(i % 3 != 0 for i in ids), sum(i % 5 == 0 for i in ids), 0]
        assert (features["id"].num_stats.min, features["id"].num_stats.max) == (min(ids), max(ids))


@pytest.mark.parametrize("build", ["direct-shuffle", "tf-protos", "dask-spill"])
def test_every_runner_and_fan_in_path_writes_the_same_shards_and_schema(builds, build):
    assert _fingerprint(builds[build]) == _fingerprint(builds["direct-spill"])
    assert load_manifest(builds[build]).schema == INFERRED
    assert sorted(os.listdir(builds[build])) == sorted(os.listdir(builds["direct-spill"]))  # no temp files left


def test_shards_hold_the_records_byte_for_byte_balanced(builds):
    out = builds["direct-spill"]
    manifest = load_manifest(out)
    assert manifest.schema == INFERRED and manifest.metadata["schema_inferred"] == {"from": "records",
                                                                                    "raw_payloads": False}
    written = []
    for shard in manifest.shards:
        with open(os.path.join(out, shard.filename), "rb") as handle:
            written.extend(iter_records(handle, name=shard.filename))
    assert sorted(written) == sorted(RECORDS)
    train = manifest.split("train")
    assert len(train.shards) >= 5 and train.balance_spread < 0.05
    assert verify_dataset(out).num_records == NUM_RECORDS


def test_read_numpy_gives_back_every_record(builds):
    out = builds["direct-spill"]
    read = {e["id"].item(): _as_lists(e) for split in ("train", "test") for e in read_numpy(out, split=split)}
    assert read == _expected(range(NUM_RECORDS))


def test_read_dataset_gives_back_every_record(builds):
    from beam_tfrecord import read_dataset

    out = builds["direct-spill"]
    read = {}
    for batch in read_dataset(out, split="train", batch_size=64):
        # Each column as NumPy once per batch (a ragged one: a row per element); indexing the tensors
        # row by row cost ~3 s of eager ops here, not the reader's time.
        columns = {name: value.numpy() for name, value in batch.items()}
        for row in range(len(columns["id"])):
            read[int(columns["id"][row])] = _as_lists({name: column[row] for name, column in columns.items()})
    assert read == _expected(_split_ids(out, "train"))


def test_torch_dataset_gives_back_every_record(builds):
    from beam_tfrecord import TFRecordIterableDataset

    out = builds["direct-spill"]
    read = {int(e["id"]): _as_lists(e) for e in TFRecordIterableDataset(out, split="test")}
    assert read == _expected(_split_ids(out, "test"))


def test_tfds_reads_it_with_no_spec(builds):
    import tensorflow_datasets as tfds

    out = builds["direct-spill"]
    builder = tfds.builder_from_directory(out)
    assert builder.info.splits["test"].num_examples == len(_split_ids(out, "test"))
    read = {int(e["id"]): _as_lists(e) for e in tfds.as_numpy(builder.as_dataset(split="test"))}
    assert read == _expected(_split_ids(out, "test"))


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> str:
    """One build read by the num_shards and DALI index tests: 3 shards a split, keyed, with DALI indexes."""
    out = str(tmp_path_factory.mktemp("sharded") / "ds")
    _write(out, RECORDS, num_shards=3, dali_index=True, key_fn=lambda record: proto.Example.FromString(
        record).features.feature["text"].bytes_list.value[0].decode())
    return out


def test_num_shards_is_honoured(sharded):
    manifest = load_manifest(sharded)
    assert {s.name: len(s.shards) for s in manifest.splits} == {"train": 3, "test": 3}
    assert manifest.num_written == NUM_RECORDS and manifest.split("train").balance_spread < 0.05


def _framing_index(path: str) -> bytes:
    """A DALI index made by walking the file's framing: each record is an 8-byte little-endian length,
    a 4-byte CRC, the data and a 4-byte CRC."""
    data, lines, offset = Path(path).read_bytes(), [], 0
    while offset < len(data):
        size = 16 + int.from_bytes(data[offset:offset + 8], "little")
        lines.append(f"{offset} {size}\n")
        offset += size
    return "".join(lines).encode()


def test_dali_index_files_come_with_the_shards(sharded):
    shards = load_manifest(sharded).shards
    assert len(shards) == 6
    for shard in shards:
        assert shard.dali_index == shard.filename + ".idx"
        index = Path(sharded, shard.dali_index).read_bytes()
        assert index == _framing_index(os.path.join(sharded, shard.filename))
        assert index.count(b"\n") == shard.num_records


def test_dali_index_of_compressed_shards_is_refused():
    with pytest.raises(WriterOptionError, match="^dali_index: "):
        WriteBalancedTFRecord("/tmp/unused", compression_type="gzip", dali_index=True)


def test_raw_payloads_are_read_back_as_one_bytes_feature(tmp_path):
    out = str(tmp_path / "raw")
    payloads = [f"payload {i}: ".encode() + bytes(range(i % 200)) for i in range(300)]
    _write(out, payloads, compression_type="gzip")
    manifest = load_manifest(out)
    assert manifest.schema == Schema({"record": Scalar(DType.BYTES)})
    assert manifest.metadata["schema_inferred"]["raw_payloads"] is True
    read = [e["record"] for split in ("train", "test") for e in read_numpy(out, split=split)]
    assert sorted(read) == sorted(payloads)


def test_conflicting_kinds_are_a_typed_error_and_nothing_is_published(tmp_path):
    out = str(tmp_path / "ds")
    floats = proto.Example()
    floats.features.feature["id"].float_list.value.append(1.5)
    with pytest.raises(Exception) as info:
        _write(out, RECORDS[:20] + [floats.SerializeToString()])
    assert "RecordSchemaError" in repr(info.value) or isinstance(info.value, RecordSchemaError)
    assert "feature 'id' holds ['float_list', 'int64_list'] in different records" in str(info.value)
    assert sorted(os.listdir(out)) == []


def test_payload_example_rejects_other_records_and_elements_of_other_types(tmp_path):
    out = str(tmp_path / "ds")
    with pytest.raises(Exception) as info:
        _write(out, RECORDS[:20] + [b"not an example", 42], payload=Payload.EXAMPLE)
    assert "RejectedSamplesError" in repr(info.value) or isinstance(info.value, RejectedSamplesError)
    assert "2 of 22 input samples were rejected" in str(info.value)
    assert "expected a serialized tf.train.Example or SequenceExample (payload=EXAMPLE), got 14 bytes" in str(
        info.value)
    assert "expected bytes or a protobuf message (a tf.train.Example), got int 42" in str(info.value)
    assert not os.path.exists(os.path.join(out, "manifest.json"))


@pytest.mark.parametrize("options, error, message", [
    (dict(num_shards=-1), ShardingError, "num_shards must be an int >= 0"),
    (dict(num_shards=100_000), ShardingError, r"num_shards must be in \[1, 99999\]"),
    (dict(target_shard_bytes=0), ShardingError, "target_shard_bytes must be >= 1"),
    (dict(target_shard_bytes=1000, max_shard_bytes=10), ShardingError, r"max_shard_bytes \(10\) must be >="),
    (dict(compression_type="bzip2"), WriterOptionError, "compression_type must be a Compression or one of"),
    (dict(key_fn="id"), WriterOptionError, "key_fn must be a function of the element"),
    (dict(payload="raw"), WriterOptionError, "payload must be a Payload"),
    (dict(splits=0.8), WriterOptionError, "splits must be a SplitConfig or its text"),
    (dict(splits="train=0.7"), ShardingError, "split fractions must be positive and sum to 1"),
    (dict(dataset_name="my data"), Exception, "my data"),
], ids=["negative-num-shards", "too-many-shards", "zero-target", "cap-below-target", "bzip2", "key-fn-not-callable",
        "payload-as-text", "splits-as-float", "splits-not-summing-to-1", "bad-dataset-name"])
def test_bad_options_are_typed_errors_at_construction(options, error, message):
    with pytest.raises(error, match=message):
        WriteBalancedTFRecord("/tmp/never-written", **options)


def _sequence_example(i: int) -> bytes:
    example = proto.SequenceExample()
    example.context.feature["id"].int64_list.value.append(i)
    for step in range(i % 4):  # 0 to 3 steps; no "frames" list at all in every fourth record
        example.feature_lists.feature_list["frames"].feature.add().float_list.value.extend([step, step + 0.5])
        example.feature_lists.feature_list["words"].feature.add().bytes_list.value.extend([b"w"] * (step + 1))
    return example.SerializeToString(deterministic=True)


def test_sequence_examples_get_sequence_features_and_read_back(tmp_path):
    out = str(tmp_path / "seq")
    _write(out, [_sequence_example(i) for i in range(40)], splits="train=1.0")
    manifest = load_manifest(out)
    assert manifest.schema == Schema({"id": Scalar(DType.INT64)}, sequence_features={
        "frames": FixedList(DType.FLOAT32, 2, allow_non_finite=True), "words": VarList(DType.BYTES)})
    assert not os.path.exists(os.path.join(out, "dataset_info.json"))  # TFDS parses tf.train.Example only
    for example in read_numpy(out):
        steps = example["id"].item() % 4
        assert example["frames"].tolist() == [[s, s + 0.5] for s in range(steps)]
        assert [w.tolist() for w in example["words"]] == [[b"w"] * (s + 1) for s in range(steps)]


def _key_of(record: bytes) -> str:
    key = proto.Example.FromString(record).features.feature["id"].int64_list.value[0]
    if key == 7:
        raise LookupError("no key for record 7")
    return f"id-{key}"


def test_a_failing_key_fn_sends_its_record_to_the_dead_letters(tmp_path):
    out = str(tmp_path / "ds")
    _write(out, RECORDS[:50], key_fn=_key_of, max_rejected_fraction=0.1)
    manifest = load_manifest(out)
    assert (manifest.num_inputs, manifest.num_written, manifest.num_rejected) == (50, 49, 1)
    with open(os.path.join(out, manifest.dead_letters)) as handle:
        assert '"error_type": "LookupError"' in handle.read()
