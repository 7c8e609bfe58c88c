"""Worker processes end without the interpreter's teardown (``beam_tfrecord.engine.worker_main``):
they still run every bundle and every DoFn's ``teardown``, and a failing DoFn still fails the job.
"""

import os
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import environments

from beam_tfrecord.engine.forked_workers import FORK_WORKERS_ENV
from beam_tfrecord.engine.local_engine import (
    BEAM_WORKER_COMMAND,
    WORKER_COMMAND,
    WORKER_MODULE,
    LocalBatchRunner,
    with_fast_ending_workers,
)
from beam_tfrecord.engine.local_workers import available_cores, use_local_workers


@pytest.fixture(autouse=True)
def started_not_forked(monkeypatch):
    """Workers started with a command line (forked ones run the launching process's ``__main__``)."""
    monkeypatch.setenv(FORK_WORKERS_ENV, "0")


def two_workers() -> beam.Pipeline:
    """A pipeline run in two local worker processes, as the writer sets them up (this module importable there)."""
    pipeline = beam.Pipeline(runner=LocalBatchRunner(), options=PipelineOptions([]))
    use_local_workers(pipeline, 2)
    return pipeline


class NoteFn(beam.DoFn):
    """Writes which entry point its process runs (``__main__``'s module) for each element, and a
    line from its ``teardown`` (the last thing a worker does before it ends)."""

    def __init__(self, folder: str) -> None:
        self._folder = folder

    def process(self, element: int):
        main = sys.modules["__main__"]
        with open(os.path.join(self._folder, f"main-{os.getpid()}"), "a") as handle:
            handle.write(f"{main.__spec__.name if main.__spec__ else main.__name__}\n")
        yield element * 2

    def teardown(self) -> None:
        with open(os.path.join(self._folder, f"teardown-{os.getpid()}"), "w") as handle:
            handle.write("done\n")


@pytest.mark.skipif(available_cores() < 2, reason="every core is one core here")
def test_worker_processes_run_the_fast_ending_entry_point_and_tear_down(tmp_path, capfd):
    out = tmp_path / "out"
    with two_workers() as pipeline:
        _ = (pipeline | beam.Create(range(20)) | beam.ParDo(NoteFn(str(tmp_path)))
             | beam.Map(str) | beam.io.WriteToText(str(out), shard_name_template=""))
    assert sorted(int(line) for line in out.read_text().split()) == [2 * i for i in range(20)]
    mains = {line for path in tmp_path.glob("main-*") for line in path.read_text().split()}
    assert mains == {WORKER_MODULE}
    worker_pids = {path.name.split("-")[1] for path in tmp_path.glob("main-*")}
    assert str(os.getpid()) not in worker_pids
    assert {path.name.split("-")[1] for path in tmp_path.glob("teardown-*")} >= worker_pids
    assert all(path.read_text() == "done\n" for path in tmp_path.glob("teardown-*"))
    assert "RuntimeWarning" not in capfd.readouterr().err  # nothing imports the entry point before -m runs it


def _fail(element: int) -> int:
    raise ValueError(f"element {element} refused")


@pytest.mark.skipif(available_cores() < 2, reason="every core is one core here")
def test_a_failing_worker_still_fails_the_job():
    with pytest.raises(Exception, match="element 3 refused"):
        with two_workers() as pipeline:
            _ = pipeline | beam.Create([3]) | beam.Map(_fail)


def test_only_beams_own_worker_command_is_replaced():
    pipeline = beam.Pipeline()
    _ = pipeline | beam.Create([1]) | beam.Map(str)
    beams = environments.SubprocessSDKEnvironment.from_command_string(BEAM_WORKER_COMMAND)
    proto = with_fast_ending_workers(pipeline.to_runner_api(default_environment=beams))
    payloads = {env.payload.decode() for env in proto.components.environments.values()}
    assert WORKER_COMMAND in payloads and BEAM_WORKER_COMMAND not in payloads

    other = environments.SubprocessSDKEnvironment.from_command_string("python -m my_worker")
    proto = with_fast_ending_workers(pipeline.to_runner_api(default_environment=other))
    assert {env.payload.decode() for env in proto.components.environments.values()} == {"python -m my_worker"}
