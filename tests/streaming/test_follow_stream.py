"""A follower of a streaming write: ``read_numpy(..., follow=True)`` in a thread, while panes commit under a Beam
prefix (``commit_pane``) or into a versioned root (``commit_pane_version``), yields every record exactly once, and a
follower restarted from its saved state reads the rest without loss or repeat. Panes are committed by the commit
functions themselves (a pipeline cannot be interleaved with a reader cheaply); their commits are the pipeline's.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from test_pane_commit import _pane, _records, _settings

from beam_tfrecord.beam.pane_commit import commit_pane
from beam_tfrecord.beam.pane_versions import VersionPaneSettings, commit_pane_version
from beam_tfrecord.core.description import DatasetDescription
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.core.sharding import ShardingConfig
from beam_tfrecord.reader import read_numpy
from beam_tfrecord.reader.follow_reader import FollowReader

PANES = 4
POLL_SECONDS = 0.01
FOLLOW_TIMEOUT_SECONDS = 0.5  # the follower ends this long after the last pane (a commit takes milliseconds)
SCHEMA = Schema({"id": Scalar(DType.INT64), "text": Scalar(DType.BYTES)})
PER_PANE = 40  # samples of a root's pane: ~6 KB, 2-3 shards of SHARDING's target


@dataclasses.dataclass(frozen=True)
class Stream:
    """A stream of panes: where it is written, how pane ``n`` commits, what a record reads back as."""

    path: str
    commit: Callable[[int], object]
    record: Callable[[dict[str, Any]], Any]
    expected: Callable[[range], list[Any]]  # the records of these panes, sorted


def _prefix_stream(base: str) -> Stream:
    settings = _settings(f"{base}/out")
    return Stream(f"{base}/out", lambda n: commit_pane(_pane(n), _records(n), settings),
                  lambda example: bytes(example["record"]), lambda panes: sorted(r for n in panes for r in _records(n)))


def _root_samples(n: int) -> list[Sample]:
    return [Sample(f"k{i}", {"id": i, "text": b"t" * (29 * i % 300)}) for i in range(n * PER_PANE, (n + 1) * PER_PANE)]


def _root_stream(base: str) -> Stream:
    settings = VersionPaneSettings(root=f"{base}/root", description=DatasetDescription(
        schema=SCHEMA, sharding=ShardingConfig(target_shard_bytes=3_000)), feature_transforms={},
        max_rejected_fraction=0.0, metadata={}, command=("test",))
    return Stream(f"{base}/root", lambda n: commit_pane_version(_pane(n), _root_samples(n), settings),
                  lambda example: int(example["id"]), lambda panes: list(range(panes.start * PER_PANE,
                                                                               panes.stop * PER_PANE)))


def _follow(stream: Stream, **options: Any) -> FollowReader:
    follower = read_numpy(stream.path, follow=True, follow_poll_seconds=POLL_SECONDS, **options)
    assert isinstance(follower, FollowReader)
    return follower


def _wait_for_length(read: list[Any], length: int) -> None:
    """Until a follower (in its thread) has read ``length`` records (20 s at most: the test then fails)."""
    deadline = time.monotonic() + 20
    while len(read) < length and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)


STREAMS = {"prefix": _prefix_stream, "root": _root_stream}


@pytest.mark.parametrize("kind", sorted(STREAMS))
def test_a_follower_reads_every_pane_of_a_running_stream_once(tmp_path, kind):
    stream = STREAMS[kind](str(tmp_path))
    commit, record, expected = stream.commit, stream.record, stream.expected
    read: list[Any] = []
    follower = _follow(stream, follow_timeout_seconds=FOLLOW_TIMEOUT_SECONDS)
    thread = threading.Thread(target=lambda: read.extend(record(e) for e in follower))
    thread.start()  # before any pane: the follower waits for the first commit
    for n in range(PANES):
        commit(n)
        _wait_for_length(read, len(expected(range(n + 1))))  # the follower read this pane: each pane is a commit
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert sorted(read) == sorted(expected(range(PANES)))  # every record, once


@pytest.mark.parametrize("kind", sorted(STREAMS))
def test_a_follower_of_a_stream_resumes_from_its_state_without_loss_or_repeat(tmp_path, kind):
    stream = STREAMS[kind](str(tmp_path))
    commit, record, expected = stream.commit, stream.record, stream.expected
    commit(0)
    commit(1)
    first = _follow(stream, follow_timeout_seconds=0)
    head: list[Any] = [record(next(first)) for _ in range(PER_PANE + 7)]  # panes 0 and 1 are one commit to it
    saved = first.state().to_dict()
    first.close()
    commit(2)  # the stream goes on while the follower is down
    second = _follow(stream, follow_timeout_seconds=FOLLOW_TIMEOUT_SECONDS, follow_state=saved)
    rest: list[Any] = []
    thread = threading.Thread(target=lambda: rest.extend(record(e) for e in second))
    thread.start()
    _wait_for_length(rest, len(expected(range(3))) - len(head))
    commit(3)  # and after it is back: a commit after the one it resumed in
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert sorted(head + rest) == sorted(expected(range(PANES)))
