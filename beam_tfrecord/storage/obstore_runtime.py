"""obstore's extension module for this process: the installed one, or a private copy in a process forked after
the installed one's runtime had started.

Invariant: no request goes through a Tokio runtime whose threads were left behind by ``fork()``. See
docs/reading.md, "Forked workers and object stores".
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import os
import sys
import threading
from types import ModuleType

# obstore runs every request on one process-wide Tokio runtime (pyo3-async-runtimes' ``get_runtime``), made at the
# first request. ``fork()`` copies only the calling thread, so in a child of a process that made a request the
# runtime is there without its threads: every request waits forever (Tokio #4301; obstore calls itself not
# fork-safe, obstore PR #441). A second copy of the extension, loaded from another inode (the dynamic loader shares
# a library only by its file's identity), has statics of its own, so its runtime is made afresh in the child.
# Measured: ~25 ms to load, ~15 MB of memory (the copy of the library) per forked process that reads a store.
_TOKIO_THREAD = "tokio-runtime-w"  # Tokio's worker threads' name, as Linux's 15-character ``comm`` shows it
_COPY_NAME = "beam_tfrecord_private_obstore._obstore"  # ends in ``_obstore``: the name its init function has


@dataclasses.dataclass(frozen=True)
class _Extension:
    module: ModuleType
    pid: int  # the process it serves
    runtime_started: bool  # a request went through it in ``pid``: its runtime has threads there


_lock = threading.Lock()
_current: _Extension | None = None
_tokio_seen_in: int | None = None  # the process that ran Tokio threads at its last fork (any library's obstore)


def extension() -> ModuleType:
    """obstore's extension module (``obstore._obstore``: ``get_range``, ``_store``, ``exceptions``) that a request
    in this process must go through, its runtime marked as started."""
    global _current
    pid = os.getpid()
    with _lock:
        current = _current
        if current is None or current.pid != pid:
            inherited_runtime = current is not None and current.runtime_started
            forked_from_tokio = _tokio_seen_in not in (None, pid)
            module = _private_copy() if inherited_runtime or forked_from_tokio else _installed()
            current = _Extension(module, pid, runtime_started=False)
        if not current.runtime_started:
            current = dataclasses.replace(current, runtime_started=True)
        _current = current
        return current.module


def _installed() -> ModuleType:
    from obstore import _obstore

    return _obstore


def _private_copy() -> ModuleType:
    """A fresh load of obstore's extension from an anonymous in-memory file: its own statics, its own runtime.
    The submodules it registers (``obstore._store``, ``obstore.exceptions``) are put back as they were, so the rest
    of this process sees the installed obstore."""
    source = _installed().__file__
    assert source is not None  # an extension module always has a file
    descriptor = os.memfd_create("beam-tfrecord-obstore")  # closed with the process: the library stays mapped
    with open(source, "rb") as library:
        os.sendfile(descriptor, library.fileno(), 0, os.fstat(library.fileno()).st_size)
    location = f"/proc/self/fd/{descriptor}"
    loader = importlib.machinery.ExtensionFileLoader(_COPY_NAME, location)
    spec = importlib.util.spec_from_file_location(_COPY_NAME, location, loader=loader)
    assert spec is not None
    before = dict(sys.modules)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    for name in [name for name in sys.modules if sys.modules[name] is not before.get(name)]:
        if name in before:
            sys.modules[name] = before[name]
        else:
            del sys.modules[name]
    return module


def _note_tokio_threads() -> None:
    """Before a fork: whether this process runs Tokio threads that its child will lack (any library's obstore)."""
    global _tokio_seen_in
    try:
        names = []
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read())
    except OSError:
        names = []
    if any(name.startswith(_TOKIO_THREAD) for name in names):
        _tokio_seen_in = os.getpid()


if hasattr(os, "register_at_fork") and sys.platform.startswith("linux"):
    os.register_at_fork(before=_note_tokio_threads)
