"""The streams the streaming tests commit pane by pane, with the commit functions a runner calls (no pipeline: a
test interleaves them with a reader, or kills them): under a Beam prefix (``commit_pane``) or into a versioned root
(``commit_pane_version``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from test_pane_commit import _pane, _records, _settings

from beam_tfrecord.beam.pane_commit import commit_pane
from beam_tfrecord.beam.pane_versions import VersionPaneSettings, commit_pane_version
from beam_tfrecord.beam.write_options import VersionRetention
from beam_tfrecord.core.description import DatasetDescription
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.core.sharding import ShardingConfig

SCHEMA = Schema({"id": Scalar(DType.INT64), "text": Scalar(DType.BYTES)})
PER_PANE = 40  # samples of a root's pane: ~6 KB, 2-3 shards of 3 KB
SHARDING = ShardingConfig(target_shard_bytes=3_000)


@dataclasses.dataclass(frozen=True)
class Stream:
    """A stream of panes: where it is written, how pane ``n`` commits, what a record reads back as."""

    path: str
    commit: Callable[[int], object]
    record: Callable[[dict[str, Any]], Any]
    expected: Callable[[range], list[Any]]  # the records of these panes, sorted


def prefix_stream(base: str) -> Stream:
    settings = _settings(f"{base}/out")
    return Stream(f"{base}/out", lambda n: commit_pane(_pane(n), _records(n), settings),
                  lambda example: bytes(example["record"]), lambda panes: sorted(r for n in panes for r in _records(n)))


def root_samples(n: int) -> list[Sample]:
    return [Sample(f"k{i}", {"id": i, "text": b"t" * (29 * i % 300)}) for i in range(n * PER_PANE, (n + 1) * PER_PANE)]


def root_stream(base: str, retention: VersionRetention | None = None) -> Stream:
    settings = VersionPaneSettings(root=f"{base}/root", description=DatasetDescription(
        schema=SCHEMA, sharding=SHARDING), feature_transforms={}, max_rejected_fraction=0.0, metadata={},
        command=("test",), retention=retention or VersionRetention())
    return Stream(f"{base}/root", lambda n: commit_pane_version(_pane(n), root_samples(n), settings),
                  lambda example: int(example["id"]), lambda panes: list(range(panes.start * PER_PANE,
                                                                               panes.stop * PER_PANE)))


def commit_root_panes(base: str, panes: int) -> None:
    """A job's commits into ``base``/root, pane after pane (run in a subprocess by the kill test; says "ready" once
    it has imported Beam)."""
    stream = root_stream(base)
    print("ready", flush=True)
    for n in range(panes):
        stream.commit(n)


def assert_compacts_to_a_full_build(root: str, samples: list[Sample], full: str) -> None:
    """``beam-tfrecord compact`` rewrites ``root`` into the very shards (names and bytes) a full build of
    ``samples`` into ``full`` writes."""
    import apache_beam as beam

    from beam_tfrecord import WriteTFRecordDataset
    from beam_tfrecord.dataset import load_manifest, read_latest, version_dir
    from pipelines import compact

    compacted_id = compact.run([f"--dataset_root={root}"])
    assert compacted_id is not None and compacted_id == read_latest(root)
    with beam.Pipeline() as pipeline:
        _ = pipeline | beam.Create(samples, reshuffle=False) | WriteTFRecordDataset(full, schema=SCHEMA,
                                                                                   sharding=SHARDING)
    compacted, built = load_manifest(root), load_manifest(full)
    assert compacted.self_contained and len(compacted.shards) == len(built.shards) >= 5
    for ours, theirs in zip(compacted.shards, built.shards, strict=True):
        assert ours.filename == theirs.filename
        assert Path(version_dir(root, compacted_id), ours.filename).read_bytes() == \
            Path(full, theirs.filename).read_bytes()
