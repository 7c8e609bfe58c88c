"""Scheduled refresh: versioned dataset roots, input fingerprints, the LATEST pointer, retention.

One refresh: fingerprint the inputs (path, size, update time of every file, as storage lists them) ->
skip if LATEST was built from the same -> else build ``ROOT/versions/<id>/`` -> replace LATEST in one
step -> delete old versions that stopped being LATEST at least ``min_version_age`` ago. Invariant:
LATEST always names a complete version (or there is none). Runs of one root must not overlap.
Layout, and why a minimum age: docs/operations.md#storage.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import json
import logging
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.core.durations import format_duration
from beam_tfrecord.core.manifest import MANIFEST_FILENAME, Manifest
from beam_tfrecord.dataset import (
    LATEST_FILENAME,
    VERSION_ID_PATTERN,
    VERSIONS_DIRNAME,
    load_manifest,
    read_latest,
    version_dir,
)
from beam_tfrecord.errors import DiskFullError, LatestPointerError, RefreshError
from beam_tfrecord.interop.tfds import DATASET_INFO_FILENAME, write_tfds_files
from beam_tfrecord.versions.drift_gate import DriftCheck, check_drift

_LOG = logging.getLogger(__name__)
FINGERPRINT_KEY = "input_fingerprint"  # the key of the fingerprint in the manifest's metadata
DEFAULT_KEEP_VERSIONS = 3
DEFAULT_MIN_VERSION_AGE = datetime.timedelta(hours=24)  # a version is kept this long after it stops being LATEST
SUPERSEDED_FILENAME = "superseded.json"  # in a version's directory: when (and by which version) it stopped being LATEST


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
    files = {found.path: InputFile(found.path, found.size_bytes, found.updated_seconds)
             for pattern in patterns for found in storage.list_details(pattern)}
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


def _utc_now(now: datetime.datetime | None) -> datetime.datetime:
    return (now or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)


def superseded_at(root: str, version_id: str) -> datetime.datetime | None:
    """When the version stopped being LATEST, as recorded in its ``superseded.json``; None without a
    readable record (one damaged by hand is logged and treated as missing: its clock restarts)."""
    path = storage.join(version_dir(root, version_id), SUPERSEDED_FILENAME)
    if not storage.exists(path):
        return None
    try:
        data = json.loads(storage.read_bytes(path))
        return datetime.datetime.fromisoformat(data["superseded_at"]).astimezone(datetime.timezone.utc)
    except (ValueError, KeyError, TypeError) as err:
        _LOG.warning("retention: unreadable %s (%s); the version's retention clock restarts now", path, err)
        return None


def record_superseded(root: str, version_id: str, *, by: str,
                      now: datetime.datetime | None = None) -> datetime.datetime:
    """Writes the version's ``superseded.json``: it stopped being LATEST ``now``, for ``by``. Returns the time."""
    moment = _utc_now(now)
    record = {"superseded_at": moment.isoformat(timespec="milliseconds"), "superseded_by": by}
    storage.write_bytes_atomic(storage.join(version_dir(root, version_id), SUPERSEDED_FILENAME),
                               (json.dumps(record, sort_keys=True) + "\n").encode())
    return moment


def commit_version(root: str, version_id: str, *, now: datetime.datetime | None = None) -> None:
    """Points LATEST at a complete version, replacing the old pointer in one step, and records in
    the version LATEST named before that it stopped being LATEST ``now`` (retention's clock).

    A run killed between its manifest and TFDS's metadata leaves a complete version without
    ``dataset_info.json`` (written last): then those files are written again (the same bytes)
    before LATEST moves. The rule: a version has ``dataset_info.json`` exactly when TFDS can read it
    (``tfds.unsupported_reason``); one it cannot (compressed, sequence features, not self-contained: shards shared
    with earlier versions or records deleted) never gets it, so its absence there is no unfinished publication and
    ``write_tfds_files`` writes nothing. A version made LATEST again (a roll-back) loses its old record first.

    Raises:
        LatestPointerError: when the version has no manifest (it is not complete).
    """
    directory = version_dir(root, version_id)
    if not storage.exists(storage.join(directory, MANIFEST_FILENAME)):
        raise LatestPointerError(root, f"cannot name {version_id!r}: that version has no {MANIFEST_FILENAME}")
    if not storage.exists(storage.join(directory, DATASET_INFO_FILENAME)):  # written last: its presence means all
        write_tfds_files(directory, load_manifest(directory))  # nothing for a version TFDS cannot read
    try:
        previous = read_latest(root)
    except LatestPointerError:
        previous = None  # a corrupt pointer names nothing to record
    storage.delete_if_exists([storage.join(directory, SUPERSEDED_FILENAME)])
    storage.write_bytes_atomic(storage.join(root, LATEST_FILENAME), f"{version_id}\n".encode())
    # A crash here leaves the old version without a record: retention writes it when it first finds the
    # version old, so the clock then starts later than the move, never earlier.
    if previous is not None and previous != version_id and \
            storage.exists(storage.join(version_dir(root, previous), MANIFEST_FILENAME)):
        _record_if_room(root, previous, by=version_id, now=_utc_now(now))


