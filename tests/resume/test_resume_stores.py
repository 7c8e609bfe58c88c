"""A build on an object store killed mid-encoding resumes from its finished runs with the clean bytes.

gs:// (fake-gcs-server), s3:// (moto's server) and az:// (Azurite); the last two marked slow (a build killed and
resumed is ~20 s on an idle machine, ~85 s on a loaded one).
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


@pytest.fixture(params=["gs", pytest.param("s3", marks=pytest.mark.slow), pytest.param("az", marks=pytest.mark.slow)])
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


def test_a_build_killed_mid_encoding_resumes_with_the_clean_bytes(bucket: str) -> None:
    clean, out = f"{bucket}/clean", f"{bucket}/resumed"
    resume_job.build(clean, resume=False, seconds=0.0)
    kill_when([sys.executable, resume_job.__file__, out], lambda: _finished_records(out) > 0, poll=0.1)
    assert not storage.exists(f"{out}/manifest.json")
    finished = _finished_records(out)

    resumed = resume_job.build(out, resume=True)
    assert resumed["reused_records"] == finished > 0
    assert _shard_bytes(out) == _shard_bytes(clean)
    assert not storage.list_files(f"{out}/{TEMP_PREFIX}*/**")
