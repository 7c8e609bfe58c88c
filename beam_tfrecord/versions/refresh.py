"""Scheduled refresh: versioned dataset roots, input fingerprints, the LATEST pointer, retention.

One refresh: fingerprint the inputs (path, size, update time of every file, as storage lists them) ->
skip if LATEST was built from the same -> else build ``ROOT/versions/<id>/`` -> replace LATEST in one
step -> retention (``versions.retention``, its names importable from here too). Invariant: LATEST always
names a complete version (or there is none). Runs of one root must not overlap.
Layout, and why a minimum age: docs/operations.md#storage.
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

from beam_tfrecord import storage
from beam_tfrecord.core.manifest import MANIFEST_FILENAME, Manifest
from beam_tfrecord.dataset import (
    LATEST_FILENAME,
    VERSION_ID_PATTERN,
    load_manifest,
    read_latest,
    version_dir,
)
from beam_tfrecord.errors import LatestPointerError, RefreshError
from beam_tfrecord.interop.tfds import DATASET_INFO_FILENAME, write_tfds_files
from beam_tfrecord.storage import StoredFile
from beam_tfrecord.versions.drift_gate import DriftCheck, check_drift
from beam_tfrecord.versions.retention import (  # retention's names stay importable from here
    DEFAULT_KEEP_VERSIONS,
    DEFAULT_MIN_VERSION_AGE,
    RETIRED_FILENAME,
    SUPERSEDED_FILENAME,
    VersionListing,
    apply_retention,
    list_versions,
    record_superseded,
    superseded_at,
)
from beam_tfrecord.versions.retention import record_superseded_if_room as _record_if_room
from beam_tfrecord.versions.retention import utc_now as _utc_now

_LOG = logging.getLogger(__name__)
FINGERPRINT_KEY = "input_fingerprint"  # the key of the fingerprint in the manifest's metadata


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


def fingerprint_listed(patterns: Sequence[str], listed: Iterable[StoredFile]) -> InputFingerprint:
    """``fingerprint_inputs(patterns)`` from a listing the caller already made, without listing again.

    Args:
        patterns: globs with wildcards (``paths.glob_regex``), not ending in ``/``.
        listed: every file the patterns match, and any others (a folder's whole listing): the ones that
            match and could be sized count.
    """
    regexes = [storage.glob_regex(pattern) for pattern in patterns]
    return InputFingerprint.of([InputFile(found.path, found.size_bytes, found.updated_seconds) for found in listed
                                if found.size_bytes >= 0 and any(regex.fullmatch(found.path) for regex in regexes)])


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
    existing = [*listing.complete, *listing.incomplete, *listing.retired, *([latest] if latest else [])]
    version_id = new_version_id(now, after=existing)
    return RefreshPlan(root, RefreshAction.BUILD, version_id, latest, fingerprint,
                       f"{why}: building version {version_id} from {fingerprint.num_files} files")


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


__all__ = [
    "DEFAULT_KEEP_VERSIONS", "DEFAULT_MIN_VERSION_AGE", "FINGERPRINT_KEY", "RETIRED_FILENAME", "SUPERSEDED_FILENAME",
    "InputFile", "InputFingerprint", "RefreshAction", "RefreshPlan", "VersionListing", "apply_retention",
    "commit_version", "fingerprint_inputs", "list_input_files", "list_versions", "new_version_id", "plan_refresh",
    "publish_version", "record_superseded", "stored_fingerprint", "superseded_at",
]
