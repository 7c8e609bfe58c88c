"""Ending a command's process without Python's interpreter teardown, once its work is done.

Threads are joined and ``atexit`` handlers run first; a command that raises ends the normal way.
Why: docs/performance.md, "The fixed cost of a job".
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
