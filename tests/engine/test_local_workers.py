"""Every core by default: on the DirectRunner the writer asks for one worker process per core
unless the user chose how the runner runs, and the bytes are those of one in-memory worker.

The suite sets ``BEAM_TFRECORD_LOCAL_WORKERS=1`` (tests/conftest.py); these tests remove it.
"""

import os
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

from beam_tfrecord import DType, Sample, Scalar, Schema, WriterTuning, WriteTFRecordDataset, read_numpy
from beam_tfrecord.engine.local_engine import (
    LocalBatchRunner,
    error_from_worker,
    local_batch_runner_for,
)
from beam_tfrecord.engine.local_workers import (
    LOCAL_WORKERS_ENV,
    available_cores,
    local_workers_for,
    local_workers_of,
)
from beam_tfrecord.errors import CorruptShardError, RejectedSamplesError, WriterOptionError
from pipelines.common import describe_local_workers, job_pipeline

SCHEMA = Schema({"id": Scalar(DType.INT64)})


@pytest.fixture
def default_workers(monkeypatch):
    """The environment of a user who set nothing."""
    monkeypatch.delenv(LOCAL_WORKERS_ENV, raising=False)


@pytest.mark.parametrize("flags, requested, expected", [
    pytest.param([], None, available_cores(), id="no-options-every-core"),
    pytest.param(["--runner=DirectRunner"], None, available_cores(), id="direct-runner-named-every-core"),
    pytest.param(["--direct_num_workers=1"], None, 1, id="direct-num-workers-1-respected"),
    pytest.param(["--direct_num_workers=3", "--direct_running_mode=multi_processing"], None, 1,
                 id="beam-multi-processing-chosen-kept"),
    pytest.param(["--direct_running_mode=multi_threading"], None, 1, id="beam-multi-threading-chosen-kept"),
    pytest.param(["--runner=DataflowRunner"], None, 1, id="another-runner-untouched"),
    pytest.param(["--runner=PortableRunner"], None, 1, id="portable-runner-untouched"),
    pytest.param([], 3, 3, id="explicit-request-wins"),
])
def test_local_workers_follow_the_users_runner_options(flags, requested, expected, default_workers):
    assert local_workers_for(PipelineOptions(flags), requested=requested, flags=flags) == expected


def test_a_users_pipeline_with_beam_parallelism_options_keeps_them(default_workers):
    """Without the command line, options that differ from Beam's defaults still count as chosen."""
    options = PipelineOptions([])
    options.view_as(DirectOptions).direct_num_workers = 4
    assert local_workers_for(options, requested=None) == 1


def test_the_environment_sets_the_default(monkeypatch):
    monkeypatch.setenv(LOCAL_WORKERS_ENV, "3")
    assert local_workers_for(PipelineOptions([]), requested=None) == 3
    assert local_workers_for(PipelineOptions(["--direct_num_workers=1"]), requested=None,
                             flags=["--direct_num_workers=1"]) == 1  # the user's flag still wins


@pytest.mark.parametrize("text, message", [
    ("two", f"{LOCAL_WORKERS_ENV} must be a whole number >= 1, got 'two'"),
    ("0", "local_workers must be >= 1, got 0"),
])
def test_a_bad_environment_value_is_an_option_error(text, message, monkeypatch):
    monkeypatch.setenv(LOCAL_WORKERS_ENV, text)
    with pytest.raises(WriterOptionError) as raised:
        local_workers_for(PipelineOptions([]), requested=None)
    assert str(raised.value) == message


def test_local_workers_below_one_is_an_option_error(tmp_path):
    with pytest.raises(WriterOptionError, match="local_workers must be >= 1, got 0"):
        WriterTuning(local_workers=0)


