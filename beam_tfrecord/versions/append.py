"""An append refresh's plan: what a new version keeps of its base, deletes from it, rewrites and encodes.

Unchanged inputs keep their records where they are (the base's shards, listed with ``stored_in``, never read);
removed and changed ones become deletion-vector positions (found through the base's record locations); new and
changed ones are encoded into new shards. A split past ``CompactionPolicy``'s limits, or every split for
``compact``, is rewritten: its live records are read with their keys and written again, as a full build would.
See docs/operations.md, "Scheduled refresh: versioned dataset roots".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from beam_tfrecord.core.deletions import DeletionVector
from beam_tfrecord.core.manifest import Manifest, ShardInfo
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.dataset import load_manifest, shard_file_path, version_dir
from beam_tfrecord.errors import InputIndexError, RefreshError
from beam_tfrecord.formats.joined import StoredNames, column_shard
from beam_tfrecord.versions.add_features import indexes_version
from beam_tfrecord.versions.commit import VersionCommit
from beam_tfrecord.versions.incremental import ShardReuse
from beam_tfrecord.versions.input_index import IndexedInput, InputIndex, read_input_index
from beam_tfrecord.versions.locations import (
    RECORD_LOCATIONS_FILENAME,
    RecordLocation,
    RecordLocations,
    keys_by_position,
    read_record_locations,
    shard_key,
)

DEFAULT_MAX_SMALL_SHARDS = 32
DEFAULT_MAX_DELETED_FRACTION = 0.25
SMALL_SHARD_FRACTION = 0.5  # a shard whose records' bytes are below this fraction of the target shard size is small


@dataclasses.dataclass(frozen=True)
class CompactionPolicy:
    """When a refresh rewrites a split instead of appending to it.

    Attributes:
        max_small_shards: rewrite a split that holds more small shards than this (each refresh adds at least
            one per split it writes to; ``SMALL_SHARD_FRACTION``).
        max_deleted_fraction: rewrite a split when more than this fraction of the records in its files is
            deleted (the files then cost that much more to store and to read past).
        compact_all: rewrite every split (``beam-tfrecord compact``): the version is then byte-identical, in its
            shards, to a full build of the same inputs.
    """

    max_small_shards: int = DEFAULT_MAX_SMALL_SHARDS
    max_deleted_fraction: float = DEFAULT_MAX_DELETED_FRACTION
    compact_all: bool = False

    def __post_init__(self) -> None:
        if type(self.max_small_shards) is not int or self.max_small_shards < 0:
            raise RefreshError(f"max_small_shards must be an integer >= 0, got {self.max_small_shards!r}")
        if not 0.0 <= self.max_deleted_fraction <= 1.0:
            raise RefreshError(f"max_deleted_fraction must be in [0, 1], got {self.max_deleted_fraction!r}")

    def reason_to_rewrite(self, shards: tuple[ShardInfo, ...], target_shard_bytes: int) -> str | None:
        """Why a split of these shards (deletions of this refresh included) is rewritten, or None."""
        if self.compact_all:
            return "compact"
        small = sum(1 for s in shards if s.num_record_bytes < SMALL_SHARD_FRACTION * target_shard_bytes)
        if small > self.max_small_shards:
            return f"{small} small shards > max_small_shards {self.max_small_shards}"
        records = sum(s.num_records for s in shards)
        deleted = records - sum(s.num_live for s in shards)
        if records and deleted / records > self.max_deleted_fraction:
            return f"{deleted / records:.1%} of its records deleted > max_deleted_fraction {self.max_deleted_fraction}"
        return None


@dataclasses.dataclass(frozen=True)
class AppendPlan:
    """What a refresh does to its base.

    Attributes:
        base_version: the version it starts from.
        kept: per split, the base shards listed as they are (``stored_in`` and deletions set).
        kept_locations: the live records of ``kept``, by key.
        rewritten: base shards of rewritten splits, with the key of each record to keep (None: deleted).
        rewritten_splits: (split, why) of each rewritten split.
        fresh: inputs to encode: new, changed, or rejected by the base version.
        removed_records: base records whose input is gone.
        changed_records: base records whose input changed (deleted, and encoded again).
    """

    base_version: str
    kept: Mapping[str, tuple[ShardInfo, ...]]
    kept_locations: Mapping[str, RecordLocation]
    rewritten: tuple[ShardReuse, ...]
    rewritten_splits: tuple[tuple[str, str], ...]
    fresh: tuple[IndexedInput, ...]
    removed_records: int
    changed_records: int

    @property
    def rewritten_records(self) -> int:
        return sum(reuse.num_kept for reuse in self.rewritten)

    @property
    def rewrites_all(self) -> bool:
        """Whether the version keeps no shard of its base as it is (every split rewritten)."""
        return not any(self.kept.values())

    def metadata(self) -> dict[str, Any]:
        """The manifest's ``metadata.refresh`` when every split is rewritten, as the copying refresh records it."""
        return {"base_version": self.base_version, "reused_records": self.rewritten_records,
                "encoded_records": len(self.fresh), "removed_records": self.removed_records}

    def commit(self, version_id: str) -> VersionCommit:
        """The commit the writer's publication makes of this plan into version ``version_id``."""
        rewritten_keys = [key for reuse in self.rewritten for key in reuse.keys if key is not None]
        return VersionCommit(version_id=version_id, written_keys=(*(i.key for i in self.fresh), *rewritten_keys),
                             base_version=self.base_version, kept=self.kept, kept_locations=self.kept_locations,
                             deleted_records=self.removed_records + self.changed_records,
                             rewritten_splits=tuple(split for split, _ in self.rewritten_splits))

    def describe(self) -> str:
        """One line for the job's log."""
        if self.rewrites_all:
            return (f"rewrite of {self.base_version}: {self.rewritten_records} of its records read and written again, "
                    f"{len(self.fresh)} inputs to encode, {self.removed_records} records removed and "
                    f"{self.changed_records} changed")
        kept = sum(len(shards) for shards in self.kept.values())
        text = (f"append to {self.base_version}: {kept} shards kept ({len(self.kept_locations)} records, not read), "
                f"{len(self.fresh)} inputs to encode, {self.removed_records} records removed and "
                f"{self.changed_records} changed (deletion vectors)")
        if self.rewritten_splits:
            text += "; rewriting " + ", ".join(f"split {split} ({why})" for split, why in self.rewritten_splits)
        return text


