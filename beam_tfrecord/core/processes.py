"""Whether a process of this host still runs (a lease's holder, a DataLoader worker that sent shared memory)."""

from __future__ import annotations

import os


def process_exists(pid: int) -> bool:
    """True while ``pid`` names a live process (one of another user's counts: signalling it is refused)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
