"""Local paths (no scheme): the ``os`` module. Writes make their parent folders.

Content tokens are ``"<size>:<mtime ns>"``, stored in existing input indexes: never change them.
"""

from __future__ import annotations

import concurrent.futures
import errno
import io
import os
import re
import shutil
import uuid
from typing import TYPE_CHECKING, BinaryIO

from beam_tfrecord.storage.backend import StorageBackend, StoredFile, VersionedBytes
from beam_tfrecord.storage.disk_space import raise_typed_when_full
from beam_tfrecord.storage.paths import glob_regex, literal_prefix

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

# Bytes handed to the kernel per write: it then fills the page cache with folios of at most 64 KiB, which it
# takes first from memory freed lately. A larger write gets folios as large (a 1 MiB write, 1 MiB folios),
# split from the large free blocks that a VM's host takes back (free page reporting) and must supply again at
# the first touch. Measured on this project's VM, new files (benchmarks/page_cache_writes.py): 0.27 CPU-s per
# GB written in 64 KiB writes, 1.38 in 1 MiB writes; a build of 1M small records, 4.5% faster (docs/performance.md,
# "Spill runs in 64 KiB writes, the temp folder deleted by 8 threads").
WRITE_BYTES = 64 << 10


class _SmallWrites(io.FileIO):
    """A file that passes at most ``WRITE_BYTES`` to each write system call (``io.BufferedWriter`` calls again
    for the rest)."""

    def write(self, data: "ReadableBuffer") -> int:
        return super().write(memoryview(data)[:WRITE_BYTES])


# Files a tree's deletion unlinks at once. Unlinking a file frees the page cache it holds, page by page, in the
# kernel; threads spread that over the cores and over the waits. The temp folder of a build of 1M small records
# (3.1 GB of spill runs), deleted at the job's end: 0.60 s in one thread, 0.26 s in 8.
DELETE_THREADS = 8


def _unlink_files(directory: str) -> None:
    """Unlinks the files under ``directory`` (links themselves, not what they point to; folders stay),
    ``DELETE_THREADS`` at a time."""
    def raise_error(err: OSError) -> None:
        raise err

    files = [os.path.join(root, name) for root, _, names in os.walk(directory, onerror=raise_error) for name in names]
    if len(files) < 2:
        return
    with concurrent.futures.ThreadPoolExecutor(min(DELETE_THREADS, len(files))) as pool:
        list(pool.map(os.unlink, files))  # the first error is raised


def _make_parent(path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)


def _stored(path: str, stat: os.stat_result) -> StoredFile:
    return StoredFile(path, stat.st_size, stat.st_mtime, f"{stat.st_size}:{stat.st_mtime_ns}")


