"""Runs retention in forks that SIGKILL themselves after a given number of storage writes/deletes.

``python retention_kill_server.py KEEP``: reads ``ROOT CALLS`` lines on stdin; for each, forks a child that runs
``apply_retention(ROOT, KEEP, min_version_age=0)`` and kills itself (SIGKILL: no handler, no clean-up) right after its
CALLS-th call of a mutating storage method (``MUTATING``; a store's rename is a copy and a delete), and answers
``killed``, ``finished`` (the run ended first) or ``failed`` (it raised). This process never touches a store
itself, so every fork starts with fresh clients; one interpreter serves a whole test.
"""

from __future__ import annotations

import datetime
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.versions.retention import apply_retention

MUTATING = ("delete", "delete_tree", "write_new", "rename", "copy", "create_if_absent")


def _counted(method: Callable[..., Any], calls: list[int], after_calls: int) -> Callable[..., Any]:
    def counted(*args: Any) -> Any:
        result = method(*args)
        calls[0] += 1
        if calls[0] == after_calls:
            os.kill(os.getpid(), signal.SIGKILL)
        return result
    return counted


def _run_killed(root: str, keep: int, after_calls: int) -> None:
    backend = storage.backend_for(root)
    calls = [0]
    for name in MUTATING:
        setattr(backend, name, _counted(getattr(backend, name), calls, after_calls))
    apply_retention(root, keep, min_version_age=datetime.timedelta(0))


def main() -> None:
    keep = int(sys.argv[1])
    for line in sys.stdin:
        root, after_calls = line.split()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _run_killed(root, keep, int(after_calls))
            except BaseException:  # reported as "failed", with its traceback on stderr
                traceback.print_exc()
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        print("killed" if killed else "finished" if os.WEXITSTATUS(status) == 0 else "failed", flush=True)


if __name__ == "__main__":
    main()