def plan_append(*, base_version: str, base_dir: str, manifest: Manifest, base_index: InputIndex,
                locations: RecordLocations, current: InputIndex, policy: CompactionPolicy) -> AppendPlan:
    """Compares the current inputs with the base version's and decides what to keep, delete and write.

    Raises:
        InputIndexError: the base cannot lend its records (another encoding; locations that do not match its
            manifest); the caller builds in full.
    """
    if base_index.encoding != current.encoding:
        raise InputIndexError(base_dir, "built with another schema, transform or salt")
    locations.check_against(manifest, base_version, path=base_dir)
    now = {i.key: i for i in current.inputs}
    before = {i.key: i for i in base_index.inputs}
    deleted: dict[tuple[str, str], list[int]] = {}
    kept_locations: dict[str, RecordLocation] = {}
    removed = changed = 0
    for key, location in locations.by_key.items():
        old = before.get(key)
        if key in now and old is not None and old.token and now[key].token == old.token:
            kept_locations[key] = location
            continue
        removed, changed = (removed + 1, changed) if key not in now else (removed, changed + 1)
        deleted.setdefault(location.shard, []).append(location.position)
    kept: dict[str, tuple[ShardInfo, ...]] = {}
    rewritten: list[ShardReuse] = []
    reasons: list[tuple[str, str]] = []
    for split in manifest.splits:
        shards = tuple(_with_deletions(shard, base_version, deleted.get(shard_key(shard, base_version), ()))
                       for shard in split.shards)
        why = policy.reason_to_rewrite(shards, int(manifest.sharding.get("target_shard_bytes") or 0))
        if why is None:
            kept[split.name] = tuple(shard for shard in shards if shard.num_live)
            continue
        reasons.append((split.name, why))
        rewritten.extend(_reuses(base_dir, manifest, shards, base_version, kept_locations))
    rewritten_keys = {key for reuse in rewritten for key in reuse.keys if key is not None}
    for rewritten_key in rewritten_keys:
        del kept_locations[rewritten_key]
    fresh = tuple(i for i in current.inputs if i.key not in kept_locations and i.key not in rewritten_keys)
    return AppendPlan(base_version, kept, kept_locations, tuple(rewritten), tuple(reasons), fresh, removed, changed)


