"""Finding and loading a published dataset's manifest."""

from __future__ import annotations

from beam_tfrecord import storage
from beam_tfrecord.core.manifest import MANIFEST_FILENAME, Manifest
from beam_tfrecord.errors import DatasetNotFoundError


def load_manifest(dataset_dir: str) -> Manifest:
    """Loads the manifest of the dataset at ``dataset_dir``; only a manifest makes a dataset."""
    path = storage.join(dataset_dir, MANIFEST_FILENAME)
    if not storage.exists(path):
        raise DatasetNotFoundError(f"no published dataset at {dataset_dir!r}: {MANIFEST_FILENAME} is missing "
                                   "(a build that did not finish leaves none)")
    return Manifest.loads(storage.read_bytes(path))


def shard_paths(dataset_dir: str, manifest: Manifest, split: str) -> list[str]:
    """Full paths of a split's shards, in index order."""
    return [storage.join(dataset_dir, shard.filename) for shard in manifest.split(split).shards]
