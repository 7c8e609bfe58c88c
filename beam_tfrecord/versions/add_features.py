"""The plan of an add: which base shards get a column file, where each record's key comes from, and the new
version's manifest (the base's shards listed unchanged, ``columns`` added, the schema extended).

An add never rewrites a shard. Keys come from the dataset per shard, never from one table of all keys: a feature of
the schema named by the key column (read from the shard), or the shard's key file (``keys/<shard>.keys``, written by
refresh and compaction from now on); a version written before has neither: its ``record_locations.json`` is split
per shard in the client (one process: the limit in docs/columns.md). Beam runs it (``beam.add_features``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyroaring import FrozenBitMap

from beam_tfrecord import storage
from beam_tfrecord.core import proto
from beam_tfrecord.core.columns import ColumnFile, column_filename
from beam_tfrecord.core.framing import iter_records
from beam_tfrecord.core.manifest import Manifest, ShardInfo
from beam_tfrecord.core.sample_encoder import SampleEncoder
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.schema import Schema, VarList
from beam_tfrecord.dataset import load_manifest, read_latest, shard_file_path, version_dir
from beam_tfrecord.errors import ColumnsError, FeatureNameError, InputIndexError
from beam_tfrecord.formats import shard_format
from beam_tfrecord.versions.locations import (
    RECORD_LOCATIONS_FILENAME,
    key_file_name,
    read_record_locations,
    shard_key,
)
from beam_tfrecord.versions.refresh import list_versions, new_version_id

COLUMNS_KEY = "columns"  # manifest metadata: what the add (or drop, rename) did, and where its locations are


class OnMissing(enum.Enum):
    """What a record of the version given no value gets (``--on_missing``)."""

    FAIL = "fail"  # the add fails naming the first such keys
    MISSING = "missing"  # its row holds the schema's default, or nothing (a variable list reads as empty)


@dataclasses.dataclass(frozen=True)
class BaseShard:
    """One shard of the base version, as the add reads it.

    Attributes:
        number: its place in the base manifest's ``shards`` (what the join keys rows by).
        shard: its entry as the new version lists it (``stored_in`` set).
        path: the shard file's full path.
        keys: ``(position, key)`` of its live records, when split from ``record_locations.json``; None when the
            keys are read per shard (the key feature, or the key file ``key_path``).
        key_path: the shard's key file, when read from one.
    """

    number: int
    shard: ShardInfo
    path: str
    keys: tuple[tuple[int, str], ...] | None = None
    key_path: str | None = None


@dataclasses.dataclass(frozen=True)
class AddPlan:
    """Everything the add's workers need, decided in the client before any work.

    Attributes:
        root: the versioned root.
        base_version: the version the add starts from (LATEST when planned).
        version_id: the version it writes.
        base: the base version's manifest.
        added: the added features, by logical name.
        physical: logical -> stored name of each added feature (the name itself unless taken).
        replaced: stored names of features the add replaces (``--replace``): dropped from the schema.
        key_feature: the stored name of the schema feature holding each record's key, or None (sample keys).
        shards: the base shards.
        on_missing: what a record given no value gets.
        indexes_version: the version holding the records' locations and input index (``indexes_version``).
    """

    root: str
    base_version: str
    version_id: str
    base: Manifest
    added: Schema
    physical: Mapping[str, str]
    replaced: tuple[str, ...]
    key_feature: str | None
    shards: tuple[BaseShard, ...]
    on_missing: OnMissing = OnMissing.FAIL
    indexes_version: str = ""

    @property
    def directory(self) -> str:
        return version_dir(self.root, self.version_id)

    @property
    def column_schema(self) -> Schema:
        """The added features under their stored names: what a column file's records hold."""
        return Schema({self.physical[name]: feature for name, feature in self.added.features.items()})

    def column_name(self, base: BaseShard) -> str:
        return column_filename(base.shard.stored_in or self.base_version, base.shard.filename)

    def stored(self, values: Mapping[str, Any] | None) -> dict[str, Any]:
        """A record's values (logical names) under their stored names."""
        return {self.physical.get(name, name): value for name, value in (values or {}).items()}

    def encode(self, key: str, values: Mapping[str, Any] | None, encoder: SampleEncoder) -> bytes:
        """A record's row: its values encoded under their stored names, as any build checks them (``SampleError``
        naming the key and feature); ``None`` (no value, ``OnMissing.MISSING``) encodes the schema's defaults."""
        return encoder.encode(Sample(key, self.stored(values)))

    def manifest(self, columns: Mapping[int, ColumnFile], *, command: Sequence[str], created_at: str,
                 tool_version: str, summary: Mapping[str, Any]) -> Manifest:
        """The new version's manifest: every base shard listed where it is, with its new column file."""
        by_number = {base.number: base for base in self.shards}
        splits, number = [], 0
        for split in self.base.splits:
            shards = []
            for _ in split.shards:
                base = by_number[number]
                shards.append(dataclasses.replace(base.shard, columns=(*base.shard.columns, columns[number])))
                number += 1
            splits.append(dataclasses.replace(split, shards=tuple(shards)))
        kept = {name: f for name, f in self.base.schema.features.items()
                if self.base.physical_name(name) not in self.replaced}
        renames = {name: stored for name, stored in self.base.physical_names.items() if name in kept}
        renames.update({name: stored for name, stored in self.physical.items() if stored != name})
        manifest = dataclasses.replace(
            self.base, schema=Schema({**kept, **self.added.features}, self.base.schema.sequence_features),
            splits=tuple(splits), physical_names=renames, statistics=None, created_at=created_at,
            tool_version=tool_version, command=tuple(command), run_id=self.version_id, dead_letters=None,
            num_rejected=0, num_inputs=self.base.num_written + self.base.num_dropped,
            dropped_features=tuple(sorted({*self.base.dropped_features, *self.replaced})),
            metadata={**self.base.metadata, COLUMNS_KEY: dict(summary)})
        return Manifest.loads(manifest.dumps())  # every check a reader makes, before it is published