def _with_deletions(shard: ShardInfo, base_version: str, positions: list[int] | tuple[int, ...]) -> ShardInfo:
    """The base's shard as the new version lists it: stored in the version that wrote it, with these deleted."""
    deletions = shard.deletions
    if positions:
        deletions = DeletionVector.of(positions) if deletions is None else deletions.union(positions)
    return dataclasses.replace(shard, stored_in=shard.stored_in or base_version, deletions=deletions)


def _reuses(base_dir: str, manifest: Manifest, shards: tuple[ShardInfo, ...], base_version: str,
            kept_locations: Mapping[str, RecordLocation]) -> list[ShardReuse]:
    """The shards of a rewritten split, each with the key of every record to keep (None where deleted)."""
    keys = keys_by_position(kept_locations, [shard_key(shard, base_version) for shard in shards])
    reuses = []
    for shard in shards:
        by_position = keys[shard_key(shard, base_version)]
        if by_position:
            reuses.append(ShardReuse(shard_file_path(base_dir, shard), shard, manifest.compression,
                                     manifest.file_format,
                                     tuple(by_position.get(p) for p in range(shard.num_records)),
                                     tuple(shard_file_path(base_dir, column_shard(shard, column))
                                           for column in shard.columns), StoredNames.of(manifest)))
    return reuses


def append_plan_from_root(root: str, base_version: str, current: InputIndex, policy: CompactionPolicy) -> AppendPlan:
    """``plan_append`` against version ``base_version`` of the versioned ``root``.

    Raises:
        InputIndexError: the base cannot lend its shards (no record locations or index, another encoding...).
        BeamTFRecordError: its manifest cannot be read.
    """
    base_dir = version_dir(root, base_version)
    manifest = load_manifest(base_dir)
    # An add's, drop's or rename's version keeps its base's records in their places: their index is the base's.
    index_dir = version_dir(root, indexes_version(root, base_version, manifest))
    locations = read_record_locations(index_dir)
    if locations is None:
        raise InputIndexError(index_dir, f"no {RECORD_LOCATIONS_FILENAME} (written before shards were shared, or "
                                         "its records could not be placed by key)")
    return plan_append(base_version=base_version, base_dir=base_dir, manifest=manifest,
                       base_index=read_input_index(index_dir), locations=locations, current=current, policy=policy)


def check_refresh_schema(root: str, latest: str, manifest: Manifest, schema: Schema) -> None:
    """Refuses a refresh whose records would lack features added to version ``latest`` (``manifest``) as column
    files: each new record would miss them (a feature the source itself stopped giving is the source's change, and
    builds as before).

    Raises:
        RefreshError: naming the features, the version holding them, and what to do.
    """
    lacking = sorted(name for name in set(manifest.schema.features) - set(schema.features)
                     if any(shard.column_for(manifest.physical_names.get(name, name)) is not None
                            for shard in manifest.shards))
    if lacking:
        raise RefreshError(f"refresh {root}: version {latest} has features added as column files (add-features) "
                           f"that the refresh's schema does not give: {', '.join(lacking)}; every record it writes "
                           "would lack them. Give the source and its --schema these features too (the refresh then "
                           "writes every record with them), or drop them from the root first (beam-tfrecord "
                           "drop-features) to refresh without them")
