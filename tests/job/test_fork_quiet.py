"""Quiet threads (``job/fork_quiet.py``): idle while the fork lock is held, and told from other threads."""

import os
import threading
import time

from beam_tfrecord.job.fork_quiet import start_quiet_thread, threads_held_quiet


def test_a_quiet_thread_does_not_work_while_the_fork_lock_is_held():
    calls: list[float] = []
    stop = threading.Event()
    thread = start_quiet_thread(lambda: calls.append(time.monotonic()), every_seconds=0.001, stop=stop,
                                name="quiet-test")
    try:
        while len(calls) < 3:
            time.sleep(0.001)
        with threads_held_quiet() as others:
            held_at = len(calls)
            time.sleep(0.1)
            assert len(calls) == held_at  # ~100 calls would have run without the lock
            assert "quiet-test" not in others
        deadline = time.monotonic() + 10
        while len(calls) == held_at and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(calls) > held_at  # working again once the lock is let go
    finally:
        stop.set()
        thread.join()


def test_other_python_threads_are_named():
    stop = threading.Event()
    loud = threading.Thread(target=stop.wait, name="loud-test", daemon=True)
    loud.start()
    try:
        with threads_held_quiet() as others:
            assert "loud-test" in others
    finally:
        stop.set()
        loud.join()
    with threads_held_quiet() as others:
        assert "loud-test" not in others


def test_a_child_forked_under_the_lock_can_take_it_again():
    """The fork server is forked under the lock: its children (the workers) get a free one, not a held copy."""
    with threads_held_quiet():
        pid = os.fork()
        if pid == 0:  # the child: would wait for good on an inherited held lock
            code = 1
            try:
                with threads_held_quiet():
                    code = 0
            finally:
                os._exit(code)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child waited on the fork lock")
