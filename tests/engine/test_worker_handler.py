"""The handler of LocalBatchRunner's workers (``beam_tfrecord.engine.worker_handler``): a job whose bundle fails
before its other worker process has connected ends with the error (with Beam 2.77's own handler the runner and
that worker wait for each other for good), a job whose worker process dies ends with one typed error
(the runner waited for the dead worker's answers for good), and a bundle's input reaches its worker whole, however
long the runner takes to write it (Beam's periodic flush lost what was written while it sent the rest), and a
runner's workers are ended together (Beam ended each once the one before had ended)."""

import os
import queue
import re
import subprocess
import sys
import textwrap
import threading
import time

import apache_beam as beam
import grpc
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_fn_api_pb2_grpc, beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from apache_beam.runners.worker import data_plane

from beam_tfrecord.engine.forked_workers import FORK_WORKERS_ENV
from beam_tfrecord.engine.local_engine import LocalBatchRunner
from beam_tfrecord.engine.local_workers import use_local_workers
from beam_tfrecord.engine.worker_handler import local_workers_urn

# worker_0 starts 3 s late; the failing bundle runs in worker_1 (Beam 2.77 gives it the bundle), so
# the job fails while worker_0 has not connected yet: the moment Beam's own handler hangs at.
JOB = textwrap.dedent("""
    import shlex
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle
    from beam_tfrecord.engine import local_engine
    from beam_tfrecord.engine.local_workers import use_local_workers

    def refuse(element):
        raise ValueError(f"element {element} refused")

    late_first = shlex.quote('case "$WORKER_ID" in *_0) sleep 3;; esac; ' + local_engine.WORKER_COMMAND)
    pipeline = beam.Pipeline(options=PipelineOptions([]))
    use_local_workers(pipeline, 2)
    _ = pipeline | beam.Create([3]) | beam.Map(refuse)
    options = pipeline._options
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
    engine = local_engine._engine(fn_runner.FnApiRunner, f"sh -c {late_first}")(provision_info=provision)
    try:
        engine.run_pipeline(pipeline, options)
    except Exception as err:
        print("the job failed:", "element 3 refused" in str(err))
    """)


def test_a_job_failing_before_a_worker_connected_ends_with_its_error() -> None:
    try:
        done = subprocess.run([sys.executable, "-c", JOB], capture_output=True, text=True, timeout=120,
                              env={**os.environ, FORK_WORKERS_ENV: "0"})
    except subprocess.TimeoutExpired as err:
        raise AssertionError("the runner and the late worker waited for each other (killed after 120 s)") from err
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the job failed: True" in done.stdout


# A job whose worker process ends while the runner waits for it: killed in its bundle (a DoFn with no output, so
# the runner waits on the worker's answer alone); or, before it connected, worker_0's command exits (started workers),
# or its forked worker fails in Beam's harness, which finds no control service to reach (forked workers).
LOST_JOB = textwrap.dedent("""
    import os, shlex, signal, sys
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle
    from beam_tfrecord.engine import local_engine
    from beam_tfrecord.engine.forked_workers import worker_fork_server
    from beam_tfrecord.engine.local_workers import use_local_workers
    from beam_tfrecord.errors import WorkerProcessLostError

    def die(element):
        if element == 7:
            os.kill(os.getpid(), signal.SIGKILL)

    how = sys.argv[1]
    pipeline = beam.Pipeline(runner=local_engine.LocalBatchRunner(), options=PipelineOptions([]))
    use_local_workers(pipeline, 2)
    _ = pipeline | beam.Create(range(10)) | beam.Map(die if how == "killed" else print)
    try:
        if how == "killed":
            pipeline.run()
        else:
            options = pipeline._options
            encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
            provision = fn_runner.ExtendedProvisionInfo(
                beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
            with worker_fork_server() as server:
                first = "exit 3" if how == "exits" else "unset CONTROL_API_SERVICE_DESCRIPTOR"
                command = local_engine.WORKER_COMMAND if how == "exits" else server.launch_command
                script = shlex.quote(f'case "$WORKER_ID" in *_0) {first};; esac; {command}')
                engine = local_engine._engine(fn_runner.FnApiRunner, f"exec sh -c {script}")
                engine(provision_info=provision).run_pipeline(pipeline, options)
    except WorkerProcessLostError as err:
        print("lost:", err.worker_id, err.exit_code, err)
    """)


