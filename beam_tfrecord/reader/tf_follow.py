"""``read_dataset(follow=True)``: each commit's new records as a generator-based ``tf.data.Dataset``.

The records come from ``FollowReader`` (serialized, in each commit's stored order) through ``tf_generated`` and are
batched and parsed as ``read_dataset`` parses them. A generator cannot be saved in a ``tf.train.Checkpoint``:
resume a follower with ``read_numpy`` or the PyTorch dataset, whose state names the last commit read.
docs/reading.md, "Following a dataset as it grows".
"""

from __future__ import annotations

import time

from beam_tfrecord.core.record_schema import holds_verbatim_payloads
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.errors import DatasetNotFoundError
from beam_tfrecord.reader.follow import Commit, Follow, load_commit
from beam_tfrecord.reader.follow_reader import Decoding, FollowReader, check_followable, follow_reader
from beam_tfrecord.reader.options import ImageDecoding
from beam_tfrecord.reader.tf_generated import generated
from beam_tfrecord.reader.tf_spec import make_batch_parser, tf  # imports TensorFlow quietly
from beam_tfrecord.remote_reads.options import RemoteReads


def first_commit(path: str, follow: Follow) -> Commit:
    """The commit published at ``path``, waiting for one (its schema shapes the dataset).

    Raises:
        DatasetNotFoundError: none came within ``follow.timeout_seconds``.
    """
    started = time.monotonic()
    while (commit := load_commit(path)) is None:
        if follow.timeout_seconds is not None and time.monotonic() - started >= follow.timeout_seconds:
            raise DatasetNotFoundError(f"no dataset was published at {path!r} within follow_timeout_seconds="
                                       f"{follow.timeout_seconds:g}")
        time.sleep(follow.poll_seconds)
    return commit


def following_batches(path: object, *, split: str, batch_size: int, num_workers: int, worker_index: int,
                      shuffle: bool, image_decoding: ImageDecoding | None, reads: RemoteReads,
                      follow: Follow) -> tuple[tf.data.Dataset, Schema]:
    """(batches of parsed features of every new commit's records, the schema of the first commit).

    Batches may hold the records of two commits (tf.data batches a stream); the iteration ends after
    ``follow.timeout_seconds`` without a new commit.
    """
    followed = check_followable(path, split, shuffle=shuffle)
    manifest = first_commit(followed, follow).dataset.manifest
    parse = make_batch_parser(manifest.schema, image_decoding=image_decoding,
                              verbatim=holds_verbatim_payloads(manifest.metadata))

    def records() -> FollowReader:
        return follow_reader(followed, split=split, num_workers=num_workers, worker_index=worker_index, shuffle=False,
                             poll_seconds=follow.poll_seconds, timeout_seconds=follow.timeout_seconds, state=None,
                             decoding=Decoding(reads=reads, serialized=True))

    dataset = generated(records, tf.TensorSpec([], tf.string)).batch(batch_size).map(parse)
    return dataset, manifest.schema
