"""One pane's commit (issue 62), as a runner retrying a bundle or restarting a job drives it: committed twice it
publishes once, byte for byte the same; killed (SIGKILL, at seeded moments) it never leaves a manifest listing
part of a pane; a restarted job publishes every pane exactly once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import apache_beam as beam
import pytest

from beam_tfrecord import WriteBalancedTFRecord, load_manifest, read_numpy
from beam_tfrecord.beam.beam_names import prefix_layout
from beam_tfrecord.beam.pane_commit import PaneCommitSettings, commit_pane, publish_pane, write_pane
from beam_tfrecord.beam.pane_manifest import STREAMING_KEY, PaneId
from beam_tfrecord.beam.serialized_records import Payload
from beam_tfrecord.beam.write_balanced import RAW_SCHEMA
from beam_tfrecord.core.description import DatasetDescription
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.core.record_schema import PAYLOAD_METADATA_KEY
from beam_tfrecord.core.sharding import ShardingConfig, SplitConfig
from beam_tfrecord.storage import crc32c_and_size

PANES = 6
RECORDS_PER_PANE = 300


def _settings(prefix: str) -> PaneCommitSettings:
    splits = SplitConfig.single()
    return PaneCommitSettings(
        layout=prefix_layout(prefix, file_name_suffix=".tfrecord", shard_name_template="-V-SSSSS-of-NNNNN",
                             splits=splits, windowed=True),
        description=DatasetDescription(schema=RAW_SCHEMA, splits=splits,
                                       sharding=ShardingConfig(target_shard_bytes=4_000), statistics=False),
        payload=Payload.VERBATIM, key_fn=None, max_rejected_fraction=0.0,
        metadata={PAYLOAD_METADATA_KEY: Payload.VERBATIM.value}, command=("test",), empty_schema=RAW_SCHEMA)


def _pane(n: int) -> PaneId:
    return PaneId(n * 60_000_000, (n + 1) * 60_000_000, 0, f"[2021-03-01T00-{n:02d}-00, 2021-03-01T00-{n + 1:02d}-00)")


def _records(n: int) -> list[bytes]:
    rng = random.Random(n)
    return [f"pane {n} record {i} ".encode() + b"x" * rng.randrange(200) for i in range(RECORDS_PER_PANE)]


def commit_panes(prefix: str) -> None:
    """A job's commits, pane after pane (run in a subprocess by the kill test; says "ready" once it has imported
    Beam, ~2 s of CPU)."""
    settings = _settings(prefix)
    print("ready", flush=True)
    for n in range(PANES):
        commit_pane(_pane(n), _records(n), settings)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_a_pane_committed_twice_publishes_once_byte_identical(tmp_path):
    settings = _settings(str(tmp_path / "a" / "out"))
    (tmp_path / "a").mkdir()
    first = commit_pane(_pane(0), _records(0), settings)
    manifest_bytes = Path(settings.layout.manifest_path).read_bytes()
    shards = _files(tmp_path / "a")
    assert len(first.shards) >= 10  # ~40 KB of records in shards of ~4 KB
    again = commit_pane(_pane(0), reversed(_records(0)), settings)  # a retried bundle, its elements in another order
    assert again == first and Path(settings.layout.manifest_path).read_bytes() == manifest_bytes
    assert _files(tmp_path / "a") == shards
    # Two attempts that both wrote their shards (the first died before its commit): the second publishes nothing.
    written = [write_pane(_pane(1), _records(1), settings) for _ in range(2)]
    published = publish_pane(written[0], settings)
    assert publish_pane(written[1], settings) == published
    assert [p["pane"] for p in published.metadata[STREAMING_KEY]["panes"]] == [_pane(0).key, _pane(1).key]
    # The same pane, another order, another prefix: the same names and bytes.
    (tmp_path / "b").mkdir()
    commit_pane(_pane(0), sorted(_records(0)), _settings(str(tmp_path / "b" / "out")))
    assert _files(tmp_path / "b") == shards


def _check_published(prefix: str) -> list[str]:
    """The panes the manifest lists (none without one), each whole: every shard listed is in place, as listed."""
    path = _settings(prefix).layout.manifest_path
    if not os.path.exists(path):
        return []
    manifest = Manifest.loads(Path(path).read_bytes())
    folder = Path(prefix).parent
    for shard in manifest.shards:
        assert crc32c_and_size(str(folder / shard.filename)) == (shard.crc32c, shard.num_bytes), shard.filename
    panes = manifest.metadata[STREAMING_KEY]["panes"]
    assert [p["num_records"] for p in panes] == [RECORDS_PER_PANE] * len(panes)
    assert manifest.num_written == RECORDS_PER_PANE * len(panes)
    return [p["pane"] for p in panes]


def killed_job(module: str, call: str, *, seed: int, within_seconds: float) -> None:
    """Runs ``module.call`` (a job that prints "ready" before its commits) in a subprocess and SIGKILLs it at a
    moment drawn by ``seed`` from [0, within_seconds) after it is ready."""
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import {module} as t; t.{call}"
    job = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert job.stdout is not None and job.stdout.readline() == "ready\n"
    time.sleep(random.Random(seed).uniform(0.0, within_seconds))
    job.send_signal(signal.SIGKILL)
    job.wait()


@pytest.mark.parametrize("seed", [7])  # ~65 ms into the commits (one case: a subprocess imports Beam, ~4 s)
def test_sigkill_during_commits_never_lists_half_a_pane_and_a_restart_lists_each_once(tmp_path, seed):
    prefix = str(tmp_path / "out")
    killed_job("test_pane_commit", f"commit_panes({prefix!r})", seed=seed, within_seconds=0.2)  # 6 panes: ~0.16 s
    listed = _check_published(prefix)
    assert listed == [_pane(n).key for n in range(len(listed))]
    commit_panes(prefix)  # the job restarted (here: its process is gone, so the lease it held is taken over at once)
    assert _check_published(prefix) == [_pane(n).key for n in range(PANES)]
    expected = sorted(r for n in range(PANES) for r in _records(n))
    assert sorted(e["record"] for e in read_numpy(prefix)) == expected
    assert load_manifest(prefix).num_inputs == len(expected)


def test_a_panes_shards_are_the_shards_a_batch_build_of_its_records_writes(tmp_path):
    """The same planner and order as a batch build: byte for byte the same shards (only the names take the window)."""
    (tmp_path / "s").mkdir()
    streamed = commit_pane(_pane(0), _records(0), _settings(str(tmp_path / "s" / "out")))
    with beam.Pipeline() as pipeline:
        _ = pipeline | beam.Create(_records(0)) | WriteBalancedTFRecord(
            str(tmp_path / "b" / "out"), file_name_suffix=".tfrecord", target_shard_bytes=4_000, statistics=False)
    built = load_manifest(str(tmp_path / "b" / "out"))
    assert len(streamed.shards) == len(built.shards) >= 10
    for ours, theirs in zip(streamed.shards, built.shards, strict=True):
        assert (tmp_path / "s" / ours.filename).read_bytes() == (tmp_path / "b" / theirs.filename).read_bytes()
    assert streamed.metadata[STREAMING_KEY]["panes"][0]["balance_spread"] == built.split("train").balance_spread
