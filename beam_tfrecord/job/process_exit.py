"""Ending a command's process without Python's interpreter teardown, once its work is done.

A process that has imported Apache Beam (gRPC, pandas, pyarrow, protobuf with it) took 1-2 s after
its last line to end, most of it in C with no Python frame running: the interpreter clearing
thousands of modules and their objects (a build of 300 images, load average 14: 1.2 s with one
in-memory worker, 1.9 s with two worker processes; each Beam worker process the same, which the
runner waits for). The user waits for that teardown, and it does nothing a finished job needs.

``run_and_exit`` runs the command, then exits as ``sys.exit`` does: non-daemon threads are joined
and every ``atexit`` handler runs (temporary folders removed, logging flushed), and only then the
process ends with ``os._exit``, skipping the teardown that follows. A command that raises leaves the
normal way (traceback, exit code 1). Measured: ``docs/performance.md#the-fixed-cost-of-a-job``.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from typing import NoReturn


def run_and_exit(command: Callable[[], int | None]) -> NoReturn:
    """Runs ``command`` and exits with its code (None: 0), skipping the interpreter's teardown.

    The ending handler is registered before ``command`` runs, so it runs after every ``atexit``
    handler registered during it (they run last registered, first run).
    """
    ending: list[int] = []
    atexit.register(_end_now, ending)
    code = command()
    ending.append(0 if code is None else int(code))
    sys.exit(ending[0])


def _end_now(ending: list[int]) -> None:
    if not ending:  # the command raised: let the interpreter report it and end as usual
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing left to flush
            pass
    os._exit(ending[0])
