"""Real local S3 and Azure servers for tests, one of each per test process, started on first use.

S3: moto's server (``tests/moto_s3_server.py``, the ``[test]`` extra) in its own process; Azure: Azurite
(npm; ``scripts/test.sh`` installs it into ``.tools/azurite``), skipped only where Node.js is absent. Each
points this process and its children at itself through the variables boto3 and azure-storage-blob read.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_gcs import free_port, stop_server

REPO = Path(__file__).resolve().parent.parent
S3_ENV_KEYS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
               "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE",
               "AWS_SHARED_CREDENTIALS_FILE", "AWS_EC2_METADATA_DISABLED")
AZURE_ENV_KEYS = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT",
                  "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN")
# Azurite's documented development account (public, the same in every Azurite): not a secret.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZURITE_BIN = REPO / ".tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"


@dataclasses.dataclass(frozen=True)
class Server:
    """A running store. ``url``: its endpoint; ``env``: what points clients at it (already in ``os.environ``)."""

    url: str
    env: dict[str, str]


def wait_listening(process: subprocess.Popen, port: int, log: Path, name: str, timeout_seconds: float = 30) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{name} exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    process.kill()
    pytest.fail(f"{name} did not listen on 127.0.0.1:{port} within {timeout_seconds} s")


def launch_moto(work: Path, port: int) -> subprocess.Popen:
    """moto's S3 server on 127.0.0.1:``port`` (writes serialized: see tests/moto_s3_server.py)."""
    log = work / f"moto-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, str(REPO / "tests" / "moto_s3_server.py"), str(port)],
                                   stdout=out, stderr=subprocess.STDOUT)
    wait_listening(process, port, log, "moto's S3 server")
    return process


def s3_env(url: str) -> dict[str, str]:
    """Placeholder credentials (moto accepts any) and the endpoint; no shared config file is read."""
    return {"AWS_ENDPOINT_URL_S3": url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true"}


def azurite_binary() -> Path:
    if shutil.which("node") is None:
        pytest.skip("Node.js is not installed: Azurite (the Azure Storage emulator) cannot run")
    found = shutil.which("azurite-blob")
    if found is None and not AZURITE_BIN.exists():
        pytest.fail(f"Azurite is not installed: scripts/test.sh installs it (npm install --prefix "
                    f"{AZURITE_BIN.parents[2]} azurite@3)")
    return Path(found) if found else AZURITE_BIN


def launch_azurite(work: Path, port: int) -> subprocess.Popen:
    """Azurite's blob service on 127.0.0.1:``port``, in memory."""
    log = work / f"azurite-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen([str(azurite_binary()), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                                    "--inMemoryPersistence", "--skipApiVersionCheck", "--silent", "--disableTelemetry"],
                                   cwd=work, stdout=out, stderr=subprocess.STDOUT)
    wait_listening(process, port, log, "Azurite")
    return process


def azure_env(url: str) -> dict[str, str]:
    return {"AZURE_STORAGE_CONNECTION_STRING": (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={url}/{AZURITE_ACCOUNT};")}


@dataclasses.dataclass
class _Running:
    server: Server
    process: subprocess.Popen
    saved_env: dict[str, str | None]
    users: int = 0


_running: dict[str, _Running] = {}


def _shared(kind: str, work_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server of ``kind`` per test process, shared by every fixture that asks (each conftest's import)."""
    if kind not in _running:
        work = work_factory.mktemp(kind)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        process, env, keys = ((launch_moto(work, port), s3_env(url), S3_ENV_KEYS) if kind == "s3"
                              else (launch_azurite(work, port), azure_env(url), AZURE_ENV_KEYS))
        saved = {key: os.environ.get(key) for key in keys}
        for key in keys:
            os.environ.pop(key, None)
        os.environ.update(env)
        _running[kind] = _Running(Server(url, env), process, saved)
    running = _running[kind]
    running.users += 1
    try:
        yield running.server
    finally:
        running.users -= 1
        if running.users == 0:
            del _running[kind]
            stop_server(running.process, running.saved_env)


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """moto's S3 server on 127.0.0.1 for the whole session."""
    yield from _shared("s3", tmp_path_factory)


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Azurite's blob service on 127.0.0.1 for the whole session (skipped without Node.js)."""
    yield from _shared("azure", tmp_path_factory)


def _fresh_name(request: pytest.FixtureRequest) -> str:
    name = "bt-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    return re.sub("-+", "-", f"{name}-{time.monotonic_ns() % 10**6}")


@pytest.fixture()
def s3_bucket(moto_s3: Server, request: pytest.FixtureRequest) -> str:
    """A fresh, empty bucket per test: ``s3://<name>``."""
    from beam_tfrecord.storage import s3

    name = _fresh_name(request)
    s3.client().create_bucket(Bucket=name)
    return f"s3://{name}"


@pytest.fixture()
def az_container(azurite: Server, request: pytest.FixtureRequest) -> str:
    """A fresh, empty container per test: ``az://<name>``."""
    from beam_tfrecord.storage import azure_blob

    name = _fresh_name(request)
    azure_blob.service(None).create_container(name)
    return f"az://{name}"
