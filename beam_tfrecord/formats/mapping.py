"""Local files mapped whole into memory, read-only, each mapping carrying its file's path and identity.

The identity is taken from the open file when it is mapped; ``mapped_file`` gives it back from the array, so a
DataLoader worker's batch names its shard without asking the system (docs/reading.md, "From workers").
"""

from __future__ import annotations

import dataclasses
import mmap
import os

import numpy as np


@dataclasses.dataclass(frozen=True)
class MappedFile:
    """A local file as it was mapped: its real path and identity (device, inode, size, modification time)."""

    path: str
    device: int
    inode: int
    size: int
    mtime_ns: int

    @staticmethod
    def of(path: str, status: os.stat_result) -> "MappedFile":
        return MappedFile(path, status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


class _FileMapping(mmap.mmap):
    """An ``mmap`` of a whole file that knows which file (set once, right after mapping)."""

    file: MappedFile


def map_whole(path: str) -> np.ndarray:
    """The whole file at ``path`` as a read-only uint8 array over a mapping of it (empty for an empty file)."""
    with open(path, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not status.st_size:
            return np.frombuffer(b"", dtype=np.uint8)
        mapping = _FileMapping(handle.fileno(), 0, access=mmap.ACCESS_READ)
    mapping.file = MappedFile.of(os.path.realpath(path), status)
    return np.frombuffer(mapping, dtype=np.uint8)


def mapped_file(array: np.ndarray) -> MappedFile | None:
    """The file ``array`` maps whole (an array ``map_whole`` gave, not a slice of it), else None."""
    base = array.base.obj if isinstance(array.base, memoryview) else array.base
    if not isinstance(base, _FileMapping) or array.dtype != np.uint8 or len(array) != len(base):
        return None
    return base.file
