"""Ready batches as tensors: ``RaggedBatch`` for variable-length features, stacked tensors for the rest.

Inside a DataLoader worker, columns are allocated in shared memory, so a batch reaches the main process as
tensor handles, not pickled bytes (docs/reading.md, "Ragged batches").
"""

from __future__ import annotations

import io
import itertools
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.utils.data

from beam_tfrecord.reader.decode.block_decode import Columns
from beam_tfrecord.reader.decode.ragged import Allocate, RaggedArray, allocate, item_index, ragged_items


class RaggedBatch:
    """One variable-length feature of a batch: ``values`` (a flat tensor) and ``offsets`` (int64, items + 1).

    ``len(batch)`` is its number of items; ``batch[i]`` is item ``i``: ``bytes`` for bytes features (a copy, as
    lists of bytes gave), else a tensor view of ``values``; ``view(i)`` is a zero-copy ``memoryview`` and
    ``image(i)`` decodes an encoded image. Views share memory with ``values``: they stay valid as long as they
    are referenced (the tensor's storage is kept alive by them). With ``starts`` (bytes read at 0 workers from a
    mapped shard), item ``i`` lies at ``starts[i]`` of ``values``, the read-only mapped shard: never write into
    it. ``pin_memory()`` and ``to()`` (which pack the items first) serve ``DataLoader(pin_memory=True)``.
    """

    __slots__ = ("is_bytes", "offsets", "starts", "values")

    def __init__(self, values: torch.Tensor, offsets: torch.Tensor, *, is_bytes: bool,
                 starts: torch.Tensor | None = None) -> None:
        self.values = values
        self.offsets = offsets
        self.is_bytes = is_bytes
        self.starts = starts

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> Any:
        start, stop = self.bounds(index)
        return self.values.numpy()[start:stop].tobytes() if self.is_bytes else self.values[start:stop]

    def __iter__(self) -> Iterator[Any]:
        bounds = self.offsets.tolist()
        spans: Iterator[tuple[int, int]] = itertools.pairwise(bounds)
        if self.starts is not None:
            spans = ((at, at + stop - start) for at, (start, stop) in zip(self.starts.tolist(), spans))
        if self.is_bytes:
            values = self.values.numpy()
            return (values[start:stop].tobytes() for start, stop in spans)
        return (self.values[start:stop] for start, stop in spans)

    def bounds(self, index: int) -> tuple[int, int]:
        """Where item ``index`` lies in ``values``: (start, stop)."""
        index = item_index(index, len(self))
        start, stop = self.offsets[index:index + 2].tolist()
        if self.starts is None:
            return start, stop
        at = int(self.starts[index])
        return at, at + stop - start

    def __repr__(self) -> str:
        kind = "bytes" if self.is_bytes else str(self.values.dtype)
        return f"RaggedBatch({len(self)} items of {kind}, {self.values.numel()} values)"

    def view(self, index: int) -> memoryview:
        """Item ``index`` as a zero-copy ``memoryview`` of ``values`` (CPU tensors only)."""
        start, stop = self.bounds(index)
        return self.values.numpy()[start:stop].data

    def image(self, index: int, *, mode: str = "RGB") -> torch.Tensor:
        """Item ``index`` decoded with Pillow to a uint8 (height, width, channels) tensor in ``mode``."""
        from PIL import Image as PILImage  # lazily: only when images are decoded

        with PILImage.open(io.BytesIO(self.view(index))) as opened:
            pixels = np.asarray(opened.convert(mode), dtype=np.uint8)
        return torch.from_numpy(pixels.reshape(*pixels.shape[:2], -1).copy())

    def lengths(self) -> torch.Tensor:
        """Each item's number of values (bytes for bytes features)."""
        return self.offsets[1:] - self.offsets[:-1]

    def tolist(self) -> list[Any]:
        """The items as a list, as batches gave them with ``ragged=False``."""
        return list(self)

    def packed(self) -> "RaggedBatch":
        """The items packed into one new tensor (``starts`` None); the batch itself when it is packed already."""
        if self.starts is None:
            return self
        items = RaggedArray(self.values.numpy(), self.offsets.numpy(), is_bytes=self.is_bytes,
                            starts=self.starts.numpy()).packed()
        return RaggedBatch(torch.from_numpy(items.values), self.offsets, is_bytes=self.is_bytes)

    def pin_memory(self) -> "RaggedBatch":
        """A packed copy in pinned memory (what ``DataLoader(pin_memory=True)`` calls)."""
        packed = self.packed()
        return RaggedBatch(packed.values.pin_memory(), packed.offsets.pin_memory(), is_bytes=self.is_bytes)

    def to(self, device: torch.device | str) -> "RaggedBatch":
        """The batch, packed, with ``values`` and ``offsets`` on ``device``."""
        packed = self.packed()
        return RaggedBatch(packed.values.to(device), packed.offsets.to(device), is_bytes=self.is_bytes)


def shared_allocate(size: int, dtype: np.dtype) -> np.ndarray:
    """A 1-D array in shared memory: a DataLoader worker hands its tensor to the main process without a copy."""
    torch_dtype = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    storage = torch.empty(0, dtype=torch_dtype)._typed_storage()._new_shared(size)
    return torch.empty(0, dtype=torch_dtype).set_(storage).numpy()


def worker_allocate() -> Allocate:
    """Shared memory inside a DataLoader worker, ordinary memory elsewhere."""
    return shared_allocate if torch.utils.data.get_worker_info() is not None else allocate


def as_tensor(array: np.ndarray) -> torch.Tensor:
    """``array`` as a tensor without a copy; a view of the shared tensor it was cut from (``shared_allocate``)."""
    base: Any = array.base
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, torch.Tensor) and base.is_shared() and array.flags.c_contiguous and array.dtype.isnative:
        flat = base.view(-1)
        offset, rest = divmod(array.ctypes.data - flat.data_ptr(), array.itemsize)
        if not rest and flat.dtype == torch.from_numpy(array[:0]).dtype and 0 <= offset <= flat.numel() - array.size:
            return flat[offset:offset + array.size].view(array.shape)
    if not array.flags.writeable:  # a mapped shard, read-only: handed out as such (RaggedBatch), never written
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(array)
    return torch.from_numpy(array)


def tensors(columns: Columns, *, ragged: bool = True, allocate_values: Allocate = allocate) -> dict[str, Any]:
    """A batch's columns as tensors: numeric arrays stacked; bytes and variable-length lists as ``RaggedBatch``
    (with ``ragged``), else lists; anything else (sequence features, fixed lists of bytes) as lists."""
    out: dict[str, Any] = {}
    for name, column in columns.items():
        if isinstance(column, np.ndarray) and column.dtype != object:
            out[name] = as_tensor(column)
            continue
        items = ragged_items(column, allocate_values) if ragged else None
        if items is None:
            out[name] = list(column)
        else:
            starts = None if items.starts is None else torch.from_numpy(items.starts)
            out[name] = RaggedBatch(as_tensor(items.values), torch.from_numpy(items.offsets), is_bytes=items.is_bytes,
                                    starts=starts)
    return out
