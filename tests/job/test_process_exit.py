"""``process_exit.run_and_exit``: a command's process ends as ``sys.exit`` ends it (exit code, output,
atexit handlers, temporary folders removed), only without the interpreter's teardown."""

from __future__ import annotations

import subprocess
import sys

import pytest

_SCRIPT = """
import atexit, sys, tempfile, threading, time
from beam_tfrecord.job.process_exit import run_and_exit

def command():
    atexit.register(lambda: open(sys.argv[1] + "/atexit", "w").write("ran"))
    kept = tempfile.TemporaryDirectory(dir=sys.argv[1])  # removed at exit by its finalizer
    open(sys.argv[1] + "/tempdir", "w").write(kept.name)
    # a non-daemon thread still working: joined before the process ends, as sys.exit joins it
    threading.Thread(target=lambda: (time.sleep(0.3), open(sys.argv[1] + "/thread", "w").write("done"))).start()
    print("written to a pipe, flushed before the end", end="")
    sys.stderr.write("and to stderr")
    if sys.argv[2] == "raise":
        raise ValueError("the command failed")
    return int(sys.argv[2])
run_and_exit(command)
"""


@pytest.mark.parametrize("code", [0, 3])
def test_the_process_ends_with_the_commands_code_after_its_exit_handlers(tmp_path, code):
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path), str(code)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == code, done.stderr
    assert done.stdout == "written to a pipe, flushed before the end"
    assert done.stderr == "and to stderr"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "done"
    assert not (tmp_path / (tmp_path / "tempdir").read_text()).exists()


def test_a_command_that_raises_ends_the_usual_way(tmp_path):
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path), "raise"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == "ValueError: the command failed"
    assert (tmp_path / "atexit").read_text() == "ran"