def _build(out: str, pids: str, *, local_workers: int | None) -> tuple[beam.Pipeline, dict[str, bytes]]:
    def note_pid(value):
        with open(pids, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        return value

    samples = [[Sample(f"k{c}-{i}", {"id": c * 100 + i}) for i in range(50)] for c in range(8)]
    pipeline = beam.Pipeline()  # a user's pipeline with Beam's default options
    with pipeline:
        _ = (pipeline | beam.Create(samples)
             | WriteTFRecordDataset(out, schema=SCHEMA, tuning=WriterTuning(local_workers=local_workers),
                                    feature_transforms={"id": note_pid}))
    return pipeline, {name: open(os.path.join(out, name), "rb").read() for name in sorted(os.listdir(out))
                      if name.startswith("data-")}


@pytest.mark.skipif(available_cores() < 2, reason="every core is one core here")
def test_by_default_a_users_pipeline_runs_in_worker_processes_with_the_same_bytes(tmp_path, default_workers):
    pipeline, pooled = _build(str(tmp_path / "default"), str(tmp_path / "default.pids"), local_workers=None)
    assert local_workers_of(pipeline.options) == available_cores()
    encoded_in = set((tmp_path / "default.pids").read_text().split())
    assert encoded_in and str(os.getpid()) not in encoded_in  # encoded in the runner's worker processes

    one, alone = _build(str(tmp_path / "one"), str(tmp_path / "one.pids"), local_workers=1)
    assert local_workers_of(one.options) == 1
    assert set((tmp_path / "one.pids").read_text().split()) == {str(os.getpid())}  # in this process
    assert pooled and pooled == alone


@pytest.mark.parametrize("flags, expected", [
    pytest.param([], LocalBatchRunner, id="no-runner-named"),
    pytest.param(["--runner=DirectRunner"], LocalBatchRunner, id="direct-runner-named"),
    pytest.param(["--runner=PrismRunner"], type(None), id="prism-chosen-kept"),
    pytest.param(["--runner=DataflowRunner"], type(None), id="another-runner-kept"),
])
def test_jobs_run_the_direct_runners_batch_engine_not_prism(flags, expected):
    assert type(local_batch_runner_for(PipelineOptions(flags))) is expected


def test_a_job_on_the_batch_engine_runs_in_worker_processes(tmp_path, default_workers):
    """What the jobs run (``job_pipeline``): the summary's worker count is what ran."""
    pids = str(tmp_path / "pids")

    def note_pid(value):
        with open(pids, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        return value

    options = PipelineOptions([])
    with job_pipeline(options) as pipeline:
        _ = (pipeline | beam.Create([[Sample(f"k{i}", {"id": i}) for i in range(20)]])
             | WriteTFRecordDataset(str(tmp_path / "out"), schema=SCHEMA, feature_transforms={"id": note_pid}))
    assert isinstance(pipeline.runner, LocalBatchRunner)
    assert local_workers_of(pipeline.options) == available_cores()
    assert str(os.getpid()) not in set((tmp_path / "pids").read_text().split())


@pytest.mark.parametrize("flags, workers", [
    pytest.param([], 1, id="beams-default-in-memory"),
    pytest.param(["--direct_running_mode=multi_threading", "--direct_num_workers=4"], 1, id="threads-one-process"),
    pytest.param(["--direct_running_mode=multi_processing", "--direct_num_workers=3"], 3, id="three-processes"),
])
def test_worker_processes_are_read_from_the_options(flags, workers):
    assert local_workers_of(PipelineOptions(flags)) == workers


@pytest.mark.parametrize("workers, line", [
    (1, "  ran in this process (1 in-memory DirectRunner worker)"),
    (2, "  ran in 2 DirectRunner worker processes (one per core by default; --direct_num_workers=1 for one "
        "in-memory worker)"),
])
def test_the_job_summary_says_how_many_workers_ran(workers, line):
    """What the summary prints (``print_how_it_ran``); the count comes from ``local_workers_of``."""
    assert describe_local_workers(workers) == line


_SCRIPT = '''
import sys
import apache_beam as beam
from beam_tfrecord import DType, Sample, Scalar, Schema, WriteTFRecordDataset
from sibling_transforms import doubled  # next to this script, not importable from the working directory

with beam.Pipeline() as pipeline:
    _ = (pipeline | beam.Create([[Sample(f"k{i}", {"id": i}) for i in range(20)]])
         | WriteTFRecordDataset(sys.argv[1], schema=Schema({"id": Scalar(DType.INT64)}),
                                feature_transforms={"id": doubled}))
'''


@pytest.mark.skipif(available_cores() < 2, reason="every core is one core here")
def test_a_scripts_sibling_modules_reach_the_worker_processes(tmp_path, default_workers):
    """A script run from another folder imports a module beside it; its functions are pickled by
    reference, so the workers (fresh interpreters) must find that module as the script did."""
    scripts, elsewhere = tmp_path / "scripts", tmp_path / "elsewhere"
    scripts.mkdir()
    elsewhere.mkdir()
    (scripts / "sibling_transforms.py").write_text("def doubled(value):\n    return 2 * value\n")
    (scripts / "build.py").write_text(_SCRIPT)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(scripts / "build.py"), str(out)], cwd=elsewhere,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ids = sorted(int(example["id"]) for example in read_numpy(str(out)))
    assert ids == [2 * i for i in range(20)]


@pytest.mark.skipif(available_cores() < 2, reason="every core is one core here")
def test_a_users_pipeline_moved_to_worker_processes_still_raises_the_typed_error(tmp_path, default_workers):
    """Beam returns a worker process's error as a RuntimeError holding its traceback as text; the
    writer's pipeline raises the beam-tfrecord error it names, as one in-memory worker does."""
    pipeline = beam.Pipeline()
    with pytest.raises(RejectedSamplesError) as raised:
        with pipeline:
            _ = (pipeline | beam.Create([[Sample("good", {"id": 1}), Sample("bad", {"id": "x"})]])
                 | WriteTFRecordDataset(str(tmp_path / "out"), schema=SCHEMA))
    assert isinstance(pipeline.runner, LocalBatchRunner)
    assert str(raised.value).startswith("1 of 2 input samples were rejected, more than the allowed fraction 0;")
    assert "feature 'id': expected int64 scalar, got str 'x' in sample 'bad'" in str(raised.value)
    assert not str(raised.value).endswith("']")  # the runner's "[while running ...]" is not part of it
    assert not (tmp_path / "out" / "manifest.json").exists()


_WORKER_TEXT = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
                "beam_tfrecord.errors.CorruptShardError: shard 'a' is corrupt at 16 [while running 'A/B']"
                " [while running 'A']\n")


@pytest.mark.parametrize("err, expected", [
    pytest.param(RuntimeError(_WORKER_TEXT), (CorruptShardError, "shard 'a' is corrupt at 16"), id="named-error"),
    pytest.param(RuntimeError("ValueError: something else [while running 'A']"), None, id="not-ours"),
    pytest.param(RuntimeError("beam_tfrecord.errors.NoSuchError: x"), None, id="unknown-name"),
    pytest.param(RejectedSamplesError(1, 2, 0.0, "p", ["r"]), None, id="already-typed"),
])
def test_error_from_worker(err, expected):
    restored = error_from_worker(err)
    if expected is None:
        assert restored is None
    else:
        assert (type(restored), str(restored)) == expected
