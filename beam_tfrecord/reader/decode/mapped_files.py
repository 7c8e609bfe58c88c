"""Local shards a DataLoader worker's batch names (path and identity), mapped again by the main process.

A worker reads a local, uncompressed shard through a mapping of the whole file that carries the file's path and
identity (``formats.mapping``); its bytes cross to the main process as those plus the items' spans, and the main
process maps the file itself, checked to be the one the worker read (docs/reading.md, "From workers").
"""

from __future__ import annotations

import collections
import os

import numpy as np

from beam_tfrecord.errors import ShardChangedError
from beam_tfrecord.formats.mapping import MappedFile, map_whole, mapped_file

_MAPS_KEPT = 16  # files the main process keeps mapped (least recently used dropped; batches keep their own)

_maps: collections.OrderedDict[str, tuple[MappedFile, np.ndarray]] = collections.OrderedDict()


def map_file(file: MappedFile) -> np.ndarray:
    """The whole of ``file`` mapped read-only in this process (a few kept mapped), checked to be as it was.

    Raises:
        ShardChangedError: when the file is gone or its device, inode, size or modification time differ.
    """
    try:
        now = MappedFile.of(file.path, os.stat(file.path))
    except FileNotFoundError:
        raise _removed(file) from None
    if now != file:
        raise ShardChangedError(
            f"shard {file.path!r} changed after a DataLoader worker read it, before the main process took its "
            f"batch: read as {_described(file)}, now {_described(now)}; do not rewrite shards while they are read")
    held = _maps.get(file.path)
    if held is not None and held[0] == file:
        _maps.move_to_end(file.path)
        return held[1]
    try:
        array = map_whole(file.path)
    except FileNotFoundError:
        raise _removed(file) from None
    opened = mapped_file(array)  # None: emptied meanwhile
    if opened != file:
        raise ShardChangedError(f"shard {file.path!r} changed while the main process opened it: read as "
                                f"{_described(file)}, now {_described(opened) if opened else 'empty'}")
    _maps[file.path] = (file, array)
    while len(_maps) > _MAPS_KEPT:
        _maps.popitem(last=False)
    return array


def _removed(file: MappedFile) -> ShardChangedError:
    return ShardChangedError(f"shard {file.path!r} was removed after a DataLoader worker read it, before the main "
                             "process took its batch: do not remove or rewrite shards while they are read")


def _described(file: MappedFile) -> str:
    return f"{file.size} bytes, mtime_ns {file.mtime_ns}, inode {file.inode}"
