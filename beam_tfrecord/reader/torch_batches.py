"""Ready batches as tensors: ``RaggedBatch`` for variable-length features, stacked tensors for the rest.

Inside a DataLoader worker, a batch (``WorkerBatch``) reaches the main process without its bytes being pickled:
bytes of a mapped local shard as a reference the main process maps, other columns in the worker's reused shared
memory slots (``torch_slots``), small ones pickled (docs/reading.md, "Ragged batches").
"""

from __future__ import annotations

import io
import itertools
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.utils.data

from beam_tfrecord.errors import ShardChangedError
from beam_tfrecord.formats.mapping import MappedFile, mapped_file
from beam_tfrecord.reader.decode.block_decode import Columns
from beam_tfrecord.reader.decode.mapped_files import map_file
from beam_tfrecord.reader.decode.ragged import Allocate, RaggedArray, allocate, item_index, ragged_items
from beam_tfrecord.reader.torch_slots import SMALL_BYTES, SlotPool, rebuild, worker_pool


class RaggedBatch:
    """One variable-length feature of a batch: ``values`` (a flat tensor) and ``offsets`` (int64, items + 1).

    ``len(batch)`` is its number of items; ``batch[i]`` is item ``i``: ``bytes`` for bytes features (a copy, as
    lists of bytes gave), else a tensor view of ``values``; ``view(i)`` is a zero-copy ``memoryview`` and
    ``image(i)`` decodes an encoded image. Views share memory with ``values``: they stay valid as long as they
    are referenced (the tensor's storage is kept alive by them). With ``starts`` (bytes read at 0 workers from a
    mapped shard), item ``i`` lies at ``starts[i]`` of ``values``, the read-only mapped shard: never write into
    it (``file`` names it when the batch crosses processes). ``pin_memory()`` and ``to()`` (which pack the items
    first) serve ``DataLoader(pin_memory=True)``.
    """

    __slots__ = ("file", "is_bytes", "offsets", "starts", "values")

    def __init__(self, values: torch.Tensor, offsets: torch.Tensor, *, is_bytes: bool,
                 starts: torch.Tensor | None = None, file: MappedFile | None = None) -> None:
        self.values = values
        self.offsets = offsets
        self.is_bytes = is_bytes
        self.starts = starts
        self.file = file

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as the mapped file's name and the spans when ``file`` is set, else packed (no whole shard)."""
        return _rebuilt, (_payload(self, None),)

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


def worker_allocate() -> Allocate:
    """A DataLoader worker's slots (``SlotPool.allocate``), ordinary memory elsewhere."""
    pool = worker_pool()
    return pool.allocate if pool is not None else allocate


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


def tensors(columns: Columns, *, ragged: bool = True, allocate_values: Allocate = allocate,
            refer: Callable[[np.ndarray], MappedFile | None] | None = None) -> dict[str, Any]:
    """A batch's columns as tensors: numeric arrays stacked; bytes and variable-length lists as ``RaggedBatch``
    (with ``ragged``), else lists; anything else (sequence features, fixed lists of bytes) as lists. Items in a
    mapped shard stay there with the default ``allocate_values``, or when ``refer`` names the shard's file (the
    batch then crosses processes as a reference); else they are packed into an array of ``allocate_values``."""
    out: dict[str, Any] = {}
    for name, column in columns.items():
        if isinstance(column, np.ndarray) and column.dtype != object:
            out[name] = as_tensor(column)
            continue
        items = ragged_items(column, allocate_values) if ragged else None
        if items is None:
            out[name] = list(column)
            continue
        file = None
        if items.starts is not None and allocate_values is not allocate:
            file = refer(items.values) if refer is not None else None
            if file is None:
                items = items.packed(allocate_values)
        starts = None if items.starts is None else torch.from_numpy(items.starts)
        out[name] = RaggedBatch(as_tensor(items.values), torch.from_numpy(items.offsets), is_bytes=items.is_bytes,
                                starts=starts, file=file)
    return out


def shard_reference(evictable: str | None) -> Callable[[np.ndarray], MappedFile | None]:
    """``tensors``' ``refer`` in a DataLoader worker: the file of a shard's mapping, unless it lies under
    ``evictable`` (a cache directory with a limit, whose shards may be removed while their batches travel)."""
    under = os.path.join(os.path.realpath(evictable), "") if evictable is not None else None

    def refer(values: np.ndarray) -> MappedFile | None:
        file = mapped_file(values)
        return None if file is None or (under is not None and file.path.startswith(under)) else file

    return refer


class WorkerBatch(dict[str, Any]):
    """A batch as a DataLoader worker yields it: pickled column by column (``_payload``), so that its bytes
    cross as references and slots; the main process gets a plain ``dict``."""

    def __copy__(self) -> "WorkerBatch":  # DataLoader's default_convert copies a mapping, then updates it
        return WorkerBatch(self)

    def __reduce__(self) -> tuple[Any, ...]:
        pool = worker_pool()
        return _rebuilt_batch, ({name: _payload(value, pool) for name, value in self.items()},)


def _payload(value: Any, pool: SlotPool | None) -> tuple[Any, ...]:
    """How one column crosses: a mapped file's spans, a slot, a small array pickled, a tensor (torch's way)."""
    if isinstance(value, RaggedBatch):
        if value.file is not None and value.starts is not None:
            return "mapped", value.file, value.offsets.numpy(), value.starts.numpy(), value.is_bytes
        packed = value.packed()
        return "ragged", _payload(packed.values, pool), packed.offsets.numpy(), packed.is_bytes
    if isinstance(value, torch.Tensor) and value.device.type == "cpu" and not value.requires_grad:
        reference = pool.reference(value) if pool is not None else None
        if reference is not None:
            return "slot", reference
        if value.nbytes < SMALL_BYTES:
            return "array", value.numpy()
    return "value", value


def _rebuilt(payload: tuple[Any, ...]) -> Any:
    """The column ``_payload`` described, in this process."""
    kind = payload[0]
    if kind == "mapped":
        _, file, offsets, starts, is_bytes = payload
        return RaggedBatch(_mapped_tensor(file), torch.from_numpy(offsets), is_bytes=is_bytes,
                           starts=torch.from_numpy(starts), file=file)
    if kind == "ragged":
        _, values, offsets, is_bytes = payload
        return RaggedBatch(_rebuilt(values), torch.from_numpy(offsets), is_bytes=is_bytes)
    if kind == "slot":
        return rebuild(*payload[1])
    if kind == "array":
        return torch.from_numpy(payload[1])
    return payload[1]


def _rebuilt_batch(payloads: dict[str, tuple[Any, ...]]) -> Any:
    """A worker's batch in the main process; a shard changed on the way: an error the DataLoader raises."""
    try:
        return {name: _rebuilt(payload) for name, payload in payloads.items()}
    except ShardChangedError:
        from torch._utils import ExceptionWrapper  # what a DataLoader re-raises, also from its pin_memory thread

        return ExceptionWrapper(where="in the main process, taking a batch from a DataLoader worker")


_mapped_tensors: dict[MappedFile, tuple[np.ndarray, torch.Tensor]] = {}


def _mapped_tensor(file: MappedFile) -> torch.Tensor:
    """The whole mapped ``file`` as a read-only uint8 tensor (one per mapping, kept while it is kept)."""
    array = map_file(file)
    held = _mapped_tensors.get(file)
    if held is not None and held[0] is array:
        return held[1]
    if len(_mapped_tensors) >= 16:
        _mapped_tensors.clear()
    tensor = as_tensor(array)
    _mapped_tensors[file] = (array, tensor)
    return tensor
