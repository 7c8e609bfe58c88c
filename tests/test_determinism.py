"""Same inputs + same options -> byte-identical shards and statistics.pb, whatever the runner, bundling and fan-in path.

Small spill runs (many runs per worker) and small shards make every mode cut and merge
differently; the output must not notice. The spill path (runs merged by shard writers), the
shuffle path with side inputs (DirectRunner forced to it), the shuffle path that joins instead
(Beam's DaskRunner on the session's local cluster of 2 worker processes) and the spill path's
encoding pool (2 processes encoding and spilling runs) all give the same files, dead letters and
manifests, for ratio and exact-count splits.
"""

import os
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import (
    DType,
    FixedList,
    Scalar,
    Schema,
    ShardingConfig,
    SplitConfig,
    VarList,
    WriterChecks,
    WriterTuning,
    WriteTFRecordDataset,
    load_manifest,
    verify_dataset,
)
from beam_tfrecord.beam.write import FanIn
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.statistics import STATISTICS_FILE
from beam_tfrecord.storage import direct_io
from pipelines.common import job_pipeline

SCHEMA = Schema({"id": Scalar(DType.INT64), "embedding": FixedList(DType.FLOAT32, 16),
                 "tokens": VarList(DType.INT64), "text": Scalar(DType.STRING)})
MODES = {
    "direct-in-memory": ["--runner=DirectRunner"],
    "direct-multi-processing": ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                                "--direct_num_workers=2"],
    "portable-loopback": ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"],
    "dask": ["--runner=apache_beam.runners.dask.dask_runner.DaskRunner"],
}
RATIO_SPLITS = "train=0.8,validation=0.2"
COUNT_SPLITS = "train=*,validation=300,test=200"


def _chunk(index: int) -> list[Sample]:
    rng = np.random.default_rng(index)
    return [Sample(f"item-{index:03d}-{i:03d}", {
        "id": index * 1000 + i, "embedding": rng.standard_normal(16).astype(np.float32),
        "tokens": rng.integers(0, 30_000, size=int(rng.integers(0, 40))).tolist(),
        "text": "word " * int(rng.integers(1, 30))}) for i in range(100)] + [
        Sample(f"bad-{index:03d}", {"id": "not a number", "embedding": np.zeros(16, np.float32), "tokens": [],
                                    "text": "x"})]  # one dead letter per chunk


def _writer(out: str, *, direct_io: bool = True, fan_in: FanIn = FanIn.AUTO, splits: str = RATIO_SPLITS,
            encode_processes: int = 1) -> WriteTFRecordDataset:
    return WriteTFRecordDataset(out, schema=SCHEMA, splits=SplitConfig.parse(splits),
                                sharding=ShardingConfig(target_shard_bytes=60_000),
                                checks=WriterChecks(max_rejected_fraction=0.05),
                                tuning=WriterTuning(spill_run_bytes=40_000, direct_io=direct_io, fan_in=fan_in,
                                                    encode_processes=encode_processes))


def _build(root: Path, options: list[str], writers: dict[str, dict]) -> dict[str, str]:
    """One pipeline on ``options``: the chunks, written by one writer per name (its options); name -> folder."""
    with job_pipeline(PipelineOptions(options)) as pipeline:
        chunks = pipeline | beam.Create(range(30)) | beam.Map(_chunk)
        for name, writer_options in writers.items():
            _ = chunks | f"Write {name}" >> _writer(str(root / name), **writer_options)
    return {name: str(root / name) for name in writers}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, dask_address):
    """Each runner's start (worker processes, a job server) is paid once: the writers that differ only in their
    own options share one pipeline (the same input, the same bundles as a pipeline of their own)."""
    root = tmp_path_factory.mktemp("determinism")
    direct = MODES["direct-in-memory"]
    built = _build(root, direct, {
        "direct-in-memory": {},
        "encode-pool": {"encode_processes": 2},  # 2 encoding processes, started at once
        "buffered-io": {"direct_io": False},  # page cache instead of O_DIRECT: same bytes
        "direct-shuffle": {"fan_in": FanIn.SHUFFLE},
        "count-spill": {"fan_in": FanIn.SPILL, "splits": COUNT_SPLITS},
        "count-shuffle": {"fan_in": FanIn.SHUFFLE, "splits": COUNT_SPLITS}})
    built |= _build(root, direct, {"direct-in-memory-again": {}})  # a second run of the same job
    for takes in (True, False):  # every run and shard through the page cache, or none (this process's runner)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(direct_io, "page_cache_takes", lambda num_bytes, share=0.5, takes=takes: takes)
            built |= _build(root, direct, {f"page-cache-{takes}": {}})
    for name in ("direct-multi-processing", "portable-loopback"):
        built |= _build(root, MODES[name], {name: {}})
    # The session's cluster; the spill path Dask's AUTO picks, for ratio and count splits.
    built |= _build(root, [*MODES["dask"], f"--dask_client_address={dask_address}"],
                    {"dask": {}, "count-dask": {"splits": COUNT_SPLITS}})
    return built


def _fingerprint(out: str) -> list[tuple[str, int, int, str]]:
    return [(s.filename, s.num_records, s.num_bytes, s.crc32c) for s in load_manifest(out).shards]


def _manifest_content(out: str) -> dict:
    """The manifest without what differs between any two runs (time, run id)."""
    with open(os.path.join(out, "manifest.json"), "rb") as handle:
        content = Manifest.loads(handle.read()).to_json()
    return {key: value for key, value in content.items() if key not in ("created_at", "run_id")}


@pytest.mark.parametrize("mode, reference", [
    ("direct-in-memory-again", "direct-in-memory"), ("buffered-io", "direct-in-memory"),
    ("page-cache-True", "direct-in-memory"), ("page-cache-False", "direct-in-memory"),
    ("encode-pool", "direct-in-memory"),
    ("direct-multi-processing", "direct-in-memory"), ("portable-loopback", "direct-in-memory"),
    ("direct-shuffle", "direct-in-memory"), ("dask", "direct-in-memory"),
    ("count-shuffle", "count-spill"), ("count-dask", "count-spill"),
])
def test_shards_and_manifests_are_identical_across_runners_and_paths(outputs, mode, reference):
    assert _fingerprint(outputs[mode]) == _fingerprint(outputs[reference])
    for filename in [*(f for f, *_ in _fingerprint(outputs[reference])), "dead_letters.jsonl", STATISTICS_FILE]:
        with open(os.path.join(outputs[reference], filename), "rb") as a, \
                open(os.path.join(outputs[mode], filename), "rb") as b:
            assert a.read() == b.read(), filename
    assert _manifest_content(outputs[mode]) == _manifest_content(outputs[reference])
    assert sorted(os.listdir(outputs[mode])) == sorted(os.listdir(outputs[reference]))  # nothing left behind
    report = verify_dataset(outputs[mode])
    assert report.num_records == 3_000


def test_count_splits_are_exact_on_every_path(outputs):
    for name in ("count-spill", "count-shuffle", "count-dask"):
        manifest = load_manifest(outputs[name])
        assert {s.name: s.num_records for s in manifest.splits} == {"train": 2_500, "validation": 300, "test": 200}
        assert manifest.num_rejected == 30


def test_reference_run_has_many_shards_and_balanced_splits(outputs):
    manifest = load_manifest(outputs["direct-in-memory"])
    train = manifest.split("train")
    assert len(train.shards) >= 5 and train.balance_spread < 0.05
    assert manifest.num_written == 3_000
