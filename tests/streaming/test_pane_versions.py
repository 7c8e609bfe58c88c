"""WriteTFRecordDataset on an unbounded input (issue 62): each fired pane one append version of a versioned root,
keeping every earlier shard where it is (``stored_in``); a pane LATEST lists already commits nothing."""

from __future__ import annotations

import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream
from apache_beam.transforms import window
from late_stream import run_late_stream

from beam_tfrecord import WriteTFRecordDataset, read_numpy
from beam_tfrecord.beam.pane_manifest import STREAMING_KEY, PaneId
from beam_tfrecord.beam.pane_versions import VersionPaneSettings, commit_pane_version
from beam_tfrecord.beam.write_options import WriterChecks
from beam_tfrecord.core.description import DatasetDescription
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.core.sharding import ShardingConfig
from beam_tfrecord.dataset import load_manifest, read_latest, version_dir
from beam_tfrecord.errors import WriterOptionError

SCHEMA = Schema({"id": Scalar(DType.INT64), "text": Scalar(DType.BYTES)})
SHARDING = ShardingConfig(target_shard_bytes=3_000)
PER_WINDOW = 30
LATE = list(range(3 * PER_WINDOW, 3 * PER_WINDOW + 5))


def _sample(i: int) -> Sample:
    return Sample(f"k{i}", {"id": i, "text": b"t" * (29 * i % 300)})


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("versions") / "root")
    run_late_stream(_sample, per_window=PER_WINDOW, late=LATE,
                    writer=WriteTFRecordDataset(root, schema=SCHEMA, sharding=SHARDING))
    return root


def test_each_pane_is_an_append_version_that_keeps_every_earlier_shard(root):
    versions = sorted(os.listdir(os.path.join(root, "versions")))
    assert len(versions) == 4 and read_latest(root) == versions[-1]
    previous: list[tuple[str, str]] = []
    for version in versions:  # each lists the shards of the one before, where they are, then its own
        manifest = load_manifest(version_dir(root, version))
        listed = [(s.stored_in or version, s.filename) for s in manifest.shards]
        assert listed[:len(previous)] == previous and len(listed) > len(previous)
        assert all(s.stored_in is None for s in manifest.shards[len(previous):])
        previous = listed
    panes = load_manifest(root).metadata[STREAMING_KEY]["panes"]
    assert [(p["window"], p["index"], p["num_records"]) for p in panes] == [
        ("[0.0, 10.0)", 0, PER_WINDOW), ("[10.0, 20.0)", 0, PER_WINDOW), ("[20.0, 30.0)", 0, PER_WINDOW),
        ("[0.0, 10.0)-pane1", 1, len(LATE))]
    shards = load_manifest(root).split("train").shards
    for pane in panes[:3]:  # ~5 KB each: balanced shards of about the target
        first, count = pane["first_shard"]["train"], pane["num_shards"]["train"]
        sizes = [s.num_record_bytes for s in shards[first:first + count]]
        assert count >= 2 and max(sizes) - min(sizes[:-1] or sizes) <= 16 + 330, sizes


def test_every_record_reads_back_once_and_a_pane_committed_again_is_a_no_op(root):
    assert sorted(int(e["id"]) for e in read_numpy(root)) == [*range(3 * PER_WINDOW), *LATE]
    latest = read_latest(root)
    pane = load_manifest(root).metadata[STREAMING_KEY]["panes"][1]
    settings = VersionPaneSettings(root=root, description=DatasetDescription(schema=SCHEMA, sharding=SHARDING),
                                   feature_transforms={}, max_rejected_fraction=0.0, metadata={}, command=())
    start, end, index = map(int, pane["pane"].split(":"))
    again = commit_pane_version(PaneId(start, end, index, pane["window"]),
                                [_sample(i) for i in range(PER_WINDOW, 2 * PER_WINDOW)], settings)
    assert again == load_manifest(root) and read_latest(root) == latest and len(os.listdir(
        os.path.join(root, "versions"))) == 4


def test_an_unbounded_write_refuses_the_checks_that_need_the_whole_input(tmp_path):
    stream = beam.Pipeline(options=PipelineOptions(["--streaming"])) | test_stream.TestStream().add_elements(
        [_sample(0)]) | beam.WindowInto(window.FixedWindows(10))
    with pytest.raises(WriterOptionError, match="^duplicates: an unbounded input"):
        _ = stream | WriteTFRecordDataset(str(tmp_path / "r"), schema=SCHEMA, checks=WriterChecks(duplicates="report"))
