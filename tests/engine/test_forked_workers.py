"""Local worker processes forked from the launching process (``engine/forked_workers.py``).

Each case runs its pipeline in a process of its own, forked (one Python thread) from a server that
imported Beam once (tests/docs/command_zygote.py), not a fresh interpreter each: the fork server is
made only while a process runs one Python thread, which pytest's own process may not.
"""

import glob
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from beam_tfrecord.engine.forked_workers import FORK_WORKERS_ENV, WorkerForkServer, fork_workers_enabled
from tests.docs.command_zygote import Job, serving

pytestmark = pytest.mark.skipif(not fork_workers_enabled(), reason="forking workers needs Linux")

# A two-worker pipeline whose DoFn reports what its worker process holds: an attribute this
# process set on a module before running (a forked worker has it, a fresh interpreter does not).
SCRIPT = textwrap.dedent("""
    import json, os, sys
    import apache_beam as beam
    from beam_tfrecord.engine.local_engine import LocalBatchRunner

    json.set_by_launcher = "yes"
    out = sys.argv[1]

    def report(i):
        import json as j
        pass  # BODY
        return f"{i} {getattr(j, 'set_by_launcher', 'no')} {os.getpid()} {os.environ.get('WORKER_ID', '')}"

    def run(out):
        options = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
        with beam.Pipeline(runner=LocalBatchRunner(), argv=options) as p:
            (p | beam.Create(range(40)) | beam.Reshuffle() | beam.Map(report)
               | beam.io.WriteToText(out, shard_name_template="", num_shards=1))

    run(out)
    if sys.argv[2:3] == ["--then-turned-off"]:  # a second run, its workers not forked: into sys.argv[3]
        from beam_tfrecord.engine.forked_workers import FORK_WORKERS_ENV
        os.environ[FORK_WORKERS_ENV] = "0"
        run(sys.argv[3])
    print("client", os.getpid())
""")


# What the scripts import, imported once by the server their processes are forked from.
PRELOAD = ("apache_beam", "apache_beam.runners.portability.fn_api_runner", "beam_tfrecord.engine.local_engine",
           "beam_tfrecord.engine.forked_workers")


@pytest.fixture(scope="module")
def jobs() -> Iterator[str]:
    """The socket of the server each case's launching process is forked from."""
    with serving(PRELOAD) as socket_path:
        yield socket_path


def _start(jobs: str, tmp_path, script: str, fork: str, *args: str) -> Job:
    """The script run as ``python SCRIPT ARGS`` with ``$BEAM_TFRECORD_FORK_WORKERS`` set to ``fork``, in its
    own session; its stdout and stderr go to ``stdout.txt`` and ``stderr.txt`` in ``tmp_path``."""
    path = tmp_path / "pipeline.py"
    path.write_text(script)
    before = os.environ.get(FORK_WORKERS_ENV)
    os.environ[FORK_WORKERS_ENV] = fork
    try:
        with open(tmp_path / "stdout.txt", "wb") as out, open(tmp_path / "stderr.txt", "wb") as err:
            return Job(jobs, [sys.executable, str(path), *args], stdout=out.fileno(), stderr=err.fileno())
    finally:
        if before is None:
            del os.environ[FORK_WORKERS_ENV]
        else:
            os.environ[FORK_WORKERS_ENV] = before


def _run(jobs: str, tmp_path, script: str, fork: str, *args: str) -> subprocess.CompletedProcess:
    code = _start(jobs, tmp_path, script, fork, *args).wait(timeout=300)
    return subprocess.CompletedProcess(args, code, (tmp_path / "stdout.txt").read_text(),
                                       (tmp_path / "stderr.txt").read_text())


def _reports(path) -> list[list[str]]:
    return sorted((line.split() for line in path.read_text().splitlines()), key=lambda r: int(r[0]))


@pytest.fixture(scope="module")
def forked_then_not(jobs, tmp_path_factory) -> tuple[int, dict[str, list[list[str]]]]:
    """One launching process runs the pipeline twice: its workers forked, then with forking turned off
    (one interpreter start for both cases); its pid, and each run's reports."""
    folder = tmp_path_factory.mktemp("forked-then-not")
    outs = {"yes": folder / "forked.txt", "no": folder / "turned-off.txt"}
    done = _run(jobs, folder, SCRIPT, "1", str(outs["yes"]), "--then-turned-off", str(outs["no"]))
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split()[-1]), {forked: _reports(out) for forked, out in outs.items()}


@pytest.mark.parametrize("forked", ["yes", "no"], ids=["forked", "turned-off"])
def test_workers_are_forked_from_the_launching_process_unless_turned_off(forked_then_not, forked):
    client, runs = forked_then_not
    reports = runs[forked]
    assert [int(r[0]) for r in reports] == list(range(40))
    assert {r[1] for r in reports} == {forked}
    assert client not in {int(r[2]) for r in reports}  # worker processes, not the launching one


