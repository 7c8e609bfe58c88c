"""The manifest: a versioned JSON file that describes (and, written last, publishes) a dataset.

A reader trusts only what a manifest lists. The format version is the constant
``MANIFEST_VERSION``, shared by writer and reader; a reader reads it and every earlier version
(``READABLE_MANIFEST_VERSIONS``), any other is a typed error. Version 2 added shared shards and deletion vectors,
3 column files, renames and drops (``core.columns``); a manifest is written as the lowest format that describes it
(``Manifest.version``, Delta's protocol rule). See docs/manifest.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
from collections.abc import Iterator, Mapping
from typing import Any

from beam_tfrecord.core.columns import COLUMNS_MANIFEST_VERSION, ColumnFile, check_columns_json
from beam_tfrecord.core.deletions import DeletionVector
from beam_tfrecord.core.file_format import DEFAULT_FILE_FORMAT, Compression, FileFormat
from beam_tfrecord.core.manifest_checks import (
    check_manifest_json,
    parse_file_format,
    parse_shard_naming,
    plain_file_name,
)
from beam_tfrecord.core.naming import PrefixShardNames
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.errors import ManifestError, ManifestVersionError, SchemaError, UnknownSplitError

MANIFEST_VERSION = 3
READABLE_MANIFEST_VERSIONS = (1, 2, 3)
_SHARED_MANIFEST_VERSION = 2  # the format that added stored_in and deletions: what a build without columns writes
MANIFEST_FILENAME = "manifest.json"
DEAD_LETTER_FILENAME = "dead_letters.jsonl"


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One written shard.

    Attributes:
        filename: file name, relative to the dataset directory.
        split: the split it belongs to.
        index: its index within the split.
        num_records: records in it.
        num_bytes: its size on storage (compressed, if compressed).
        num_record_bytes: uncompressed framed bytes (what the planner balances).
        crc32c: CRC32C of the file as stored, 8 hex digits. CRC32C rather than SHA-256: it is
            hardware-accelerated (~20x faster on every shard byte) and it is the checksum GCS keeps
            for every object, so a gs:// copy can be checked against its metadata.
        dali_index: the shard's NVIDIA DALI index file (``core.dali_index``), or None when the
            writer was not asked for one (then the field is left out of the JSON).
        stored_in: the id of the version of the same root whose directory holds the file (an earlier
            version that wrote it; ``ROOT/versions/<stored_in>/<filename>``), or None (absent from the
            JSON) when it is in the manifest's own directory.
        deletions: the records of the file this version no longer holds, or None (absent) when all are live.
            ``num_records`` always counts the file's records; ``num_live`` the ones a reader returns.
        columns: the files of features added to this shard later (``core.columns``), aligned record by record with
            it; empty (absent from the JSON) when it has none. The shard's own features are the schema's (by
            physical name) minus every feature one of them holds.
    """

    filename: str
    split: str
    index: int
    num_records: int
    num_bytes: int
    num_record_bytes: int
    crc32c: str
    dali_index: str | None = None
    stored_in: str | None = None
    deletions: DeletionVector | None = None
    columns: tuple[ColumnFile, ...] = ()

    @property
    def num_live(self) -> int:
        """Records a reader returns: the file's records but the deleted ones."""
        return self.num_records - (self.deletions.count if self.deletions is not None else 0)

    def live_runs(self) -> list[tuple[int, int]]:
        """``(start, length)`` runs of the live records, in file order (one run when none is deleted)."""
        if self.deletions is None:
            return [(0, self.num_records)] if self.num_records else []
        return self.deletions.live_runs(self.num_records)

    @property
    def self_contained(self) -> bool:
        """Whether the file is in the manifest's own directory, every record of it is live and it has no column
        file: what a reader of files alone reads completely."""
        return self.stored_in is None and self.deletions is None and not self.columns

    def column_for(self, feature: str) -> ColumnFile | None:
        """The column file holding the feature of PHYSICAL name ``feature``, or None when the shard itself holds
        it (or nothing does)."""
        for column in self.columns:
            if feature in column.features:
                return column
        return None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                                if field.name not in ("dali_index", "stored_in", "deletions", "columns")}
        # Each left out when unset: manifests without them stay as earlier versions wrote them.
        if self.dali_index is not None:
            data["dali_index"] = self.dali_index
        if self.stored_in is not None:
            data["stored_in"] = self.stored_in
        if self.deletions is not None:
            data["deletions"] = self.deletions.to_json()
        if self.columns:
            data["columns"] = [column.to_json() for column in self.columns]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, deletions: DeletionVector | None = None,
                  columns: tuple[ColumnFile, ...] = ()) -> "ShardInfo":
        """A shard entry of a manifest whose fields ``manifest_checks`` has checked (and whose deletion vector and
        column files it parsed: ``deletions``, ``columns``)."""
        return cls(data["filename"], data["split"], data["index"], data["num_records"], data["num_bytes"],
                   data["num_record_bytes"], data["crc32c"], data.get("dali_index"), data.get("stored_in"), deletions,
                   columns)


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """One split and its shards, in index order.

    Attributes:
        name: split name.
        shards: its shards.
        balance_spread: (largest - smallest) / largest uncompressed shard bytes, all shards but the
            smallest (see plan.balance_spread).
    """

    name: str
    shards: tuple[ShardInfo, ...]
    balance_spread: float = 0.0

    @property
    def num_records(self) -> int:
        """Live records: what a reader returns of the split."""
        return sum(s.num_live for s in self.shards)

    @property
    def num_bytes(self) -> int:
        return sum(s.num_bytes for s in self.shards)


