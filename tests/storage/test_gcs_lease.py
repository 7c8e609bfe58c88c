"""The lease on gs://: created with the precondition ifGenerationMatch=0 against a real GCS emulator,
so of two jobs racing for one output exactly one gets it; a stale lease is replaced only if unchanged."""

from __future__ import annotations

import concurrent.futures
import json

import pytest

from beam_tfrecord import storage
from beam_tfrecord.job import lease
from beam_tfrecord.job.lease import LeaseHolder, OutputLockedError
from tests.job.test_lease import _try  # the same racing acquire as locally


def test_a_second_acquire_is_refused_and_release_frees_it(gcs_bucket: str) -> None:
    out = f"{gcs_bucket}/leases/one"
    first = lease.acquire(out, run_id="run-a")
    with pytest.raises(OutputLockedError, match=r"run run-a"):
        lease.acquire(out, run_id="run-b")
    first.release()
    assert not storage.exists(lease.lease_path(out))
    lease.acquire(out, run_id="run-b").release()


def test_of_eight_racing_acquires_exactly_one_wins(gcs_bucket: str) -> None:
    out = f"{gcs_bucket}/leases/race"
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        won = list(pool.map(_try, [out] * 8, [f"r{i}" for i in range(8)]))
    assert sum(won) == 1


def test_a_stale_lease_is_taken_over_and_a_live_one_only_with_break_lock(gcs_bucket: str) -> None:
    out = f"{gcs_bucket}/leases/stale"
    old = {"run_id": "old", "host": "elsewhere", "pid": 1, "started_at": "2026-01-01T00:00:00+00:00"}
    storage.write_bytes_atomic(lease.lease_path(out), json.dumps(old).encode())
    taken = lease.acquire(out, run_id="mine")
    assert LeaseHolder.from_bytes(storage.read_bytes(lease.lease_path(out))).run_id == "mine"
    with pytest.raises(OutputLockedError, match="run mine"):
        lease.acquire(out, run_id="late")
    assert lease.acquire(out, run_id="breaker", break_lock=True).holder.run_id == "breaker"
    taken.release()  # no longer its lease: left alone
    assert LeaseHolder.from_bytes(storage.read_bytes(lease.lease_path(out))).run_id == "breaker"
