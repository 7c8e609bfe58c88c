"""Finding and loading a published dataset's manifest: a dataset directory, or a versioned root's LATEST version.

A reader given a root never sees a half-written version. See docs/operations.md, "Scheduled refresh".
"""

from __future__ import annotations

import dataclasses
import re

from beam_tfrecord import storage
from beam_tfrecord.core.manifest import MANIFEST_FILENAME, Manifest
from beam_tfrecord.core.tfds_info import DATASET_INFO_FILENAME, tfds_files
from beam_tfrecord.errors import DatasetNotFoundError, LatestPointerError

LATEST_FILENAME = "LATEST"
VERSIONS_DIRNAME = "versions"
# 20260131T020000.000Z-1a2b3c (UTC, milliseconds; ids without milliseconds are read too): sorts by time.
VERSION_ID_PATTERN = re.compile(r"\d{8}T\d{6}(?:\.\d{3})?Z-[0-9a-f]{6}")



def version_dir(root: str, version_id: str) -> str:
    """``ROOT/versions/<version_id>``."""
    return storage.join(root, VERSIONS_DIRNAME, version_id)


def read_latest(root: str) -> str | None:
    """The version id LATEST names, or None when ``root`` has no LATEST file.

    Raises:
        LatestPointerError: when LATEST holds anything but one well-formed version id.
    """
    path = storage.join(root, LATEST_FILENAME)
    if not storage.exists(path):
        return None
    text = storage.read_bytes(path).decode("utf-8", errors="replace").strip()
    if not VERSION_ID_PATTERN.fullmatch(text):
        raise LatestPointerError(root, f"holds {text[:80]!r}, expected a version id like "
                                       "20260131T020000.000Z-1a2b3c")
    return text


def resolve_dataset_dir(path: str) -> str:
    """The directory that holds the manifest: ``path`` itself, or its latest version for a root.

    Raises:
        LatestPointerError: when ``path`` is a root whose LATEST is corrupt.
    """
    latest = read_latest(path)
    return path if latest is None else version_dir(path, latest)


@dataclasses.dataclass(frozen=True)
class LoadedDataset:
    """A manifest and the directory it was read from, which travel together: the shards of a
    root's version are those of the version whose manifest was loaded, never of one published
    in between.

    Attributes:
        path: the path the caller gave (a dataset directory or a versioned root).
        directory: the directory the manifest was read from (``path`` itself, or a version of it).
        manifest: the manifest.
    """

    path: str
    directory: str
    manifest: Manifest

    def shard_paths(self, split: str) -> list[str]:
        """Full paths of a split's shards, in index order."""
        return [storage.join(self.directory, shard.filename) for shard in self.manifest.split(split).shards]


def open_dataset(path: str) -> LoadedDataset:
    """Loads the manifest of the dataset at ``path`` (a dataset directory or a versioned root:
    its latest version); only a manifest makes a dataset.

    Raises:
        DatasetNotFoundError: no manifest at ``path``.
        LatestPointerError: ``path`` is a root whose LATEST is corrupt or names a version without a manifest.
    """
    resolved = resolve_dataset_dir(path)
    manifest_path = storage.join(resolved, MANIFEST_FILENAME)
    if not storage.exists(manifest_path):
        if resolved != path:
            raise LatestPointerError(path, f"names {resolved!r}, which has no {MANIFEST_FILENAME}")
        raise DatasetNotFoundError(f"no published dataset at {path!r}: {MANIFEST_FILENAME} is missing "
                                   "(a build that did not finish leaves none)")
    return LoadedDataset(path, resolved, Manifest.loads(storage.read_bytes(manifest_path)))


def load_manifest(dataset_dir: str) -> Manifest:
    """Loads the manifest of the dataset at ``dataset_dir``; only a manifest makes a dataset.

    ``dataset_dir`` may be a versioned root (``ROOT/LATEST`` names ``ROOT/versions/<id>``): its latest version is
    loaded. ``open_dataset`` gives the directory it was read from too.
    """
    return open_dataset(dataset_dir).manifest


def shard_paths(dataset_dir: str, manifest: Manifest, split: str) -> list[str]:
    """Full paths of a split's shards, in index order, in the directory ``dataset_dir`` resolves to now.

    For a root, that is the version LATEST names now; ``open_dataset(root).shard_paths(split)``
    keeps to the version the manifest was loaded from.
    """
    return LoadedDataset(dataset_dir, resolve_dataset_dir(dataset_dir), manifest).shard_paths(split)


def write_tfds_files(dataset_dir: str, manifest: Manifest) -> None:
    """Writes TFDS's metadata of a published dataset (``dataset_info.json`` last).

    The same manifest always gives the same bytes, so this is safe to repeat: publishing writes
    them just after the manifest, and a step that finds a manifest a crash left without them (a
    re-executed publish, a refresh adopting a finished version) writes them again.
    """
    files = tfds_files(manifest)
    for name in sorted(files, key=lambda n: n == DATASET_INFO_FILENAME):
        storage.write_bytes_atomic(storage.join(dataset_dir, name), files[name])
