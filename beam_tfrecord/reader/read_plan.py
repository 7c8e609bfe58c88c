"""The read plan: which records one worker reads, computed from the manifest alone (no TensorFlow)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.dataset import load_manifest, shard_paths
from beam_tfrecord.reader.slicing import ReadSegment, partition, resolve_split


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    """One worker's share of a split expression.

    Attributes:
        dataset_dir: the path the reader was given (a dataset directory or a versioned root).
        manifest: its manifest.
        split: the split expression read (``"train[:10%]+validation"``).
        num_workers: workers sharing the records.
        worker_index: this worker.
        segments: this worker's records, in order.
        paths: shard file name -> full path (in the version the manifest was loaded from).
    """

    dataset_dir: str
    manifest: Manifest
    split: str
    num_workers: int
    worker_index: int
    segments: tuple[ReadSegment, ...]
    paths: Mapping[str, str]

    @property
    def num_records(self) -> int:
        """Records this worker reads per epoch (the same for every worker)."""
        return sum(segment.take for segment in self.segments)

    def path(self, segment: ReadSegment) -> str:
        """The full path of a segment's shard."""
        return self.paths[segment.shard.filename]


def plan_read(path: str, *, split: str = "train", num_workers: int = 1, worker_index: int = 0,
              manifest: Manifest | None = None) -> ReadPlan:
    """Plans what worker ``worker_index`` of ``num_workers`` reads of ``split``.

    Args:
        path: dataset directory (the one holding manifest.json) or a versioned dataset root.
        split: split expression, e.g. ``"train"``, ``"train[:10%]"``, ``"train[1000:2000]+validation"``.
        num_workers: workers sharing the records; each gets ``total // num_workers`` of them.
        worker_index: this worker, in ``[0, num_workers)``.
        manifest: the already loaded manifest, to avoid reading it again.

    Raises:
        DatasetNotFoundError: when ``path`` holds no manifest.
        UnknownSplitError: when the expression names a split the dataset lacks.
        ReaderError: on a malformed expression or bad worker arguments.
    """
    manifest = manifest if manifest is not None else load_manifest(path)
    segments = partition(resolve_split(manifest, split), num_workers=num_workers, worker_index=worker_index)
    paths = {shard.filename: full for split_info in manifest.splits
             for shard, full in zip(split_info.shards, shard_paths(path, manifest, split_info.name))}
    return ReadPlan(path, manifest, split, num_workers, worker_index, segments, paths)


def num_examples(path: str, *, split: str = "train", num_workers: int = 1) -> int:
    """Records each of ``num_workers`` workers reads per epoch (for ``steps_per_epoch``), without TensorFlow."""
    return plan_read(path, split=split, num_workers=num_workers).num_records
