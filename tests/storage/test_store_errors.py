"""A store that fails (no bucket, no endpoint, no or wrong credentials) is one line from every CLI command and a
typed error from the readers, on moto's S3 server, fake-gcs-server and Azurite (issue 65)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from fixtures_gcs import free_port
from store_cases import STORES, new_bucket, one_line, point_at, server_url

import beam_tfrecord as bt
from beam_tfrecord import cli
from beam_tfrecord.errors import (
    BucketNotFoundError,
    ReaderError,
    StoreAccessError,
    StoreDeadlinesError,
    StoreThrottledError,
    StoreUnreachableError,
)

SCHEMES = list(STORES)
# A short retry budget keeps each unreachable case to seconds (the default, 30 s, is measured in the docs).
FAST_RETRIES = {"BEAM_TFRECORD_STORE_RETRY_SECONDS": "2", "BEAM_TFRECORD_STORE_CONNECT_SECONDS": "2"}


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str], name: str) -> str:
    """Runs the CLI in this process: exit code 1 and one line naming ``name``; returns that line."""
    assert cli.main(argv) == 1
    return one_line(capsys.readouterr().err, name)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_build_into_a_missing_bucket_fails_at_once_naming_it(scheme, request, capsys, tiny_images):
    server_url(request, scheme)
    started = time.monotonic()
    line = _fails(capsys, ["build", "--input", tiny_images, "--output", f"{scheme}://no-such-bucket/ds"],
                  "BucketNotFoundError")
    assert line.startswith("beam-tfrecord build: BucketNotFoundError: ") and "'no-such-bucket'" in line
    assert time.monotonic() - started < 30  # before any encoding: the lease is the output's first request


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_readers_raise_bucket_not_found(scheme, request):
    server_url(request, scheme)
    with pytest.raises(BucketNotFoundError, match="'no-such-bucket'") as raised:
        bt.read_numpy(f"{scheme}://no-such-bucket/ds")
    assert raised.value.bucket == "no-such-bucket" and raised.value.__cause__ is not None


@pytest.mark.parametrize("command", ["build", "verify"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_an_unreachable_endpoint_is_one_line_within_the_retry_budget(scheme, command, request, capsys, monkeypatch,
                                                                     tiny_images):
    server_url(request, scheme)  # its credentials; the endpoint is then replaced by a port where nothing listens
    endpoint = f"http://127.0.0.1:{free_port()}"
    point_at(monkeypatch, scheme, endpoint)
    for name, value in FAST_RETRIES.items():
        monkeypatch.setenv(name, value)
    argv = (["build", "--input", tiny_images, "--output", f"{scheme}://bucket-a/ds"] if command == "build"
            else ["verify", f"{scheme}://bucket-a/ds"])
    started = time.monotonic()
    line = _fails(capsys, argv, "StoreUnreachableError")
    assert endpoint in line and f"{scheme}://bucket-a/ds" in line
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("scheme", SCHEMES)
def test_read_numpy_on_an_unreachable_endpoint_raises_store_unreachable(scheme, request, monkeypatch):
    server_url(request, scheme)
    point_at(monkeypatch, scheme, f"http://127.0.0.1:{free_port()}")
    for name, value in FAST_RETRIES.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(StoreUnreachableError) as raised:
        bt.read_numpy(f"{scheme}://bucket-a/ds")
    assert isinstance(raised.value, ConnectionError) and raised.value.seconds < 10


def test_s3_without_credentials_is_one_line_from_a_job_naming_what_it_reads(moto_s3, tiny_images):
    """Run as a user runs a job (``python -m pipelines.X``), in a process whose environment has no credentials."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")}
    done = subprocess.run([sys.executable, "-m", "pipelines.build_image_dataset", "--input", tiny_images,
                           "--output", "s3://bucket-a/ds"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    line = one_line(done.stderr, "StoreAccessError")
    assert "no credentials found" in line and "AWS_ACCESS_KEY_ID" in line


def test_a_store_failing_in_the_worker_processes_is_one_line(moto_s3, tmp_path):
    """A manifest whose rows name objects of a missing bucket: the DirectRunner's 2 worker processes meet the error
    mid-job. Beam's harness prints each failed instruction's traceback to the worker's standard error (~140 lines
    here before): a typed error's is left out (``engine/worker_stderr.py``), as are the workers' start-up warnings."""
    manifest = tmp_path / "rows.csv"
    manifest.write_text("id,image,label\n" + "".join(f"{i},s3://no-such-bucket/{i}.jpg,{i % 2}\n" for i in range(20)))
    done = subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", "build-manifest", "--manifest", str(manifest),
                           "--output", str(tmp_path / "out"), "--key_column", "id", "--file_columns", "image",
                           "--direct_running_mode=multi_processing", "--direct_num_workers=2", "--progress=none"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert one_line(done.stderr, "BucketNotFoundError") == done.stderr.strip()  # nothing else on stderr
    assert "no-such-bucket" in done.stderr


def test_azure_with_a_rejected_key_is_one_line_and_a_typed_error(azurite, capsys, monkeypatch):
    container = new_bucket("az", "wrong-key")
    connection = os.environ["AZURE_STORAGE_CONNECTION_STRING"]
    key = connection.split("AccountKey=")[1].split(";")[0]
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection.replace(key, "A" * 86 + "=="))
    line = _fails(capsys, ["verify", f"{container}/ds"], "StoreAccessError")
    assert "AZURE_STORAGE_CONNECTION_STRING" in line
    with pytest.raises(StoreAccessError) as raised:
        bt.read_numpy(f"{container}/ds")
    assert isinstance(raised.value, PermissionError) and raised.value.bucket == container.removeprefix("az://")


def _throttled(scheme: str) -> Exception:
    """What each SDK raises when the store keeps asking to slow down (the emulators never do)."""
    if scheme == "s3":
        from botocore.exceptions import ClientError

        return ClientError({"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."},
                            "ResponseMetadata": {"HTTPStatusCode": 503}}, "GetObject")
    if scheme == "gs":
        from google.api_core.exceptions import TooManyRequests

        return TooManyRequests("rate limit exceeded")
    from azure.core.exceptions import HttpResponseError

    busy = HttpResponseError(message="The server is busy.")
    busy.status_code = 503
    return busy


