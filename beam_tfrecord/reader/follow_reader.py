"""The follow-mode iterator the NumPy, PyTorch and tf.data readers share: decoded records of each new commit.

It walks ``follow.follow_commits`` and decodes each commit's new records in stored order, one example or one
batch (never across two commits) at a time, keeping ``state()`` at what it handed out. See docs/reading.md,
"Following a dataset as it grows".
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
from collections.abc import Generator, Iterator
from typing import Any

from beam_tfrecord.core.record_schema import holds_verbatim_payloads
from beam_tfrecord.dataset import LoadedDataset
from beam_tfrecord.errors import ReaderError
from beam_tfrecord.reader.decode.block_decode import BlockDecoder, num_rows, rebatch, rows
from beam_tfrecord.reader.decode.ragged import Allocate, allocate, packed_batches
from beam_tfrecord.reader.follow import Follow, FollowState, follow_commits
from beam_tfrecord.reader.options import ImageDecoding
from beam_tfrecord.reader.order.orders import StoredOrder
from beam_tfrecord.reader.order.read_plan import plan_read
from beam_tfrecord.remote_reads.options import RemoteReads
from beam_tfrecord.storage.deadlines import deadlines_in_force


def check_followable(path: object, split: str, *, shuffle: bool = False) -> str:
    """The one dataset path a follower reads; ``ReaderError`` for a mixture, a split expression or ``shuffle``."""
    if not isinstance(path, str):
        raise ReaderError(f"follow=True reads one dataset path (a root, a directory or a Beam prefix), got {path!r}")
    if not split.isidentifier():
        raise ReaderError(f"follow=True reads one split by name (each commit's new records of it), got {split!r}")
    if shuffle:
        raise ReaderError("follow=True reads each commit's new records in stored order: shuffle must be False")
    return path


@dataclasses.dataclass(frozen=True)
class Decoding:
    """How records are decoded: as ``read_numpy`` takes them."""

    image_decoding: ImageDecoding | None = None
    verify: bool = True
    reads: RemoteReads | None = None
    batch_size: int | None = None
    allocate_values: Allocate = allocate
    serialized: bool = False  # the records' bytes, undecoded (tf.data parses them itself)


class FollowReader:
    """Examples (or batches) of every commit's new records, for as long as the dataset keeps growing.

    Iterate it; ``state()`` is where it stands (give it back as ``start_state`` to resume); ``close()`` (or
    ``follow_timeout_seconds`` without a new commit) ends it.
    """

    def __init__(self, path: str, *, split: str, follow: Follow, decoding: Decoding, start_state: FollowState) -> None:
        self._path = path
        self._split = split
        self._follow = follow
        self._decoding = decoding
        self._state = start_state
        self._closed = threading.Event()
        self._items: Generator[Any, None, None] = self._generate()

    def state(self) -> FollowState:
        """The last commit read and the records of it handed out."""
        return self._state

    def close(self) -> None:
        """Stops following: the iterator ends (a wait for the next commit is cut short)."""
        self._closed.set()
        # Running in another thread, it cannot be closed from here: it sees the event within a poll.
        if inspect.getgeneratorstate(self._items) != inspect.GEN_RUNNING:
            self._items.close()

    def __iter__(self) -> "FollowReader":
        return self

    def __next__(self) -> Any:
        # Each step may read LATEST or a manifest, in the consumer's thread: under the reader's deadlines, as a
        # normal read opens its dataset (the shards' ranged reads take them from ``Decoding.reads``).
        with deadlines_in_force(None if self._decoding.reads is None else self._decoding.reads.deadlines):
            return next(self._items)

    def _generate(self) -> Generator[Any, None, None]:
        for at, delta in follow_commits(self._path, self._state, self._follow, split=self._split,
                                        closed=self._closed):
            self._state = at
            for item, count in self._decoded(delta, at.position):
                self._state = dataclasses.replace(self._state, position=self._state.position + count)
                yield item

    def _decoded(self, delta: LoadedDataset, start: int) -> Iterator[tuple[Any, int]]:
        """(example or batch, records in it) of a commit's new records, from ``start``."""
        plan = plan_read(self._path, split=self._split, dataset=delta)
        decoding = self._decoding
        if decoding.serialized:
            order = StoredOrder(plan, verify=decoding.verify, reads=decoding.reads)
            yield from ((bytes(record), 1) for record, _, _ in order.iter_range(start, plan.num_records))
            return
        decoder = BlockDecoder(plan.manifest.schema, image_decoding=decoding.image_decoding,
                               verbatim=holds_verbatim_payloads(plan.manifest.metadata),
                               allocate_values=decoding.allocate_values)
        blocks = (decoder.decode(block) for block in StoredOrder(plan, verify=decoding.verify, reads=decoding.reads)
                  .iter_blocks(start, plan.num_records))
        if decoding.batch_size is None:
            yield from ((example, 1) for block in blocks for example in rows(block))
            return
        batches = packed_batches(rebatch(blocks, decoding.batch_size, decoding.allocate_values))  # as read_numpy's
        yield from ((batch, num_rows(batch)) for batch in batches)


def follow_reader(path: object, *, split: str, num_workers: int, worker_index: int, shuffle: bool,
                  poll_seconds: float, timeout_seconds: float | None, state: FollowState | dict[str, Any] | None,
                  decoding: Decoding) -> FollowReader:
    """A ``FollowReader`` for reader ``worker_index`` of ``num_workers``, checked (``ReaderError``) and resumed
    from ``state`` (a ``FollowState`` or its ``to_dict()``) when given."""
    followed = check_followable(path, split, shuffle=shuffle)
    follow = Follow(poll_seconds, timeout_seconds)
    if state is None:
        start = FollowState(part=worker_index, parts=num_workers)
    else:
        start = state if isinstance(state, FollowState) else FollowState.from_dict(state)
        if (start.part, start.parts) != (worker_index, num_workers):
            raise ReaderError(f"the follow state is of reader {start.part} of {start.parts}, not {worker_index} of "
                              f"{num_workers}: resume each reader with its own state")
    return FollowReader(followed, split=split, follow=follow, decoding=decoding, start_state=start)
