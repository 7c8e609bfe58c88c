"""A version's commit: the shards a writer just wrote, joined to the shards the version keeps of its base.

A refresh appends: it lists the base's shards (``ShardInfo.stored_in``, with deletion vectors for removed and
changed records) and adds the shards its writer wrote for new and changed inputs; a split the compaction policy
rewrites, and every split of ``compact``, lists only written shards. The writer's publication calls ``merge``
for the manifest and writes ``locations`` before it (``beam.publish``), so the merged manifest is what is
published, last, as any manifest. Pure: no Beam; storage only in the caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from beam_tfrecord.core.description import DatasetDescription
from beam_tfrecord.core.manifest import Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.sharding import ShardingConfig, SplitConfig, balance_spread
from beam_tfrecord.errors import RefreshError
from beam_tfrecord.versions.locations import RecordLocation, RecordLocations, written_locations

COMMIT_KEY = "commit"  # the manifest metadata key of what the commit kept, deleted and wrote
WRITER_KEY = "writer"  # manifest metadata: the writer's options a manifest has no field for (``writer_metadata``)


@dataclasses.dataclass(frozen=True)
class VersionCommit:
    """What a version keeps of its base and what its writer is given.

    Attributes:
        version_id: the version being written.
        written_keys: the key of every input given to the writer (fresh inputs, and the kept records of the
            splits it rewrites): with the written shards they place each written record.
        base_version: the version it starts from (None: a full build).
        kept: the base's shards it lists, per split name, in order, with ``stored_in`` and deletions set.
        kept_locations: the live records of ``kept``, by key.
        deleted_records: records of kept shards deleted by this commit (removed or changed inputs).
        rewritten_splits: splits whose base shards were read and written again (compaction).
    """

    version_id: str
    written_keys: tuple[str, ...]
    base_version: str | None = None
    kept: Mapping[str, tuple[ShardInfo, ...]] = dataclasses.field(default_factory=dict)
    kept_locations: Mapping[str, RecordLocation] = dataclasses.field(default_factory=dict)
    deleted_records: int = 0
    rewritten_splits: tuple[str, ...] = ()

    @property
    def kept_records(self) -> int:
        """Live records of the kept shards."""
        return sum(shard.num_live for shards in self.kept.values() for shard in shards)

    def merge(self, written: Manifest) -> Manifest:
        """The version's manifest: each split's kept shards, then the written ones (empty written shards are
        left out of a split that keeps shards); counts, metadata and statistics follow.

        ``balance_spread`` is the written shards' (they are balanced among themselves; kept shards were when
        written). A version that keeps shards has no ``statistics.pb`` (its records are not all in it: the
        written records' statistics are ``APPENDED_STATISTICS_FILE``), and is not for outside readers.
        """
        if not any(self.kept.values()):
            return dataclasses.replace(written, metadata={**written.metadata, COMMIT_KEY: self.summary(written)})
        names = [split.name for split in written.splits]
        names += [name for name in self.kept if name not in names]
        splits = []
        for name in names:
            kept = self.kept.get(name, ())
            own = next((split.shards for split in written.splits if split.name == name), ())
            if kept:
                own = tuple(shard for shard in own if shard.num_records)
            shards = tuple(dataclasses.replace(shard, index=i) for i, shard in enumerate((*kept, *own)))
            spread = balance_spread([s.num_record_bytes for s in own if s.num_records]) if own else 0.0
            splits.append(SplitInfo(name, shards, balance_spread=round(spread, 6)))
        live = sum(shard.num_live for split in splits for shard in split.shards)
        return dataclasses.replace(
            written, splits=tuple(splits), statistics=None,
            num_inputs=live + written.num_rejected + written.num_dropped,
            metadata={**written.metadata, COMMIT_KEY: self.summary(written)})

    def locations(self, written: Manifest, rejected: Iterable[str]) -> RecordLocations | None:
        """Every live record of the merged version, or None when the written ones cannot be placed."""
        own = written_locations(self.version_id, written, self.written_keys, rejected)
        return None if own is None else RecordLocations({**self.kept_locations, **own})

    def summary(self, written: Manifest) -> dict[str, Any]:
        """What this commit did, for the manifest's metadata and the job's summary."""
        kept = [shard for shards in self.kept.values() for shard in shards]
        own = [shard for shard in written.shards if shard.num_records]
        return {"base_version": self.base_version, "kept_shards": len(kept),
                "kept_records": sum(s.num_live for s in kept), "deleted_records": self.deleted_records,
                "written_shards": len(own), "written_records": sum(s.num_records for s in own),
                "written_bytes": sum(s.num_bytes for s in own), "rewritten_splits": list(self.rewritten_splits)}


def describe_commit(summary: Mapping[str, Any]) -> str:
    """One line of what a commit did (its ``summary``, as the manifest's ``metadata.commit`` holds it)."""
    written = (f"wrote {summary.get('written_records')} records in {summary.get('written_shards')} shards "
               f"({summary.get('written_bytes', 0) / 1e6:.1f} MB)")
    if summary.get("base_version") is None:
        return f"{written} (a full build)"
    text = (f"{written}; kept {summary.get('kept_shards')} shards of version {summary.get('base_version')} as they "
            f"are ({summary.get('kept_records')} records, not read or copied); deleted "
            f"{summary.get('deleted_records')} records (deletion vectors)")
    rewritten = summary.get("rewritten_splits") or []
    return text + (f"; rewrote split(s) {', '.join(rewritten)} (compaction)" if rewritten else "")


def writer_metadata(splits: SplitConfig, *, statistics: bool, dali_index: bool) -> dict[str, Any]:
    """What a refresh records of its writer so that ``compact`` writes as it did (the manifest has the rest)."""
    return {"splits": splits.to_text(), "statistics": statistics, "dali_index": dali_index}


def description_of(manifest: Manifest) -> DatasetDescription:
    """The description a full build of the version's inputs had, from its manifest and ``writer_metadata``.

    Raises:
        RefreshError: the manifest does not record the writer's splits (written before compaction existed).
    """
    writer = manifest.metadata.get(WRITER_KEY)
    if not isinstance(writer, Mapping) or not isinstance(writer.get("splits"), str):
        raise RefreshError(f"manifest metadata {WRITER_KEY!r}: expected the writer's splits (a version written by a "
                           "refresh of this release); run a refresh with --append=false once instead")
    sharding = manifest.sharding
    return DatasetDescription(
        schema=manifest.schema, name=manifest.dataset_name, splits=SplitConfig.parse(writer["splits"]),
        sharding=ShardingConfig(target_shard_bytes=int(sharding["target_shard_bytes"]),
                                max_shard_bytes=sharding.get("max_shard_bytes"), num_shards=sharding.get("num_shards")),
        compression=manifest.compression, file_format=manifest.file_format, salt=manifest.salt,
        statistics=bool(writer.get("statistics", True)), dali_index=bool(writer.get("dali_index", False)))
