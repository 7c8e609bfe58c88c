"""Shared memory reused from batch to batch between a DataLoader worker and the main process (docs/reading.md).

A fresh segment per tensor costs more than the reading it carries (``shm_open``, ``mmap``, a fault per page on both
sides), so each worker keeps a few segments (slots), created once and mapped once by the main process. A slot is
reused only when neither process holds an array of it (a finalizer in the main process counts its drops in a
shared array); when none is free a fresh segment is taken: nothing waits, nothing held is overwritten.
"""

from __future__ import annotations

import os
import secrets
import threading
import weakref
from typing import Any

import numpy as np
import torch
import torch.utils.data

from beam_tfrecord.core.processes import process_exists

SMALL_BYTES = 64 << 10  # arrays below this are plain memory, pickled with the batch (a segment costs more)
_SLOTS = 8  # slots per worker: the batches in flight (prefetch), the one held, the one being built, blocks
_SLOT_GRAIN = 1 << 16
# flags[0]: the main process holds the pool; then per slot: times sent (written by the worker), times released
# (written by the main process: each written by one process only), the generation the main process holds.
_SENT, _RELEASED, _HELD = 1, 1 + _SLOTS, 1 + 2 * _SLOTS


def shared_allocate(size: int, dtype: np.dtype) -> np.ndarray:
    """A 1-D array in a fresh shared segment: a DataLoader worker hands its tensor over without a copy."""
    torch_dtype = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    storage = torch.empty(0, dtype=torch_dtype)._typed_storage()._new_shared(size)
    return torch.empty(0, dtype=torch_dtype).set_(storage).numpy()


class _Slot:
    """One segment of a pool: its tensor (sent once), its bytes, and the worker's array of it (weakly)."""

    __slots__ = ("bytes", "generation", "held", "tensor")

    def __init__(self, size: int, generation: int) -> None:
        self.tensor = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(size))
        self.bytes = self.tensor.numpy()
        self.generation = generation
        self.held: weakref.ref[np.ndarray] | None = None


class SlotPool:
    """A DataLoader worker's slots. ``allocate`` is an ``Allocate``; ``reference`` names a tensor of a slot."""

    def __init__(self) -> None:
        self.key = f"{os.getpid()}-{secrets.token_hex(8)}"
        self.pid = os.getpid()
        self.flags_tensor = torch.zeros(1 + 3 * _SLOTS, dtype=torch.int64).share_memory_()
        self.flags = self.flags_tensor.numpy()
        self.slots: list[_Slot] = []

    def _free(self, index: int) -> bool:
        slot = self.slots[index]
        return (slot.held is None or slot.held() is None) and \
            self.flags[_SENT + index] == self.flags[_RELEASED + index]

    def allocate(self, size: int, dtype: np.dtype) -> np.ndarray:
        """A 1-D array: plain memory when small, else a free slot, else a fresh shared segment."""
        nbytes = size * np.dtype(dtype).itemsize
        if nbytes < SMALL_BYTES:
            return np.empty(size, dtype=dtype)
        free = [i for i in range(len(self.slots)) if self._free(i)]
        fits = [i for i in free if len(self.slots[i].bytes) >= nbytes]
        if fits:
            index = min(fits, key=lambda i: len(self.slots[i].bytes))
        elif len(self.slots) < _SLOTS or free:
            index = len(self.slots) if len(self.slots) < _SLOTS else free[0]
            capacity = -(-(nbytes + nbytes // 8) // _SLOT_GRAIN) * _SLOT_GRAIN  # room for larger batches
            generation = self.slots[index].generation + 1 if index < len(self.slots) else 1
            slot = _Slot(capacity, generation)
            self.slots[index:index + 1] = [slot]
        else:
            return shared_allocate(size, np.dtype(dtype))
        array = np.frombuffer(self.slots[index].bytes.data[:nbytes], dtype=dtype)
        self.slots[index].held = weakref.ref(array)  # views of it have it as base: it lives while any does
        return array

    def reference(self, tensor: torch.Tensor) -> tuple[Any, ...] | None:
        """What ``rebuild`` needs to give ``tensor`` (a contiguous view of a slot) in the main process, else None;
        counts the slot as sent."""
        address = tensor.data_ptr()
        index = next((i for i, slot in enumerate(self.slots)
                      if slot.bytes.ctypes.data <= address < slot.bytes.ctypes.data + len(slot.bytes)), None)
        if index is None:
            return None
        slot = self.slots[index]
        start = slot.bytes.ctypes.data
        if not tensor.is_contiguous() or address + tensor.nbytes > start + len(slot.bytes):
            return None
        self.flags[_SENT + index] += 1
        pool = self.flags_tensor if not self.flags[0] else None
        sent = slot.tensor if self.flags[_HELD + index] != slot.generation else None
        return (self.key, pool, index, slot.generation, sent, address - start, tensor.nbytes, tuple(tensor.shape),
                tensor.numpy().dtype.str)


_pool: SlotPool | None = None


def worker_pool() -> SlotPool | None:
    """This DataLoader worker's pool (made on first use), None outside a worker."""
    global _pool
    if torch.utils.data.get_worker_info() is None:
        return None
    if _pool is None or _pool.pid != os.getpid():
        _pool = SlotPool()
    return _pool


class _Received:
    """A worker's pool as the main process holds it: the shared flags and each slot's bytes."""

    def __init__(self, flags_tensor: torch.Tensor, pid: int) -> None:
        self.flags_tensor = flags_tensor
        self.flags = flags_tensor.numpy()
        self.pid = pid
        self.slots: dict[int, tuple[int, np.ndarray]] = {}


_received: dict[str, _Received] = {}
_releasing = threading.Lock()  # finalizers run in whichever thread drops a batch (the pin_memory thread's too)


def _release(flags: np.ndarray, index: int) -> None:
    with _releasing:
        flags[_RELEASED + index] += 1


def rebuild(key: str, pool: torch.Tensor | None, index: int, generation: int, sent: torch.Tensor | None,
            offset: int, nbytes: int, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    """The tensor ``SlotPool.reference`` named, over this process's mapping of the slot (no copy); dropping
    its last view releases the slot to its worker."""
    received = _received.get(key)
    if received is None:
        if pool is None:
            raise RuntimeError(f"a batch names slot {index} of DataLoader worker pool {key}, which this process "
                               "was never sent (a batch handed on from another process?)")
        for other in [k for k, r in _received.items() if not process_exists(r.pid)]:
            del _received[other]
        received = _received[key] = _Received(pool, int(key.split("-")[0]))
        received.flags[0] = 1
    if sent is not None:
        received.slots[index] = (generation, sent.numpy())
        received.flags[_HELD + index] = generation
    held, data = received.slots[index]
    if held != generation:
        raise RuntimeError(f"slot {index} of DataLoader worker pool {key}: generation {generation} sent, {held} held")
    array = np.frombuffer(data.data[offset:offset + nbytes], dtype=np.dtype(dtype))
    weakref.finalize(array, _release, received.flags, index).atexit = False
    return torch.from_numpy(array.reshape(shape))

