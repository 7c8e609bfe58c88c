"""Which versions a reader outside this project may be given: self-contained ones only.

A tool that reads shard files itself (TFDS, NVIDIA DALI, Ray Data, Croissant's consumers, a glob) cannot honour a
deletion vector, find a shard stored in an earlier version nor join column files (features added later), so it
would return deleted records, miss live ones or miss features. Its files are written only for versions that are
``Manifest.self_contained``, and its read arguments are refused otherwise (``NotSelfContainedError``, naming
``compact``). See docs/reading.md, "Outside readers".
"""

from __future__ import annotations

from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.dataset import VERSIONS_DIRNAME, LoadedDataset, split_path
from beam_tfrecord.errors import NotSelfContainedError


def not_self_contained_reason(manifest: Manifest) -> str | None:
    """What the version shares with earlier ones, deletes, holds in column files or renames, or None when it is
    self-contained."""
    if manifest.self_contained:
        return None
    shared = sum(1 for shard in manifest.shards if shard.stored_in is not None)
    parts = []
    if shared:
        parts.append(f"{shared} of its {len(manifest.shards)} shards are stored in earlier versions (shared with them)")
    if manifest.num_deleted:
        parts.append(f"{manifest.num_deleted} records of its shards are deleted (deletion vectors)")
    added = sorted({name for shard in manifest.shards for column in shard.columns for name in column.features})
    if added:
        parts.append(f"features {', '.join(added)} of its records are in column files beside its shards (added "
                     "later: a shard alone lacks them)")
    if manifest.physical_names or manifest.dropped_features:
        parts.append("its files hold features under other names or features it dropped (renamed and dropped "
                     "without rewriting them)")
    return " and ".join(parts)


def require_self_contained(dataset: LoadedDataset, *, reader: str) -> None:
    """Refuses a version ``reader`` (an outside reader's name) cannot read.

    Raises:
        NotSelfContainedError: naming the version, what it shares or deletes, and ``beam-tfrecord compact ROOT``.
    """
    reason = not_self_contained_reason(dataset.manifest)
    if reason is None:
        return
    versions, _ = split_path(dataset.directory.rstrip("/"))
    root = split_path(versions)[0] if split_path(versions)[1] == VERSIONS_DIRNAME else dataset.directory
    raise NotSelfContainedError(reader=reader, version=dataset.directory, reason=reason, root=root)
