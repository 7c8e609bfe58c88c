"""The read plan: which records one worker reads, computed from the manifest alone (no TensorFlow)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence

from beam_tfrecord.core.manifest import Manifest, ShardInfo
from beam_tfrecord.dataset import LoadedDataset, open_dataset, resolve_dataset_dir
from beam_tfrecord.errors import ReaderError
from beam_tfrecord.formats import ShardFormat, ShardReader, shard_format
from beam_tfrecord.formats.joined import StoredNames, column_shard, needs_join, open_joined
from beam_tfrecord.reader.order.passes import ShardPass, shard_passes
from beam_tfrecord.reader.order.slicing import ReadSegment, partition, resolve_split
from beam_tfrecord.remote_reads.fetched import FetchedShard
from beam_tfrecord.remote_reads.fetcher import COPIES_AHEAD, ShardFetcher, shard_fetcher
from beam_tfrecord.remote_reads.options import RemoteReads, RemoteShard

ReadPart = ReadSegment | ShardPass  # what names a shard to open or fetch


def shard_key(shard: ShardInfo) -> tuple[str | None, str]:
    """What tells a manifest's shards apart: versions of a root may each have written a file of the same name."""
    return shard.stored_in, shard.filename


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
        paths: ``shard_key`` -> full path (in the version the manifest was loaded from, or the earlier version
            of its root that wrote the file), of every shard and column file.
    """

    dataset_dir: str
    manifest: Manifest
    split: str
    num_workers: int
    worker_index: int
    segments: tuple[ReadSegment, ...]
    paths: Mapping[tuple[str | None, str], str]

    @property
    def num_records(self) -> int:
        """Records this worker reads per epoch (the same for every worker)."""
        return sum(segment.take for segment in self.segments)

    @functools.cached_property
    def passes(self) -> tuple[ShardPass, ...]:
        """The segments as the passes over their files that read them (``passes``): one per shard, however many
        deleted records split it into runs."""
        return shard_passes(self.segments)

    def path(self, part: ReadPart) -> str:
        """The full path of a segment's or a pass's shard."""
        return self.paths[shard_key(part.shard)]

    @property
    def format(self) -> ShardFormat:
        """The shards' format (``beam_tfrecord.formats``), from the manifest's ``file_format``."""
        return shard_format(self.manifest.file_format)

    @functools.cached_property
    def names(self) -> StoredNames:
        """How the names stored in the files become the schema's (renamed and dropped features)."""
        return StoredNames.of(self.manifest)

    @property
    def joins(self) -> bool:
        """Whether a shard of the plan has column files, or the version renames or drops features: its records
        are then read through ``formats.joined`` (every reader of ``open_shard`` does)."""
        return any(needs_join(segment.shard, self.names) for segment in self.segments)

    def part_plans(self) -> "tuple[ReadPlan, ...] | None":
        """The plan as aligned plans of files without columns: the base shards', then each column file's (the same
        segments, passes and deletions: record ``i`` of each is one example); None when it has no column file, when
        names are mapped, or when its shards' column layouts differ (then ``open_shard`` joins them)."""
        layouts = {tuple(column.features for column in segment.shard.columns) for segment in self.segments}
        if len(layouts) != 1 or not next(iter(layouts)) or not self.names.identity:
            return None
        parts = []
        for number in range(-1, len(next(iter(layouts)))):
            replaced: dict[ShardInfo, ShardInfo] = {}
            for segment in self.segments:
                shard = segment.shard
                if shard not in replaced:
                    replaced[shard] = dataclasses.replace(shard, columns=()) if number < 0 else dataclasses.replace(
                        column_shard(shard, shard.columns[number]), deletions=shard.deletions)
            parts.append(dataclasses.replace(self, segments=tuple(
                dataclasses.replace(segment, shard=replaced[segment.shard]) for segment in self.segments)))
        return tuple(parts)

    def column_paths(self, shard: ShardInfo) -> list[str]:
        """The full paths of a shard's column files, in its ``columns`` order."""
        return [self.paths[shard_key(column_shard(shard, column))] for column in shard.columns]

    def open_shard(self, part: ReadPart, *, verify: bool = True, fetched: FetchedShard | None = None) -> ShardReader:
        """A reader of a segment's or a pass's shard, in the shards' format (see ``ShardFormat.open_reader``); with
        its column files joined (``formats.joined``) when it has any, or when the version renames or drops."""
        reader = self.format.open_reader(self.path(part), part.shard, compression=self.manifest.compression,
                                         verify=verify, fetched=fetched)
        if not needs_join(part.shard, self.names):
            return reader
        return open_joined(self.format, self.path(part), part.shard, self.column_paths(part.shard),
                           compression=self.manifest.compression, names=self.names, verify=verify, base=reader)

    def remote_shards(self, parts: Sequence[ReadPart]) -> list[RemoteShard]:
        """The parts' shards as the fetcher and the cache know them: full path, size and CRC32C as listed."""
        return [RemoteShard(self.path(s), s.shard.num_bytes, s.shard.crc32c) for s in parts]

    def fetcher(self, segments: Sequence[ReadPart], reads: RemoteReads, *,
                side_by_side: Sequence[Sequence[int]] = (), copies_ahead: int = COPIES_AHEAD) -> ShardFetcher | None:
        """A ``ShardFetcher`` of the segments' shards in this order (``open(i)`` for ``segments[i]``); None when
        they are local (read as they always were). ``side_by_side``: groups of them read together;
        ``copies_ahead``: shards copied whole ahead of a reader that takes them whole."""
        return shard_fetcher(self.remote_shards(segments), reads, side_by_side=side_by_side,
                             copies_ahead=copies_ahead)

    def require_reader(self, reader: str) -> None:
        """Raises ReaderError, naming the readers that can, when ``reader`` cannot read these shards."""
        if reader not in self.format.readers:
            raise ReaderError(f"{reader} cannot read {self.manifest.file_format.value} shards (the dataset at "
                              f"{self.dataset_dir!r}); read them with {' or '.join(self.format.readers)}")


