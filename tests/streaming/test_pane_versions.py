"""WriteTFRecordDataset on an unbounded input (issue 62): each fired pane one append version of a versioned root,
keeping every earlier shard where it is (``stored_in``); a pane LATEST lists already commits nothing; a commit killed
(SIGKILL) leaves LATEST at a complete version, and a rerun publishes each pane once."""

from __future__ import annotations

import os
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream
from apache_beam.transforms import window
from late_stream import run_late_stream
from streams import PER_PANE, assert_compacts_to_a_full_build, commit_root_panes
from test_pane_commit import _pane, killed_job

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
from beam_tfrecord.storage import crc32c_and_size

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


def test_a_compacted_streamed_root_equals_a_full_build_of_its_samples(tmp_path):
    """Each pane's version lends its records by key (its input index: the panes' samples; record locations), so
    ``beam-tfrecord compact`` rewrites the streamed root into the very shards a full build of the samples writes."""
    root = str(tmp_path / "root")
    run_late_stream(_sample, per_window=PER_WINDOW, late=LATE,
                    writer=WriteTFRecordDataset(root, schema=SCHEMA, sharding=SHARDING))
    samples = [_sample(i) for i in [*range(3 * PER_WINDOW), *LATE]]
    assert_compacts_to_a_full_build(root, samples, str(tmp_path / "full"))
    compacted, compacted_id = load_manifest(root), read_latest(root)
    # The compacted version still lists every pane committed (a replayed one commits nothing) and lends its records.
    settings = VersionPaneSettings(root=root, description=DatasetDescription(schema=SCHEMA, sharding=SHARDING),
                                   feature_transforms={}, max_rejected_fraction=0.0, metadata={}, command=())
    replayed = commit_pane_version(PaneId(0, 10_000_000, 0, "[0.0, 10.0)"), samples[:PER_WINDOW], settings)
    assert replayed == compacted
    later = commit_pane_version(PaneId(30_000_000, 40_000_000, 0, "[30.0, 40.0)"), [_sample(1000)], settings)
    assert [s.stored_in for s in later.shards] == [compacted_id] * len(compacted.shards) + [None]
    assert sorted(int(e["id"]) for e in read_numpy(root)) == sorted([*range(3 * PER_WINDOW), *LATE, 1000])


KILLED_PANES = 12  # ~10 ms each here


def _latest_panes(root: str) -> list[str]:
    """The panes LATEST's version lists (none without LATEST), each whole: every shard it lists is in place."""
    latest = read_latest(root)
    if latest is None:
        return []
    manifest = load_manifest(version_dir(root, latest))
    for shard in manifest.shards:
        path = Path(version_dir(root, shard.stored_in or latest), shard.filename)
        assert crc32c_and_size(str(path)) == (shard.crc32c, shard.num_bytes), path
    panes = manifest.metadata[STREAMING_KEY]["panes"]
    assert [p["num_records"] for p in panes] == [PER_PANE] * len(panes)
    assert manifest.num_written == PER_PANE * len(panes)
    return [p["pane"] for p in panes]


@pytest.mark.parametrize("seed", [5])  # ~0.1 s in: 9 panes out, the 10th killed in its commit (one case: ~3 s)
def test_sigkill_during_pane_version_commits_never_shows_half_a_version_and_a_rerun_publishes_each_once(
        tmp_path, seed):
    root = str(tmp_path / "root")
    killed_job("streams", f"commit_root_panes({str(tmp_path)!r}, {KILLED_PANES})", seed=seed, within_seconds=0.15)
    listed = _latest_panes(root)
    assert listed == [_pane(n).key for n in range(len(listed))]  # LATEST: a complete version of the first panes
    commit_root_panes(str(tmp_path), KILLED_PANES)  # the job rerun: every pane again (those LATEST lists: no-ops)
    assert _latest_panes(root) == [_pane(n).key for n in range(KILLED_PANES)]
    assert sorted(int(e["id"]) for e in read_numpy(root)) == list(range(KILLED_PANES * PER_PANE))
