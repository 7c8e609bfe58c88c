"""Background threads a ``fork`` of this process may copy: each works only while it holds the fork
lock, so a fork taken under that lock finds every one idle, holding no lock the child would inherit held.

Why: the local engine forks its workers only when no other thread could hold such a lock
(``engine/forked_workers.py``). The progress display's thread runs during every local build, so each
build used to start its workers as fresh interpreters that import Beam again (15,000 images: +3.5 s of
CPU, +2.2 s of wall). docs/performance.md, "Every core by default".
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Iterator

_FORK_LOCK = threading.Lock()
_QUIET_THREADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def _fresh_lock_in_child() -> None:
    """A forked child gets a lock of its own: the fork is taken under the parent's, which the child would
    inherit held (a worker that makes a fork server in turn would wait on it for good)."""
    global _FORK_LOCK
    _FORK_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock_in_child)


def start_quiet_thread(work: Callable[[], None], *, every_seconds: float, stop: threading.Event,
                       name: str) -> threading.Thread:
    """A daemon thread running ``work()`` every ``every_seconds`` until ``stop`` is set, each call
    under the fork lock; between calls it only waits on ``stop``."""

    def run() -> None:
        while not stop.wait(every_seconds):
            with _FORK_LOCK:
                work()

    thread = threading.Thread(target=run, name=name, daemon=True)
    _QUIET_THREADS.add(thread)
    thread.start()
    return thread


@contextlib.contextmanager
def threads_held_quiet() -> Iterator[list[str]]:
    """Holds the fork lock while the block runs (every quiet thread is then between two calls) and
    yields the names of this process's other Python threads that are not quiet: a fork in the block
    is safe from Python threads only when that list is empty."""
    with _FORK_LOCK:
        current = threading.current_thread()
        yield [thread.name for thread in threading.enumerate()
               if thread is not current and thread not in _QUIET_THREADS]
