"""A full disk is a typed error: the path, the bytes the write needed, and no partial file left.

A local write that fails with ENOSPC (no space left) or EDQUOT (quota exceeded) raises
``DiskFullError`` instead of a bare ``OSError``: the job's message names the file and how much it
needed, and the job deletes its temporary folder (``pipelines.common``). Object stores do not run
out of space this way: the wrapper only matters for local paths.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

from beam_tfrecord.errors import DiskFullError

NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def free_bytes(path: str) -> int | None:
    """Bytes free to an unprivileged writer on the filesystem of ``path`` (or of its nearest
    existing parent); None where that cannot be asked (a remote path, no such folder)."""
    if "://" in path:
        return None
    folder = os.path.abspath(path)
    while folder and not os.path.isdir(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent
    try:
        stats = os.statvfs(folder)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


@contextlib.contextmanager
def raise_typed_when_full(path: str, needed_bytes: int, *, partial: str | None = None) -> Iterator[None]:
    """Turns an out-of-space ``OSError`` raised in the block into ``DiskFullError(path, needed_bytes)``.

    Args:
        path: the file the block writes (named in the error).
        needed_bytes: the bytes the block writes.
        partial: a file the block may leave half-written: removed (when local) before the error is
            raised, so it does not keep the space that is missing.
    """
    try:
        yield
    except DiskFullError:
        raise
    except OSError as err:
        if err.errno not in NO_SPACE_ERRNOS:
            raise
        if partial is not None and "://" not in partial:
            with contextlib.suppress(FileNotFoundError):
                # Emptied before it is removed: a handle still open on it (a writer a traceback holds)
                # would otherwise keep its blocks until it is closed.
                os.truncate(partial, 0)
                os.remove(partial)
        raise DiskFullError(path, needed_bytes, free_bytes(path)) from err
