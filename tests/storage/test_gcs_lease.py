"""The lease on gs://: created with the precondition ifGenerationMatch=0 against a real GCS emulator, so of jobs
racing for one output exactly one gets it. Acquire, release and a stale lease: test_store_lease.py, on every store."""

from __future__ import annotations

import concurrent.futures

from tests.job.test_lease import _try  # the same racing acquire as locally


def test_of_eight_racing_acquires_exactly_one_wins(gcs_bucket: str) -> None:
    out = f"{gcs_bucket}/leases/race"
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        won = list(pool.map(_try, [out] * 8, [f"r{i}" for i in range(8)]))
    assert sum(won) == 1
