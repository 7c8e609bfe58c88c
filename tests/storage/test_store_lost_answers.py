"""A write on s3:// or az:// whose answer is lost (done by the store, the connection then dropped) is retried by
the client and recognised as done: the conditional create, the versioned delete, and the copy of a rename.

The shaping, fault-injecting proxy of tests/storage/flaky_proxy.py sits in front of moto's server or Azurite.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fixtures_stores import Server, azure_env, s3_env
from flaky_proxy import FlakyProxy, flaky_proxy

from beam_tfrecord import storage
from beam_tfrecord.job import lease
from beam_tfrecord.storage import azure_blob

SERVERS = {"s3": ("moto_s3", "s3_bucket", s3_env), "az": ("azurite", "az_container", azure_env)}


@pytest.fixture(params=list(SERVERS))
def through_proxy(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, FlakyProxy]]:
    """(a fresh bucket, the proxy every request of this test's clients goes through)."""
    server_fixture, bucket_fixture, env_of = SERVERS[request.param]
    server: Server = request.getfixturevalue(server_fixture)
    bucket = request.getfixturevalue(bucket_fixture)
    with flaky_proxy(server.url, fault_fraction=0.0, seed=0) as proxy:
        for key, value in env_of(proxy.url).items():
            monkeypatch.setenv(key, value)  # the backends make new clients for another endpoint
        for constant in ("RETRY_INITIAL_BACKOFF_SECONDS", "RETRY_INCREMENT_BASE", "RETRY_JITTER_SECONDS"):
            monkeypatch.setattr(azure_blob, constant, 0)  # retried at once, not 15-21 s after each lost answer
        yield bucket, proxy


def test_a_lease_whose_create_answer_is_lost_is_this_jobs(through_proxy: tuple[str, FlakyProxy]) -> None:
    bucket, proxy = through_proxy
    out = f"{bucket}/out"
    proxy.fail_next("drop_after", "PUT", lease.LEASE_FILENAME)
    held = lease.acquire(out, run_id="mine")  # its retry is refused by its own first try: the same bytes
    assert held.holder.run_id == "mine"
    proxy.fail_next("drop_after", "DELETE", lease.LEASE_FILENAME)
    held.release()  # the retried delete finds nothing: done
    assert not storage.exists(lease.lease_path(out))
    assert proxy.faults["drop_after"] == 2


def test_a_rename_whose_copy_answer_is_lost_is_done(through_proxy: tuple[str, FlakyProxy]) -> None:
    bucket, proxy = through_proxy
    storage.write_bytes_atomic(f"{bucket}/LATEST", b"v1")
    storage.write_bytes_atomic(f"{bucket}/next", b"v2")
    proxy.fail_next("drop_after", "PUT", "/LATEST")  # the copy over the pointer (S3 CopyObject, Azure Copy Blob)
    storage.rename([f"{bucket}/next"], [f"{bucket}/LATEST"])
    assert storage.read_bytes(f"{bucket}/LATEST") == b"v2"
    assert [p for p, _ in storage.list_files(f"{bucket}/**")] == [f"{bucket}/LATEST"]
    assert proxy.faults["drop_after"] == 1
