"""No remote read waits without a deadline (issue 64): a store that takes connections and never answers gives
``StoreTimeoutError`` within the limits set (``RemoteReads(deadlines=)``, or the ``BEAM_TFRECORD_STORE_*``
variables) from the NumPy and PyTorch readers, tf.data, ``verify`` and a build reading its inputs, on each store."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from holding_proxy import HoldingProxy
from store_cases import STORES, new_bucket, one_line, point_at, server_url

import beam_tfrecord as bt
from beam_tfrecord import cli, storage
from beam_tfrecord.errors import StoreTimeoutError
from beam_tfrecord.storage.deadlines import CONNECT_VARIABLE, REQUEST_VARIABLE, RETRY_VARIABLE
from pipelines import build_image_dataset

SHORT = bt.StoreDeadlines(connect_seconds=1, request_seconds=1, retry_seconds=1)
# The most a call may take past SHORT: boto3's 3 attempts and its back-off, a second of slack on a loaded machine.
BOUND_SECONDS = 3 * SHORT.request_seconds + 4


@dataclasses.dataclass(frozen=True)
class Stored:
    scheme: str
    upstream: str  # the store's server, http://127.0.0.1:PORT
    dataset: str  # a dataset built on it
    images: str  # the images it was built from, on it


@pytest.fixture(scope="module")
def local_dataset(tiny_images: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    output = str(tmp_path_factory.mktemp("deadlines") / "ds")
    build_image_dataset.run(["--input", tiny_images, "--output", output, "--target_shard_bytes=6000",
                             "--runner=DirectRunner", "--direct_running_mode=in_memory"])
    return output


@pytest.fixture(scope="module", params=list(STORES))
def stored(request: pytest.FixtureRequest, local_dataset: str, tiny_images: str) -> Stored:
    upstream = server_url(request, request.param)
    bucket = new_bucket(request.param, "deadlines")
    for local, remote in ((local_dataset, f"{bucket}/ds"), (tiny_images, f"{bucket}/images")):
        for path, _ in storage.list_files(f"{local}/**"):
            storage.copy_file(path, remote + path[len(local):])
    return Stored(request.param, upstream, f"{bucket}/ds", f"{bucket}/images")


@pytest.fixture()
def proxy(stored: Stored, monkeypatch: pytest.MonkeyPatch) -> Iterator[HoldingProxy]:
    """A proxy in front of the store, forwarding until held; this process's clients go through it."""
    held = HoldingProxy(int(stored.upstream.rsplit(":", 1)[1]))
    point_at(monkeypatch, stored.scheme, held.url)
    yield held
    held.close()


def _timed_out(err: StoreTimeoutError, stored: Stored) -> None:
    assert isinstance(err, TimeoutError) and err.store == {"az": "azure"}.get(stored.scheme, stored.scheme)
    assert err.seconds < BOUND_SECONDS and stored.dataset.partition("://")[2].split("/")[0] == err.bucket


@pytest.mark.parametrize("reader", ["numpy", "torch"])
def test_a_reader_whose_store_stops_answering_raises_store_timeout_error(stored, proxy, reader):
    """Opened while the store answers (the manifest read), then the store holds every new connection: the
    shards' ranged reads time out within ``RemoteReads.deadlines``, in the reader's process."""
    reads = bt.RemoteReads(deadlines=SHORT)
    if reader == "numpy":
        examples = bt.read_numpy(stored.dataset, remote_reads=reads)
    else:
        examples = iter(bt.TFRecordIterableDataset(stored.dataset, remote_reads=reads))
    proxy.hold()
    with pytest.raises(StoreTimeoutError, match="did not answer in time: a ranged read") as raised:
        list(examples)
    _timed_out(raised.value, stored)


def test_a_follower_on_a_store_that_never_answers_raises_store_timeout_error(stored, proxy):
    """Its first look for a commit (LATEST, the manifest) is made under ``RemoteReads.deadlines``, as a normal
    reader's open, not the process's."""
    follower = bt.read_numpy(stored.dataset, follow=True, follow_timeout_seconds=0,
                             remote_reads=bt.RemoteReads(deadlines=SHORT))
    proxy.hold()
    with pytest.raises(StoreTimeoutError) as raised:
        next(follower)
    _timed_out(raised.value, stored)


def test_read_dataset_on_a_store_that_never_answers_raises_store_timeout_error(stored, proxy):
    pytest.importorskip("tensorflow")
    proxy.hold()
    with pytest.raises(StoreTimeoutError) as raised:
        bt.read_dataset(stored.dataset, remote_reads=bt.RemoteReads(deadlines=SHORT))
    _timed_out(raised.value, stored)


@pytest.mark.parametrize("command", ["verify", "build"])
def test_verify_and_a_build_reading_its_inputs_time_out_as_the_variables_say(stored, proxy, command, capsys,
                                                                             monkeypatch, tmp_path):
    for name in (CONNECT_VARIABLE, REQUEST_VARIABLE, RETRY_VARIABLE):
        monkeypatch.setenv(name, "1")
    proxy.hold()
    argv = (["verify", stored.dataset] if command == "verify"
            else ["build", "--input", stored.images, "--output", str(tmp_path / "out")])
    assert cli.main(argv) == 1
    line = one_line(capsys.readouterr().err, "StoreTimeoutError")
    assert proxy.url in line and "did not answer in time" in line


# An object's read (not a listing) under the images' prefix, as each store's client asks for it.
_IMAGE_READ = {"s3": b"/images/", "gs": b"/o/images%2F", "az": b"/images/"}


def test_a_store_that_stops_answering_while_the_workers_read_is_one_line(stored, monkeypatch, capsys, tmp_path):
    """The inputs are listed, then each image's read is held: the error the workers raise reaches the CLI as
    the same one line, not a dead letter per sample."""
    proxy = HoldingProxy(int(stored.upstream.rsplit(":", 1)[1]), hold_marker=_IMAGE_READ[stored.scheme])
    point_at(monkeypatch, stored.scheme, proxy.url)
    for name in (CONNECT_VARIABLE, REQUEST_VARIABLE, RETRY_VARIABLE):
        monkeypatch.setenv(name, "1")
    try:
        assert cli.main(["build", "--input", stored.images, "--output", str(tmp_path / "out")]) == 1
    finally:
        proxy.close()
    line = one_line(capsys.readouterr().err, "StoreTimeoutError")
    assert f"{stored.images}/" in line and "did not answer in time" in line
