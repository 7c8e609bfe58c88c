"""Local paths with runners whose workers may run on other machines: refused at construction, by the library
transforms, every job and the CLI, before any work starts; let through where the workers are here or the user
declares a shared filesystem. (The Dask cluster whose workers really see no client folder:
tests/dask/test_no_shared_disk.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import DType, Scalar, Schema, WriteBalancedTFRecord, WriterTuning, WriteTFRecordDataset
from beam_tfrecord.engine.worker_placement import remote_workers_reason, require_shared_paths, workers_probe
from beam_tfrecord.errors import LocalPathError
from pipelines import build_from_arrays, build_from_manifest, build_image_dataset, refresh_image_dataset

DASK = "apache_beam.runners.dask.dask_runner.DaskRunner"


@pytest.mark.parametrize("runner, options, expected", [
    ("DirectRunner", [], None),
    ("LocalBatchRunner", [], None),
    ("PrismRunner", [], None),
    ("PortableRunner", ["--job_endpoint=embed", "--environment_type=LOOPBACK"], None),
    ("PortableRunner", ["--environment_type=EXTERNAL", "--environment_config=localhost:50000"],
     "the PortableRunner starts its SDK workers with --environment_type=EXTERNAL (containers, or a worker pool "
     "that may run on other machines)"),
    ("PortableRunner", ["--job_endpoint=embed"],
     "the PortableRunner starts its SDK workers with --environment_type=DOCKER (containers, or a worker pool "
     "that may run on other machines)"),
    ("DaskRunner", [], None),  # Beam starts a cluster on this machine
    ("DaskRunner", ["--dask_client_address=tcp://10.0.0.5:8786"],
     "the DaskRunner runs on the Dask scheduler tcp://10.0.0.5:8786, whose workers may run on other machines"),
    ("DaskRunner", ["--dask_scheduler_file=/shared/scheduler.json"],
     "the DaskRunner runs on the Dask scheduler /shared/scheduler.json, whose workers may run on other machines"),
    ("DataflowRunner", [], "the DataflowRunner's workers run on other machines"),
    ("FlinkRunner", [], "the FlinkRunner's workers run on other machines"),
    ("SparkRunner", [], "the SparkRunner's workers run on other machines"),
], ids=["direct", "local-batch", "prism", "portable-loopback", "portable-external", "portable-docker",
        "dask-local-cluster", "dask-address", "dask-scheduler-file", "dataflow", "flink", "spark"])
def test_remote_workers_reason_by_runner(runner, options, expected):
    assert remote_workers_reason(runner, PipelineOptions(options)) == expected


FLINK = "the FlinkRunner's workers run on other machines"


@pytest.mark.parametrize("paths, reason, shared", [
    ({"--input": "gs://b/in", "--output": "gs://b/out"}, FLINK, False),
    ({"--input": "/data/in", "--output": "/data/out"}, None, False),  # workers on this machine
    ({"--input": "/nfs/in", "--output": "/nfs/out"}, FLINK, True),  # declared shared
    ({"--input": None, "--output": ""}, FLINK, False),  # not given
], ids=["all-on-gcs", "local-runner", "declared-shared", "unset"])
def test_paths_let_through(paths, reason, shared):
    require_shared_paths(paths, remote_reason=reason, shared_filesystem=shared, declare="--shared_filesystem")


def test_the_first_local_path_is_refused_with_the_reason_and_both_fixes():
    with pytest.raises(LocalPathError) as raised:
        require_shared_paths({"--input": "gs://b/in", "--output": "out/ds", "--manifest": "/m.csv"},
                             remote_reason=FLINK, shared_filesystem=False, declare="--shared_filesystem")
    assert (raised.value.role, raised.value.path) == ("--output", "out/ds")
    assert str(raised.value) == (
        "--output 'out/ds' is a local path, but the FlinkRunner's workers run on other machines: they would not "
        "see it. Put it on storage every worker reads (gs://BUCKET/...), or, if every worker mounts this path "
        "(NFS, a bucket mounted with gcsfuse), say so with --shared_filesystem")


@pytest.mark.parametrize("paths, answer, expected", [
    ({"--input": "/data/in", "--output": "/data/out"}, None, True),  # the workers showed they see both
    ({"--input": "gs://b/in", "--output": "gs://b/out"}, "not asked", False),  # nothing local to ask about
], ids=["workers-see-local-paths", "nothing-local"])
def test_a_probe_that_sees_the_paths_lets_them_through(paths, answer, expected):
    asked: list[list[str]] = []

    def probe(local: list[str]) -> str | None:
        asked.append(local)
        return answer

    assert require_shared_paths(paths, remote_reason=FLINK, shared_filesystem=False, declare="--shared_filesystem",
                                probe=probe) is expected
    assert asked == ([["/data/in", "/data/out"]] if answer is None else [])


def test_a_probe_that_misses_a_path_gives_the_reason():
    with pytest.raises(LocalPathError, match=r"^--output '/data/out' is a local path, but worker w1 cannot see "
                                             r"'/data/out': they would not see it"):
        require_shared_paths({"--input": "gs://b/in", "--output": "/data/out"}, remote_reason=FLINK,
                             shared_filesystem=False, declare="--shared_filesystem",
                             probe=lambda local: f"worker w1 cannot see {local[0]!r}")


@pytest.mark.parametrize("runner, options, asked", [
    ("DirectRunner", [], False),
    ("DaskRunner", [], False),  # the job starts its own cluster here
    ("DaskRunner", ["--dask_client_address=tcp://10.0.0.5:8786"], True),
    ("DaskRunner", ["--dask_scheduler_file=/shared/scheduler.json"], True),
    ("FlinkRunner", [], False),
], ids=["direct", "dask-local-cluster", "dask-address", "dask-scheduler-file", "flink"])
def test_which_runners_workers_are_asked(runner, options, asked):
    assert (workers_probe(runner, PipelineOptions(options)) is not None) is asked


SCHEMA = Schema({"id": Scalar(DType.INT64)})


@pytest.mark.parametrize("make_writer, role", [
    (lambda out, **kw: WriteTFRecordDataset(out, schema=SCHEMA, tuning=WriterTuning(**kw)), "output_dir"),
    (lambda out, **kw: WriteBalancedTFRecord(output_dir=out, tuning=WriterTuning(**kw)), "output_dir"),
    (lambda out, **kw: WriteBalancedTFRecord(out, tuning=WriterTuning(**kw)), "file_path_prefix"),
    (lambda out, **kw: WriteTFRecordDataset("gs://b/out", schema=SCHEMA, tuning=WriterTuning(temp_dir=out, **kw)),
     "temp_dir"),
], ids=["WriteTFRecordDataset", "WriteBalancedTFRecord", "WriteBalancedTFRecord-prefix", "temp_dir"])
def test_library_transforms_refuse_local_paths_when_the_pipeline_is_built(tmp_path, make_writer, role):
    out = str(tmp_path / "ds")
    pipeline = beam.Pipeline(runner="FlinkRunner", options=PipelineOptions(["--flink_master=[local]"]))
    with pytest.raises(LocalPathError, match=rf"^{role} '{out}' is a local path, but the FlinkRunner's workers run on "
                                             r"other machines: .* say so with "
                                             r"tuning=WriterTuning\(shared_filesystem=True\)$"):
        _ = pipeline | beam.Create([1]) | make_writer(out)
    _ = pipeline | "Declared" >> beam.Create([1]) | "Shared" >> make_writer(out, shared_filesystem=True)  # built
    assert not Path(out).exists()


def _job_cases(tmp_path: Path) -> dict[str, tuple[object, list[str], str]]:
    local = str(tmp_path / "in")
    return {
        "build_image_dataset": (build_image_dataset, [f"--input={local}", "--output=gs://b/out"], "--input"),
        "build_from_manifest": (build_from_manifest, [f"--manifest={local}.csv", "--output=gs://b/out",
                                                      "--schema=id:int64"], "--manifest"),
        "build_from_arrays": (build_from_arrays, ["--arrays=gs://b/x.npy", f"--output={local}",
                                                  "--schema=x:float32"], "--output"),
        "refresh_image_dataset": (refresh_image_dataset, ["--input=gs://b/images", f"--dataset_root={local}"],
                                  "--dataset_root"),
    }


@pytest.mark.parametrize("name", ["build_image_dataset", "build_from_manifest", "build_from_arrays",
                                  "refresh_image_dataset"])
def test_every_job_refuses_a_local_path_on_a_remote_runner_before_any_work(tmp_path, name):
    job, args, role = _job_cases(tmp_path)[name]
    with pytest.raises(LocalPathError, match=rf"^{role} '{tmp_path}/in(\.csv)?' is a local path, but the "
                                             r"FlinkRunner's workers run on other machines"):
        job.run([*args, "--runner=FlinkRunner"])
    assert list(tmp_path.iterdir()) == []  # no lease, no listing: nothing ran


def test_the_dataflow_dry_run_refuses_a_local_output(tmp_path):
    with pytest.raises(LocalPathError, match=r"^--output '.*' is a local path, but the DataflowRunner's workers run "
                                             r"on other machines"):
        build_from_arrays.run(["--arrays=gs://b/x.npy", f"--output={tmp_path / 'ds'}", "--schema=x:float32",
                               "--runner=DataflowRunner", "--project=p", "--region=us-central1",
                               "--temp_location=gs://bucket-x/tmp", "--dry_run=True"])
    assert list(tmp_path.iterdir()) == []


def test_the_cli_prints_one_line_and_exits_1(tmp_path):
    done = subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", "build", f"--input={tmp_path}",
                           "--output=gs://b/out", "--runner=FlinkRunner"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"beam-tfrecord build: LocalPathError: --input '{tmp_path}' is a local path, but the FlinkRunner's workers "
        "run on other machines: they would not see it. Put it on storage every worker reads (gs://BUCKET/...), or, "
        "if every worker mounts this path (NFS, a bucket mounted with gcsfuse), say so with --shared_filesystem")
