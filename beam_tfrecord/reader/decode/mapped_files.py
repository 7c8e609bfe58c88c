"""Local shards mapped into memory, named so that another process maps the same bytes (a batch's reference).

A DataLoader worker reads a local, uncompressed shard through a read-only mapping of the whole file; its bytes
cross to the main process as the file's name and identity plus the items' spans, and the main process maps the
file itself (docs/reading.md, "From workers"). The file of a mapping is found in ``/proc/self/maps`` (Linux).
"""

from __future__ import annotations

import collections
import dataclasses
import mmap
import os
import weakref

import numpy as np

from beam_tfrecord.errors import ShardChangedError

_MAPS_KEPT = 16  # files the main process keeps mapped (least recently used dropped; batches keep their own)


@dataclasses.dataclass(frozen=True)
class MappedFile:
    """A local file as a worker mapped it: its path and identity (device, inode, size, modification time)."""

    path: str
    device: int
    inode: int
    size: int
    mtime_ns: int

    @staticmethod
    def of(path: str, status: os.stat_result) -> "MappedFile":
        return MappedFile(path, status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


_named: dict[int, tuple[weakref.ref[np.ndarray], MappedFile | None]] = {}  # mapping address -> its file
_maps: collections.OrderedDict[str, tuple[MappedFile, np.ndarray]] = collections.OrderedDict()


def mapped_file(root: np.ndarray) -> MappedFile | None:
    """The file ``root`` maps whole (a read-only ``mmap`` of it, as the TFRecord reader makes), else None.

    Found once per mapping (``/proc/self/maps``, then ``os.stat``: the same inode and size) and remembered.
    """
    base = root.base.obj if isinstance(root.base, memoryview) else root.base  # np.frombuffer's base: a memoryview
    if not isinstance(base, mmap.mmap) or root.flags.writeable or not len(root):
        return None
    address = root.ctypes.data
    held = _named.get(address)
    if held is not None and held[0]() is root:
        return held[1]
    if len(_named) >= 64:
        for key in [key for key, (ref, _) in _named.items() if ref() is None]:
            del _named[key]
    found = _find(address, len(root))
    _named[address] = (weakref.ref(root), found)
    return found


def _find(address: int, size: int) -> MappedFile | None:
    """The file mapped whole at ``address`` (``size`` bytes from its start), from ``/proc/self/maps``."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            line = next((line for line in maps if int(line.split("-", 1)[0], 16) == address), None)
    except (OSError, ValueError):
        return None
    fields = line.split(maxsplit=5) if line is not None else []
    if len(fields) < 6 or int(fields[2], 16) != 0 or not fields[5].startswith("/") or \
            fields[5].rstrip("\n").endswith(" (deleted)"):
        return None
    path = fields[5].rstrip("\n")
    major, minor = (int(part, 16) for part in fields[3].split(":"))
    try:
        status = os.stat(path)
    except OSError:
        return None
    if (status.st_ino, os.major(status.st_dev), os.minor(status.st_dev), status.st_size) != (
            int(fields[4]), major, minor, size):
        return None
    return MappedFile.of(path, status)


def map_file(file: MappedFile) -> np.ndarray:
    """The whole of ``file`` mapped read-only in this process (a few kept mapped), checked to be as it was.

    Raises:
        ShardChangedError: when the file is gone or its device, inode, size or modification time differ.
    """
    try:
        now = MappedFile.of(file.path, os.stat(file.path))
    except FileNotFoundError:
        raise ShardChangedError(f"shard {file.path!r} was removed after a DataLoader worker read it, before the "
                                "main process took its batch: do not remove or rewrite shards while they are read"
                                ) from None
    if now != file:
        raise ShardChangedError(
            f"shard {file.path!r} changed after a DataLoader worker read it, before the main process took its "
            f"batch: read as {_described(file)}, now {_described(now)}; do not rewrite shards while they are read")
    held = _maps.get(file.path)
    if held is not None and held[0] == file:
        _maps.move_to_end(file.path)
        return held[1]
    with open(file.path, "rb") as handle:
        opened = MappedFile.of(file.path, os.fstat(handle.fileno()))
        if opened != file:
            raise ShardChangedError(f"shard {file.path!r} changed while the main process opened it: read as "
                                    f"{_described(file)}, now {_described(opened)}")
        array = np.frombuffer(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ), dtype=np.uint8)
    _maps[file.path] = (file, array)
    while len(_maps) > _MAPS_KEPT:
        _maps.popitem(last=False)
    return array


def _described(file: MappedFile) -> str:
    return f"{file.size} bytes, mtime_ns {file.mtime_ns}, inode {file.inode}"