class LocalBackend(StorageBackend):
    """This machine's files."""

    is_local = True

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def open_read(self, path: str) -> BinaryIO:
        return open(path, "rb")

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb", buffering=0) as handle:
            return handle.readall()

    def read_bytes_or_none(self, path: str) -> bytes | None:
        try:
            return self.read_bytes(path)
        except (FileNotFoundError, NotADirectoryError):  # a file's name used as a folder: os.path.exists says False
            return None

    def open_write(self, path: str) -> BinaryIO:
        _make_parent(path)
        return io.BufferedWriter(_SmallWrites(path, "wb"))

    def list_files(self, pattern: str, *, include_broken: bool = False) -> list[tuple[str, int]]:
        return [(path, size) for path, size, _ in _listed(pattern, include_broken=include_broken)]

    def list_details(self, pattern: str, *, include_broken: bool = False) -> list[StoredFile]:
        return [_stored(path, stat) if stat else StoredFile(path, -1, 0.0, None)
                for path, _, stat in _listed(pattern, include_broken=include_broken)]

    def stat(self, path: str) -> StoredFile | None:
        try:
            return _stored(path, os.stat(path))
        except OSError:
            return None

    def delete(self, path: str) -> None:
        if os.path.lexists(path):
            os.remove(path)

    def delete_tree(self, directory: str) -> None:
        if os.path.isdir(directory):
            if not os.path.islink(directory):  # rmtree refuses a link: so does this, deleting nothing
                _unlink_files(directory)
            shutil.rmtree(directory)

    def make_dirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)  # exist_ok: two jobs may make it at once

    def rename(self, source: str, destination: str) -> bool:
        _make_parent(destination)
        try:
            os.replace(source, destination)
        except OSError as err:
            if err.errno == errno.EXDEV:  # another filesystem: the caller copies
                return False
            raise
        return True

    def copy(self, source: str, destination: str) -> None:
        _make_parent(destination)
        shutil.copyfile(source, destination)  # the kernel copies (copy_file_range / sendfile)

    def create_if_absent(self, path: str, data: bytes) -> bool:
        self.make_dirs(os.path.dirname(path) or ".")
        # Written whole under a name of its own, then linked (fails if the path exists): a process killed at any
        # moment, or a disk too full, never leaves ``path`` empty or half-written (a lease would read as held by
        # nobody, for ever). A killed one may leave its ``.create-*`` file.
        aside = f"{path}.create-{uuid.uuid4().hex[:8]}"
        try:
            with raise_typed_when_full(aside, len(data), partial=aside), open(aside, "wb") as handle:
                handle.write(data)
            os.link(aside, path)
        except FileExistsError:
            return False
        except OSError as err:
            if err.errno not in _NO_HARD_LINKS:
                raise
            return _create_exclusive(path, data)
        finally:
            if os.path.exists(aside):
                os.unlink(aside)
        return True

    def read_versioned(self, path: str) -> VersionedBytes | None:
        try:
            with open(path, "rb") as handle:
                return VersionedBytes(handle.read(), None)
        except FileNotFoundError:
            return None

    def delete_if_unchanged(self, path: str, read: VersionedBytes) -> None:
        # Moved aside first, so two callers deleting the same file cannot both delete a new one.
        aside = f"{path}.stale-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return
        with open(aside, "rb") as handle:
            moved = handle.read()
        if moved != read.data and not os.path.exists(path):
            os.replace(aside, path)  # not the one read: put it back
            return
        os.remove(aside)


_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK}  # FUSE mounts, some NFS


def _create_exclusive(path: str, data: bytes) -> bool:
    """``create_if_absent`` where hard links are refused: ``O_EXCL`` (a kill between create and write can leave
    the file empty)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with raise_typed_when_full(path, len(data), partial=path), os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return True


def _files_under(literal: str) -> list[str]:
    """Every file whose path starts with ``literal``: a folder's whole tree, or in a folder only the entries
    named from the literal's last part on (``/data/train-`` walks ``/data/train-*`` and no sibling's tree)."""
    if literal.endswith(os.sep) or os.path.isdir(literal):
        roots, names = [literal], []
    else:
        parent, stem = os.path.split(literal)
        try:
            with os.scandir(parent or ".") as entries:
                chosen = [entry for entry in entries if entry.name.startswith(stem)]
        except OSError:  # absent or unreadable: nothing listed, as os.walk does
            return []
        # As os.walk classifies them: a folder (not a link to one) is walked; a link to a folder is neither.
        roots = [os.path.join(parent, e.name) for e in chosen if e.is_dir() and not e.is_symlink()]
        names = [os.path.join(parent, e.name) for e in chosen if not e.is_dir()]
    for root in roots:  # a pattern relative to the working directory gives "x.csv", not "./x.csv"
        names += [os.path.join(folder, name) for folder, _, files in os.walk(root) for name in files]
    return names


def _listed(pattern: str, *, include_broken: bool) -> list[tuple[str, int, os.stat_result | None]]:
    """(path, size, stat) of the files matching ``pattern``, sorted; unsizable ones (-1, None) if asked."""
    literal = literal_prefix(pattern)
    regex = glob_regex(pattern)
    candidates = [literal] if os.path.isfile(literal) or os.path.islink(literal) else _files_under(literal)
    out: list[tuple[str, int, os.stat_result | None]] = []
    for path in candidates:
        if not _matches(regex, path):
            continue
        try:
            stat = os.stat(path)
            out.append((path, stat.st_size, stat))
        except OSError:
            if include_broken:
                out.append((path, -1, None))
    return sorted(out, key=lambda found: found[0])


def _matches(regex: re.Pattern[str], path: str) -> bool:
    return regex.fullmatch(path) is not None
