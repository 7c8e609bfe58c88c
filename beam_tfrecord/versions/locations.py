"""Record locations: each live record of a version by key (the version that wrote its shard, the shard, the position).

Every version a refresh or a compaction writes has ``record_locations.json``, written before its manifest. The next
refresh turns removed and changed keys into deletion-vector positions with it, and reads the records of a split it
rewrites with their keys. Read back it is untrusted input (``InputIndexError``). A version without one (built
before, or with dropped duplicates: which keys were dropped is not recorded) lends nothing: the next refresh
rewrites every split. See docs/operations.md#storage.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence

from beam_tfrecord import storage
from beam_tfrecord.core.framing import frame
from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.core.manifest import Manifest, ShardInfo
from beam_tfrecord.core.naming import VERSION_ID_PATTERN
from beam_tfrecord.errors import InputIndexError
from beam_tfrecord.versions.input_index import parse_versioned_json

RECORD_LOCATIONS_FILENAME = "record_locations.json"
KEYS_DIRNAME = "keys"  # ROOT/versions/<id>/keys/<shard filename>.keys (``key_file_name``)
_FORMAT = "beam-tfrecord-record-locations"
_VERSION = 1


@dataclasses.dataclass(frozen=True, order=True)
class RecordLocation:
    """Where one record is.

    Attributes:
        version: the id of the version whose directory holds the shard (the one that wrote it).
        filename: the shard's file name.
        position: the record's position in the shard, from 0.
    """

    version: str
    filename: str
    position: int

    @property
    def shard(self) -> tuple[str, str]:
        return self.version, self.filename


def shard_key(shard: ShardInfo, version_id: str) -> tuple[str, str]:
    """``(version that holds the file, file name)`` of a shard listed by version ``version_id``'s manifest."""
    return shard.stored_in or version_id, shard.filename


@dataclasses.dataclass(frozen=True)
class RecordLocations:
    """Every live record of one version, by key.

    Attributes:
        by_key: key -> location.
    """

    by_key: Mapping[str, RecordLocation]

    def to_bytes(self) -> bytes:
        shards = sorted({location.shard for location in self.by_key.values()})
        numbers = {shard: number for number, shard in enumerate(shards)}
        rows = [[key, numbers[loc.shard], loc.position] for key, loc in sorted(self.by_key.items())]
        return json.dumps({"format": _FORMAT, "version": _VERSION, "shards": [list(s) for s in shards],
                           "records": rows}, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, *, path: str) -> "RecordLocations":
        """Parses a file read from storage; ``InputIndexError`` naming ``path`` on anything unexpected."""
        parsed = parse_versioned_json(data, path=path, file_format=_FORMAT, version=_VERSION)
        shards, rows = parsed.get("shards"), parsed.get("records")
        if not isinstance(shards, list) or not isinstance(rows, list):
            raise InputIndexError(path, "expected 'shards' and 'records' lists")
        for number, shard in enumerate(shards):
            if not (isinstance(shard, list) and len(shard) == 2 and all(isinstance(v, str) for v in shard)
                    and VERSION_ID_PATTERN.fullmatch(shard[0])):
                raise InputIndexError(path, f"shard {number}: expected [version id, file name], got {shard!r:.200}")
        by_key: dict[str, RecordLocation] = {}
        taken: set[tuple[int, int]] = set()
        for number, row in enumerate(rows):
            if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)
                    and all(type(v) is int for v in row[1:]) and 0 <= row[1] < len(shards) and row[2] >= 0):
                raise InputIndexError(path, f"record {number}: expected [key, shard number, position], "
                                            f"got {row!r:.200}")
            if row[0] in by_key or (row[1], row[2]) in taken:
                raise InputIndexError(path, f"record {number}: key {row[0]!r} or its place is listed twice")
            taken.add((row[1], row[2]))
            by_key[row[0]] = RecordLocation(shards[row[1]][0], shards[row[1]][1], row[2])
        return cls(by_key)

    def check_against(self, manifest: Manifest, version_id: str, *, path: str) -> None:
        """Raises ``InputIndexError`` unless the locations are exactly the manifest's live records."""
        live = {shard_key(shard, version_id): shard for shard in manifest.shards}
        if len(self.by_key) != manifest.num_written:
            raise InputIndexError(path, f"{len(self.by_key)} records located; the manifest lists "
                                        f"{manifest.num_written} live ones")
        for key, location in self.by_key.items():
            shard = live.get(location.shard)
            if shard is None or location.position >= shard.num_records or (
                    shard.deletions is not None and location.position in shard.deletions.positions):
                raise InputIndexError(path, f"key {key!r}: {location} is not a live record of the manifest")


def written_locations(version_id: str, written: Manifest, keys: Iterable[str], rejected: Iterable[str]
                      ) -> dict[str, RecordLocation] | None:
    """The locations of the records a writer just wrote into version ``version_id`` (its own shards in
    ``written``), from the keys it was given: the shards tile the key-hash space in split order and hold their
    records in hash order. None when that cannot place every record (equal hashes, records dropped as
    duplicates, or counts that disagree)."""
    placed = sorted((key_hash(key, written.salt), key) for key in set(keys) - set(rejected))
    if written.num_dropped or len(placed) != sum(s.num_records for s in written.shards if s.stored_in is None):
        return None
    if any(placed[i][0] == placed[i - 1][0] for i in range(1, len(placed))):
        return None
    found: dict[str, RecordLocation] = {}
    start = 0
    for split in written.splits:
        for shard in split.shards:
            if shard.stored_in is not None:
                continue
            for position, (_, key) in enumerate(placed[start:start + shard.num_records]):
                found[key] = RecordLocation(version_id, shard.filename, position)
            start += shard.num_records
    return found


def write_record_locations(directory: str, locations: RecordLocations) -> None:
    storage.write_bytes_atomic(storage.join(directory, RECORD_LOCATIONS_FILENAME), locations.to_bytes())


def key_file_name(shard_filename: str) -> str:
    """A shard's key file, relative to the directory of the version that wrote the shard: its records' sample keys
    in its record order (TFRecord framing of each key's UTF-8 bytes), so an add finds a shard's records by key
    reading that shard's keys alone (``versions.add_features``)."""
    return f"{KEYS_DIRNAME}/{shard_filename}.keys"


def write_key_files(directory: str, version_id: str, locations: RecordLocations) -> None:
    """The key file of each shard version ``version_id`` wrote (its records in ``locations``), in ``directory``."""
    own: dict[str, dict[int, str]] = {}
    for key, location in locations.by_key.items():
        if location.version == version_id:
            own.setdefault(location.filename, {})[location.position] = key
    for filename, keys in own.items():
        framed = b"".join(frame(keys[position].encode("utf-8")) for position in sorted(keys))
        storage.write_bytes_atomic(storage.join(directory, key_file_name(filename)), framed)


def read_record_locations(directory: str) -> RecordLocations | None:
    """The locations of the version at ``directory``; None when it has none (it lends nothing)."""
    path = storage.join(directory, RECORD_LOCATIONS_FILENAME)
    data = storage.read_bytes_or_none(path)
    return None if data is None else RecordLocations.from_bytes(data, path=path)


def keys_by_position(locations: Mapping[str, RecordLocation], shards: Sequence[tuple[str, str]]
                     ) -> dict[tuple[str, str], dict[int, str]]:
    """For each of ``shards``, position -> key of its located records."""
    wanted: dict[tuple[str, str], dict[int, str]] = {shard: {} for shard in shards}
    for key, location in locations.items():
        if location.shard in wanted:
            wanted[location.shard][location.position] = key
    return wanted