def _record_if_room(root: str, version_id: str, *, by: str, now: datetime.datetime) -> datetime.datetime | None:
    """``record_superseded``, or None when the disk is full: LATEST has moved already, so the job goes
    on, and the version stays (its clock starts when a later retention can record it)."""
    try:
        return record_superseded(root, version_id, by=by, now=now)
    except DiskFullError as err:
        _LOG.warning("retention: cannot record when version %s stopped being LATEST (%s); it is kept", version_id, err)
        return None


def apply_retention(root: str, keep_versions: int, *,
                    min_version_age: datetime.timedelta = DEFAULT_MIN_VERSION_AGE,
                    now: datetime.datetime | None = None) -> list[str]:
    """Deletes complete versions beyond the newest ``keep_versions`` that stopped being LATEST at
    least ``min_version_age`` before ``now``, and abandoned unfinished ones.

    Never deletes LATEST's version, nor anything newer than it (a run may be writing it). A
    version beyond ``keep_versions`` that is younger than ``min_version_age`` is kept, so a reader
    that opened it before LATEST moved on finishes its epoch; one without a ``superseded.json``
    gets one (its clock starts ``now``). ``min_version_age`` 0 deletes at once. A complete version
    loses its manifest first, so a half-deleted version never looks complete. Temporary pointer
    files left by a run killed while moving LATEST are removed too.

    Args:
        root: the dataset root.
        keep_versions: complete versions to keep at any age (LATEST among them), at least 1.
        min_version_age: how long a version is kept after it stopped being LATEST.
        now: the time to measure ages at (default: the clock).

    Returns:
        The ids deleted, oldest first.
    """
    if keep_versions < 1:
        raise RefreshError(f"keep_versions must be >= 1, got {keep_versions}")
    if min_version_age < datetime.timedelta(0):
        raise RefreshError(f"min_version_age must be >= 0, got {min_version_age}")
    latest = read_latest(root)
    if latest is None:
        return []
    moment = _utc_now(now)
    listing = list_versions(root)
    published = [v for v in listing.complete if v <= latest]
    doomed = {v for v in listing.incomplete if v < latest}
    for version_id in published[:-keep_versions]:
        if version_id == latest:
            continue
        if min_version_age:
            stopped = superseded_at(root, version_id) or _record_if_room(root, version_id, by=latest, now=moment)
            if stopped is None:
                continue  # no record could be written (disk full): kept, its clock not started
            if moment - stopped < min_version_age:
                _LOG.info("retention: kept version %s of %s: not LATEST since %s, less than %s ago",
                          version_id, root, stopped.isoformat(timespec="seconds"), format_duration(min_version_age))
                continue
        doomed.add(version_id)
    for version_id in sorted(doomed):
        directory = version_dir(root, version_id)
        storage.delete_if_exists([storage.join(directory, MANIFEST_FILENAME)])
        storage.delete_tree(directory)
        _LOG.info("retention: deleted version %s of %s", version_id, root)
    # storage.write_bytes_atomic writes LATEST as "LATEST.tmp-<hex>" and renames it.
    stale_pointers = storage.list_files(storage.join(root, LATEST_FILENAME) + ".tmp-*")
    storage.delete_if_exists([path for path, _ in stale_pointers])
    return sorted(doomed)


def publish_version(_manifest: Manifest, *, root: str, version_id: str, keep_versions: int,
                    min_version_age: datetime.timedelta = DEFAULT_MIN_VERSION_AGE,
                    drift: DriftCheck | None = None) -> str:
    """The pipeline's last step (runs on a worker): check drift against LATEST (``drift``: recorded in the
    version's ``drift.json``), then move LATEST and apply retention, unless the check holds the version:
    then LATEST stays and the job reads the record to fail (``DriftHeldError``). Returns the id."""
    record = check_drift(root, version_id, drift) if drift is not None else None
    if record is not None and record.held:
        return version_id
    commit_version(root, version_id)
    apply_retention(root, keep_versions, min_version_age=min_version_age)
    return version_id
