"""Scheduled refresh: versioned dataset roots, input fingerprints, the LATEST pointer, retention.

Layout (see ``beam_tfrecord.dataset``)::

    ROOT/LATEST                        the id of the newest complete version
    ROOT/versions/<id>/manifest.json   written last by the writer: the version is complete
    ROOT/versions/<id>/...             shards (and, while building, the writer's temp folder)

One refresh: fingerprint the inputs at launch (path, size, update time of every file) ->
compare with the fingerprint stored in the LATEST version's manifest -> nothing to do, or build
into a new ``versions/<id>/`` -> replace LATEST in one step -> delete versions beyond the
newest ``keep_versions``. A crash at any point leaves LATEST naming a complete version (or no
LATEST at all), because LATEST is written only after the version's manifest, to a temporary
name that is then renamed over the old pointer.

Runs of one root must not overlap (a scheduler runs one at a time); retention deletes
unfinished versions older than LATEST, which only an abandoned run leaves.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import logging
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from apache_beam.io.filesystems import FileSystems

from beam_tfrecord import storage
from beam_tfrecord.core.manifest import MANIFEST_FILENAME, Manifest
from beam_tfrecord.core.tfds_info import DATASET_INFO_FILENAME
from beam_tfrecord.dataset import (
    LATEST_FILENAME,
    VERSION_ID_PATTERN,
    VERSIONS_DIRNAME,
    load_manifest,
    read_latest,
    version_dir,
    write_tfds_files,
)
from beam_tfrecord.errors import LatestPointerError, RefreshError

_LOG = logging.getLogger(__name__)
FINGERPRINT_KEY = "input_fingerprint"  # the key of the fingerprint in the manifest's metadata
DEFAULT_KEEP_VERSIONS = 3


@dataclasses.dataclass(frozen=True)
class InputFile:
    """One input file as storage lists it.

    Attributes:
        path: full path (local or ``gs://``).
        size_bytes: its size.
        updated_seconds: modification time (local) or last update (GCS: changes with every new
            generation of the object), in seconds since the epoch.
    """

    path: str
    size_bytes: int
    updated_seconds: float


@dataclasses.dataclass(frozen=True)
class InputFingerprint:
    """A digest of every input file's path, size and update time, stored in the manifest.

    Attributes:
        sha256: hex SHA-256 over the sorted ``path, size, update time`` lines.
        num_files: how many files the inputs had.
        num_bytes: their total size.
    """

    sha256: str
    num_files: int
    num_bytes: int

    @classmethod
    def of(cls, files: Sequence[InputFile]) -> "InputFingerprint":
        digest = hashlib.sha256()
        for f in sorted(files, key=lambda f: f.path):
            digest.update(f"{f.path}\t{f.size_bytes}\t{f.updated_seconds:.6f}\n".encode())
        return cls(digest.hexdigest(), len(files), sum(f.size_bytes for f in files))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "InputFingerprint":
        try:
            return cls(str(data["sha256"]), int(data["num_files"]), int(data["num_bytes"]))
        except (KeyError, TypeError, ValueError) as err:
            raise RefreshError(f"malformed input fingerprint {dict(data)!r}: {err}") from err


def list_input_files(patterns: Sequence[str]) -> list[InputFile]:
    """Every file matching the glob patterns (local or ``gs://``), with size and update time."""
    files = {}
    for result in FileSystems.match(list(patterns)):
        for meta in result.metadata_list:
            files[meta.path] = InputFile(meta.path, int(meta.size_in_bytes), float(meta.last_updated_in_seconds))
    return sorted(files.values(), key=lambda f: f.path)


def fingerprint_inputs(patterns: Sequence[str]) -> InputFingerprint:
    """The fingerprint of the files matching ``patterns``, taken now (at launch)."""
    return InputFingerprint.of(list_input_files(patterns))


_TIME_FORMAT = "%Y%m%dT%H%M%S"


def new_version_id(now: datetime.datetime | None = None, token: str | None = None, *,
                   after: Iterable[str] = ()) -> str:
    """A version id that sorts by creation: ``YYYYMMDDTHHMMSS.mmmZ-<6 hex>`` (UTC, milliseconds).

    Args:
        now: the creation time (default: the clock).
        token: 6 lowercase hex digits (default: random), so concurrent launches differ.
        after: existing ids; the new id is made later than all of them (by 1 ms if the clock is
            not ahead), so "newest" never depends on the random token or on a skewed clock.
    """
    moment = (now or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)
    newest = max(after, default=None)
    if newest is not None:
        stamp = newest.split("Z-")[0]
        newest_moment = datetime.datetime.strptime(stamp, _TIME_FORMAT + (".%f" if "." in stamp else "")).replace(
            tzinfo=datetime.timezone.utc)
        moment = max(moment, newest_moment + datetime.timedelta(milliseconds=1))
    version_id = f"{moment:{_TIME_FORMAT}}.{moment.microsecond // 1000:03d}Z-{token or secrets.token_hex(3)}"
    if not VERSION_ID_PATTERN.fullmatch(version_id):
        raise RefreshError(f"bad version id {version_id!r}: the token must be 6 lowercase hex digits")
    return version_id


@dataclasses.dataclass(frozen=True)
class VersionListing:
    """What ``ROOT/versions/`` holds. Ids sort oldest first.

    Attributes:
        complete: versions whose manifest exists.
        incomplete: versions with files but no manifest (being written, or abandoned by a crash).
    """

    complete: tuple[str, ...]
    incomplete: tuple[str, ...]


def list_versions(root: str) -> VersionListing:
    """The complete and incomplete versions under ``root``."""
    prefix = storage.join(root, VERSIONS_DIRNAME).rstrip("/") + "/"
    seen: dict[str, bool] = {}
    for path, _ in storage.list_files(prefix + "**"):
        relative = path[len(prefix):] if path.startswith(prefix) else ""
        version_id, _, rest = relative.partition("/")
        if VERSION_ID_PATTERN.fullmatch(version_id):
            seen[version_id] = seen.get(version_id, False) or rest == MANIFEST_FILENAME
    return VersionListing(complete=tuple(sorted(v for v, done in seen.items() if done)),
                          incomplete=tuple(sorted(v for v, done in seen.items() if not done)))


def stored_fingerprint(manifest: Manifest) -> InputFingerprint | None:
    data = manifest.metadata.get(FINGERPRINT_KEY)
    return InputFingerprint.from_json(data) if data is not None else None


class RefreshAction(enum.Enum):
    """What a refresh does."""

    SKIP = "skip"  # the inputs are unchanged since LATEST was built
    ADOPT = "adopt"  # a complete version of these inputs exists but LATEST was not moved (crash): point to it
    BUILD = "build"  # build a new version


@dataclasses.dataclass(frozen=True)
class RefreshPlan:
    """The decision taken at launch, printable and testable.

    Attributes:
        root: the dataset root.
        action: what to do.
        version_id: the version to build or adopt; for SKIP, the current LATEST.
        latest: LATEST before this refresh (None on the first run).
        fingerprint: the inputs' fingerprint now.
        reason: one sentence for the log.
    """

    root: str
    action: RefreshAction
    version_id: str
    latest: str | None
    fingerprint: InputFingerprint
    reason: str

    @property
    def version_dir(self) -> str:
        return version_dir(self.root, self.version_id)


def plan_refresh(root: str, fingerprint: InputFingerprint, *, force: bool = False,
                 now: datetime.datetime | None = None) -> RefreshPlan:
    """Decides whether to build, skip (inputs unchanged) or adopt a finished but unpointed version.

    Raises:
        LatestPointerError: when LATEST is corrupt or names a version without a manifest.
    """
    latest = read_latest(root)
    # load_manifest raises LatestPointerError if LATEST is bad.
    if latest is not None and not force and stored_fingerprint(load_manifest(root)) == fingerprint:
        return RefreshPlan(root, RefreshAction.SKIP, latest, latest, fingerprint,
                           f"inputs unchanged since version {latest} ({fingerprint.num_files} files, "
                           f"{fingerprint.num_bytes} bytes); nothing to do (use --force to rebuild)")
    listing = list_versions(root)
    newer = [v for v in listing.complete if latest is None or v > latest]
    if newer and not force:
        candidate = newer[-1]
        if stored_fingerprint(load_manifest(version_dir(root, candidate))) == fingerprint:
            return RefreshPlan(root, RefreshAction.ADOPT, candidate, latest, fingerprint,
                               f"version {candidate} of these inputs is complete but was not published "
                               "(the last run stopped before moving LATEST); publishing it")
    why = "forced rebuild" if force else ("first build" if latest is None else f"inputs changed since {latest}")
    version_id = new_version_id(now, after=[*listing.complete, *listing.incomplete, *([latest] if latest else [])])
    return RefreshPlan(root, RefreshAction.BUILD, version_id, latest, fingerprint,
                       f"{why}: building version {version_id} from {fingerprint.num_files} files")


def commit_version(root: str, version_id: str) -> None:
    """Points LATEST at a complete version, replacing the old pointer in one step.

    A run killed between its manifest and TFDS's metadata leaves a complete version without
    ``dataset_info.json`` (written last): then those files are written again (the same bytes)
    before LATEST moves.

    Raises:
        LatestPointerError: when the version has no manifest (it is not complete).
    """
    directory = version_dir(root, version_id)
    if not storage.exists(storage.join(directory, MANIFEST_FILENAME)):
        raise LatestPointerError(root, f"cannot name {version_id!r}: that version has no {MANIFEST_FILENAME}")
    if not storage.exists(storage.join(directory, DATASET_INFO_FILENAME)):  # written last: its presence means all
        write_tfds_files(directory, load_manifest(directory))
    storage.write_bytes_atomic(storage.join(root, LATEST_FILENAME), f"{version_id}\n".encode())


def apply_retention(root: str, keep_versions: int) -> list[str]:
    """Deletes complete versions beyond the newest ``keep_versions`` and abandoned unfinished ones.

    Never deletes LATEST's version, nor anything newer than it (a run may be writing it). A
    complete version loses its manifest first, so a half-deleted version never looks complete.
    Temporary pointer files left by a run killed while moving LATEST are removed too.

    Returns:
        The ids deleted, oldest first.
    """
    if keep_versions < 1:
        raise RefreshError(f"keep_versions must be >= 1, got {keep_versions}")
    latest = read_latest(root)
    if latest is None:
        return []
    listing = list_versions(root)
    published = [v for v in listing.complete if v <= latest]
    doomed = set(published[:-keep_versions]) | {v for v in listing.incomplete if v < latest}
    doomed.discard(latest)
    for version_id in sorted(doomed):
        directory = version_dir(root, version_id)
        storage.delete_if_exists([storage.join(directory, MANIFEST_FILENAME)])
        storage.delete_tree(directory)
        _LOG.info("retention: deleted version %s of %s", version_id, root)
    # storage.write_bytes_atomic writes LATEST as "LATEST.tmp-<hex>" and renames it.
    stale_pointers = storage.list_files(storage.join(root, LATEST_FILENAME) + ".tmp-*")
    storage.delete_if_exists([path for path, _ in stale_pointers])
    return sorted(doomed)


def publish_version(_manifest: Manifest, *, root: str, version_id: str, keep_versions: int) -> str:
    """The pipeline's last step (runs on a worker): move LATEST, then apply retention. Returns the id."""
    commit_version(root, version_id)
    apply_retention(root, keep_versions)
    return version_id
