"""Readers in processes a training script starts after its main process read from gs://, s3:// and az://.

One script (``forked_readers.py``, a user's own) reads the three stores' copies of one dataset in its main process,
then under fork, forkserver and spawn in turn: a DataLoader's 2 workers read them again, a loader resumed from its
state part-way reads the rest, and under fork a ``multiprocessing.Pool`` reads each. Every record must come once.
Then the same from Beam's workers on three runners (``runner_workers.py``).
Before the fix, forked workers waited forever on their first request (obstore's runtime without its threads:
``storage/obstore_runtime``); the DataLoader's timeout turns such a wait into a failure.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_gcs import FakeGcs

from beam_tfrecord.core.file_format import Compression, FileFormat
from beam_tfrecord.storage import azure_blob, s3
from tests.storage.forked_readers import assert_every_record_once, run_forked_readers
from tests.storage.remote_datasets import write_local

BUCKET = "bt-forked-readers"
RUNNER_WORKERS = Path(__file__).with_name("runner_workers.py")


@pytest.fixture(scope="module")
def store_copies(tmp_path_factory: pytest.TempPathFactory, moto_s3: object, fake_gcs: FakeGcs,
                 azurite: object) -> list[str]:
    """One small dataset (90 records, 12 shards) written locally, then copied to each store."""
    local = write_local(str(tmp_path_factory.mktemp("forked") / "ds"), FileFormat.TFRECORD, Compression.NONE)
    s3.client().create_bucket(Bucket=BUCKET)
    fake_gcs.create_bucket(BUCKET)
    azure_blob.service(None).create_container(BUCKET)
    copies = [f"{scheme}://{BUCKET}/ds" for scheme in ("s3", "gs", "az")]
    for remote in copies:
        fake_gcs.upload_tree(local, remote)  # any store: it writes through beam_tfrecord.storage
    return copies


START_METHODS = ["fork", "forkserver", "spawn"]


def test_workers_started_after_a_read_in_the_main_process_read_every_record_once(store_copies: list[str]) -> None:
    """One script for the three start methods: its main process's imports and reads made once."""
    result = run_forked_readers(START_METHODS, store_copies)
    assert len(result["main"]) >= 3 * 40 and set(collections.Counter(result["main"]).values()) == {3}
    for start_method in START_METHODS:
        assert_every_record_once(result, start_method)


RUNNERS = ["direct-forked", "portable-loopback", "dask"]


def test_runner_workers_read_the_stores_after_the_launching_process_did(store_copies: list[str],
                                                                        tmp_path: Path) -> None:
    """The DirectRunner's workers forked from the launching process, the portable runner's LOOPBACK workers (in
    it) and a Dask LocalCluster's spawned workers each read every store after the launcher read them
    (tests/storage/runner_workers.py). The encode pool's processes read no store (their samples are sent to them)."""
    done = subprocess.run([sys.executable, str(RUNNER_WORKERS), str(tmp_path), ",".join(RUNNERS), *store_copies],
                          capture_output=True, text=True, env=os.environ.copy(), timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    launcher = json.loads(done.stdout.strip().splitlines()[-1])
    for runner in RUNNERS:
        read = [json.loads((tmp_path / f"{runner}-{index}.json").read_text()) for index in range(len(store_copies))]
        assert {r["path"]: r["records"] for r in read} == launcher["main"], runner
        if runner == "direct-forked":
            assert all(r["forked"] for r in read)
        elif runner == "portable-loopback":
            assert {r["pid"] for r in read} == {launcher["pid"]}
