"""WriteTFRecordDataset under TestPipeline: what it publishes and what it rejects."""

import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that

from beam_tfrecord import (
    ClassLabel,
    DType,
    Scalar,
    Schema,
    ShardingConfig,
    SplitConfig,
    Tensor,
    TensorDType,
    WriterChecks,
    WriteTFRecordDataset,
    load_manifest,
    verify_dataset,
)
from beam_tfrecord.core.framing import iter_records
from beam_tfrecord.core.proto import Example
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.errors import RejectedSamplesError
from beam_tfrecord.interop import INTEROP_FILENAMES
from beam_tfrecord.interop.tfds import tfds_files

SCHEMA = Schema({"pixels": Tensor(TensorDType.UINT8, (8, 8, 3)), "label": ClassLabel(tuple("abcdefghij")),
                 "weight": Scalar(DType.FLOAT32)})


def _samples(n: int) -> list[Sample]:
    rng = np.random.default_rng(0)
    return [Sample(f"row-{i:05d}", {"pixels": rng.integers(0, 255, (8, 8, 3), dtype=np.uint8),
                                    "label": i % 10, "weight": float(i) / 7}) for i in range(n)]


def _read_split(out: str, split: str) -> dict[str, tuple[int, bytes]]:
    """key-less view of a split: label and pixel bytes of every record, keyed by the pixel bytes' weight."""
    manifest = load_manifest(out)
    records = {}
    for shard in manifest.split(split).shards:
        with open(os.path.join(out, shard.filename), "rb") as handle:
            for data in iter_records(handle, name=shard.filename):
                feature = Example.FromString(data).features.feature
                records[round(feature["weight"].float_list.value[0] * 7)] = (
                    feature["label"].int64_list.value[0], feature["pixels"].bytes_list.value[0])
    return records


def test_publishes_a_balanced_manifest_and_every_sample(tmp_path):
    out = str(tmp_path / "ds")
    samples = _samples(2_000)
    with BeamTestPipeline() as pipeline:
        manifests = (pipeline
                     | beam.Create([samples[i:i + 100] for i in range(0, 2_000, 100)])  # chunks of rows
                     | WriteTFRecordDataset(out, schema=SCHEMA, splits=SplitConfig.parse("train=0.9,test=0.1"),
                                            sharding=ShardingConfig(target_shard_bytes=40_000)))

        def check(published):
            assert len(published) == 1
            assert published[0].num_inputs == 2_000 and published[0].num_rejected == 0

        assert_that(manifests, check)
    manifest = load_manifest(out)
    assert verify_dataset(out).num_records == 2_000
    train = manifest.split("train")
    assert len(train.shards) >= 4 and train.balance_spread < 0.05
    assert sorted(os.listdir(out)) == sorted([s.filename for s in manifest.shards] + [
        "manifest.json", *tfds_files(manifest), *INTEROP_FILENAMES, *filter(None, [manifest.statistics])])
    written = {**_read_split(out, "train"), **_read_split(out, "test")}
    assert len(written) == 2_000
    for i, sample in enumerate(samples):
        assert written[i] == (i % 10, sample.values["pixels"].tobytes())


def test_mixed_order_no_class_pure_shards(tmp_path):
    out = str(tmp_path / "ds")
    samples = sorted(_samples(1_000), key=lambda s: s.values["label"])  # arrives sorted by class
    with BeamTestPipeline() as pipeline:
        _ = pipeline | beam.Create(samples) | WriteTFRecordDataset(
            out, schema=SCHEMA, sharding=ShardingConfig(target_shard_bytes=50_000))
    manifest = load_manifest(out)
    for shard in manifest.split("train").shards:
        with open(os.path.join(out, shard.filename), "rb") as handle:
            labels = {Example.FromString(d).features.feature["label"].int64_list.value[0]
                      for d in iter_records(handle, name=shard.filename)}
        assert len(labels) == 10, f"{shard.filename} holds only classes {sorted(labels)}"


def test_bad_samples_fail_the_job_by_default_and_nothing_is_published(tmp_path):
    out = str(tmp_path / "ds")
    samples = _samples(20) + [Sample("bad-label", {"pixels": np.zeros((8, 8, 3), np.uint8), "label": "zebra",
                                                   "weight": 1.0})]
    with pytest.raises(Exception) as info:
        with BeamTestPipeline() as pipeline:
            _ = pipeline | beam.Create(samples) | WriteTFRecordDataset(out, schema=SCHEMA)
    assert "RejectedSamplesError" in repr(info.value) or isinstance(info.value, RejectedSamplesError)
    assert "1 of 21 input samples were rejected" in str(info.value)
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    leftovers = [n for n in os.listdir(out) if n.startswith("dead_letters-")]
    assert len(leftovers) == 1
    with open(os.path.join(out, leftovers[0])) as handle:
        assert "unknown class name 'zebra'" in handle.read()


def test_bad_samples_within_the_threshold_go_to_dead_letters(tmp_path):
    out = str(tmp_path / "ds")
    samples = _samples(20) + [Sample("nan-weight", {"pixels": np.zeros((8, 8, 3), np.uint8), "label": 1,
                                                   "weight": float("nan")})]
    with BeamTestPipeline() as pipeline:
        _ = pipeline | beam.Create(samples) | WriteTFRecordDataset(
            out, schema=SCHEMA, checks=WriterChecks(max_rejected_fraction=0.1))
    manifest = load_manifest(out)
    assert (manifest.num_inputs, manifest.num_written, manifest.num_rejected) == (21, 20, 1)
    with open(os.path.join(out, manifest.dead_letters)) as handle:
        lines = handle.read().splitlines()
    assert len(lines) == 1 and '"stage": "validate"' in lines[0] and '"feature": "weight"' in lines[0]
    assert "expected float32 scalar that is finite" in lines[0]


def test_secrets_in_the_command_line_are_redacted():
    from pipelines.common import redact_command

    assert redact_command(["job", "--output", "gs://b/d", "--access_token=abc", "--db_password", "hunter2",
                           "--dataset_name", "x"]) == (
        "job", "--output", "gs://b/d", "--access_token=<redacted>", "--db_password", "<redacted>",
        "--dataset_name", "x")
