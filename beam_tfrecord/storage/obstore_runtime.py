"""obstore's extension module for this process: the installed one, or a private copy in a process forked from one
that had loaded it (whose runtime may have started).

Invariant: no request goes through a Tokio runtime whose threads were left behind by ``fork()``. See
docs/reading.md, "Forked workers and object stores".
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from types import ModuleType

# obstore runs every request on one process-wide Tokio runtime (pyo3-async-runtimes' ``get_runtime``), made at the
# first request. ``fork()`` copies only the calling thread, so in a child of a process that made a request the
# runtime is there without its threads: every request waits forever (Tokio #4301; obstore calls itself not
# fork-safe, obstore PR #441). A second copy of the extension, loaded from another inode (the dynamic loader shares
# a library only by its file's identity), has statics of its own, so its runtime is made afresh in the child.
# Measured: ~25 ms to load, ~15 MB of memory (the copy of the library) per forked process that reads a store.
# Whether the parent's runtime had started cannot be asked (its threads' names are set by the threads themselves,
# after a fork may have happened), so a child copies whenever its parent had loaded obstore's extension.
_EXTENSION = "obstore._obstore"
_COPY_NAME = "beam_tfrecord_private_obstore._obstore"  # ends in ``_obstore``: the name its init function has


@dataclasses.dataclass(frozen=True)
class _Extension:
    module: ModuleType
    pid: int  # the process it serves


_lock = threading.Lock()
_current: _Extension | None = None
_loaded_in: int | None = None  # the process that had loaded obstore's extension (any copy) at its last fork


def extension() -> ModuleType:
    """obstore's extension module (``obstore._obstore``: ``get_range``, ``_store``, ``exceptions``) that requests
    in this process go through: the installed one, or in a process forked from one that had loaded it, a private
    copy (made once per process)."""
    global _current
    pid = os.getpid()
    with _lock:
        if _current is None or _current.pid != pid:
            inherited = _current is not None or _loaded_in not in (None, pid)  # from a parent, with its runtime
            _current = _Extension(_private_copy() if inherited else _installed(), pid)
        return _current.module


def _installed() -> ModuleType:
    from obstore import _obstore

    return _obstore


def _private_copy() -> ModuleType:
    """A fresh load of obstore's extension from a copy of its file (anonymous, in memory, on Linux): its own
    statics, its own runtime. The submodules it registers (``obstore._store``, ``obstore.exceptions``) are put back
    as they were, so the rest of this process sees the installed obstore."""
    source = _installed().__file__
    assert source is not None  # an extension module always has a file
    with open(source, "rb") as library, _anonymous_file() as (copy, location):
        os.sendfile(copy, library.fileno(), 0, os.fstat(library.fileno()).st_size)
        loader = importlib.machinery.ExtensionFileLoader(_COPY_NAME, location)
        spec = importlib.util.spec_from_file_location(_COPY_NAME, location, loader=loader)
        assert spec is not None
        before = dict(sys.modules)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)  # mapped now: the file may go
    for name in [name for name in sys.modules if sys.modules[name] is not before.get(name)]:
        if name in before:
            sys.modules[name] = before[name]
        else:
            del sys.modules[name]
    return module


@contextlib.contextmanager
def _anonymous_file() -> Iterator[tuple[int, str]]:
    """(a descriptor open for writing, a path the loader opens it by), gone on exit."""
    if hasattr(os, "memfd_create"):
        descriptor = os.memfd_create("beam-tfrecord-obstore")
        try:
            yield descriptor, f"/proc/self/fd/{descriptor}"
        finally:
            os.close(descriptor)
        return
    with tempfile.NamedTemporaryFile(suffix=".so") as file:
        yield file.fileno(), file.name


def _note_loaded() -> None:
    """Before a fork: whether this process had loaded obstore's extension, whose runtime its child could not use."""
    global _loaded_in
    if _EXTENSION in sys.modules or _current is not None:
        _loaded_in = os.getpid()


def _new_lock_in_child() -> None:
    """A fork while another thread loaded a copy would leave the child's lock held forever."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_note_loaded, after_in_child=_new_lock_in_child)