def plan_read(path: str, *, split: str = "train", num_workers: int = 1, worker_index: int = 0,
              dataset: LoadedDataset | None = None, manifest: Manifest | None = None) -> ReadPlan:
    """Plans what worker ``worker_index`` of ``num_workers`` reads of ``split``.

    Args:
        path: dataset directory (the one holding manifest.json) or a versioned dataset root.
        split: split expression, e.g. ``"train"``, ``"train[:10%]"``, ``"train[1000:2000]+validation"``.
        num_workers: workers sharing the records; each gets ``total // num_workers`` of them.
        worker_index: this worker, in ``[0, num_workers)``.
        dataset: the dataset already opened from ``path`` (``open_dataset``), to avoid reading its
            manifest again; its shards are those of the version it was loaded from.
        manifest: a manifest already loaded from ``path`` (its shards are looked up in the version
            ``path`` resolves to now); ``dataset`` is preferred.

    Raises:
        DatasetNotFoundError: when ``path`` holds no manifest.
        UnknownSplitError: when the expression names a split the dataset lacks.
        ReaderError: on a malformed expression or bad worker arguments.
    """
    if dataset is None:
        dataset = (open_dataset(path) if manifest is None
                   else LoadedDataset(path, resolve_dataset_dir(path), manifest))
    manifest = dataset.manifest
    segments = partition(resolve_split(manifest, split), num_workers=num_workers, worker_index=worker_index)
    paths = {shard_key(shard): full for split_info in manifest.splits
             for shard, full in zip(split_info.shards, dataset.shard_paths(split_info.name))}
    paths.update({shard_key(column_shard(shard, column)): dataset.shard_path(column_shard(shard, column))
                  for shard in manifest.shards for column in shard.columns})
    return ReadPlan(path, manifest, split, num_workers, worker_index, segments, paths)
