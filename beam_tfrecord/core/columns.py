"""Column files: features added to a published version without rewriting its shards (manifest format 3).

A ``ColumnFile`` holds, for one base shard, the added features of the same records in the same order (row i = file
record i of the shard, deleted positions included), in the shard's format and compression, always under
``columns/`` so no glob over a version folder matches it. Invariant: a stored feature name is held by one file of a
shard at most. A manifest is untrusted: ``check_columns_json`` refuses any other shape with a ``ManifestError`` naming
the field. See docs/manifest.md#feature-columns-format-3 and docs/columns.md.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from beam_tfrecord.core.manifest_checks import MAX_NAME_CHARS, is_crc32c, is_version_id
from beam_tfrecord.errors import ManifestError

COLUMNS_DIRNAME = "columns"
COLUMNS_MANIFEST_VERSION = 3  # the manifest format that introduced column files, renames and drops
_COLUMN_NAME = re.compile(COLUMNS_DIRNAME + r"/[A-Za-z0-9_.\-]+")
_COLUMN_FIELDS = {"filename", "features", "num_records", "num_bytes", "crc32c"}
_OPTIONAL_COLUMN_FIELDS = {"stored_in"}
_fail = ManifestError.field


@dataclasses.dataclass(frozen=True)
class ColumnFile:
    """One file of features added to one base shard, aligned record by record with it.

    Attributes:
        filename: relative to its version's directory, always ``columns/<name>`` (``column_filename``).
        features: the PHYSICAL names of the features it holds (``Manifest.physical_names``), sorted, at least one.
        num_records: its records: the base shard's ``num_records`` (deleted positions included).
        num_bytes: its size as stored.
        crc32c: CRC32C of the file as stored, 8 lowercase hex digits (as ``ShardInfo.crc32c``).
        stored_in: the id of the version of the same root whose directory holds it, or None (absent from the JSON)
            when it is in the manifest's own directory (as ``ShardInfo.stored_in``).
    """

    filename: str
    features: tuple[str, ...]
    num_records: int
    num_bytes: int
    crc32c: str
    stored_in: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", tuple(sorted(self.features)))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"filename": self.filename, "features": list(self.features),
                                "num_records": self.num_records, "num_bytes": self.num_bytes, "crc32c": self.crc32c}
        if self.stored_in is not None:
            data["stored_in"] = self.stored_in
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ColumnFile":
        """A column entry ``check_columns_json`` has checked."""
        return cls(data["filename"], tuple(data["features"]), data["num_records"], data["num_bytes"],
                   data["crc32c"], data.get("stored_in"))


def column_filename(base_version: str, shard_filename: str) -> str:
    """The name of the column file an add writes for base shard ``shard_filename`` stored in version
    ``base_version``: two base shards of one name in two versions never collide, and the name keeps the shard's
    format and compression suffix."""
    return f"{COLUMNS_DIRNAME}/{base_version}-{shard_filename}"


def _check_column(entry: Any, path: str, index: int, *, records: int, schema_names: frozenset[str] | None,
                  seen: dict[str, int]) -> None:
    """One column entry of a shard of ``records`` records; ``seen`` maps the features of the shard's earlier
    column entries to their index (a feature is held by one file of a shard at most)."""
    if not isinstance(entry, Mapping) or not _COLUMN_FIELDS <= entry.keys() <= _COLUMN_FIELDS | _OPTIONAL_COLUMN_FIELDS:
        raise _fail(path, f"a column object of the fields {sorted(_COLUMN_FIELDS)} (and optionally "
                          f"{sorted(_OPTIONAL_COLUMN_FIELDS)})", sorted(entry) if isinstance(entry, Mapping) else entry)
    filename = entry["filename"]
    if not (isinstance(filename, str) and len(filename) <= MAX_NAME_CHARS and _COLUMN_NAME.fullmatch(filename)
            and ".." not in filename):
        raise _fail(f"{path}.filename", f"a plain file name under '{COLUMNS_DIRNAME}/' ('{COLUMNS_DIRNAME}/' + "
                                        "letters, digits, '_', '-', '.'; no '..', absolute path or URL)", filename)
    features = entry["features"]
    if not isinstance(features, list) or not features or not all(isinstance(f, str) and f for f in features) \
            or features != sorted(set(features)):
        raise _fail(f"{path}.features", "a non-empty sorted list of distinct feature names", features)
    for feature in features:
        if schema_names is not None and feature not in schema_names:
            raise _fail(f"{path}.features", f"physical names of features of the schema or dropped_features "
                                            f"({sorted(schema_names)[:20]})", feature)
        if feature in seen:
            raise _fail(f"{path}.features", f"features no other column file of the shard holds (columns"
                                            f"[{seen[feature]}] holds {feature!r})", feature)
        seen[feature] = index
    if type(entry["num_records"]) is not int or entry["num_records"] != records:
        raise _fail(f"{path}.num_records", f"{records} (the base shard's num_records: one row per record)",
                    entry["num_records"])
    if type(entry["num_bytes"]) is not int or entry["num_bytes"] < 0:
        raise _fail(f"{path}.num_bytes", "an integer >= 0", entry["num_bytes"])
    if not is_crc32c(entry["crc32c"]):
        raise _fail(f"{path}.crc32c", "8 lowercase hex digits", entry["crc32c"])
    if "stored_in" in entry and not (isinstance(entry["stored_in"], str) and is_version_id(entry["stored_in"])):
        raise _fail(f"{path}.stored_in", "the id of a version of this root (YYYYMMDDTHHMMSS.mmmZ-xxxxxx; the file is "
                                         "ROOT/versions/<id>/<filename>)", entry["stored_in"])


def _schema_names(data: Mapping[str, Any]) -> set[str] | None:
    """The logical feature names of the manifest's JSON schema, or None when it is malformed (``Schema.from_json``
    then refuses it)."""
    schema = data.get("schema")
    if not isinstance(schema, Mapping) or not isinstance(schema.get("features"), Mapping) \
            or not isinstance(schema.get("sequence_features", {}), Mapping):
        return None
    return set(schema["features"]) | set(schema.get("sequence_features", {}))


def check_renames_json(data: Mapping[str, Any]) -> tuple[dict[str, str], tuple[str, ...]]:
    """The manifest's ``physical_names`` and ``dropped_features``, checked: each renamed feature is in the schema
    under a new name, the physical names of the schema's features are distinct, and a dropped name is none of them.

    Raises:
        ManifestError: naming the field.
    """
    version: int = data["version"]  # checked before: one of READABLE_MANIFEST_VERSIONS
    for key in ("physical_names", "dropped_features"):
        if key in data and version < COLUMNS_MANIFEST_VERSION:
            raise _fail(key, f"no such field in a manifest of format version {version}", data[key])
    names = _schema_names(data) or set()
    renamed = data.get("physical_names", {})
    if not isinstance(renamed, Mapping) or (not renamed and "physical_names" in data) \
            or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in renamed.items()):
        raise _fail("physical_names", "a non-empty object of logical feature name -> stored name (strings)", renamed)
    physical: dict[str, str] = {}
    for logical in sorted(names):
        stored = renamed.get(logical, logical)
        if stored in physical:
            raise _fail(f"physical_names.{stored if logical in renamed else physical[stored]}",
                        f"a stored name no other feature has ({physical[stored]!r} and {logical!r} are both stored "
                        f"as {stored!r})", stored)
        physical[stored] = logical
    for logical, stored in renamed.items():
        if logical not in names or stored == logical:
            raise _fail(f"physical_names.{logical}", "a feature of the schema stored under another name", stored)
    dropped = data.get("dropped_features", [])
    if not isinstance(dropped, list) or (not dropped and "dropped_features" in data) \
            or not all(isinstance(name, str) and name for name in dropped) or dropped != sorted(set(dropped)):
        raise _fail("dropped_features", "a non-empty sorted list of distinct stored feature names", dropped)
    for name in dropped:
        if name in physical:
            raise _fail("dropped_features", f"stored names no feature of the schema has ({physical[name]!r} is "
                                            f"stored as {name!r})", name)
    return dict(renamed), tuple(dropped)


def check_columns_json(data: Mapping[str, Any]) -> dict[tuple[int, int], tuple[ColumnFile, ...]]:
    """Checks every shard's ``columns`` (after ``check_manifest_json`` checked the shards themselves and
    ``check_renames_json`` the names); returns the column files by (split, shard) position.

    Raises:
        ManifestError: naming the first column field that is wrong, e.g. ``splits[0].shards[3].columns[0].crc32c``.
    """
    renamed, dropped = check_renames_json(data)
    version: int = data["version"]
    names = _schema_names(data)
    stored = None if names is None else frozenset({renamed.get(n, n) for n in names} | set(dropped))
    parsed: dict[tuple[int, int], tuple[ColumnFile, ...]] = {}
    for i, split in enumerate(data["splits"]):
        for j, shard in enumerate(split["shards"]):
            if "columns" not in shard:
                continue
            path = f"splits[{i}].shards[{j}].columns"
            entries = shard["columns"]
            if version < COLUMNS_MANIFEST_VERSION or data.get("shard_naming") is not None:
                why = f"no such field in a manifest of format version {version}" \
                    if version < COLUMNS_MANIFEST_VERSION else \
                    "no column files in a dataset under a Beam prefix (it has no versions)"
                raise _fail(path, why, entries)
            if not isinstance(entries, list) or not entries:
                raise _fail(path, "a non-empty list of column files", entries)
            seen: dict[str, int] = {}
            for k, entry in enumerate(entries):
                _check_column(entry, f"{path}[{k}]", k, records=shard["num_records"], schema_names=stored, seen=seen)
            parsed[(i, j)] = tuple(ColumnFile.from_json(entry) for entry in entries)
    return parsed


__all__ = ["COLUMNS_DIRNAME", "COLUMNS_MANIFEST_VERSION", "ColumnFile", "check_columns_json", "check_renames_json",
           "column_filename"]
