"""A versioned root whose LATEST shares shards with an earlier version and deletes some of their records, made by
hand (as SHARED60 describes) for the tools' tests: verify, inspect, the report, statistics, compare, outside readers.

``build_shared_root(root)``: version ``EARLIER`` (train: two shards of 5 and 4 records, test: one of 3; TFRecord
shards with their DALI indexes, or ArrayRecord ones) published and committed as a build publishes; then ``LATER``,
whose manifest lists EARLIER's shards (``stored_in``) with deletion vectors (train shard 0: positions 1 and 3; test:
position 0) and one shard of its own (train: 2 new records), committed with ``commit_version``. Records are
``{"x": int, "label": int}``; ``LIVE_X`` is what every reader of LATER returns. Milliseconds to build: no Beam.
"""

from __future__ import annotations

import dataclasses

from beam_tfrecord import storage
from beam_tfrecord.core.dali_index import dali_index_name
from beam_tfrecord.core.deletions import DeletionVector
from beam_tfrecord.core.file_format import Compression, FileFormat
from beam_tfrecord.core.framing import FRAMING_BYTES
from beam_tfrecord.core.manifest import MANIFEST_FILENAME, Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.naming import ShardName
from beam_tfrecord.core.sample_encoder import SampleEncoder
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.schema import ClassLabel, DType, Scalar, Schema
from beam_tfrecord.dataset import VERSIONS_DIRNAME, load_manifest
from beam_tfrecord.formats import shard_format
from beam_tfrecord.interop import write_interop_files
from beam_tfrecord.interop.dali import DaliIndexingWriter
from beam_tfrecord.interop.tfds import write_tfds_files
from beam_tfrecord.versions.refresh import commit_version

DATASET = "d"
SCHEMA = Schema({"x": Scalar(DType.INT64), "label": ClassLabel(("a", "b", "c"))})
EARLIER = "20260101T000000.000Z-aaaaaa"
LATER = "20260102T000000.000Z-bbbbbb"
EARLIER_X = {"train": [[0, 1, 2, 3, 4], [5, 6, 7, 8]], "test": [[100, 101, 102]]}  # x of each shard's records
NEW_X = [200, 201]  # LATER's own train shard
DELETED = {("train", 0): [1, 3], ("test", 0): [0]}  # (split, EARLIER's shard index) -> deleted positions
LIVE_X = {"train": [0, 2, 4, 5, 6, 7, 8, 200, 201], "test": [101, 102]}
NUM_DELETED = 3


@dataclasses.dataclass(frozen=True)
class SharedRoot:
    """A root built by ``build_shared_root``: its path, its shards' format and the directories of its two versions."""

    root: str
    file_format: FileFormat = FileFormat.TFRECORD

    @property
    def earlier_dir(self) -> str:
        return storage.join(self.root, VERSIONS_DIRNAME, EARLIER)

    @property
    def later_dir(self) -> str:
        return storage.join(self.root, VERSIONS_DIRNAME, LATER)


def _write_shard(directory: str, split: str, index: int, count: int, xs: list[int], file_format: FileFormat,
                 ) -> ShardInfo:
    """One shard of records ``{"x": x, "label": x % 3}`` (and a TFRecord shard's DALI index), as a build writes."""
    filename = str(ShardName(DATASET, split, index, count, Compression.NONE, file_format))
    path = storage.join(directory, filename)
    encoder = SampleEncoder(SCHEMA)
    dali = file_format is FileFormat.TFRECORD
    writer = shard_format(file_format).open_writer(path, compression=Compression.NONE, direct_io=False)
    writer = DaliIndexingWriter(writer, dali_index_name(path)) if dali else writer
    record_bytes = 0
    for x in xs:
        record = encoder.encode(Sample(f"k{x}", {"x": x, "label": x % 3}))
        record_bytes += len(record) + FRAMING_BYTES
        writer.append(record)
    crc32c, stored = writer.close()
    return ShardInfo(filename, split, index, len(xs), stored, record_bytes, crc32c,
                     dali_index=dali_index_name(filename) if dali else None)


def _manifest(splits: dict[str, list[ShardInfo]], file_format: FileFormat) -> Manifest:
    infos = tuple(SplitInfo(name, tuple(dataclasses.replace(shard, index=i) for i, shard in enumerate(shards)))
                  for name, shards in splits.items())
    written = sum(split.num_records for split in infos)
    return Manifest(dataset_name=DATASET, schema=SCHEMA, splits=infos, compression=Compression.NONE,
                    created_at="2026-01-01T00:00:00+00:00", tool_version="test", command=("tools_fixtures",),
                    num_inputs=written, num_rejected=0, dead_letters=None, salt="s", sharding={},
                    file_format=file_format)


def _publish(directory: str, manifest: Manifest) -> None:
    """What a build's publish writes beside the shards: the views for other tools, the manifest, TFDS's files."""
    write_interop_files(directory, manifest)
    storage.write_bytes_atomic(storage.join(directory, MANIFEST_FILENAME), manifest.dumps().encode())
    write_tfds_files(directory, manifest)


def build_shared_root(root: str, file_format: FileFormat = FileFormat.TFRECORD) -> SharedRoot:
    """Builds the root described in the module docstring at ``root`` (local or a store) and returns it."""
    built = SharedRoot(root, file_format)
    earlier = {split: [_write_shard(built.earlier_dir, split, i, len(shards), xs, file_format)
                       for i, xs in enumerate(shards)] for split, shards in EARLIER_X.items()}
    _publish(built.earlier_dir, _manifest(earlier, file_format))
    commit_version(root, EARLIER)
    shared = {split: [dataclasses.replace(shard, stored_in=EARLIER, deletions=None if (split, i) not in DELETED
                                          else DeletionVector.of(DELETED[(split, i)]))
                      for i, shard in enumerate(shards)] for split, shards in earlier.items()}
    shared["train"].append(_write_shard(built.later_dir, "train", 0, 1, NEW_X, file_format))
    _publish(built.later_dir, _manifest(shared, file_format))
    commit_version(root, LATER)
    return built


def add_test_shard_named_as_earliers(built: SharedRoot, xs: list[int]) -> None:
    """Gives LATER's test split a shard of its own (records ``xs``) under the very name of EARLIER's test shard
    (``d-test.tfrecord-00000-of-00001``: each writer names its shards among its own), rewriting LATER's manifest."""
    manifest = load_manifest(built.later_dir)
    own = _write_shard(built.later_dir, "test", 0, 1, xs, built.file_format)
    splits = {split.name: [*split.shards, *([own] if split.name == "test" else [])] for split in manifest.splits}
    _publish(built.later_dir, _manifest(splits, built.file_format))
