"""A worker's standard error drops the tracebacks of typed errors only, and Ctrl-C ends a worker without one
(``engine/worker_stderr.py``)."""

import io
import signal
import subprocess
import sys
import traceback

import pytest

from beam_tfrecord.engine.worker_stderr import TypedTracebacksDropped
from beam_tfrecord.errors import BucketNotFoundError


def _traceback_of(error: BaseException) -> str:
    try:
        raise error
    except BaseException:
        return traceback.format_exc()


def _printed(*texts: str) -> str:
    """What reaches the stream when a harness ``print``s each text (the text, then a newline)."""
    stream = io.StringIO()
    stderr = TypedTracebacksDropped(stream)
    for text in texts:
        print(text, file=stderr)
    return stream.getvalue()


TYPED = _traceback_of(BucketNotFoundError(store="s3", bucket="b", path="s3://b/x", kind="bucket", endpoint="here"))
WRAPPED = TYPED.rstrip("\n").replace("beam_tfrecord.errors.BucketNotFoundError:", "RuntimeError: beam_tfrecord."
                                     "errors.BucketNotFoundError:") + " [while running 'Encode']\n"
UNTYPED = _traceback_of(ValueError("not ours"))


@pytest.mark.parametrize("typed", [TYPED, WRAPPED], ids=["typed", "as Beam re-raises it"])
def test_a_typed_errors_traceback_is_dropped_with_its_newline(typed: str) -> None:
    assert typed.splitlines()[-1].startswith(("beam_tfrecord.errors.", "RuntimeError: beam_tfrecord.errors."))
    assert _printed("before", typed, "after") == "before\nafter\n"


@pytest.mark.parametrize("text", [UNTYPED, "a warning naming beam_tfrecord.errors.ReaderError", "\n", ""])
def test_everything_else_passes_unchanged(text: str) -> None:
    assert _printed(text, TYPED, text) == f"{text}\n{text}\n"


INTERRUPTED_WORKER = """
import os, signal, sys
from beam_tfrecord.engine.worker_stderr import end_quietly_on_interrupt
end_quietly_on_interrupt()
os.kill(os.getpid(), signal.SIGINT)
print("still running")
"""


@pytest.mark.parametrize("sigint, code, stdout", [
    (signal.default_int_handler, -signal.SIGINT, ""),  # Python's: KeyboardInterrupt, and its traceback
    (signal.SIG_IGN, 0, "still running\n"),  # a job started in the background ignores Ctrl-C; so do its workers
])
def test_ctrl_c_ends_a_worker_without_a_traceback_unless_ignored(sigint, code, stdout):
    def start_with_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN if sigint is signal.SIG_IGN else signal.SIG_DFL)

    done = subprocess.run([sys.executable, "-c", INTERRUPTED_WORKER], capture_output=True, text=True, timeout=60,
                          preexec_fn=start_with_sigint)
    assert (done.returncode, done.stdout, done.stderr) == (code, stdout, "")