@pytest.mark.parametrize("how, forked, worker, exit_code, worker_traceback", [
    ("killed", "1", "worker_[01]", -9, None),
    ("killed", "0", "worker_[01]", -9, None),
    ("exits at start", "0", "worker_0", 3, None),
    ("fails at start", "1", "worker_0", 1, "KeyError: 'CONTROL_API_SERVICE_DESCRIPTOR'"),
])
def test_a_worker_process_that_ends_fails_the_job_with_one_typed_error(how, forked, worker, exit_code,
                                                                       worker_traceback) -> None:
    # Beam 2.77's runner waited for the dead worker's answers for good, and printed three tracebacks.
    try:
        done = subprocess.run([sys.executable, "-c", LOST_JOB, how.split()[0]], capture_output=True, text=True,
                              timeout=120, env={**os.environ, FORK_WORKERS_ENV: forked})
    except subprocess.TimeoutExpired as err:
        raise AssertionError("the runner waited for the dead worker (killed after 120 s)") from err
    assert done.returncode == 0, done.stderr[-2000:]
    how_it_ended = "killed by SIGKILL (exit code -9)" if exit_code < 0 else f"it exited with code {exit_code}"
    assert re.fullmatch(rf"lost: {worker} {exit_code} local worker process {worker} ended while the job still "
                        rf"needed it: {re.escape(how_it_ended)}.*\n", done.stdout), done.stdout
    # The one traceback printed: the failing worker's own, which says why it failed.
    assert done.stderr.count("Traceback") == (worker_traceback is not None), done.stderr
    assert worker_traceback is None or done.stderr.rstrip().endswith(worker_traceback), done.stderr


def _received(responses, instruction_id: str, into: list[bytes]) -> None:
    """What the worker is sent for ``instruction_id``, until its end marker."""
    for elements in responses:
        for data in elements.data:
            if data.instruction_id == instruction_id:
                into.append(data.data)
                if data.is_last:
                    return


def test_a_bundles_input_reaches_its_worker_whole_while_a_flush_is_held_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # Beam's runner gave each local worker's channel a flush every DATA_BUFFER_TIME_LIMIT_MS (shortened here: the
    # test waits for one), from a thread that takes what is written, sends it, then empties the stream. The send
    # waits while the channel's queues are full (no worker reads yet), so what the runner writes meanwhile went.
    monkeypatch.setattr(worker_handlers, "DATA_BUFFER_TIME_LIMIT_MS", 20)
    server = worker_handlers.GrpcServer(worker_handlers.StateServicer(), None, None)
    handler = worker_handlers.WorkerHandler.create(
        beam_runner_api_pb2.Environment(urn=local_workers_urn(), payload=b"true"), server.state, None, server)
    requests: queue.Queue = queue.Queue()
    try:
        filler = handler.data_conn.output_stream("filler", "read")
        for _ in range(2 * data_plane._DEFAULT_SEND_QUEUE_MAX_ELEMENTS + 1):  # both send queues full, none waits
            filler.write(b"f")
            filler.flush()
        stream = handler.data_conn.output_stream("bundle", "read")
        stream.write(b"first half;")
        time.sleep(0.2)  # a periodic flush (if any) has taken the first half and waits to send it
        stream.write(b"second half")
        channel = grpc.insecure_channel(f"localhost:{server.data_port}")
        responses = beam_fn_api_pb2_grpc.BeamFnDataStub(channel).Data(
            iter(requests.get, None), metadata=[("worker_id", handler.worker_id)])
        sent: list[bytes] = []
        reader = threading.Thread(target=_received, args=(responses, "bundle", sent), daemon=True)
        reader.start()  # the worker reads: the queues drain
        stream.close()
        reader.join(timeout=30)
        assert not reader.is_alive(), "the bundle's input never ended"
        assert b"".join(sent) == b"first half;second half"
    finally:
        requests.put(None)
        handler.data_conn.close()  # ends what it sends: the server then stops at once, not after its grace period
        server.close()


class MeetAtTeardownFn(beam.DoFn):
    """Each worker's teardown (run when the runner ends it) waits up to ``MEET_SECONDS`` for the other's to start,
    and notes whether it did: they meet only if the runner ends both workers together."""

    def __init__(self, folder: str) -> None:
        self._folder = folder

    def process(self, element: int):
        yield element

    def teardown(self) -> None:
        open(os.path.join(self._folder, f"ending-{os.getpid()}"), "w").close()
        deadline = time.monotonic() + MEET_SECONDS
        while len([name for name in os.listdir(self._folder) if name.startswith("ending-")]) < 2:
            if time.monotonic() > deadline:
                open(os.path.join(self._folder, f"alone-{os.getpid()}"), "w").close()
                return
            time.sleep(0.01)
        open(os.path.join(self._folder, f"met-{os.getpid()}"), "w").close()


MEET_SECONDS = 5.0


@pytest.mark.parametrize("forked", ["1", "0"])
def test_a_runners_workers_are_ended_together(tmp_path, monkeypatch: pytest.MonkeyPatch, forked: str) -> None:
    # Beam 2.77 closes them one after the other, each close waiting for its worker's process to end: the second
    # worker was told to end only once the first had ended, so their teardowns never overlapped.
    monkeypatch.setenv(FORK_WORKERS_ENV, forked)
    pipeline = beam.Pipeline(runner=LocalBatchRunner(), options=PipelineOptions([]))
    use_local_workers(pipeline, 2)
    with pipeline:
        _ = pipeline | beam.Create(range(20)) | beam.ParDo(MeetAtTeardownFn(str(tmp_path)))
    notes = sorted(name.split("-")[0] for name in os.listdir(tmp_path))
    assert notes == ["ending", "ending", "met", "met"], notes
