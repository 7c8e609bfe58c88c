"""Incremental refresh: keep the records of unchanged inputs, encode only what is new or changed.

The result is exactly a full build's shards; any doubt (``InputIndexError``) means a full build.
See docs/operations.md, "Scheduled refresh: versioned dataset roots".
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.core.file_format import Compression, FileFormat
from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.core.manifest import Manifest, ShardInfo
from beam_tfrecord.core.prebuilt import PrebuiltRecord
from beam_tfrecord.dataset import load_manifest, shard_file_path, version_dir
from beam_tfrecord.errors import InputIndexError
from beam_tfrecord.formats import shard_format
from beam_tfrecord.formats.joined import StoredNames, needs_join, open_joined
from beam_tfrecord.spill.resume import killed_inputs
from beam_tfrecord.versions.input_index import IndexedInput, InputIndex, read_input_index
from beam_tfrecord.versions.refresh import list_versions

REFRESH_KEY = "refresh"  # the manifest metadata key of what an incremental refresh did
DEFAULT_CHUNK_RECORDS = 256  # kept records per Beam element: per-element overhead stays small


@dataclasses.dataclass(frozen=True)
class ShardReuse:
    """One base shard and, record by record, the key to keep it under (None: dropped).

    Attributes:
        path: the shard's full path in the base version.
        shard: its manifest entry (the reader checks the record count against it).
        compression: the base version's compression.
        file_format: the base version's shard format.
        keys: one per record, in shard order.
        column_paths: the full paths of the shard's column files (``ShardInfo.columns``), in its order: each record
            is read joined with its rows and folded into the bytes a build with every feature writes.
        names: the base version's renamed and dropped features (folded into the schema's names too).
    """

    path: str
    shard: ShardInfo
    compression: Compression
    file_format: FileFormat
    keys: tuple[str | None, ...]
    column_paths: tuple[str, ...] = ()
    names: StoredNames = dataclasses.field(default_factory=StoredNames)

    @property
    def num_kept(self) -> int:
        return sum(key is not None for key in self.keys)


@dataclasses.dataclass(frozen=True)
class IncrementalPlan:
    """What an incremental refresh reuses, encodes and drops.

    Attributes:
        base_version: the version it starts from.
        shards: base shards holding at least one kept record.
        fresh: inputs to encode: new, changed, or rejected by the base version (rejected again,
            or not, exactly as in a full build).
        removed_records: base records whose input is gone.
    """

    base_version: str
    shards: tuple[ShardReuse, ...]
    fresh: tuple[IndexedInput, ...]
    removed_records: int

    @property
    def reused_records(self) -> int:
        return sum(s.num_kept for s in self.shards)

    def metadata(self) -> dict[str, Any]:
        """The manifest's ``metadata.refresh``."""
        return {"base_version": self.base_version, "reused_records": self.reused_records,
                "encoded_records": len(self.fresh), "removed_records": self.removed_records}


def rejected_keys(base_dir: str, manifest: Manifest) -> set[str]:
    """Keys in the base version's dead-letter file (untrusted: ``InputIndexError`` when malformed)."""
    if not manifest.dead_letters:
        return set()
    path = storage.join(base_dir, manifest.dead_letters)
    keys = set()
    for number, line in enumerate(storage.read_bytes(path).decode("utf-8", "replace").splitlines()):
        try:
            keys.add(str(json.loads(line)["key"]))
        except (ValueError, KeyError, TypeError) as err:
            raise InputIndexError(path, f"dead letter {number}: expected a JSON object with a 'key': {err}") from err
    if len(keys) != manifest.num_rejected:
        raise InputIndexError(path, f"{len(keys)} rejected keys; the manifest counts {manifest.num_rejected}")
    return keys


def _keys_in_record_order(index: InputIndex, rejected: set[str], manifest: Manifest) -> list[str | None]:
    """The key of every record of the base version, in manifest order (None where hashes collide)."""
    written = [i.key for i in index.inputs if i.key not in rejected]
    if len(written) != manifest.num_written:
        raise InputIndexError("input index", f"{len(written)} inputs were written by its account; the manifest "
                                             f"lists {manifest.num_written} records")
    hashed = sorted((key_hash(key, manifest.salt), key) for key in written)
    keys: list[str | None] = [key for _, key in hashed]
    for i in range(1, len(hashed)):
        if hashed[i][0] == hashed[i - 1][0]:  # equal hashes: the shard order is by content, unknown here
            keys[i] = keys[i - 1] = None
    return keys


