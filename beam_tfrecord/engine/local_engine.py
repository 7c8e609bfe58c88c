"""The DirectRunner's batch engine, which the jobs and the local worker processes run on; the runner a job runs on."""

from __future__ import annotations

import contextlib
import re
import shlex
import sys
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineRunner

from beam_tfrecord import errors
from beam_tfrecord.engine.forked_workers import worker_fork_server
from beam_tfrecord.engine.size_sampling import size_encoder_inputs_cheaply
from beam_tfrecord.engine.table import uses_dask_runner
from beam_tfrecord.engine.worker_handler import local_workers_urn

# What Beam's FnApiRunner runs for each worker process in ``multi_processing`` mode (Beam 2.77), and
# what LocalBatchRunner runs instead: the same harness, ended without the interpreter's teardown.
BEAM_WORKER_COMMAND = f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main"
WORKER_MODULE = "beam_tfrecord.engine.worker_main"
# ``exec``: Beam runs it through a shell, which would otherwise stand between the runner and the worker's exit.
WORKER_COMMAND = f"exec {shlex.quote(sys.executable)} -m {WORKER_MODULE}"


class LocalBatchRunner(PipelineRunner):
    """The DirectRunner's batch engine (Beam's ``FnApiRunner``), set up as the DirectRunner sets it up,
    without the DirectRunner's first choice of Prism, and with beam-tfrecord's errors typed again.

    Beam 2.77's DirectRunner runs a pipeline on Prism when it can download it (online), where the
    Python workers run in the launching process and ``direct_running_mode`` has no effect; offline it
    runs this engine. The jobs, and pipelines the writer gives worker processes (``use_local_workers``),
    run this engine either way, so they use the worker processes the summary reports online and
    offline alike.

    A worker process's error reaches the launching process as a ``RuntimeError`` holding the
    worker's traceback as text; when it names a beam-tfrecord error, that error is raised instead
    (``error_from_worker``), as one in-memory worker raises it.

    Worker processes (``multi_processing``) are forked from this process where that is safe
    (``forked_workers``: no second import of Beam in each), else run Beam's SDK worker through
    ``worker_main``; either ends each at once when the runner closes it instead of waiting 1-3 s
    for Python's teardown.
    """

    def run_pipeline(self, pipeline: beam.Pipeline, options: PipelineOptions) -> Any:
        from apache_beam.portability.api import beam_provision_api_pb2
        from apache_beam.runners.portability.fn_api_runner import fn_runner
        from apache_beam.runners.portability.portable_runner import JobServiceHandle

        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        forking = options.view_as(DirectOptions).direct_running_mode == "multi_processing"
        try:
            with worker_fork_server() if forking else contextlib.nullcontext() as server:
                command = server.launch_command if server is not None else WORKER_COMMAND
                return _engine(fn_runner.FnApiRunner, command)(provision_info=provision).run_pipeline(pipeline, options)
        except Exception as err:
            ours = error_from_worker(err)
            if ours is None:
                raise
            raise ours from err


def _engine(fn_api_runner: type, worker_command: str) -> type:
    """Beam's ``FnApiRunner`` with its worker processes started by ``worker_command``: a fork server's
    launcher (``forked_workers``) or ``worker_main`` (the same harness, ended without the
    interpreter's teardown). The pipeline proto's environments that run Beam's own worker command
    run it instead (Beam imported lazily, as in ``run_pipeline``), and the writer's encoders' inputs are
    sized without encoding them (``size_sampling``)."""

    class _Engine(fn_api_runner):
        def run_via_runner_api(self, pipeline_proto: Any, options: PipelineOptions) -> Any:
            pipeline_proto = size_encoder_inputs_cheaply(with_fast_ending_workers(pipeline_proto, worker_command))
            return super().run_via_runner_api(pipeline_proto, options)

    return _Engine


def with_fast_ending_workers(pipeline_proto: Any, worker_command: str = WORKER_COMMAND) -> Any:
    """``pipeline_proto`` (a ``beam_runner_api_pb2.Pipeline``, changed in place and returned) with its
    environments that run Beam's worker command (``BEAM_WORKER_COMMAND``) running ``worker_command``,
    through ``worker_handler``'s handler (Beam's, without its hang when a job fails fast)."""
    from apache_beam.portability import python_urns

    for environment in pipeline_proto.components.environments.values():
        if environment.urn == python_urns.SUBPROCESS_SDK and environment.payload == BEAM_WORKER_COMMAND.encode():
            environment.urn = local_workers_urn()
            environment.payload = worker_command.encode()
    return pipeline_proto


# How Beam's worker harness words a DoFn's error: "<module>.<class>: <message> [while running '<step>']".
_NAMED_ERROR = re.compile(r"beam_tfrecord\.errors\.(\w+): ")
_STEP_SUFFIX = re.compile(r"(?: \[while running '[^']*'\])+\s*$")


def error_from_worker(err: BaseException) -> errors.BeamTFRecordError | None:
    """The beam-tfrecord error that ``err`` (a runner's error from a worker process) reports as text:
    the same class and message, without the attributes the original carried (the worker kept them).
    None when ``err`` already is one, or names none."""
    if isinstance(err, errors.BeamTFRecordError):
        return None
    text = str(err)
    named = list(_NAMED_ERROR.finditer(text))
    if not named:
        return None
    cls = getattr(errors, named[-1].group(1), None)  # the last: the error the DoFn raised
    if not (isinstance(cls, type) and issubclass(cls, errors.BeamTFRecordError)):
        return None
    restored = cls.__new__(cls)
    BaseException.__init__(restored, _STEP_SUFFIX.sub("", text[named[-1].end():]))
    return restored


def local_batch_runner_for(options: PipelineOptions) -> LocalBatchRunner | None:
    """``LocalBatchRunner`` when ``options`` choose the DirectRunner (by name, or by naming no runner),
    else None (the runner the options name)."""
    runner = options.view_as(StandardOptions).runner
    if runner is None or (isinstance(runner, str) and runner.rsplit(".", 1)[-1] == "DirectRunner"):
        return LocalBatchRunner()
    return None


def job_runner_for(options: PipelineOptions) -> PipelineRunner | None:
    """The runner a job runs on for ``options``: ``local_batch_runner_for``'s, the project's DaskRunner (Beam's,
    fixed: ``dask_runner.py``) when they choose a DaskRunner, else None (the runner the options name)."""
    if uses_dask_runner(options):
        from beam_tfrecord.engine.dask_runner import DaskRunner  # needs the [dask] extra

        return DaskRunner()
    return local_batch_runner_for(options)
