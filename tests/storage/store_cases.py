"""The three object stores as the store-error tests take them: each one's server fixture, its scheme, a
fresh bucket on it, and the variable that points its clients at another endpoint (a free port, a proxy)."""

from __future__ import annotations

import time

import pytest
from fixtures_stores import azure_env

STORES = {"s3": "moto_s3", "gs": "fake_gcs", "az": "azurite"}  # scheme -> the session fixture of its server


def server_url(request: pytest.FixtureRequest, scheme: str) -> str:
    """The running server of ``scheme`` (started on first use), as ``http://127.0.0.1:PORT``."""
    return str(request.getfixturevalue(STORES[scheme]).url)


def new_bucket(scheme: str, prefix: str) -> str:
    """A fresh, empty bucket (Azure: container) on the running server: ``SCHEME://NAME``."""
    name = f"{prefix}-{time.monotonic_ns() % 10**9}"
    if scheme == "s3":
        from beam_tfrecord.storage import s3

        s3.client().create_bucket(Bucket=name)
    elif scheme == "gs":
        from google.cloud import storage

        storage.Client.create_anonymous_client().create_bucket(name)
    else:
        from beam_tfrecord.storage import azure_blob

        azure_blob.service(None).create_container(name)
    return f"{scheme}://{name}"


def point_at(monkeypatch: pytest.MonkeyPatch, scheme: str, url: str) -> None:
    """Points this process's (and its children's) clients of ``scheme`` at ``url``, with the same credentials."""
    if scheme == "s3":
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", url)
    elif scheme == "gs":
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    else:
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azure_env(url)["AZURE_STORAGE_CONNECTION_STRING"])


def one_line(err: str, name: str) -> str:
    """The CLI's error output, checked: at most 3 lines, no traceback, naming ``name``."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 3 and "Traceback" not in err and name in err, err
    return lines[-1]
