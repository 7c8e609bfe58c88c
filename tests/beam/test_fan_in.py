"""The fan-in path follows the runner; the side-input-free planner equals the local one."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_tfrecord import DType, Scalar, Schema, WriterChecks, WriterTuning, WriteTFRecordDataset, load_manifest
from beam_tfrecord.beam.plan_dataset import PlanDataset
from beam_tfrecord.beam.shuffle_path import batch_index
from beam_tfrecord.beam.write import FanIn, describe_fan_in, resolve_fan_in
from beam_tfrecord.core.cut_planner import plan_dataset
from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.core.runs import make_record_entry
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.sharding import ShardingConfig, SplitConfig
from beam_tfrecord.encoding.entries import EncodedBatch
from beam_tfrecord.engine.local_engine import LocalBatchRunner
from beam_tfrecord.errors import RejectedSamplesError, WriterOptionError

# (The DataflowRunner is left out: making its pipeline looks up Google credentials, ~200 s offline.)


@pytest.mark.parametrize("runner, options, expected", [
    ("DirectRunner", [], FanIn.SPILL),
    ("SwitchingDirectRunner", [], FanIn.SPILL),
    ("PrismRunner", [], FanIn.SPILL),
    ("PortableRunner", ["--job_endpoint=embed"], FanIn.SPILL),
    ("PortableRunner", ["--job_endpoint=localhost:8099"], FanIn.SHUFFLE),  # a Flink or Spark job server
    ("FlinkRunner", [], FanIn.SHUFFLE),
    ("apache_beam.runners.dask.dask_runner.DaskRunner", [], FanIn.SPILL),  # bag groupby holds data in memory
], ids=["direct", "switching-direct", "prism", "portable-embedded", "portable-job-server", "flink",
        "dask"])
def test_auto_picks_spill_for_in_memory_shuffles_and_shuffle_elsewhere(runner, options, expected):
    pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(options))
    assert resolve_fan_in(FanIn.AUTO, pipeline) is expected
    assert resolve_fan_in(FanIn.SHUFFLE, pipeline) is FanIn.SHUFFLE  # forced: kept


@pytest.mark.parametrize("runner", ["FlinkRunner", "apache_beam.runners.dask.dask_runner.DaskRunner"])
def test_either_path_can_be_forced_on_any_runner(runner):
    pipeline = beam.Pipeline(runner=runner)
    assert resolve_fan_in(FanIn.SPILL, pipeline) is FanIn.SPILL
    assert resolve_fan_in(FanIn.SHUFFLE, pipeline) is FanIn.SHUFFLE


@pytest.mark.parametrize("text, expected", [("auto", FanIn.AUTO), (" Shuffle ", FanIn.SHUFFLE), ("spill", FanIn.SPILL)])
def test_fan_in_parses(text, expected):
    assert FanIn.parse(text) is expected


def test_unknown_fan_in_is_a_typed_error_naming_the_choices():
    with pytest.raises(WriterOptionError, match=r"fan_in must be one of \['auto', 'spill', 'shuffle'\], got 'disk'"):
        FanIn.parse("disk")


def _batches(n: int, per_batch: int) -> tuple[list[EncodedBatch], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    hashes = [key_hash(f"k{i}", "salt") for i in range(n)]
    records = [bytes(int(size)) for size in rng.integers(50, 400, size=n)]
    entries = [make_record_entry(h, r) for h, r in zip(hashes, records)]
    batches = [EncodedBatch(tuple(entries[i:i + per_batch])) for i in range(0, n, per_batch)]
    return batches, np.array(hashes, np.uint64), np.array([len(r) + 16 for r in records], np.int64)


@pytest.mark.parametrize("side_inputs", [True, False], ids=["side-inputs", "joins"])
@pytest.mark.parametrize("splits", ["train=0.8,test=0.2", "train=*,validation=150,test=100"], ids=["ratio", "count"])
def test_the_pipeline_plans_what_plan_dataset_plans(side_inputs, splits):
    batches, hashes, sizes = _batches(3_000, 37)
    config = SplitConfig.parse(splits)
    sharding = ShardingConfig(target_shard_bytes=40_000)
    expected = plan_dataset(hashes, sizes, config, sharding)
    assert len(expected.shards) > 10
    with BeamTestPipeline() as pipeline:
        plans = pipeline | beam.Create(batches) | PlanDataset(config, sharding, index_of=batch_index,
                                                                side_inputs=side_inputs)
        assert_that(plans, equal_to([expected]))


def _write_all_rejected(out: str, fan_in: FanIn, rejected: int) -> None:
    schema = Schema({"id": Scalar(DType.INT64)})
    samples = [Sample(f"bad-{i}", {"id": "x"}) for i in range(rejected)]
    with beam.Pipeline(runner=LocalBatchRunner()) as pipeline:  # raises the worker's error typed
        _ = (pipeline | beam.Create(samples, reshuffle=False)
             | WriteTFRecordDataset(out, schema=schema, tuning=WriterTuning(fan_in=fan_in),
                                    checks=WriterChecks(max_rejected_fraction=1.0),
                                    splits=SplitConfig.parse("train=0.5,test=0.5")))


@pytest.mark.parametrize("fan_in", [FanIn.SPILL, FanIn.SHUFFLE], ids=["spill", "shuffle"])
def test_no_input_publishes_an_empty_dataset(tmp_path, fan_in):
    out = str(tmp_path / "ds")
    _write_all_rejected(out, fan_in, rejected=0)
    manifest = load_manifest(out)
    assert (manifest.num_written, manifest.num_rejected) == (0, 0)
    assert [s.name for s in manifest.splits] == ["train", "test"]
    # One empty shard file per split, as WriteToTFRecord writes one (tests/beam/test_writer_inputs.py).
    assert [(s.filename, s.num_records) for s in manifest.shards] == [("data-train.tfrecord-00000-of-00001", 0),
                                                                      ("data-test.tfrecord-00000-of-00001", 0)]


@pytest.mark.parametrize("fan_in", [FanIn.SPILL, FanIn.SHUFFLE], ids=["spill", "shuffle"])
def test_every_input_rejected_publishes_nothing_even_when_allowed(tmp_path, fan_in):
    """A dataset of 0 records is never published from inputs, whatever max_rejected_fraction allows."""
    out = tmp_path / "ds"
    with pytest.raises(RejectedSamplesError, match=r"^all 3 input samples were rejected \(a dataset of 0 records is "
                                                   r"never published\); the dataset was NOT published\. Every "
                                                   r"reason is in .*dead_letters-\w+\.jsonl\. First reasons:\n"
                                                   r"  bad-0 \[validate\] feature 'id': expected int64 scalar"):
        _write_all_rejected(str(out), fan_in, rejected=3)
    assert sorted(p.name.split("-")[0] for p in out.iterdir()) == ["dead_letters"]  # no manifest, no temp folder


@pytest.mark.parametrize("runner, fan_in, expected", [
    ("direct", FanIn.AUTO, "spill (auto: the DirectRunner's shuffle holds what it groups in memory); sorted runs "
                           "spilled to the temp folder, merged by the shard writers"),
    ("FlinkRunner", FanIn.AUTO, "shuffle (auto: the FlinkRunner's shuffle is disk-backed); records keyed by shard "
                                "through the runner's shuffle"),
    ("direct", FanIn.SHUFFLE, "shuffle (asked for); records keyed by shard through the runner's shuffle"),
], ids=["auto-spill", "auto-shuffle", "asked-for"])
def test_the_summary_says_which_fan_in_ran_why_and_where(runner, fan_in, expected):
    pipeline = beam.Pipeline(runner=LocalBatchRunner() if runner == "direct" else runner)
    assert describe_fan_in(fan_in, pipeline, "gs://b/out/.tmp-beam-tfrecord-abc") == (
        f"  fan-in: {expected} (temp folder gs://b/out/.tmp-beam-tfrecord-abc, deleted once published)")
