"""Finding and loading a published dataset's manifest: a dataset directory, a versioned root's LATEST version,
a Beam ``file_path_prefix`` (shards beside it, manifest in ``.PREFIX.beam-tfrecord/``) or a manifest's path.

A reader given a root never sees a half-written version. See docs/operations.md, "Scheduled refresh", and
docs/inputs.md, "Files named by a Beam prefix".
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import dataclasses

from beam_tfrecord import storage
from beam_tfrecord.core.manifest import MANIFEST_FILENAME, Manifest, ShardInfo
from beam_tfrecord.core.naming import VERSION_ID_PATTERN
from beam_tfrecord.errors import DatasetNotFoundError, LatestPointerError, ManifestError

LATEST_FILENAME = "LATEST"
VERSIONS_DIRNAME = "versions"
# 20260131T020000.000Z-1a2b3c (UTC, milliseconds; ids without milliseconds are read too): sorts by time.
# A dataset written under a Beam prefix keeps its manifest and metadata in ``FOLDER/.PREFIX.beam-tfrecord/``:
# hidden, so no consumer's glob (``PREFIX-*``, ``PREFIX*``, ``FOLDER/*``) sees it.
PREFIX_METADATA_SUFFIX = ".beam-tfrecord"


def version_dir(root: str, version_id: str) -> str:
    """``ROOT/versions/<version_id>``."""
    return storage.join(root, VERSIONS_DIRNAME, version_id)


def read_latest(root: str) -> str | None:
    """The version id LATEST names, or None when ``root`` has no LATEST file (one read, no ``exists`` first).

    Raises:
        LatestPointerError: when LATEST holds anything but one well-formed version id.
    """
    data = storage.read_bytes_or_none(storage.join(root, LATEST_FILENAME))
    return None if data is None else _version_named(root, data)


def _version_named(root: str, latest: bytes) -> str:
    text = latest.decode("utf-8", errors="replace").strip()
    if not VERSION_ID_PATTERN.fullmatch(text):
        raise LatestPointerError(root, f"holds {text[:80]!r}, expected a version id like "
                                       "20260131T020000.000Z-1a2b3c")
    return text


def split_path(path: str) -> tuple[str, str]:
    """``(folder, last part)`` of a local or remote path (``("gs://b/out", "result")``); folder ``""`` for none."""
    stripped = path.rstrip("/")
    folder, _, name = stripped.rpartition("/")
    return (folder + "/" if folder.endswith(":/") or (not folder and stripped.startswith("/")) else folder), name


def prefix_metadata_dir(file_path_prefix: str) -> str:
    """``FOLDER/.PREFIX.beam-tfrecord``: where the manifest and metadata of a prefix's shards go."""
    folder, name = split_path(file_path_prefix)
    return storage.join(folder, f".{name}{PREFIX_METADATA_SUFFIX}") if folder else f".{name}{PREFIX_METADATA_SUFFIX}"


@dataclasses.dataclass(frozen=True)
class _Location:
    """Where the manifest of the dataset a path names is (it may not exist), and its shards' folder."""

    manifest_path: str
    shards_dir: str
    version: str | None = None  # the version LATEST names, for a versioned root


def _manifest_path_location(path: str) -> _Location:
    """A manifest's own path: its shards are beside it, or beside the prefix whose metadata folder holds it."""
    folder, name = split_path(split_path(path)[0])
    in_prefix_dir = name.startswith(".") and name.endswith(PREFIX_METADATA_SUFFIX)
    return _Location(path, folder if in_prefix_dir else split_path(path)[0])


def _version_location(root: str, version: str) -> _Location:
    return _Location(storage.join(version_dir(root, version), MANIFEST_FILENAME), version_dir(root, version), version)


def _prefix_location(prefix: str) -> _Location:
    return _Location(storage.join(prefix_metadata_dir(prefix), MANIFEST_FILENAME), split_path(prefix)[0])


