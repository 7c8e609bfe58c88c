"""Every job, built for Dataflow with ``--dry_run=True`` and checked offline: what the service would get.

Each job runs from its command line with ``--runner=DataflowRunner --dry_run=True``; its inputs,
output, temp and staging locations are on the GCS emulator (tests/fixtures_gcs.py). Beam's
DataflowRunner builds the job (pipeline proto, options, container environment) and returns
before staging or submitting; the job ends with ``DryRunFinished`` carrying Beam's ``Job``. One
test then does the step a real submission does next, with Beam's own client: it stages the job's
artifacts and ``pipeline.pb`` to the emulator and builds the job description the service receives.

Not checked here (no Google Cloud): the Dataflow service's own validation and graph optimisation,
the Flex Template launcher, worker start-up.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import GoogleCloudOptions, WorkerOptions
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.dataflow.internal.apiclient import DataflowApplicationClient
from fixtures_gcs import FakeGcs
from job_inputs import JOBS, upload_job_inputs
from writer_graph import WriterGraph, assert_shuffle_writer

from beam_tfrecord import storage
from pipelines import refresh_image_dataset
from pipelines.dry_run import DryRunFinished

METADATA = Path(__file__).resolve().parents[2] / "deploy" / "dataflow" / "metadata.json"
IMAGE = "us-central1-docker.pkg.dev/beam-tfrecord-test/beam-tfrecord/refresh-image-dataset:test"
PROJECT, REGION = "beam-tfrecord-test", "us-central1"


def dataflow_args(bucket: str) -> list[str]:
    """What launch.sh and the Flex Template launcher give the job, plus --dry_run=True."""
    return ["--runner=DataflowRunner", f"--project={PROJECT}", f"--region={REGION}",
            f"--temp_location={bucket}/tmp", f"--staging_location={bucket}/staging",
            f"--sdk_container_image={IMAGE}", "--dry_run=True"]


def dry_run(job_module, argv: list[str]):
    """Runs a job's ``run(argv)``; returns the Dataflow ``Job`` it built (it must end with DryRunFinished)."""
    with pytest.raises(DryRunFinished) as finished:
        job_module.run(argv)
    assert finished.value.code == 0
    return finished.value.job


@pytest.fixture(scope="module")
def bucket(fake_gcs: FakeGcs, tiny_images: str) -> str:
    return upload_job_inputs(fake_gcs, "dataflow-dry-run", tiny_images)


@pytest.fixture(scope="module")
def dry_run_jobs(bucket: str) -> dict:
    return {name: dry_run(case.job, [*case.args(bucket), *dataflow_args(bucket)]) for name, case in JOBS.items()}


@pytest.mark.parametrize("name", JOBS)
def test_dry_run_builds_the_shuffle_writer(dry_run_jobs: dict, name: str) -> None:
    case = JOBS[name]
    assert_shuffle_writer(WriterGraph.of(dry_run_jobs[name].proto_pipeline, case.writer),
                          refines_splits=case.refines_splits)


@pytest.mark.parametrize("name", JOBS)
def test_dry_run_publishes_nothing(dry_run_jobs: dict, bucket: str, name: str) -> None:
    output = [a.split("=", 1)[1] for a in JOBS[name].args(bucket) if a.startswith(("--output=", "--dataset_root="))]
    assert not storage.exists(storage.join(output[0], "manifest.json"))
    assert not storage.exists(storage.join(output[0], "LATEST"))


@pytest.mark.parametrize("name", JOBS)
def test_dry_run_job_carries_the_runner_options(dry_run_jobs: dict, bucket: str, name: str) -> None:
    job = dry_run_jobs[name]
    cloud = job.options.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region) == (PROJECT, REGION)
    # Beam makes the locations job-specific below the ones given: still on the emulator's bucket.
    assert cloud.temp_location.startswith(f"{bucket}/tmp/") and cloud.staging_location.startswith(f"{bucket}/staging/")
    assert job.root_staging_location == f"{bucket}/staging"
    assert job.options.view_as(WorkerOptions).sdk_container_image == IMAGE
    environments = list(job.proto_pipeline.components.environments.values())
    assert [env.urn for env in environments] == [common_urns.environments.DOCKER.urn]
    docker = beam_runner_api_pb2.DockerPayload.FromString(environments[0].payload)
    assert docker.container_image == IMAGE  # workers start from the Flex Template image


def test_dry_run_prints_the_job_and_exits_zero(bucket: str, capsys) -> None:
    case = JOBS["build_image_dataset"]
    dry_run(case.job, [*case.args(bucket), *dataflow_args(bucket)])
    out = capsys.readouterr().out
    assert re.search(rf"dry run: the DataflowRunner built job '\S+' for project '{PROJECT}' in '{REGION}' "
                     r"\(\d+ transforms\); nothing was staged or submitted", out), out


def _template_example(parameter: dict, bucket: str) -> str:
    """A value for a Flex Template parameter that its regexes accept and the job can build with."""
    examples = {"input": f"{bucket}/raw/images", "dataset_root": f"{bucket}/datasets/template",
                "image_format": "jpeg", "resize": "8x8", "channels": "3", "encode": "png", "jpeg_quality": "80",
                "resize_method": "bicubic", "reduced_decode": "false", "check_decode": "true", "dataset_name": "images",
                "splits": "train=0.9,validation=0.1", "target_shard_bytes": "5000", "max_shard_bytes": "20000",
                "num_shards": "2", "compression": "gzip", "file_format": "tfrecord", "dali_index": "false",
                "no_statistics": "false", "salt": "s1", "shard_writers": "1", "on_drift": "warn",
                "drift_thresholds": f"{bucket}/config/drift.json",
                "max_rejected_fraction": "0.25", "fan_in": "auto", "encode_processes": "1", "spill_run_mib": "16",
                "keep_versions": "2", "min_version_age": "12h", "incremental": "true", "append": "true",
                "max_small_shards": "32", "max_deleted_fraction": "0.25",
                "force": "true", "break_lock": "false", "shared_filesystem": "false",
                "duplicates": "report", "duplicates_exclude": "image", "split_by": "label"}
    value = examples[parameter["name"]]
    assert all(re.fullmatch(regex, value) for regex in parameter.get("regexes", [])), parameter["name"]
    return value


