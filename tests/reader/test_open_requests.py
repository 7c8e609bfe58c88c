"""What opening a dataset asks its store: reads whose "not found" is the answer, never an ``exists`` first.

The store is the real local backend registered for a test scheme (``counted://``) that records each call
before doing it, so ``open_dataset`` runs its real remote code path (side-by-side reads) on local files.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from beam_tfrecord import storage
from beam_tfrecord.dataset import open_dataset
from beam_tfrecord.errors import DatasetNotFoundError
from beam_tfrecord.storage.local import LocalBackend

SCHEME = "counted://"
VERSION = "20260101T000000.000Z-abcdef"
SIDE_BY_SIDE_WAIT_SECONDS = 5.0  # how long a LATEST read waits to see its sibling manifest read start


class RecordingBackend(LocalBackend):
    """Local files under ``counted://``; records every existence check and read, in the order asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # (method, path without the scheme)
        self.read_side_by_side: list[bool] = []  # per LATEST read: the sibling manifest.json read had started
        self._started = threading.Condition()

    def _local(self, method: str, path: str) -> str:
        if not path.startswith(SCHEME):
            return path  # LocalBackend calling itself with the local path: already recorded
        local = path[len(SCHEME):]
        with self._started:
            self.calls.append((method, local))
            self._started.notify_all()
        return local

    def exists(self, path: str) -> bool:
        return super().exists(self._local("exists", path))

    def read_bytes(self, path: str) -> bytes:
        return super().read_bytes(self._local("read_bytes", path))

    def read_bytes_or_none(self, path: str) -> bytes | None:
        local = self._local("read_bytes_or_none", path)
        if local.endswith("/LATEST"):
            sibling = ("read_bytes_or_none", local.removesuffix("LATEST") + "manifest.json")
            with self._started:
                self.read_side_by_side.append(
                    self._started.wait_for(lambda: sibling in self.calls, timeout=SIDE_BY_SIDE_WAIT_SECONDS))
        return super().read_bytes_or_none(local)


@pytest.fixture()
def recorded(monkeypatch: pytest.MonkeyPatch) -> RecordingBackend:
    backend = RecordingBackend()
    monkeypatch.setitem(storage._BACKENDS, "counted", backend)
    return backend


@pytest.fixture()
def layouts(counted, tmp_path: Path) -> dict[str, Path]:
    """A dataset directory, a versioned root holding it as its LATEST version, and a folder with no dataset."""
    root = tmp_path / "root"
    shutil.copytree(counted.path, root / "versions" / VERSION)
    (root / "LATEST").write_text(VERSION + "\n")
    (tmp_path / "empty").mkdir()
    return {"dir": Path(counted.path), "root": root, "empty": tmp_path / "empty"}


def _reads(backend: RecordingBackend) -> list[str]:
    assert [method for method, _ in backend.calls if method != "read_bytes_or_none"] == []  # no exists, no 2nd read
    return [path for _, path in backend.calls]


def test_a_dataset_directory_opens_in_one_round_trip(recorded: RecordingBackend, layouts: dict[str, Path]) -> None:
    directory = str(layouts["dir"])
    dataset = open_dataset(SCHEME + directory)
    assert dataset.directory == SCHEME + directory
    assert sorted(_reads(recorded)) == [f"{directory}/LATEST", f"{directory}/manifest.json"]
    assert recorded.read_side_by_side == [True]  # asked for at once: one round trip


def test_a_versioned_root_opens_in_two_round_trips(recorded: RecordingBackend, layouts: dict[str, Path]) -> None:
    root = str(layouts["root"])
    dataset = open_dataset(SCHEME + root)
    assert dataset.directory == f"{SCHEME}{root}/versions/{VERSION}"
    reads = _reads(recorded)
    assert sorted(reads[:2]) == [f"{root}/LATEST", f"{root}/manifest.json"]
    assert reads[2:] == [f"{root}/versions/{VERSION}/manifest.json"]
    assert recorded.read_side_by_side == [True]


def test_a_manifest_path_opens_with_one_read(recorded: RecordingBackend, layouts: dict[str, Path]) -> None:
    manifest = f"{layouts['dir']}/manifest.json"
    assert open_dataset(SCHEME + manifest).directory == SCHEME + str(layouts["dir"])
    assert _reads(recorded) == [manifest]


def test_a_folder_without_a_dataset_is_not_found_after_three_reads(recorded: RecordingBackend,
                                                                   layouts: dict[str, Path]) -> None:
    empty = str(layouts["empty"])
    with pytest.raises(DatasetNotFoundError, match="manifest.json is missing"):
        open_dataset(SCHEME + empty)
    reads = _reads(recorded)
    assert sorted(reads[:2]) == [f"{empty}/LATEST", f"{empty}/manifest.json"]
    assert reads[2:] == [f"{layouts['empty'].parent}/.empty.beam-tfrecord/manifest.json"]  # a Beam prefix's