def _locate(path: str) -> _Location:
    if split_path(path)[1] == MANIFEST_FILENAME:
        return _manifest_path_location(path)
    latest = read_latest(path)
    if latest is not None:
        return _version_location(path, latest)
    in_dir, beside = _Location(storage.join(path, MANIFEST_FILENAME), path), _prefix_location(path)
    if not storage.exists(in_dir.manifest_path) and storage.exists(beside.manifest_path):
        return beside
    return in_dir


def _check_location(location: _Location, manifest: Manifest) -> None:
    """A manifest naming its shards by a prefix sits in that prefix's folder; a dataset directory's does not."""
    name = split_path(split_path(location.manifest_path)[0])[1]
    expected = None if manifest.shard_naming is None else f".{manifest.shard_naming.prefix}{PREFIX_METADATA_SUFFIX}"
    if expected is not None and name != expected:
        raise ManifestError(f"manifest {location.manifest_path!r} names shards by the prefix "
                            f"{manifest.shard_naming.prefix!r}, so it must be in a folder {expected!r}")  # type: ignore[union-attr]
    if expected is None and name.startswith(".") and name.endswith(PREFIX_METADATA_SUFFIX):
        raise ManifestError(f"manifest {location.manifest_path!r} in a prefix's folder has no shard_naming")


def resolve_dataset_dir(path: str) -> str:
    """The folder of the dataset's shards: ``path`` itself, its latest version for a root, the folder of a
    Beam prefix, or the folder of a manifest's path.

    Raises:
        LatestPointerError: when ``path`` is a root whose LATEST is corrupt.
    """
    return _locate(path).shards_dir

@dataclasses.dataclass(frozen=True)
class LoadedDataset:
    """A manifest and the directory it was read from, which travel together: the shards of a
    root's version are those of the version whose manifest was loaded, never of one published
    in between.

    Attributes:
        path: the path the caller gave (a dataset directory, a versioned root, a Beam prefix, a manifest).
        directory: the directory of the shards (``path`` itself, a version of it, or a prefix's folder).
        manifest: the manifest.
        metadata_dir: the manifest's folder, where its dead letters are (None: ``directory``).
    """

    path: str
    directory: str
    manifest: Manifest
    metadata_dir: str | None = None

    def dead_letters_path(self) -> str | None:
        """The dead-letter file's path, or None when nothing was rejected."""
        name = self.manifest.dead_letters
        return None if name is None else storage.join(self.metadata_dir or self.directory, name)

    def shard_paths(self, split: str) -> list[str]:
        """Full paths of a split's shards, in index order."""
        return [self.shard_path(shard) for shard in self.manifest.split(split).shards]

    def shard_path(self, shard: ShardInfo) -> str:
        """The full path of a shard the manifest lists: in its directory, or in the earlier version of the same
        root that wrote it (``ShardInfo.stored_in``)."""
        return shard_file_path(self.directory, shard)


def open_dataset(path: str) -> LoadedDataset:
    """Loads the manifest of the dataset at ``path`` (a dataset directory, a versioned root: its latest
    version, a Beam ``file_path_prefix`` its shards were written under, or the manifest's path); only a
    manifest makes a dataset.

    Every request is a read whose "not found" is an answer, never an ``exists`` before it: a manifest's path
    costs one read; a directory and a root read ``LATEST`` and ``manifest.json`` side by side (remote: at
    once), so a directory is open after one round trip, a root after two (then its version's manifest), a
    Beam prefix after two (then ``.PREFIX.beam-tfrecord/manifest.json``).

    Raises:
        DatasetNotFoundError: no manifest at ``path``.
        LatestPointerError: ``path`` is a root whose LATEST is corrupt or names a version without a manifest.
    """
    location, data = _read_manifest(path)
    if data is None:
        if location.version is not None:
            raise LatestPointerError(path, f"names {location.shards_dir!r}, which has no {MANIFEST_FILENAME}")
        storage.raise_if_bucket_missing(path)
        raise DatasetNotFoundError(f"no published dataset at {path!r}: {MANIFEST_FILENAME} is missing "
                                   f"(in it, or in {prefix_metadata_dir(path)!r} for a Beam prefix; a build that "
                                   "did not finish leaves none)")
    manifest = Manifest.loads(data)
    _check_location(location, manifest)
    return LoadedDataset(path, location.shards_dir, manifest, split_path(location.manifest_path)[0])


