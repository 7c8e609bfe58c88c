"""A build on an object store killed mid-encoding resumes from its finished runs with the clean bytes.

gs:// (fake-gcs-server), s3:// (moto's server) and az:// (Azurite), each against one clean build on local disk
(the same input gives the same bytes on every store); ``resume_job --small``: each store request costs. The
killed job runs in a fork of one server that imported Beam and the stores' clients once (its own process:
tests/docs/command_zygote.py), not in a fresh interpreter each.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest
import resume_job
from fixtures_gcs import FakeGcs, fake_gcs  # noqa: F401  (pytest fixture)
from fixtures_stores import az_container, azurite, moto_s3, s3_bucket  # noqa: F401  (pytest fixtures)
from kills import kill_when

from beam_tfrecord import load_manifest, storage
from beam_tfrecord.spill.resume import TEMP_PREFIX, finished_runs
from tests.docs.command_zygote import Job, serving

# What resume_job.py imports, and the stores' clients (imported when a path on them is first used).
PRELOAD = ("apache_beam", "apache_beam.runners.portability.fn_api_runner", "numpy", "beam_tfrecord",
           "beam_tfrecord.engine.local_engine", "beam_tfrecord.beam.write", "google.cloud.storage",
           "azure.storage.blob", "obstore")


@pytest.fixture(scope="module")
def jobs() -> Iterator[str]:
    """The socket of the server the killed jobs are forked from."""
    with serving(PRELOAD) as socket_path:
        yield socket_path


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The clean build, made once on local disk."""
    out = str(tmp_path_factory.mktemp("clean") / "data")
    resume_job.build(out, resume=False, seconds=0.0, num_samples=resume_job.SMALL_SAMPLES)
    return out


@pytest.fixture(params=["gs", "s3", "az"])
def bucket(request: pytest.FixtureRequest) -> str:
    """A fresh bucket (container) on the store named by the parameter."""
    if request.param == "gs":
        fake: FakeGcs = request.getfixturevalue("fake_gcs")
        return fake.create_bucket(f"bt-resume-{time.monotonic_ns() % 10**6}")
    return str(request.getfixturevalue({"s3": "s3_bucket", "az": "az_container"}[request.param]))


def _shard_bytes(out: str) -> dict[str, bytes]:
    return {s.filename: storage.read_bytes(storage.join(out, s.filename)) for s in load_manifest(out).shards}


def _finished_records(out: str) -> int:
    return sum(len(index.hashes) for index in finished_runs(out))


def test_a_build_killed_mid_encoding_resumes_with_the_clean_bytes(bucket: str, clean: str, jobs: str) -> None:
    out = f"{bucket}/resumed"
    kill_when([sys.executable, resume_job.__file__, out, "--small"], lambda: _finished_records(out) > 0, poll=0.1,
              start=lambda command: Job(jobs, command))
    assert not storage.exists(f"{out}/manifest.json")
    finished = _finished_records(out)

    resumed = resume_job.build(out, resume=True, num_samples=resume_job.SMALL_SAMPLES)
    assert resumed["reused_records"] == finished > 0
    assert _shard_bytes(out) == _shard_bytes(clean) != {}
    assert len(load_manifest(clean).shards) > 1 and not storage.list_files(f"{out}/{TEMP_PREFIX}*/**")
