"""A batch's variable-length values as one flat array plus offsets, the form that crosses processes without pickling.

Item ``i`` is ``values[offsets[i]:offsets[i + 1]]`` (packed), or ``lengths`` bytes at ``starts[i]`` of ``values``
(mapped: ``values`` is the shard's mapping, nothing copied); views hand items out (docs/reading.md, "Ragged batches").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

# Allocates a 1-D array of (size, dtype): NumPy's own by default; shared memory in a DataLoader worker.
Allocate = Callable[[int, np.dtype], np.ndarray]


def allocate(size: int, dtype: np.dtype) -> np.ndarray:
    """A fresh 1-D array of ``size`` items (the default ``Allocate``)."""
    return np.empty(size, dtype=dtype)


class RaggedArray:
    """Variable-length items (bytes, or 1-D arrays of one dtype) held as ``values``, ``offsets`` and ``starts``.

    ``len()`` is the number of items; ``array[i]`` is item ``i``: ``bytes`` (a copy) for bytes items, else a
    view into ``values``; ``view(i)`` a zero-copy ``memoryview``. ``starts`` None: packed, item ``i`` at
    ``offsets[i]``; else item ``i`` at ``starts[i]`` (``values`` is then a read-only mapped shard). Views stay
    valid while any reference to ``values`` lives (as for ``np.frombuffer``). ``packed()`` copies.
    """

    __slots__ = ("is_bytes", "offsets", "starts", "values")

    def __init__(self, values: np.ndarray, offsets: np.ndarray, *, is_bytes: bool,
                 starts: np.ndarray | None = None) -> None:
        self.values = values
        self.offsets = offsets
        self.is_bytes = is_bytes
        self.starts = starts

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return RaggedArray.of([self[i] for i in range(start, stop, step)], dtype=self.values.dtype,
                                      is_bytes=self.is_bytes)
            return self.take(start, stop)
        item = self.values[self.bounds(index)]
        return item.tobytes() if self.is_bytes else item

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        kind = "bytes" if self.is_bytes else str(self.values.dtype)
        return f"RaggedArray({len(self)} items of {kind}, {len(self.values)} values)"

    def bounds(self, index: int) -> slice:
        """Where item ``index`` lies in ``values``."""
        index = item_index(index, len(self))
        stop = int(self.offsets[index + 1])
        if self.starts is None:
            return slice(int(self.offsets[index]), stop)
        start = int(self.starts[index])
        return slice(start, start + stop - int(self.offsets[index]))

    def view(self, index: int) -> memoryview:
        """Item ``index`` as a zero-copy ``memoryview`` of ``values``."""
        return self.values[self.bounds(index)].data

    def packed(self, allocate_values: Allocate = allocate) -> "RaggedArray":
        """The items packed into one array (a copy); the array itself when it is packed already."""
        if self.starts is None:
            return self
        return RaggedArray.gather(self.values, self.starts, self.lengths(), allocate_values=allocate_values)

    def lengths(self) -> np.ndarray:
        """Each item's number of values (bytes for bytes items)."""
        return np.diff(self.offsets)

    def tolist(self) -> list[Any]:
        """The items as a list (``bytes`` or arrays), as batches were before ragged ones."""
        return list(self)

    def take(self, start: int, stop: int) -> "RaggedArray":
        """Items ``[start, stop)``: a view of the same values."""
        offsets = self.offsets[start:stop + 1]
        if self.starts is not None:
            return RaggedArray(self.values, offsets - (offsets[0] if len(offsets) else 0), is_bytes=self.is_bytes,
                               starts=self.starts[start:stop])
        first = int(offsets[0]) if len(offsets) else 0
        return RaggedArray(self.values[first:int(offsets[-1]) if len(offsets) else 0], offsets - first,
                           is_bytes=self.is_bytes)

    @staticmethod
    def of(items: Sequence[Any], *, dtype: np.dtype | type = np.uint8, is_bytes: bool = True,
           allocate_values: Allocate = allocate) -> "RaggedArray":
        """Packs items (bytes-like, or 1-D arrays) into one array from ``allocate_values`` (one copy of each)."""
        lengths = np.fromiter((len(item) for item in items), dtype=np.int64, count=len(items))
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = allocate_values(int(offsets[-1]), np.dtype(dtype))
        if is_bytes:
            target = values.data  # slice assignment of a bytes-like: one memcpy per item
            for item, start, stop in zip(items, offsets[:-1].tolist(), offsets[1:].tolist()):
                target[start:stop] = item
        elif len(items):
            np.concatenate(items, out=values)
        return RaggedArray(values, offsets, is_bytes=is_bytes)

    @staticmethod
    def gather(buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray, *,
               allocate_values: Allocate = allocate) -> "RaggedArray":
        """Bytes items at ``starts`` / ``lengths`` of ``buffer`` (a shard's block), packed with one copy."""
        offsets = np.zeros(len(starts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = allocate_values(int(offsets[-1]), np.dtype(np.uint8))
        _gather_into(values, buffer, starts, lengths, offsets[:-1])
        return RaggedArray(values, offsets, is_bytes=True)

    @staticmethod
    def mapped(buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> "RaggedArray":
        """Bytes items at ``starts`` / ``lengths`` of ``buffer``, not copied: ``values`` is the whole array
        ``buffer`` is a window of (a shard's mapping), so that the windows of one shard join without a copy."""
        root = buffer
        while isinstance(root.base, np.ndarray):
            root = root.base
        shift = buffer.ctypes.data - root.ctypes.data
        if root.ndim != 1 or root.dtype != np.uint8 or not root.flags.c_contiguous or \
                not 0 <= shift <= len(root) - len(buffer):
            root, shift = buffer, 0
        offsets = np.zeros(len(starts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return RaggedArray(root, offsets, is_bytes=True, starts=starts + shift)

    @staticmethod
    def concat(parts: Sequence["RaggedArray"], *, allocate_values: Allocate = allocate) -> "RaggedArray":
        """Parts joined into one: mapped parts of one ``values`` without a copy, else one copy of their values."""
        first = parts[0]
        if first.starts is not None and all(p.values is first.values and p.starts is not None for p in parts):
            bases = np.cumsum([0] + [int(p.offsets[-1]) for p in parts[:-1]])
            offsets = np.concatenate([[0], *[p.offsets[1:] + base for p, base in zip(parts, bases.tolist())]])
            return RaggedArray(first.values, offsets.astype(np.int64), is_bytes=first.is_bytes,
                               starts=np.concatenate([p.starts for p in parts if p.starts is not None]))
        sizes = np.array([int(p.offsets[-1]) for p in parts], dtype=np.int64)
        values = allocate_values(int(sizes.sum()), first.values.dtype)
        bases = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        for part, base, size in zip(parts, bases.tolist(), sizes.tolist()):
            if part.starts is None:
                values[base:base + size] = part.values[:size]
            else:  # mapped: each item copied once, straight into the joined array
                _gather_into(values, part.values, part.starts, part.lengths(), part.offsets[:-1] + base)
        offsets = np.concatenate([[0], *[p.offsets[1:] + base for p, base in zip(parts, bases.tolist())]])
        return RaggedArray(values, offsets.astype(np.int64), is_bytes=parts[0].is_bytes)


def _gather_into(out: np.ndarray, buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                 at: np.ndarray) -> None:
    """Copies the items ``lengths`` long at ``starts`` of ``buffer`` to ``at`` of ``out`` (one memcpy each)."""
    for start, stop, to in zip(starts.tolist(), (starts + lengths).tolist(), at.tolist()):
        out[to:to + stop - start] = buffer[start:stop]


def item_index(index: int, count: int) -> int:
    """``index`` (negative from the end) checked against ``count`` items, as a list checks it."""
    if not -count <= index < count:
        raise IndexError(f"item {index} of a ragged batch of {count}")
    return index % count


def ragged_items(column: Any, allocate_values: Allocate = allocate) -> RaggedArray | None:
    """A list column of bytes, or of 1-D numeric arrays, as a ``RaggedArray`` (None when it is neither)."""
    if isinstance(column, RaggedArray):  # a mapped one stays so: the caller packs it where it must
        return column
    if not isinstance(column, list) or not column:
        return None
    if all(isinstance(item, bytes) for item in column):
        return RaggedArray.of(column, allocate_values=allocate_values)
    first = column[0]
    if isinstance(first, np.ndarray) and first.dtype != object and first.ndim == 1 and all(
            isinstance(item, np.ndarray) and item.ndim == 1 and item.dtype == first.dtype for item in column):
        return RaggedArray.of(column, dtype=first.dtype, is_bytes=False, allocate_values=allocate_values)
    return None


def packed_batches(batches: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Batches (columns) whose lists of bytes or of 1-D arrays are packed as ``RaggedArray`` (``ragged_items``)."""
    for batch in batches:
        packed = {name: ragged_items(column) for name, column in batch.items()}
        yield {name: column if packed[name] is None else packed[name] for name, column in batch.items()}
