"""Retention of a versioned root: which versions stay, and deleting the others without breaking what is shared.

A version's directory may hold files that newer versions list (``ShardInfo.stored_in``), so retention retires a
version (its manifest goes first: it never looks complete again), then deletes only the files of its directory that
no kept version lists; the rest stay in a *retired* directory (it holds ``retired.json``) until no kept version
lists them, then the directory goes. Invariant: every file a kept version lists exists, whenever a run is killed.
Layout, and why a minimum age: docs/operations.md#storage.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from collections.abc import Iterable, Mapping, Sequence

from beam_tfrecord import storage
from beam_tfrecord.core.durations import format_duration
from beam_tfrecord.core.manifest import MANIFEST_FILENAME
from beam_tfrecord.dataset import LATEST_FILENAME, VERSION_ID_PATTERN, VERSIONS_DIRNAME, read_latest, version_dir
from beam_tfrecord.errors import DiskFullError, ManifestError, RefreshError
from beam_tfrecord.versions.locations import key_file_name

_LOG = logging.getLogger(__name__)
DEFAULT_KEEP_VERSIONS = 3
DEFAULT_MIN_VERSION_AGE = datetime.timedelta(hours=24)  # a version is kept this long after it stops being LATEST
SUPERSEDED_FILENAME = "superseded.json"  # in a version's directory: when (and by which version) it stopped being LATEST
RETIRED_FILENAME = "retired.json"  # in a retired version's directory: it is no version, only files others list
# The fields of a manifest's shard entry that name a file of the shard (in ``ROOT/versions/<stored_in>/`` when it
# has ``stored_in``): what ``dataset.shard_file_path`` is asked for. A new per-shard file is one more name here.
# Each entry of a shard's ``columns`` (``core.columns``) names one more file, with its own ``stored_in``.
SHARD_FILE_FIELDS = ("filename", "dali_index")
COLUMNS_FIELD = "columns"


@dataclasses.dataclass(frozen=True)
class VersionListing:
    """What ``ROOT/versions/`` holds. Ids sort oldest first.

    Attributes:
        complete: versions whose manifest exists.
        incomplete: versions with files but no manifest (being written, or abandoned by a crash).
        retired: directories of versions retention retired that still hold files kept versions list; no version.
    """

    complete: tuple[str, ...]
    incomplete: tuple[str, ...]
    retired: tuple[str, ...] = ()


def _version_files(root: str) -> dict[str, dict[str, int]]:
    """Every version directory's files (path relative to it -> size in bytes), from one listing."""
    prefix = storage.join(root, VERSIONS_DIRNAME).rstrip("/") + "/"
    found: dict[str, dict[str, int]] = {}
    for path, size in storage.list_files(prefix + "**"):
        relative = path[len(prefix):] if path.startswith(prefix) else ""
        version_id, _, rest = relative.partition("/")
        if VERSION_ID_PATTERN.fullmatch(version_id) and rest:
            found.setdefault(version_id, {})[rest] = size
    return found


def _listing(files: Mapping[str, Mapping[str, int]]) -> VersionListing:
    def having(name: str) -> set[str]:
        return {v for v, names in files.items() if name in names}

    complete, retired = having(MANIFEST_FILENAME), having(RETIRED_FILENAME) - having(MANIFEST_FILENAME)
    return VersionListing(complete=tuple(sorted(complete)), incomplete=tuple(sorted(set(files) - complete - retired)),
                          retired=tuple(sorted(retired)))


def list_versions(root: str) -> VersionListing:
    """The complete, incomplete and retired versions under ``root`` (one listing of ``ROOT/versions/``)."""
    return _listing(_version_files(root))


def utc_now(now: datetime.datetime | None) -> datetime.datetime:
    """``now`` (default: the clock) in UTC."""
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
    moment = utc_now(now)
    record = {"superseded_at": moment.isoformat(timespec="milliseconds"), "superseded_by": by}
    storage.write_bytes_atomic(storage.join(version_dir(root, version_id), SUPERSEDED_FILENAME),
                               (json.dumps(record, sort_keys=True) + "\n").encode())
    return moment


def record_superseded_if_room(root: str, version_id: str, *, by: str,
                              now: datetime.datetime) -> datetime.datetime | None:
    """``record_superseded``, or None when the disk is full: LATEST has moved already, so the job goes
    on, and the version stays (its clock starts when a later retention can record it)."""
    try:
        return record_superseded(root, version_id, by=by, now=now)
    except DiskFullError as err:
        _LOG.warning("retention: cannot record when version %s stopped being LATEST (%s); it is kept", version_id, err)
        return None


