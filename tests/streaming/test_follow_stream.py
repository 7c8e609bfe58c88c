"""A follower of a streaming write: ``read_numpy(..., follow=True)`` in a thread, while panes commit under a Beam
prefix (``commit_pane``) or into a versioned root (``commit_pane_version``), yields every record exactly once, and a
follower restarted from its saved state reads the rest without loss or repeat. Panes are committed by the commit
functions themselves (a pipeline cannot be interleaved with a reader cheaply); their commits are the pipeline's.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from streams import PER_PANE, Stream, prefix_stream, root_stream

from beam_tfrecord.reader import read_numpy
from beam_tfrecord.reader.follow_reader import FollowReader

PANES = 4
POLL_SECONDS = 0.01
FOLLOW_TIMEOUT_SECONDS = 0.5  # the follower ends this long after the last pane (a commit takes milliseconds)


def _follow(stream: Stream, **options: Any) -> FollowReader:
    follower = read_numpy(stream.path, follow=True, follow_poll_seconds=POLL_SECONDS, **options)
    assert isinstance(follower, FollowReader)
    return follower


def _wait_for_length(read: list[Any], length: int) -> None:
    """Until a follower (in its thread) has read ``length`` records (20 s at most: the test then fails)."""
    deadline = time.monotonic() + 20
    while len(read) < length and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)


STREAMS = {"prefix": prefix_stream, "root": root_stream}


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