# What starts a thread the fork would copy without it, in a launching process that could fork until then.
_THREAD_STARTS = {
    "a-python-thread": """
        import threading
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    """,
    "an-array-record-write": """
        import tempfile
        from beam_tfrecord.formats.array_record import ArrayRecordShardWriter
        with tempfile.TemporaryDirectory() as folder:
            writer = ArrayRecordShardWriter(f"{folder}/one.array_record")
            writer.append(b"record")
            writer.close()
    """,
}


@pytest.mark.parametrize("start", list(_THREAD_STARTS))
def test_no_fork_server_once_other_threads_run(jobs, tmp_path, start):
    """A thread of the launching process could hold a lock the fork would copy held (riegeli's, started by an
    ArrayRecord write or read, does not survive a fork either): no fork server then, and the run takes Beam's
    own command line (the path the turned-off case above runs whole)."""
    script = (textwrap.dedent("""
        from beam_tfrecord.engine import forked_workers
        with forked_workers.worker_fork_server() as server:
            print("before", server is not None)
    """) + textwrap.dedent(_THREAD_STARTS[start]) + textwrap.dedent("""
        with forked_workers.worker_fork_server() as server:
            print("after", server is None)
    """))
    done = _run(jobs, tmp_path, script, "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["before", "True", "after", "True"]


def test_a_worker_that_fails_fails_the_pipeline_with_its_error(jobs, tmp_path):
    script = SCRIPT.replace("pass  # BODY", "raise ValueError(f'sample {i} is bad')")
    done = _run(jobs, tmp_path, script, "1", str(tmp_path / "out.txt"))
    assert done.returncode != 0
    assert "ValueError: sample" in done.stderr and "is bad" in done.stderr


def test_the_launchers_exit_code_is_the_forked_workers(jobs, tmp_path):
    """Beam sees a worker's end through its launcher: the same exit code as a fresh interpreter's."""
    script = textwrap.dedent("""
        import os, subprocess, sys
        from beam_tfrecord.engine.forked_workers import WorkerForkServer
        server = WorkerForkServer()
        env = dict(os.environ, CONTROL_API_SERVICE_DESCRIPTOR="url: 'localhost:1'", PIPELINE_OPTIONS="{not json")
        code = subprocess.run(server.launch_command, shell=True, env=env, timeout=120).returncode
        server.close()
        print("exit", code, "running", server.running(), "socket", os.path.exists(server.address))
    """)
    done = _run(jobs, tmp_path, script, "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-6:] == ["exit", "1", "running", "False", "socket", "False"]


def test_killing_the_launching_process_ends_the_fork_server_and_its_workers(jobs, tmp_path):
    """SIGKILL of the launching process alone (not its group): nothing it forked keeps running."""
    started = tmp_path / "started"
    started.mkdir()
    script = SCRIPT.replace("pass  # BODY", 'open(os.path.join(sys.argv[2], str(os.getpid())), "w").close(); '
                                            'import time; time.sleep(600)')
    job = _start(jobs, tmp_path, script, "1", str(tmp_path / "out.txt"), str(started))  # its own session
    try:
        deadline = time.monotonic() + 120
        while len(glob.glob(str(started / "*"))) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert glob.glob(str(started / "*")), "no worker started"
        os.kill(job.pid, signal.SIGKILL)
        job.wait()
        deadline = time.monotonic() + 90
        while _group_alive(job.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _group_alive(job.pid), "processes of the killed job still run"
    finally:
        if _group_alive(job.pid):
            os.killpg(job.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_fork_server_ends_when_closed(tmp_path):
    server = WorkerForkServer()
    assert server.running() and os.path.exists(server.address)
    server.close()
    assert not server.running() and not os.path.exists(server.address)


# SCRIPT's run under the progress display every local build shows (its thread runs all along).
DISPLAYED = SCRIPT.replace("\nrun(out)\n", textwrap.dedent("""
    from beam_tfrecord.job.progress import ProgressDisplay, progress_folder
    with progress_folder() as folder, ProgressDisplay(folder, live=sys.argv[2] == "bar", stream=sys.stderr,
                                                      interval_seconds=0.005):
        run(out)
"""))


@pytest.mark.parametrize("display", ["log", "bar"])
def test_workers_are_forked_while_the_progress_display_runs(jobs, tmp_path, display):
    """The display's thread (and tqdm's bar, without its monitor thread) is quiet while the fork is taken
    (job/fork_quiet.py): a build's workers are forked, not started as fresh interpreters, and the display
    goes on drawing during and after the run."""
    assert DISPLAYED != SCRIPT
    done = _run(jobs, tmp_path, DISPLAYED, "1", str(tmp_path / "out.txt"), display)
    assert done.returncode == 0, done.stderr[-3000:]
    reports = _reports(tmp_path / "out.txt")
    assert [int(r[0]) for r in reports] == list(range(40))
    assert {r[1] for r in reports} == {"yes"}
    if display == "log":
        assert done.stderr.count("progress: 0 samples") >= 3  # drawn while the pipeline ran, not only at its end