def shared_files(manifest_json: bytes) -> dict[str, set[str]]:
    """The files a manifest lists in other versions' directories: version id -> file names in it.

    Reads only the JSON (no manifest check, no deletion vector decoded: a manifest of 100,000 shards costs its
    parse): what it names is only ever kept, never deleted, so a hostile name cannot make retention delete.

    Raises:
        ManifestError: the bytes do not have a manifest's shape (then what it lists is unknown).
    """
    try:
        splits = json.loads(manifest_json)["splits"]
        entries = [shard for split in splits for shard in split["shards"]]
        if not all(isinstance(shard, dict) for shard in entries):
            raise TypeError("a shard entry is not a JSON object")
    except (ValueError, KeyError, TypeError) as err:
        raise ManifestError(f"not a manifest's JSON ({type(err).__name__}: {err})") from err
    shared: dict[str, set[str]] = {}
    for shard in entries:
        stored_in = shard.get("stored_in")
        if isinstance(stored_in, str):
            shared.setdefault(stored_in, set()).update(
                name for name in (shard.get(field) for field in SHARD_FILE_FIELDS) if isinstance(name, str))
            if isinstance(shard.get("filename"), str):  # its key file, where the version that wrote it has one
                shared[stored_in].add(key_file_name(shard["filename"]))
        columns = shard.get(COLUMNS_FIELD)
        for column in columns if isinstance(columns, list) else ():
            if isinstance(column, dict) and isinstance(column.get("stored_in"), str) \
                    and isinstance(column.get("filename"), str):
                shared.setdefault(column["stored_in"], set()).add(column["filename"])
    return shared


def _shared_by(root: str, kept: Iterable[str]) -> dict[str, set[str]] | None:
    """What the ``kept`` versions list in other versions' directories, or None when a manifest of theirs
    cannot be read (logged): then every file of a retired version stays until a later run can read them."""
    shared: dict[str, set[str]] = {}
    for version_id in kept:
        path = storage.join(version_dir(root, version_id), MANIFEST_FILENAME)
        try:
            for stored_in, names in shared_files(storage.read_bytes(path)).items():
                shared.setdefault(stored_in, set()).update(names)
        except (ManifestError, FileNotFoundError) as err:
            _LOG.warning("retention: cannot read which files kept version %s lists (%s: %s); no file another "
                         "version may list is deleted in this run", version_id, path, err)
            return None
    return shared


def _expired(root: str, candidates: Sequence[str], *, latest: str, min_version_age: datetime.timedelta,
             moment: datetime.datetime) -> set[str]:
    """The ``candidates`` (complete versions beyond the newest kept) that stopped being LATEST at least
    ``min_version_age`` before ``moment``; one without a record gets one (its clock starts ``moment``)."""
    expired = set()
    for version_id in candidates:
        if version_id == latest:
            continue
        if min_version_age:
            stopped = superseded_at(root, version_id) or record_superseded_if_room(root, version_id, by=latest,
                                                                                   now=moment)
            if stopped is None:
                continue  # no record could be written (disk full): kept, its clock not started
            if moment - stopped < min_version_age:
                _LOG.info("retention: kept version %s of %s: not LATEST since %s, less than %s ago",
                          version_id, root, stopped.isoformat(timespec="seconds"), format_duration(min_version_age))
                continue
        expired.add(version_id)
    return expired


