"""Killing a job at a chosen moment: what the resume tests share."""

from __future__ import annotations

import glob
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol


def files_exist(pattern: str) -> Callable[[], bool]:
    """A moment: the first file matching ``pattern`` (a glob) is there."""
    return lambda: bool(glob.glob(pattern))


class Killable(Protocol):
    """A running job as ``subprocess.Popen`` gives it (or ``command_zygote.Job``)."""

    def poll(self) -> int | None: ...
    def wait(self) -> int: ...
    def kill(self) -> None: ...


def kill_when(command: Sequence[str], moment: Callable[[], bool], *, seconds: float = 600, pause: float = 0.0,
              poll: float = 0.02, cwd: str | Path | None = None,
              start: Callable[[list[str]], Killable] | None = None) -> None:
    """Runs ``command`` and SIGKILLs it ``pause`` seconds after ``moment()`` holds (or after ``seconds``).

    Fails when the job ends by itself first: a kill after the end proves nothing. ``seconds`` only bounds a
    hung job: on a loaded machine a job on an object store took 175 s to its first finished run. ``start``:
    how the job is started (default: a fresh process in ``cwd``, output discarded).
    """
    job = (start(list(command)) if start is not None else
           subprocess.Popen(list(command), cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        deadline = time.monotonic() + seconds
        while not moment() and time.monotonic() < deadline:
            assert job.poll() is None, "the job ended before the moment of its kill"
            time.sleep(poll)
        time.sleep(pause)
        assert job.poll() is None, "the job finished before its kill: the case proves nothing"
        job.kill()
    finally:
        if job.poll() is None:
            job.kill()
        job.wait()