@pytest.mark.parametrize("scheme", SCHEMES)
def test_throttling_past_the_retries_is_store_throttled_error(scheme):
    from beam_tfrecord.storage import azure_blob, gcs, s3

    store = {"s3": s3.STORE, "gs": gcs.STORE, "az": azure_blob.STORE}[scheme]
    with pytest.raises(StoreThrottledError, match=f"{scheme}://bucket-a/x") as raised:
        with store.translated(f"{scheme}://bucket-a/x", doing="read"):
            raise _throttled(scheme)
    assert raised.value.bucket == "bucket-a" and raised.value.__cause__ is not None


@pytest.mark.parametrize("field", ["connect_seconds", "request_seconds", "retry_seconds"])
def test_a_limit_that_is_not_a_positive_number_of_seconds_is_refused_naming_it(field):
    with pytest.raises(StoreDeadlinesError, match=field):
        bt.StoreDeadlines(**{field: 0})


def test_remote_reads_takes_store_deadlines_only():
    with pytest.raises(ReaderError, match="deadlines must be a StoreDeadlines"):
        bt.RemoteReads(deadlines=30)  # type: ignore[arg-type]


def test_a_bad_limit_variable_is_one_line_naming_it(moto_s3, capsys, monkeypatch):
    monkeypatch.setenv("BEAM_TFRECORD_STORE_REQUEST_SECONDS", "30s")
    line = _fails(capsys, ["verify", "s3://bucket-a/ds"], "StoreDeadlinesError")
    assert "BEAM_TFRECORD_STORE_REQUEST_SECONDS='30s'" in line
