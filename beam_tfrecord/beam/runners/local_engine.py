"""The DirectRunner's batch engine, which the jobs and the local worker processes run on."""

from __future__ import annotations

import contextlib
import re
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineRunner

from beam_tfrecord import errors
from beam_tfrecord.beam.runners.forked_workers import forking_fn_api_runner, worker_fork_server


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
                runner = (forking_fn_api_runner(server.launch_command, provision_info=provision) if server is not None
                          else fn_runner.FnApiRunner(provision_info=provision))
                return runner.run_pipeline(pipeline, options)
        except Exception as err:
            ours = error_from_worker(err)
            if ours is None:
                raise
            raise ours from err


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

