"""The lease on s3:// (PutObject If-None-Match: *, DeleteObject If-Match) and az:// (the same headers on Put
Blob and Delete Blob), on real servers: of racing jobs exactly one holds an output; two builds started at
once into one output publish one dataset, unmixed, and the other is refused with OutputLockedError. The
acquire, release and stale-lease cases run on gs:// too (its race: test_gcs_lease.py)."""

from __future__ import annotations

import concurrent.futures
import json
import threading
from pathlib import Path

import pytest

from beam_tfrecord import storage
from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.interop import INTEROP_FILENAMES
from beam_tfrecord.interop.tfds import tfds_files
from beam_tfrecord.job import lease
from beam_tfrecord.job.lease import LeaseHolder, OutputLockedError
from beam_tfrecord.verify import verify_dataset
from pipelines import build_image_dataset
from tests.job.test_lease import _try  # the same racing acquire as locally and on gs://

BUCKETS = {"s3": "s3_bucket", "az": "az_container"}


@pytest.fixture(params=list(BUCKETS))
def bucket(request: pytest.FixtureRequest) -> str:
    """A fresh bucket (s3://) or container (az://)."""
    return str(request.getfixturevalue(BUCKETS[request.param]))


@pytest.fixture(params=[*BUCKETS, "gs"])
def any_bucket(request: pytest.FixtureRequest) -> str:
    """A fresh bucket on s3://, az:// or gs:// (the GCS emulator)."""
    return str(request.getfixturevalue({**BUCKETS, "gs": "gcs_bucket"}[request.param]))


def test_a_second_acquire_is_refused_and_release_frees_it(any_bucket: str) -> None:
    out = f"{any_bucket}/leases/one"
    first = lease.acquire(out, run_id="run-a")
    with pytest.raises(OutputLockedError, match=r"run run-a"):
        lease.acquire(out, run_id="run-b")
    first.release()
    assert not storage.exists(lease.lease_path(out))
    lease.acquire(out, run_id="run-b").release()


def test_of_eight_processes_racing_for_one_output_exactly_one_wins(bucket: str) -> None:
    out = f"{bucket}/leases/race"
    with concurrent.futures.ProcessPoolExecutor(8) as pool:  # each process its own client and connections
        won = list(pool.map(_try, [out] * 8, [f"r{i}" for i in range(8)]))
    assert sum(won) == 1


def test_a_create_that_meets_its_own_bytes_counts_as_created(bucket: str) -> None:
    """A create retried after its answer was lost is refused (412/409) by its own first try: same bytes, ours."""
    path = f"{bucket}/lease"
    assert storage.create_if_absent(path, b"mine")
    assert storage.create_if_absent(path, b"mine")
    assert not storage.create_if_absent(path, b"theirs")


def test_a_stale_lease_is_taken_over_and_a_live_one_only_with_break_lock(any_bucket: str) -> None:
    out = f"{any_bucket}/leases/stale"
    old = {"run_id": "old", "host": "elsewhere", "pid": 1, "started_at": "2026-01-01T00:00:00+00:00"}
    storage.write_bytes_atomic(lease.lease_path(out), json.dumps(old).encode())
    taken = lease.acquire(out, run_id="mine")
    assert LeaseHolder.from_bytes(storage.read_bytes(lease.lease_path(out))).run_id == "mine"
    with pytest.raises(OutputLockedError, match="run mine"):
        lease.acquire(out, run_id="late")
    assert lease.acquire(out, run_id="breaker", break_lock=True).holder.run_id == "breaker"
    taken.release()  # no longer its lease (If-Match of the ETag or generation it read fails): left alone
    assert LeaseHolder.from_bytes(storage.read_bytes(lease.lease_path(out))).run_id == "breaker"


def test_two_builds_started_at_once_publish_one_dataset_and_refuse_the_other(bucket: str, tiny_images: str,
                                                                           tmp_path: Path) -> None:
    output = f"{bucket}/datasets/contended"
    shard_targets = (6000, 20000)  # different shard plans: a mixed output would show shards of both
    start = threading.Barrier(len(shard_targets))

    def build(target_shard_bytes: int) -> object:
        start.wait()
        try:
            return build_image_dataset.run(["--input", tiny_images, "--output", output,
                                            f"--target_shard_bytes={target_shard_bytes}", "--runner=DirectRunner",
                                            "--direct_running_mode=in_memory"])
        except OutputLockedError as err:
            return err

    with concurrent.futures.ThreadPoolExecutor(len(shard_targets)) as pool:
        results = list(pool.map(build, shard_targets))
    refused = [r for r in results if isinstance(r, OutputLockedError)]
    assert len(refused) == 1 and "is being written by another job" in str(refused[0])
    winner = shard_targets[1 - results.index(refused[0])]
    manifest = load_manifest(output)
    assert manifest.num_written == 30 and verify_dataset(output).num_records == 30
    alone = build_image_dataset.run(["--input", tiny_images, "--output", str(tmp_path / "alone"),  # plans: any store
                                     f"--target_shard_bytes={winner}", "--runner=DirectRunner",
                                     "--direct_running_mode=in_memory"])
    assert [s.filename for s in manifest.shards] == [s.filename for s in alone.shards]  # the winner's plan
    published = ["manifest.json", *tfds_files(manifest), *INTEROP_FILENAMES,
                 *filter(None, [manifest.statistics]), *(s.filename for s in manifest.shards)]
    assert {p for p, _ in storage.list_files(f"{output}/**")} == {f"{output}/{n}" for n in published}  # no lease
