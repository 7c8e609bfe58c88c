"""Runs a command on a pseudo-terminal and returns everything it printed, as a terminal would get it."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import termios
from collections.abc import Sequence


def run_on_tty(argv: Sequence[str], *, columns: int = 120, rows: int = 30) -> tuple[int, bytes]:
    """(exit code, raw output) of ``argv`` run with stdout and stderr on a pseudo-terminal."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its stdio is the terminal
        os.execvp(argv[0], list(argv))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), b"".join(chunks)
