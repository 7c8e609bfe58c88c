"""A manifest described in text for people (``inspect``, the end of a build, the HTML report).

Not to be confused with ``core/summary.py``: the hash-bucket histograms the planner merges.
"""

from __future__ import annotations

from beam_tfrecord.core.manifest import Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.schema import feature_to_json
from beam_tfrecord.interop.self_contained import not_self_contained_reason
from beam_tfrecord.interop.tfds import unsupported_reason
from beam_tfrecord.quality.duplicate_counts import describe_duplicates
from beam_tfrecord.quality.near_report import REPORT_KEY as NEAR_REPORT_KEY
from beam_tfrecord.quality.near_report import describe_near_duplicates
from beam_tfrecord.statistics.drift_record import DriftRecord

SKIPPED_INPUTS_KEY = "skipped_inputs"  # manifest metadata: files a source found but did not make samples of


def _size(num_bytes: int) -> str:
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{num_bytes} B"
        value /= 1024
    raise AssertionError("unreachable")


def empty_shards_note(split: SplitInfo) -> str | None:
    """Why some of a split's shards are empty files, or None when none is.

    A split has ``num_shards`` shards when it is set (else at least one, as Beam's WriteToTFRecord
    writes): records are never cut, so fewer records than shards, or records larger than a
    shard's share of the split, leave some empty.
    """
    empty = sum(1 for shard in split.shards if not shard.num_records)
    if not empty:
        return None
    total = len(split.shards)
    if not split.num_records:
        why = "the split has no record"
    elif split.num_records < total:
        records = f"{split.num_records} record" + ("s" if split.num_records > 1 else "")
        why = f"{records} cannot fill {total} shards (a shard holds whole records)"
    else:
        largest = max(shard.num_record_bytes for shard in split.shards)
        why = (f"some records are larger than a shard's share of the split ({_size(largest)} in one shard, "
               f"{_size(sum(s.num_record_bytes for s in split.shards) // total)} a share); a record is never cut")
    return f"{empty} of its {total} shards " + ("is an empty file" if empty == 1 else "are empty files") + f": {why}"


def _shard_line(shard: ShardInfo) -> str:
    """A shard for people: its live records, the deleted ones and where it is stored when another version has it."""
    deleted = shard.num_records - shard.num_live
    return (f"{shard.filename}  {shard.num_live} records" + (f" ({deleted} of {shard.num_records} deleted)"
                                                              if deleted else "")
            + f"  {_size(shard.num_bytes)}  crc32c {shard.crc32c}"
            + (f"  stored in version {shard.stored_in}" if shard.stored_in is not None else "")
            + "".join(f"\n      + column file {column.filename}  {', '.join(column.features)}  "
                      f"{_size(column.num_bytes)}"
                      + (f"  stored in version {column.stored_in}" if column.stored_in is not None else "")
                      for column in shard.columns))


def describe_manifest(manifest: Manifest, location: str, *, show_shards: bool = True,
                      drift: DriftRecord | None = None) -> str:
    """Lines for people: counts, format, the drift check (``drift``: the version's ``drift.json``: why it was
    held, or what moved when it was published anyway), rejected and skipped inputs, splits and (optionally) shards."""
    lines = [
        f"dataset {manifest.dataset_name!r} at {location}",
        f"  {manifest.num_written} records written, {manifest.num_rejected} rejected, "
        + (f"{manifest.num_dropped} dropped as duplicates, " if manifest.num_dropped else "")
        + f"of {manifest.num_inputs} "
        f"inputs; {manifest.file_format.value}, compression {manifest.compression.value or 'none'}; "
        f"manifest v{manifest.version}, "
        f"beam-tfrecord {manifest.tool_version}, {manifest.created_at}",
    ]
    if drift is not None:
        head, *moved = drift.summary()
        lines.extend([f"  drift check: {head}", *(f"    {line}" for line in moved)])
    if manifest.dead_letters:
        lines.append(f"  rejected samples and reasons: {manifest.dead_letters}")
    skipped = manifest.metadata.get(SKIPPED_INPUTS_KEY)
    if isinstance(skipped, dict) and skipped.get("count"):
        reasons = "; ".join(f"{count} {reason}" for reason, count in skipped.get("by_reason", {}).items())
        extensions = ", ".join(f"{ext} x{count}" for ext, count in skipped.get("by_extension", {}).items())
        lines.append(f"  skipped {skipped['count']} files that are not samples: {reasons} (extensions: {extensions})")
    near = manifest.metadata.get(NEAR_REPORT_KEY)
    if isinstance(near, dict):
        lines.append(f"  {describe_near_duplicates(near)}")
    lines.extend(f"  {line}" for line in describe_duplicates(manifest.metadata))
    shared = not_self_contained_reason(manifest)
    if shared is not None:
        lines.append(f"  not self-contained: {shared}; readers outside beam-tfrecord (TFDS, DALI, Ray, Croissant, "
                     "a glob of its files) get no files for it and are refused: `beam-tfrecord compact ROOT` "
                     "writes a version they read")
    no_tfds = unsupported_reason(manifest)
    if no_tfds is not None and shared is None:
        lines.append(f"  no TFDS metadata (dataset_info.json) written: {no_tfds}")
    for split in manifest.splits:
        deleted = sum(shard.num_records - shard.num_live for shard in split.shards)
        lines.append(f"  split {split.name}: {split.num_records} records in {len(split.shards)} shards"
                     + (f" ({deleted} more deleted)" if deleted else "")
                     + f", {_size(split.num_bytes)}, balance spread {split.balance_spread:.2%}")
        note = empty_shards_note(split)
        if note is not None:
            lines.append(f"    ({note})")
        if show_shards:
            lines.extend(f"    {_shard_line(shard)}" for shard in split.shards)
    lines.append("  schema:")
    for name, feature in {**manifest.schema.features, **manifest.schema.sequence_features}.items():
        fields = {k: v for k, v in feature_to_json(feature).items() if k != "kind" and v not in (None, False)}
        if "names" in fields and len(fields["names"]) > 8:
            fields["names"] = fields["names"][:8] + ["..."]
        detail = ", ".join(f"{k}={v}" for k, v in fields.items())
        seq = " (per step)" if name in manifest.schema.sequence_features else ""
        stored = manifest.physical_names.get(name, name)
        where = (f" (stored as {stored!r})" if stored != name else "") + (
            " [column files]" if any(shard.column_for(stored) for shard in manifest.shards) else "")
        lines.append(f"    {name}: {feature.KIND}{seq} {detail}{where}")
    if manifest.dropped_features:
        lines.append(f"  dropped (still in its files, not read): {', '.join(manifest.dropped_features)}")
    return "\n".join(lines)
