"""A local worker process's standard error, less the tracebacks of the project's typed errors and of Ctrl-C.

Beam's SDK harness prints every failed instruction's traceback to the worker's standard error, the user's terminal
(``sdk_worker.SdkHarness._execute``: 60-140 lines for one error), as well as sending it to the runner. A typed error
(``beam_tfrecord.errors``) fails the job, which reports it as one line (``job.process_exit``): that printed copy is
dropped; other errors' tracebacks pass. Ctrl-C (SIGINT, sent to the whole process group) ends a worker as the
signal's default does, with no ``KeyboardInterrupt`` traceback: the launching process reports the interrupt.
"""

from __future__ import annotations

import io
import signal
import sys
import threading
from typing import Any, TextIO

_TRACEBACK = "Traceback (most recent call last):"
_TYPED_ERRORS = "beam_tfrecord.errors."  # how a typed error's class is named in a traceback's last line
_HEAD_CHARACTERS = 80  # the last line names the error first (Beam may put "RuntimeError: " before it)


def names_a_typed_error(text: str) -> bool:
    """Whether ``text`` is a traceback whose last line is one of the project's typed errors."""
    lines = [line for line in text.splitlines() if line.strip()]
    return bool(lines) and lines[0].startswith(_TRACEBACK) and _TYPED_ERRORS in lines[-1][:_HEAD_CHARACTERS]


class TypedTracebacksDropped(io.TextIOBase):
    """Writes through to ``stream``, except a typed error's traceback and the newline ``print`` ends it with."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream
        self._after_dropped = False

    def write(self, text: str) -> int:
        dropped_end = self._after_dropped and text == "\n"
        self._after_dropped = names_a_typed_error(text)
        if not (dropped_end or self._after_dropped):
            self._stream.write(text)
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def fileno(self) -> int:
        return self._stream.fileno()

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer...: the stream's
        return getattr(self._stream, name)


def drop_typed_error_tracebacks() -> None:
    """From now on, this process's ``sys.stderr`` leaves out typed errors' tracebacks (once per process)."""
    if not isinstance(sys.stderr, TypedTracebacksDropped):
        sys.stderr = TypedTracebacksDropped(sys.stderr)


def end_quietly_on_interrupt() -> None:
    """From now on, SIGINT ends this process at once, with no traceback (as the signal's default does), where Python
    would raise ``KeyboardInterrupt``; a SIGINT ignored (a job started in the background) stays ignored."""
    interrupts_raise = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if interrupts_raise and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
