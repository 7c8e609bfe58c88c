"""Decoded images of a batch in one buffer: blocks cut at batch boundaries, their rows handed out in order.

One allocation per batch (shared memory in a DataLoader worker, where it cost ~70 CPU us per 49 KB image on the
project's 2-core VM: fallocate and page mapping) and no copy when ``rebatch`` joins a batch's pieces (``adjacent``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from beam_tfrecord.core.blocks import RecordBlock
from beam_tfrecord.reader.decode.ragged import Allocate


def adjacent(parts: list[np.ndarray]) -> np.ndarray | None:
    """The parts as one view when they lie one after the other in one 1-D buffer (a ``BatchRows`` buffer), else None."""
    buffer = parts[0].base
    if not (isinstance(buffer, np.ndarray) and buffer.ndim == 1 and buffer.flags.c_contiguous
            and all(p.base is buffer and p.flags.c_contiguous and p.shape[1:] == parts[0].shape[1:] for p in parts)):
        return None
    ends = [p.ctypes.data + p.nbytes for p in parts[:-1]]
    if ends != [p.ctypes.data for p in parts[1:]]:
        return None
    start = (parts[0].ctypes.data - buffer.ctypes.data) // buffer.itemsize
    rows = sum(len(p) for p in parts)
    return buffer[start:start + rows * int(np.prod(parts[0].shape[1:]))].reshape(rows, *parts[0].shape[1:])


class BatchRows:
    """Rows of decoded images handed out from one buffer of ``batch_rows`` rows after another, in order.

    When blocks are cut at batch boundaries (``cut_blocks``), the pieces of one batch fill one buffer, so
    ``rebatch`` joins them as a view: one allocation (shared memory in a DataLoader worker) and no copy per batch.
    """

    def __init__(self, batch_rows: int, allocate_values: Allocate) -> None:
        self._batch_rows = batch_rows
        self._allocate = allocate_values
        self._buffer = np.empty((0,), np.uint8)
        self._used = 0

    def take(self, count: int, like: np.ndarray) -> np.ndarray:
        """The next ``count`` rows shaped as ``like`` (from a new buffer when the current one is full, or of
        another shape)."""
        if self._used + count > len(self._buffer) or self._buffer.shape[1:] != like.shape or \
                self._buffer.dtype != like.dtype:
            rows = max(count, self._batch_rows)
            self._buffer, self._used = self._allocate(rows * like.size, like.dtype).reshape(rows, *like.shape), 0
        self._used += count
        return self._buffer[self._used - count:self._used]


def cut_blocks(blocks: Iterable[RecordBlock], every: int) -> Iterator[RecordBlock]:
    """The blocks, split where the count of records so far reaches a multiple of ``every`` (batch boundaries)."""
    done = 0
    for block in blocks:
        start = 0
        while len(block) - start > every - done % every:
            stop = start + every - done % every
            yield block.slice(start, stop)
            done, start = done + stop - start, stop
        if start < len(block):
            yield block.slice(start, len(block)) if start else block
            done += len(block) - start