def _read_manifest(path: str) -> tuple[_Location, bytes | None]:
    """Where the manifest of the dataset ``path`` names is, and its bytes (None: there are none)."""
    if split_path(path)[1] == MANIFEST_FILENAME:
        return _manifest_path_location(path), storage.read_bytes_or_none(path)
    latest, in_dir = _read_side_by_side([storage.join(path, name) for name in (LATEST_FILENAME, MANIFEST_FILENAME)])
    if latest is not None:  # a root: LATEST wins, as in ``_locate``
        location = _version_location(path, _version_named(path, latest))
    elif in_dir is not None:
        return _Location(storage.join(path, MANIFEST_FILENAME), path), in_dir
    else:
        location = _prefix_location(path)
    return location, storage.read_bytes_or_none(location.manifest_path)


def _read_side_by_side(paths: list[str]) -> list[bytes | None]:
    """Each file's bytes or None; remote files are asked for at once (one round trip), local ones in turn."""
    if not storage.is_remote(paths[0]):
        return [storage.read_bytes_or_none(path) for path in paths]
    with concurrent.futures.ThreadPoolExecutor(len(paths)) as pool:  # each in this thread's context: its deadlines
        asked = [pool.submit(contextvars.copy_context().run, storage.read_bytes_or_none, path) for path in paths]
        return [future.result() for future in asked]


def load_manifest(dataset_dir: str) -> Manifest:
    """Loads the manifest of the dataset at ``dataset_dir``; only a manifest makes a dataset.

    ``dataset_dir`` may be a versioned root (``ROOT/LATEST`` names ``ROOT/versions/<id>``): its latest version is
    loaded. ``open_dataset`` gives the directory it was read from too.
    """
    return open_dataset(dataset_dir).manifest


def shard_file_path(directory: str, shard: ShardInfo, filename: str | None = None) -> str:
    """The full path of ``filename`` (default: the shard's file; its DALI index...) of a shard listed by the
    manifest in ``directory``: ``directory/filename``, or ``ROOT/versions/<stored_in>/filename`` when an earlier
    version of the root wrote it.

    Raises:
        ManifestError: the shard is stored in another version but ``directory`` is not a version of a root (a
            version copied out of its root lost the shards it shares: ``compact`` it first).
    """
    filename = filename or shard.filename
    if shard.stored_in is None:
        return storage.join(directory, filename)
    versions, own = split_path(directory.rstrip("/"))
    if split_path(versions)[1] != VERSIONS_DIRNAME or not VERSION_ID_PATTERN.fullmatch(own):
        raise ManifestError(f"shard {shard.filename!r} is stored in version {shard.stored_in} of the dataset's "
                            f"root, but {directory!r} is not a version of a root (ROOT/{VERSIONS_DIRNAME}/<id>); "
                            "read the root, or compact the version first")
    return storage.join(versions, shard.stored_in, filename)


def shard_paths(dataset_dir: str, manifest: Manifest, split: str) -> list[str]:
    """Full paths of a split's shards, in index order, in the directory ``dataset_dir`` resolves to now.

    For a root, that is the version LATEST names now; ``open_dataset(root).shard_paths(split)``
    keeps to the version the manifest was loaded from.
    """
    return LoadedDataset(dataset_dir, resolve_dataset_dir(dataset_dir), manifest).shard_paths(split)