def _sweep(root: str, version_id: str, files: Mapping[str, int], *, listed: set[str] | None,
           latest: str, moment: datetime.datetime) -> None:
    """Deletes every file of a version without a manifest (retired, or abandoned unfinished) that no kept version
    lists (``listed``; None: unknown, all stay). A directory left with none goes whole; else it keeps them and
    ``retired.json``, which a run killed before writing it leaves for the next to write."""
    directory = version_dir(root, version_id)
    kept = {name for name in files if listed is None or name in listed} - {MANIFEST_FILENAME, RETIRED_FILENAME}
    if not kept:
        storage.delete_tree(directory)
        _LOG.info("retention: deleted version %s of %s (%d bytes)", version_id, root, sum(files.values()))
        return
    if RETIRED_FILENAME not in files:
        record = {"retired_at": moment.isoformat(timespec="milliseconds"), "latest": latest,
                  "why": "newer versions list files of this directory; deleted once no kept version lists them"}
        try:  # one call (its presence is what counts), so even runs killed at their first call each make progress
            storage.create_if_absent(storage.join(directory, RETIRED_FILENAME),
                                     (json.dumps(record, sort_keys=True) + "\n").encode())
        except DiskFullError as err:  # it looks unfinished (older than LATEST) until a later run writes it
            _LOG.warning("retention: cannot mark version %s of %s retired (%s)", version_id, root, err)
    doomed = sorted(set(files) - kept - {MANIFEST_FILENAME, RETIRED_FILENAME})
    storage.delete_if_exists([storage.join(directory, name) for name in doomed])
    _LOG.info("retention: version %s of %s retired: %d files (%d bytes) deleted, %d files (%d bytes) kept: newer "
              "versions list them", version_id, root, len(doomed), sum(files[n] for n in doomed), len(kept),
              sum(files[n] for n in kept))


def apply_retention(root: str, keep_versions: int, *,
                    min_version_age: datetime.timedelta = DEFAULT_MIN_VERSION_AGE,
                    now: datetime.datetime | None = None) -> list[str]:
    """Retires complete versions beyond the newest ``keep_versions`` that stopped being LATEST at least
    ``min_version_age`` before ``now``, and abandoned unfinished ones; deletes their files no kept version lists.

    Kept: the newest ``keep_versions`` complete versions up to LATEST, those younger than ``min_version_age`` (so a
    reader that opened one before LATEST moved on finishes its epoch; one without a ``superseded.json`` gets one: its
    clock starts ``now``), and every version newer than LATEST (a run may be writing it: an unfinished one lists only
    files LATEST lists or holds, as a refresh builds on LATEST). A retired version loses its manifest first, then the
    files of its directory no kept version's manifest lists (``stored_in``); a directory whose files none lists goes
    whole. Retired directories are swept again on every run. ``min_version_age`` 0 retires at once. Temporary pointer
    files left by a run killed while moving LATEST are removed too. Runs of one root must not overlap.

    Args:
        root: the dataset root.
        keep_versions: complete versions to keep at any age (LATEST among them), at least 1.
        min_version_age: how long a version is kept after it stopped being LATEST.
        now: the time to measure ages at (default: the clock).

    Returns:
        The ids of the versions retired or deleted in this run, oldest first.
    """
    if keep_versions < 1:
        raise RefreshError(f"keep_versions must be >= 1, got {keep_versions}")
    if min_version_age < datetime.timedelta(0):
        raise RefreshError(f"min_version_age must be >= 0, got {min_version_age}")
    latest = read_latest(root)
    if latest is None:
        return []
    moment = utc_now(now)
    files = _version_files(root)
    listing = _listing(files)
    published = [v for v in listing.complete if v <= latest]
    doomed = {v for v in listing.incomplete if v < latest} | _expired(
        root, published[:-keep_versions], latest=latest, min_version_age=min_version_age, moment=moment)
    if doomed or listing.retired:
        shared = _shared_by(root, [v for v in listing.complete if v not in doomed])
        # Every manifest first: a file of v1 that only v2 lists goes while v2 is retired too, never while v2 looks
        # complete.
        storage.delete_if_exists([storage.join(version_dir(root, v), MANIFEST_FILENAME)
                                  for v in sorted(doomed) if MANIFEST_FILENAME in files[v]])
        for version_id in sorted(doomed | set(listing.retired)):
            _sweep(root, version_id, files[version_id], latest=latest, moment=moment,
                   listed=None if shared is None else shared.get(version_id, set()))
    # storage.write_bytes_atomic writes LATEST as "LATEST.tmp-<hex>" and renames it.
    stale_pointers = storage.list_files(storage.join(root, LATEST_FILENAME) + ".tmp-*")
    storage.delete_if_exists([path for path, _ in stale_pointers])
    return sorted(doomed)


__all__ = ["DEFAULT_KEEP_VERSIONS", "DEFAULT_MIN_VERSION_AGE", "RETIRED_FILENAME", "SHARD_FILE_FIELDS",
           "SUPERSEDED_FILENAME", "VersionListing", "apply_retention", "list_versions", "record_superseded",
           "record_superseded_if_room", "shared_files", "superseded_at", "utc_now"]