def indexes_version(root: str, base_version: str, base: Manifest) -> str:
    """The version whose directory holds the ``record_locations.json`` and input index that describe the records of
    ``base_version``: itself, or, for a version an add, drop or rename wrote (they write neither: the records and
    their places are the base's), the version its ``metadata.columns.indexes_version`` names."""
    if storage.exists(storage.join(version_dir(root, base_version), RECORD_LOCATIONS_FILENAME)):
        return base_version
    recorded = base.metadata.get(COLUMNS_KEY, {})
    found = recorded.get("indexes_version") if isinstance(recorded, Mapping) else None
    return found if isinstance(found, str) else base_version


def with_base_shards(base: Manifest, base_version: str) -> tuple[ShardInfo, ...]:
    """The base's shards as a version after it lists them: each file (and column file) where it is stored."""
    return tuple(dataclasses.replace(
        shard, stored_in=shard.stored_in or base_version,
        columns=tuple(dataclasses.replace(c, stored_in=c.stored_in or base_version) for c in shard.columns))
        for shard in base.shards)


def stored_names(manifest: Manifest) -> set[str]:
    """Every feature name the version's files hold: its features' stored names and the dropped ones."""
    return {manifest.physical_name(name) for name in manifest.schema.features} | set(manifest.dropped_features)


