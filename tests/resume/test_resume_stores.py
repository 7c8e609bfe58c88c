"""A build on an object store killed mid-encoding resumes from its finished runs with the clean bytes.

gs:// (fake-gcs-server), s3:// (moto's server) and az:// (Azurite), each against one clean build on local disk
(the same input gives the same bytes on every store); ``resume_job --small``: each store request costs.
"""

from __future__ import annotations

import sys
import time

import pytest
import resume_job
from fixtures_gcs import FakeGcs, fake_gcs  # noqa: F401  (pytest fixture)
from fixtures_stores import az_container, azurite, moto_s3, s3_bucket  # noqa: F401  (pytest fixtures)
from kills import kill_when

from beam_tfrecord import load_manifest, storage
from beam_tfrecord.spill.resume import TEMP_PREFIX, finished_runs


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


def test_a_build_killed_mid_encoding_resumes_with_the_clean_bytes(bucket: str, clean: str) -> None:
    out = f"{bucket}/resumed"
    kill_when([sys.executable, resume_job.__file__, out, "--small"], lambda: _finished_records(out) > 0, poll=0.1)
    assert not storage.exists(f"{out}/manifest.json")
    finished = _finished_records(out)

    resumed = resume_job.build(out, resume=True, num_samples=resume_job.SMALL_SAMPLES)
    assert resumed["reused_records"] == finished > 0
    assert _shard_bytes(out) == _shard_bytes(clean) != {}
    assert len(load_manifest(clean).shards) > 1 and not storage.list_files(f"{out}/{TEMP_PREFIX}*/**")