@dataclasses.dataclass(frozen=True)
class Manifest:
    """Everything a reader, a verifier or a refresh needs to know about a dataset.

    Attributes:
        dataset_name: the name in the shard files.
        schema: the feature spec (logical names); the reader parses with it, under ``physical_names``. After an
            add it holds the added features too.
        splits: splits in order.
        compression: shard compression.
        created_at: ISO-8601 UTC time the manifest was written.
        tool_version: beam-tfrecord version that wrote it.
        command: the command line (or options) that produced it.
        num_inputs: samples that entered the writer; always num_written + num_rejected.
        num_rejected: samples sent to the dead-letter file instead.
        dead_letters: dead-letter file name (relative), or None when nothing was rejected.
        salt: the hash salt that ordered and split the records.
        sharding: the sharding options used (target, cap, count).
        metadata: free-form extra facts (e.g. input fingerprint for refreshes).
        run_id: the writing job's run id; publication executed again finds its own manifest by it.
        file_format: how records are stored in the shards (TFRecord, or ArrayRecord for random
            access). Absent from manifests written before ArrayRecord, which are TFRecord.
        shard_naming: for a dataset written under a Beam ``file_path_prefix``, how its shards are named
            (``PrefixShardNames``); the shards then sit in the folder that holds the manifest's folder
            (``beam_tfrecord.dataset``). None (absent from the JSON) for a dataset directory.
        num_dropped: inputs left out as exact duplicates (``duplicates=drop``); absent from the JSON when 0.
        statistics: the dataset's feature statistics file (``statistics.pb``: TFMD's
            ``DatasetFeatureStatisticsList``), or None (absent from the JSON) when it has none.
        version: manifest format version: the lowest that describes it (``__post_init__`` sets it): 3 with column
            files, renames or drops; 2 with shared shards or deletions, or unless read as 1.
        physical_names: logical feature name -> the name stored in the files, for renamed features only; empty
            (absent from the JSON) when none is. Every writer into a version with renames writes physical names.
        dropped_features: physical names still in files but not in the schema (dropped), sorted; empty (absent)
            when none is.
    """

    dataset_name: str
    schema: Schema
    splits: tuple[SplitInfo, ...]
    compression: Compression
    created_at: str
    tool_version: str
    command: tuple[str, ...]
    num_inputs: int
    num_rejected: int
    dead_letters: str | None
    salt: str
    sharding: Mapping[str, Any]
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    run_id: str | None = None
    file_format: FileFormat = DEFAULT_FILE_FORMAT
    shard_naming: PrefixShardNames | None = None
    statistics: str | None = None
    version: int = MANIFEST_VERSION
    num_dropped: int = 0
    physical_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    dropped_features: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "physical_names", dict(sorted(self.physical_names.items())))
        object.__setattr__(self, "dropped_features", tuple(sorted(self.dropped_features)))
        object.__setattr__(self, "version", self._lowest_version())
        if self.num_inputs != self.num_written + self.num_rejected + self.num_dropped:
            dropped = f" + dropped duplicates {self.num_dropped}" if self.num_dropped else ""
            raise ManifestError(f"num_inputs {self.num_inputs} != written {self.num_written} + rejected "
                                f"{self.num_rejected}{dropped}")

    def _lowest_version(self) -> int:
        """The lowest manifest format that describes this one (Delta's protocol rule)."""
        if self.physical_names or self.dropped_features or any(shard.columns for shard in self.shards):
            return COLUMNS_MANIFEST_VERSION
        if self.version == 1 and not any(shard.stored_in or shard.deletions for shard in self.shards):
            return 1
        return _SHARED_MANIFEST_VERSION

    def physical_name(self, feature: str) -> str:
        """The name the files hold logical feature ``feature`` under."""
        return self.physical_names.get(feature, feature)

    def column_features(self) -> frozenset[str]:
        """The physical names of the features held in column files (of any shard)."""
        return frozenset(name for shard in self.shards for column in shard.columns for name in column.features)

    @property
    def num_written(self) -> int:
        return sum(split.num_records for split in self.splits)

    def split(self, name: str) -> SplitInfo:
        for split in self.splits:
            if split.name == name:
                return split
        raise UnknownSplitError(name, [s.name for s in self.splits])

    @property
    def shards(self) -> tuple[ShardInfo, ...]:
        return tuple(shard for split in self.splits for shard in split.shards)

    @property
    def self_contained(self) -> bool:
        """Whether every shard is in the manifest's directory, whole, with no column file, and the files hold the
        schema's names: what a reader outside this project (TFDS, DALI, Ray, Croissant, a glob) can read. A version
        that is not is made so by ``compact``."""
        return not self.physical_names and not self.dropped_features and all(s.self_contained for s in self.shards)

    @property
    def num_deleted(self) -> int:
        """Records of the listed files that this version no longer holds."""
        return sum(shard.num_records - shard.num_live for shard in self.shards)

    def to_json(self) -> dict[str, Any]:
        data = self._json_fields()
        if self.file_format is not DEFAULT_FILE_FORMAT:
            # Only for another format: a manifest of the default format stays readable by versions
            # that predate the field, and an older reader refuses any other (unknown field) instead
            # of misreading its shards.
            data["file_format"] = self.file_format.value
        if self.shard_naming is not None:  # as file_format: absent for a dataset directory, refused by older readers
            data["shard_naming"] = self.shard_naming.to_json()
        if self.num_dropped:  # as file_format: absent unless duplicates were dropped
            data["num_dropped"] = self.num_dropped
        if self.statistics is not None:  # as shard_naming: absent without the file
            data["statistics"] = self.statistics
        if self.physical_names:  # format 3; absent without a rename
            data["physical_names"] = dict(self.physical_names)
        if self.dropped_features:  # format 3; absent without a drop
            data["dropped_features"] = list(self.dropped_features)
        return data

    def _json_fields(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "dataset_name": self.dataset_name,
            "created_at": self.created_at,
            "tool_version": self.tool_version,
            "command": list(self.command),
            "compression": self.compression.value or "NONE",
            "num_inputs": self.num_inputs,
            "num_written": self.num_written,
            "num_rejected": self.num_rejected,
            "dead_letters": self.dead_letters,
            "salt": self.salt,
            "sharding": dict(self.sharding),
            "schema": self.schema.to_json(),
            "splits": [
                {"name": s.name, "num_records": s.num_records, "num_bytes": s.num_bytes,
                 "balance_spread": s.balance_spread,
                 "shards": [shard.to_json() for shard in s.shards]}
                for s in self.splits
            ],
            "metadata": dict(self.metadata),
            "run_id": self.run_id,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Manifest":
        if not isinstance(data, Mapping):
            raise ManifestError(f"a manifest must be a JSON object, got {type(data).__name__}")
        if data.get("version") not in READABLE_MANIFEST_VERSIONS or type(data.get("version")) is not int:
            raise ManifestVersionError(data.get("version"), MANIFEST_VERSION)
        deletions = check_manifest_json(data)  # untrusted until every field is checked; no file is opened before
        columns = check_columns_json(data)
        try:
            splits = tuple(
                SplitInfo(name=s["name"], balance_spread=float(s.get("balance_spread", 0.0)),
                          shards=tuple(ShardInfo.from_json(shard, deletions=deletions.get((i, j)),
                                                           columns=columns.get((i, j), ()))
                                       for j, shard in enumerate(s["shards"])))
                for i, s in enumerate(data["splits"])
            )
            return cls(
                dataset_name=data["dataset_name"], schema=Schema.from_json(data["schema"]), splits=splits,
                compression=Compression.parse(data["compression"]), created_at=data["created_at"],
                tool_version=data["tool_version"], command=tuple(data["command"]),
                num_inputs=int(data["num_inputs"]), num_rejected=int(data["num_rejected"]),
                dead_letters=data.get("dead_letters"), salt=data["salt"], sharding=dict(data["sharding"]),
                metadata=dict(data.get("metadata", {})), run_id=data.get("run_id"),
                file_format=parse_file_format(data), shard_naming=parse_shard_naming(data),
                version=int(data["version"]), num_dropped=int(data.get("num_dropped", 0)),
                statistics=plain_file_name(data["statistics"], "statistics") if "statistics" in data else None,
                physical_names=dict(data.get("physical_names", {})),
                dropped_features=tuple(data.get("dropped_features", ())),
            )
        except ManifestError:
            raise
        except (SchemaError, ValueError, AttributeError) as err:  # found by fuzzing: a damaged schema
            raise ManifestError(f"manifest field 'schema': {type(err).__name__}: {err}") from err
        except (KeyError, TypeError) as err:
            raise ManifestError(f"malformed manifest: missing or bad field {err}") from err

    @classmethod
    def loads(cls, text: str | bytes) -> "Manifest":
        with _no_cyclic_gc():  # a manifest of 100,000 shards makes ~1e6 objects, none of them in a cycle
            try:
                data = json.loads(text)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:  # bytes that are not UTF-8 (found by fuzzing)
                raise ManifestError(f"manifest is not valid JSON: {err}") from err
            return cls.from_json(data)


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Python's cyclic collector paused for the block: it would otherwise walk every new object again and again
    while a big manifest is parsed (~15% of the time at 100,000 shards). Reference counting still frees memory."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