def added_names(base: Manifest, added: Schema, *, replace: bool, token: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """(logical -> stored name of each added feature, stored names it replaces).

    A name the version has is refused unless ``replace``; a stored name still in the files (dropped, or the
    replaced feature's) is never reused: the feature is stored as ``<name>__<token>`` instead.

    Raises:
        FeatureNameError: a name the version has, without ``replace``; a sequence-feature name.
    """
    if added.sequence_features:
        raise FeatureNameError(f"sequence features cannot be added ({sorted(added.sequence_features)}): a column "
                               "file holds one value per record")
    clash = sorted(set(added.features) & (set(base.schema.features) | set(base.schema.sequence_features)))
    if clash and not replace:
        raise FeatureNameError(f"feature(s) {clash} are already in the dataset; pass --replace to replace them (the "
                               "old values stay in their files, dropped), or add them under other names")
    if set(clash) & set(base.schema.sequence_features):
        raise FeatureNameError(f"sequence feature(s) {clash} cannot be replaced by a column")
    replaced = tuple(sorted(base.physical_name(name) for name in clash))
    taken = stored_names(base)
    physical = {name: name if name not in taken else f"{name}__{token}" for name in added.features}
    return physical, replaced


def check_on_missing(added: Schema, on_missing: OnMissing) -> None:
    """``OnMissing.MISSING`` needs every added feature to be encodable without a value.

    Raises:
        ColumnsError: naming the features that need one.
    """
    if on_missing is not OnMissing.MISSING:
        return
    required = sorted(name for name, feature in added.features.items()
                      if not isinstance(feature, VarList) and getattr(feature, "default", None) is None)
    if required:
        raise ColumnsError(f"--on_missing missing: feature(s) {required} have no default and are not variable "
                           "lists, so a record without a value cannot be read; give them a default in the schema, or "
                           "use --on_missing fail")


def base_shards(root: str, base_version: str, base: Manifest, *, keys_from_shards: bool) -> tuple[BaseShard, ...]:
    """The base's shards with where their keys come from: the shards themselves (``keys_from_shards``), each one's
    key file, or (a version written before key files) the version's ``record_locations.json`` split per shard.

    Raises:
        ColumnsError: no key source (a version without record locations, and no key feature).
    """
    directory = version_dir(root, base_version)
    listed = with_base_shards(base, base_version)
    paths = [shard_file_path(directory, shard) for shard in base.shards]
    if keys_from_shards:
        return tuple(BaseShard(n, shard, path) for n, (shard, path) in enumerate(zip(listed, paths)))
    key_paths = [shard_file_path(directory, shard, key_file_name(shard.filename)) for shard in base.shards]
    if all(storage.exists(path) for path in key_paths):
        return tuple(BaseShard(n, shard, path, key_path=key_path)
                     for n, (shard, path, key_path) in enumerate(zip(listed, paths, key_paths)))
    try:
        locations = read_record_locations(directory)
    except InputIndexError as err:
        raise ColumnsError(f"version {base_version}: {err}") from err
    if locations is None:
        raise ColumnsError(f"version {base_version} of {root!r} has no {RECORD_LOCATIONS_FILENAME} (written by every "
                           "refresh and compaction) to find its records by key: name a feature of the dataset with "
                           "--key_column, or compact the root first")
    per_shard: dict[tuple[str, str], list[tuple[int, str]]] = {shard_key(s, base_version): [] for s in base.shards}
    for key, location in locations.by_key.items():
        per_shard.setdefault(location.shard, []).append((location.position, key))
    return tuple(BaseShard(n, shard, path, keys=tuple(sorted(per_shard[shard_key(s, base_version)])))
                 for n, (s, shard, path) in enumerate(zip(base.shards, listed, paths)))


def _key_of(record: bytes, feature: str) -> str | None:
    """The key a record's key feature holds (its one value, as text), or None when it holds not exactly one."""
    values = proto.Example.FromString(record).features.feature.get(feature)
    if values is None:
        return None
    kind = values.WhichOneof("kind")
    found = list(getattr(values, kind).value) if kind else []
    if len(found) != 1:
        return None
    value = found[0]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def shard_keys(base: BaseShard, plan: AddPlan) -> Iterator[tuple[str, tuple[int, int]]]:
    """``(key, (shard number, position))`` of each live record of one base shard: the dataset's side of the join,
    one shard in memory at most (a shard per task).

    Raises:
        CorruptShardError: the shard (or its key file) holds another number of records than listed.
    """
    shard = base.shard
    deleted = shard.deletions.positions if shard.deletions is not None else FrozenBitMap()
    if base.keys is not None:
        yield from ((key, (base.number, position)) for position, key in base.keys)
        return
    if base.key_path is not None:
        with storage.open_read(base.key_path) as handle:
            keys = [bytes(record).decode("utf-8") for record in iter_records(handle, name=base.key_path)]
        if len(keys) != shard.num_records:
            raise ColumnsError(f"key file {base.key_path!r} holds {len(keys)} keys; its shard {shard.filename!r} "
                               f"has {shard.num_records} records")
        yield from ((key, (base.number, p)) for p, key in enumerate(keys) if p not in deleted)
        return
    reader = shard_format(plan.base.file_format).open_reader(base.path, shard, compression=plan.base.compression)
    with reader:
        for position, (record, _) in enumerate(reader.iter_records(0, shard.num_records)):
            key = None if position in deleted else _key_of(bytes(record), plan.key_feature or "")
            if key is not None:
                yield key, (base.number, position)


def plan_add(root: str, added: Schema, *, key_column: str | None, replace: bool = False,
             on_missing: OnMissing = OnMissing.FAIL) -> tuple[AddPlan, tuple[BaseShard, ...]]:
    """The add of ``added`` to LATEST of ``root`` (call it under the root's lease), and the base shards with their
    key sources (for the job's first step; the plan's own shards carry none: every worker gets the plan).

    ``key_column`` names a feature of the version (its stored value is each record's key), or anything else (the
    records' sample keys).

    Raises:
        ColumnsError: ``root`` has no LATEST, no key source, or ``on_missing`` cannot be honoured.
        FeatureNameError: an added name the version has, without ``replace``.
    """
    latest = read_latest(root)
    if latest is None:
        raise ColumnsError(f"{root!r} is not a versioned root with a LATEST version (features are added to a root "
                           "that `beam-tfrecord refresh` writes)")
    base = load_manifest(version_dir(root, latest))
    check_on_missing(added, on_missing)
    listing = list_versions(root)
    version_id = new_version_id(after=[*listing.complete, *listing.incomplete, *listing.retired, latest])
    physical, replaced = added_names(base, added, replace=replace, token=version_id[-6:])
    key_feature = base.physical_name(key_column) if key_column and key_column in base.schema.features else None
    sources = base_shards(root, latest, base, keys_from_shards=key_feature is not None)
    plan = AddPlan(root, latest, version_id, base, added, physical, replaced, key_feature,
                   tuple(dataclasses.replace(source, keys=None) for source in sources), on_missing,
                   indexes_version(root, latest, base))
    return plan, sources