def _as_text(value: object) -> str:
    """An option's value as the service holds it (JSON: numbers are floats) written as a parameter."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).lower()


def test_flex_template_parameters_reach_the_staged_job(bucket: str) -> None:
    """Every Flex Template parameter, passed as the launcher passes it (``--name=value``), is a job option
    in the job description the service would receive; the pipeline proto is staged to the emulator."""
    parameters = json.loads(METADATA.read_text())["parameters"]
    given = {p["name"]: _template_example(p, bucket) for p in parameters}
    storage.write_bytes_atomic(given["drift_thresholds"], b"{}")  # the defaults (docs/drift.md)
    job = dry_run(refresh_image_dataset, [*(f"--{k}={v}" for k, v in given.items()), *dataflow_args(bucket)])
    graph = WriterGraph.of(job.proto_pipeline, "WriteVersion")
    assert_shuffle_writer(graph, refines_splits=False)

    # What DataflowRunner.run_pipeline does next without --dry_run, short of submitting: stage to the emulator.
    DataflowApplicationClient(job.options, job.root_staging_location).create_job_description(job)
    staging = job.options.view_as(GoogleCloudOptions).staging_location
    with storage.open_read(f"{staging}/pipeline.pb") as staged:
        assert beam_runner_api_pb2.Pipeline.FromString(staged.read()) == job.proto_pipeline
    for package in job.proto.environment.worker_pools[0].packages:  # pickled main session, pip freeze...
        assert storage.exists(f"{staging}/{package.name}"), package.name
    submitted = dict(job.proto.environment.sdk_pipeline_options["options"])
    for name, value in given.items():
        assert _as_text(submitted[name]) == value.lower(), (name, submitted.get(name), value)
    assert submitted["pipelineUrl"] == f"{staging}/pipeline.pb"
    # ... and nothing the job reads is missing from the template: every option of the job's own classes.
    assert set(refresh_image_dataset.job_option_names()) <= set(given)


@pytest.mark.parametrize("required", [p["name"] for p in json.loads(METADATA.read_text())["parameters"]
                                      if not p.get("isOptional")])
def test_flex_template_required_parameters_are_required_by_the_job(bucket: str, required: str) -> None:
    argv = [f"--input={bucket}/raw/images", f"--dataset_root={bucket}/datasets/required", *dataflow_args(bucket)]
    with pytest.raises(SystemExit, match=f"--{required} is required") as stopped:
        refresh_image_dataset.run([a for a in argv if not a.startswith(f"--{required}=")])
    assert not isinstance(stopped.value, DryRunFinished)


def test_dry_run_refuses_locations_beam_would_replace_with_a_new_bucket(bucket: str) -> None:
    """``gs://b/tmp`` (a 1-character bucket) made Beam look up and create a default bucket: 120 s offline."""
    case = JOBS["build_image_dataset"]
    argv = [*case.args(bucket), *(a for a in dataflow_args(bucket) if "_location=" not in a), "--temp_location=gs://b/tmp"]
    with pytest.raises(SystemExit, match=r"a dry run needs a valid gs:// --temp_location .*Invalid GCS bucket \(gs://b/tmp\)"):
        case.job.run(argv)


def test_dry_run_is_refused_on_runners_that_would_run_the_job(bucket: str) -> None:
    case = JOBS["build_image_dataset"]
    with pytest.raises(SystemExit, match="--dry_run=True is honoured only by the DataflowRunner"):
        case.job.run([*case.args(bucket), "--runner=DirectRunner", "--dry_run=True"])
    assert not storage.exists(f"{bucket}/datasets/images/manifest.json")


def test_dry_run_translates_a_streaming_write(bucket: str) -> None:
    """An unbounded input (``PeriodicImpulse``) into ``WriteBalancedTFRecord`` with ``--streaming``: Dataflow builds
    a streaming job whose graph commits each pane (issue 62); nothing is written."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.transforms.periodicsequence import PeriodicImpulse

    from beam_tfrecord import WriteBalancedTFRecord

    prefix = f"{bucket}/streams/out"
    options = PipelineOptions([*dataflow_args(bucket), "--streaming"])
    pipeline = beam.Pipeline(options=options)
    _ = (pipeline | PeriodicImpulse(fire_interval=1)
         | beam.Map(lambda t: str(t).encode()) | WriteBalancedTFRecord(prefix, triggering_frequency=60))
    job = pipeline.run().job
    assert options.view_as(StandardOptions).streaming and job.proto.type.name == "JOB_TYPE_STREAMING"
    labels = {t.unique_name for t in job.proto_pipeline.components.transforms.values()}
    assert {"WriteBalancedTFRecord/WritePanes/ApplyFixedWindows", "WriteBalancedTFRecord/WritePanes/GroupPane",
            "WriteBalancedTFRecord/WritePanes/CommitPane"} <= labels
    assert storage.list_files(f"{bucket}/streams/*") == []