def plan_incremental(*, base_version: str, base_dir: str, manifest: Manifest, base_index: InputIndex,
                     current: InputIndex) -> IncrementalPlan:
    """Compares the current inputs with the base version's and decides what to keep.

    Raises:
        InputIndexError: the base cannot lend its records (other encoding, index and manifest
            disagree); the caller builds in full.
    """
    if base_index.encoding != current.encoding:
        raise InputIndexError(base_dir, "built with another schema, transform or salt")
    if not manifest.self_contained:  # its records are not in key hash order across its own shards
        raise InputIndexError(base_dir, "shares shards or deletes records, and has no record locations")
    rejected = rejected_keys(base_dir, manifest)
    order = _keys_in_record_order(base_index, rejected, manifest)
    now = {i.key: i for i in current.inputs}
    before = {i.key: i for i in base_index.inputs}
    unchanged = {key for key, old in before.items()
                 if old.token and key in now and now[key].token == old.token and key not in rejected}
    shards = []
    start = 0
    for split in manifest.splits:
        for shard in sorted(split.shards, key=lambda s: s.index):
            keys = tuple(key if key in unchanged else None for key in order[start:start + shard.num_records])
            start += shard.num_records
            reuse = ShardReuse(shard_file_path(base_dir, shard), shard, manifest.compression,
                               manifest.file_format, keys)
            if reuse.num_kept:
                shards.append(reuse)
    kept = {key for s in shards for key in s.keys if key is not None}
    fresh = tuple(i for i in current.inputs if i.key not in kept)
    removed = sum(1 for key in order if key is not None and key not in now)
    return IncrementalPlan(base_version, tuple(shards), fresh, removed)


def read_kept_records(reuse: ShardReuse, *, chunk_records: int = DEFAULT_CHUNK_RECORDS
                      ) -> Iterator[list[PrebuiltRecord]]:
    """The kept records of one base shard as ``PrebuiltRecord``s, in chunks (one Beam element each).

    The whole shard is read (and its record count and CRCs checked); dropped records are skipped. A shard with
    column files, or of a version that renames or drops features, gives each record folded
    (``formats.joined``): a full build's bytes for the version's schema.
    """
    file_format = shard_format(reuse.file_format)
    reader = open_joined(file_format, reuse.path, reuse.shard, reuse.column_paths, compression=reuse.compression,
                         names=reuse.names, folded=True) if needs_join(reuse.shard, reuse.names) else \
        file_format.open_reader(reuse.path, reuse.shard, compression=reuse.compression)
    chunk: list[PrebuiltRecord] = []
    with reader:
        for (record, _), key in zip(reader.iter_records(0, reuse.shard.num_records), reuse.keys, strict=True):
            if key is not None:
                chunk.append(PrebuiltRecord(key, bytes(record)))
                if len(chunk) >= chunk_records:
                    yield chunk
                    chunk = []
    if chunk:
        yield chunk


def plan_from_root(root: str, base_version: str, current: InputIndex) -> IncrementalPlan:
    """``plan_incremental`` against version ``base_version`` of the versioned ``root``.

    Raises:
        InputIndexError: the base cannot lend its records (no or bad index, other encoding...).
        BeamTFRecordError: its manifest cannot be read.
    """
    base_dir = version_dir(root, base_version)
    return plan_incremental(base_version=base_version, base_dir=base_dir, manifest=load_manifest(base_dir),
                            base_index=read_input_index(base_dir), current=current)


def killed_refresh(root: str, latest: str | None, inputs_identity: str) -> str | None:
    """The newest unfinished version, newer than ``latest``, that a killed refresh of these inputs left
    (its writer's ``resume.json`` names ``inputs_identity``): a refresh builds it again in place,
    resuming (``beam_tfrecord.spill.resume``); None when there is none."""
    for version_id in reversed(list_versions(root).incomplete):
        if latest is not None and version_id <= latest:
            break  # retention deletes these: no refresh builds a version older than LATEST
        if inputs_identity in killed_inputs(version_dir(root, version_id)):
            return version_id
    return None
