"""Same inputs + same options -> byte-identical shards, whatever the runner mode and bundling.

Small spill runs (many runs per worker) and small shards make every mode cut and merge
differently; the output must not notice.
"""

import os

import apache_beam as beam
import numpy as np
import pytest

from beam_tfrecord import (DType, FixedList, Scalar, Schema, ShardingConfig, SplitConfig, VarList,
                           WriteTFRecordDataset, load_manifest, verify_dataset)
from beam_tfrecord.core.samples import Sample

SCHEMA = Schema({"id": Scalar(DType.INT64), "embedding": FixedList(DType.FLOAT32, 16),
                 "tokens": VarList(DType.INT64), "text": Scalar(DType.STRING)})
MODES = {
    "direct-in-memory": ["--runner=DirectRunner"],
    "direct-multi-processing": ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                                "--direct_num_workers=2"],
    "portable-loopback": ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"],
}


def _chunk(index: int) -> list[Sample]:
    rng = np.random.default_rng(index)
    return [Sample(f"item-{index:03d}-{i:03d}", {
        "id": index * 1000 + i, "embedding": rng.standard_normal(16).astype(np.float32),
        "tokens": rng.integers(0, 30_000, size=int(rng.integers(0, 40))).tolist(),
        "text": "word " * int(rng.integers(1, 30))}) for i in range(100)]


def _build(out: str, options: list[str], *, direct_io: bool = True) -> None:
    with beam.Pipeline(argv=options) as pipeline:
        _ = (pipeline
             | beam.Create(range(30))
             | beam.Map(_chunk)
             | WriteTFRecordDataset(out, schema=SCHEMA, splits=SplitConfig.parse("train=0.8,validation=0.2"),
                                    sharding=ShardingConfig(target_shard_bytes=60_000), spill_run_bytes=40_000,
                                    direct_io=direct_io))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("determinism")
    built = {}
    for name, options in MODES.items():
        built[name] = str(root / name)
        _build(built[name], options)
    built["direct-in-memory-again"] = str(root / "again")
    _build(built["direct-in-memory-again"], MODES["direct-in-memory"])
    built["buffered-io"] = str(root / "buffered-io")  # page cache instead of O_DIRECT: same bytes
    _build(built["buffered-io"], MODES["direct-in-memory"], direct_io=False)
    return built


def _fingerprint(out: str) -> list[tuple[str, int, int, str]]:
    return [(s.filename, s.num_records, s.num_bytes, s.crc32c) for s in load_manifest(out).shards]


@pytest.mark.parametrize("mode", ["direct-in-memory-again", "buffered-io", "direct-multi-processing",
                                  "portable-loopback"])
def test_shards_are_byte_identical_to_the_in_memory_run(outputs, mode):
    reference = outputs["direct-in-memory"]
    assert _fingerprint(outputs[mode]) == _fingerprint(reference)
    for filename, *_ in _fingerprint(reference):
        with open(os.path.join(reference, filename), "rb") as a, open(os.path.join(outputs[mode], filename), "rb") as b:
            assert a.read() == b.read(), filename
    assert verify_dataset(outputs[mode]).num_records == 3_000


def test_reference_run_has_many_shards_and_balanced_splits(outputs):
    manifest = load_manifest(outputs["direct-in-memory"])
    train = manifest.split("train")
    assert len(train.shards) >= 5 and train.balance_spread < 0.05
    assert manifest.num_written == 3_000
