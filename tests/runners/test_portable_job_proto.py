"""The portable job Flink is given, checked without Flink: the pipeline proto a job server receives.

Each job runs from its command line with deploy/flink/submit.sh's runner options
(``--runner=PortableRunner --environment_type=EXTERNAL --environment_config=localhost:50000
--parallelism=2``), its data on the GCS emulator, and ``--job_endpoint`` / ``--artifact_endpoint``
pointing at a recording job server: Beam's own job service (``LocalJobServicer``, with its
artifact staging service) whose jobs record what they were given and end DONE without running.
So the proto and options checked are exactly what the PortableRunner sends to Flink's job server.

Not checked (Flink's job server is a Java jar downloaded at start, which cannot happen here): its
``DescribePipelineOptions`` answer, its translation of the proto to a Flink job (and whether Flink's
batch shuffle spills as expected), artifact retrieval by the SDK worker pool, execution.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_job_api_pb2, beam_runner_api_pb2
from apache_beam.runners.job.utils import struct_to_dict
from apache_beam.runners.portability.local_job_service import BeamJob, LocalJobServicer
from fixtures_gcs import FakeGcs
from job_inputs import JOBS, upload_job_inputs
from writer_graph import WriterGraph, assert_shuffle_writer

from beam_tfrecord import storage
from beam_tfrecord.errors import DatasetNotFoundError
from pipelines.refresh_image_dataset import RefreshAction

SUBMIT = Path(__file__).resolve().parents[2] / "deploy" / "flink" / "submit.sh"
RUNNER_OPTIONS = ("runner", "environment_type", "environment_config", "parallelism")


def submit_runner_args(job_endpoint: str) -> list[str]:
    """submit.sh's runner options, with the job and artifact endpoints of ``job_endpoint``."""
    text = SUBMIT.read_text()
    found = re.findall(r'^\s+--([a-z_]+)="?([^"\s]+)"?', text, flags=re.M)  # the command's lines, not comments
    default = re.compile(r"[$][{][A-Z_]+:-([^}]*)[}]")  # ${PARALLELISM:-2} -> 2
    args = ["--{}={}".format(name, default.sub(r"\1", value)) for name, value in found if name in RUNNER_OPTIONS]
    assert len(args) == len(RUNNER_OPTIONS), args
    return [*args, f"--job_endpoint={job_endpoint}", f"--artifact_endpoint={job_endpoint}"]


class RecordingJob(BeamJob):
    """A job of Beam's local job service that records its pipeline and options and ends DONE unrun."""

    def __init__(self, *args, recorded: list, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._recorded = recorded

    def run(self) -> None:
        self._recorded.append((self._pipeline_proto, struct_to_dict(self._pipeline_options)))
        self.set_state(beam_job_api_pb2.JobState.STARTING)
        self.set_state(beam_job_api_pb2.JobState.DONE)


@pytest.fixture(scope="module")
def job_server():
    recorded: list = []
    servicer = LocalJobServicer(beam_job_type=functools.partial(RecordingJob, recorded=recorded))
    port = servicer.start_grpc_server(0)
    try:
        yield f"localhost:{port}", recorded
    finally:
        servicer.stop()


@pytest.fixture(scope="module")
def bucket(fake_gcs: FakeGcs, tiny_images: str) -> str:
    return upload_job_inputs(fake_gcs, "portable-job-proto", tiny_images)


@pytest.fixture(scope="module")
def submitted(job_server, bucket: str) -> dict:
    """Job name -> (pipeline proto, options) as the job server received them."""
    endpoint, recorded = job_server
    received = {}
    for name, case in JOBS.items():
        argv = [*case.args(bucket), *submit_runner_args(endpoint)]
        if name == "refresh_image_dataset":  # the job server ran nothing: LATEST must not have moved
            assert case.job.run(argv).action is RefreshAction.BUILD
        else:  # ... and a build finds no manifest
            with pytest.raises(DatasetNotFoundError):
                case.job.run(argv)
        received[name] = recorded.pop()
        assert not recorded
    return received


@pytest.mark.parametrize("name", JOBS)
def test_portable_job_has_the_shuffle_writer(submitted: dict, name: str) -> None:
    case = JOBS[name]
    proto, _ = submitted[name]
    assert_shuffle_writer(WriterGraph.of(proto, case.writer), refines_splits=case.refines_splits)


@pytest.mark.parametrize("name", JOBS)
def test_portable_job_runs_in_the_external_worker_pool(submitted: dict, name: str) -> None:
    proto, options = submitted[name]
    environments = list(proto.components.environments.values())
    assert [env.urn for env in environments] == [common_urns.environments.EXTERNAL.urn]
    payload = beam_runner_api_pb2.ExternalPayload.FromString(environments[0].payload)
    assert payload.endpoint.url == "localhost:50000"  # the worker pool sidecar of each task manager
    # Sent as text: option types come from the job server's DescribePipelineOptions, which this one leaves empty.
    assert options["beam:option:parallelism:v1"] == "2"
    assert "beam:option:runner:v1" not in options  # the PortableRunner leaves the runner to the job server


def test_portable_refresh_job_carries_submit_sh_options(submitted: dict, bucket: str) -> None:
    _, options = submitted["refresh_image_dataset"]
    given = dict(a[2:].split("=", 1) for a in JOBS["refresh_image_dataset"].args(bucket))
    assert {name: options[f"beam:option:{name}:v1"] for name in given} == given
    assert not storage.exists(f"{bucket}/datasets/versioned/LATEST")
