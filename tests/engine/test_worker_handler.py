"""A job whose bundle fails before its other worker process has connected ends with the error
(``beam_tfrecord.engine.worker_handler``); with Beam 2.77's own handler the runner and that
worker wait for each other for good."""

import os
import subprocess
import sys
import textwrap

from beam_tfrecord.engine.forked_workers import FORK_WORKERS_ENV

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

    late_first = shlex.quote('case "$WORKER_ID" in *_0) sleep 3;; esac; exec ' + local_engine.WORKER_COMMAND)
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
