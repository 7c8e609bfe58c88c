"""The manifest of a streaming write under a Beam prefix: every committed pane's shards, and each pane's record.

Invariant: a pane (``PaneId``: its window and index) is listed once, whole, in ``metadata["streaming"]["panes"]``,
and its shards follow the shards of every pane committed before it in each split. Pure: no Beam, no storage.
See docs/streaming.md.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from beam_tfrecord._version import __version__
from beam_tfrecord.core.description import DatasetDescription
from beam_tfrecord.core.manifest import DEAD_LETTER_FILENAME, Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.naming import PrefixShardNames
from beam_tfrecord.core.record_schema import FeatureSummary, RecordsSummary
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.sharding import balance_spread
from beam_tfrecord.errors import ManifestError

STREAMING_KEY = "streaming"  # the manifest's metadata entry of a streaming write: its panes and records' summary


@dataclasses.dataclass(frozen=True, order=True)
class PaneId:
    """One fired pane: its window (microseconds since the epoch, as Beam keeps them) and its index in the window.

    Attributes:
        start_micros, end_micros: the window's bounds.
        index: the pane's index (``PaneInfo.index``): 0 for the first firing, 1 for the next (a late pane)...
        window_text: the window as the shards' names carry it (``core.naming.WINDOW_TEXT``).
    """

    start_micros: int
    end_micros: int
    index: int
    window_text: str

    @property
    def key(self) -> str:
        """The pane's identity in the manifest: the same window and index are the same commit."""
        return f"{self.start_micros}:{self.end_micros}:{self.index}"


@dataclasses.dataclass(frozen=True)
class PaneShards:
    """What one pane wrote, before it is merged into the manifest.

    Attributes:
        pane: the pane.
        shards: its shards by split, each in its own index order (names carry the pane's window).
        num_inputs: elements the pane held.
        rejected: dead letters, as JSON objects (one line each in ``dead_letters.jsonl``).
        summary: what its records say of the schema (None: no record).
    """

    pane: PaneId
    shards: Mapping[str, Sequence[ShardInfo]]
    num_inputs: int
    rejected: Sequence[Mapping[str, Any]]
    summary: RecordsSummary | None

    @property
    def filenames(self) -> list[str]:
        return [shard.filename for shards in self.shards.values() for shard in shards]

    def spread(self) -> float:
        """The largest balance spread of the pane's splits (``sharding.balance_spread``, as a batch build's)."""
        return max((round(balance_spread([s.num_record_bytes for s in shards if s.num_records]), 6)
                    for shards in self.shards.values()), default=0.0)


def committed_panes(manifest: Manifest | None) -> dict[str, Mapping[str, Any]]:
    """The panes ``manifest`` lists, by ``PaneId.key`` (none for no manifest)."""
    if manifest is None:
        return {}
    streaming = manifest.metadata.get(STREAMING_KEY)
    panes = streaming.get("panes") if isinstance(streaming, Mapping) else None
    if not isinstance(panes, list):
        return {}
    return {pane["pane"]: pane for pane in panes if isinstance(pane, Mapping) and "pane" in pane}


def _summary_json(summary: RecordsSummary | None) -> dict[str, Any] | None:
    if summary is None:
        return None

    def features(by_name: Mapping[str, FeatureSummary]) -> dict[str, Any]:
        return {name: [sorted(f.kinds), list(f.lengths) if f.lengths else None, f.in_every_record]
                for name, f in by_name.items()}
    return {"context": features(summary.context), "steps": features(summary.steps), "raw": summary.raw}


def _summary_of_json(data: Any) -> RecordsSummary | None:
    """The summary ``_summary_json`` wrote; ManifestError naming the field for anything else."""
    if data is None:
        return None
    try:
        def features(by_name: Mapping[str, Any]) -> dict[str, FeatureSummary]:
            return {str(name): FeatureSummary(frozenset(map(str, kinds)), tuple(lengths) if lengths else None,
                                              bool(every)) for name, (kinds, lengths, every) in by_name.items()}
        return RecordsSummary(features(data["context"]), features(data["steps"]), bool(data["raw"]))
    except (KeyError, TypeError, ValueError) as err:
        raise ManifestError.field(f"metadata.{STREAMING_KEY}.summary", "the records' summary a streaming "
                                  "write keeps", data) from err


def _pane_json(written: PaneShards, first_shard: Mapping[str, int]) -> dict[str, Any]:
    return {"pane": written.pane.key, "window": written.pane.window_text, "index": written.pane.index,
            "first_shard": dict(first_shard), "num_shards": {s: len(v) for s, v in written.shards.items()},
            "num_inputs": written.num_inputs, "num_rejected": len(written.rejected),
            "num_records": sum(s.num_records for v in written.shards.values() for s in v),
            "balance_spread": written.spread()}


def with_pane(old: Manifest | None, written: PaneShards, *, description: DatasetDescription,
              naming: PrefixShardNames | None,
              metadata: Mapping[str, Any], command: Sequence[str], empty_schema: Schema) -> Manifest:
    """``old`` (None: no pane yet) with ``written``'s shards after each split's, its pane recorded, counts added,
    the schema the records of every pane fit (``empty_schema`` while there is none), dated now.

    Raises:
        RecordSchemaError: when the new records' features and the earlier ones' make no schema.
    """
    streaming = dict(old.metadata.get(STREAMING_KEY, {})) if old is not None else {}
    summary = _summary_of_json(streaming.get("summary"))
    if written.summary is not None:
        summary = written.summary if summary is None else summary.merge(written.summary)
    schema = summary.schema() if summary is not None else empty_schema
    old_splits = {split.name: split for split in old.splits} if old is not None else {}
    splits, first_shard = [], {}
    for spec in description.splits.specs:
        kept = old_splits[spec.name].shards if spec.name in old_splits else ()
        first_shard[spec.name] = len(kept)
        added = tuple(dataclasses.replace(shard, index=len(kept) + i)
                      for i, shard in enumerate(written.shards.get(spec.name, ())))
        spread = max([old_splits[spec.name].balance_spread if spec.name in old_splits else 0.0, written.spread()])
        splits.append(SplitInfo(spec.name, kept + added, balance_spread=spread))
    panes = [*streaming.get("panes", []), _pane_json(written, first_shard)]
    inferred = {"schema_inferred": {"from": "records", "raw_payloads": summary.raw}} if summary is not None else {}
    num_rejected = (old.num_rejected if old is not None else 0) + len(written.rejected)
    sharding = description.sharding
    return Manifest(
        dataset_name=description.name, schema=schema, splits=tuple(splits), compression=description.compression,
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        tool_version=__version__, command=tuple(command),
        num_inputs=(old.num_inputs if old is not None else 0) + written.num_inputs, num_rejected=num_rejected,
        dead_letters=DEAD_LETTER_FILENAME if num_rejected else None, salt=description.salt,
        sharding={"target_shard_bytes": sharding.target_shard_bytes, "max_shard_bytes": sharding.cap,
                  "num_shards": sharding.num_shards},
        metadata={**metadata, **inferred, STREAMING_KEY: {"summary": _summary_json(summary), "panes": panes}},
        run_id=None, file_format=description.file_format, shard_naming=naming)
