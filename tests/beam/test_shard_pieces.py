"""The shard phase uses every worker: a shard larger than its share is written in pieces by several
workers and joined (``beam.shard_pieces``), and the dataset is byte for byte the one-writer dataset."""

import os
import pathlib

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from random_files import write_random_files

from beam_tfrecord import (
    DatasetDescription,
    DType,
    FileRef,
    Sample,
    Scalar,
    Schema,
    WriterTuning,
    WriteTFRecordDataset,
    load_manifest,
    storage,
)
from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.beam.shard_pieces import JoinPiecesFn, WrittenPiece, describe_pieces, join_pieces
from beam_tfrecord.beam.shards import ShardTarget
from beam_tfrecord.beam.spill_path import ShardTask, WriteShardFromRunsFn
from beam_tfrecord.core.file_format import Compression, FileFormat
from beam_tfrecord.core.pieces import PieceSpec, ShardWriters, cut_pieces, pieces_per_shard
from beam_tfrecord.core.sharding import ShardingConfig, ShardSpec, SplitConfig
from beam_tfrecord.errors import CorruptShardError, WriterOptionError

SCHEMA = Schema({"blob": Scalar(DType.BYTES), "index": Scalar(DType.INT64)})
ONE_SHARD = ShardingConfig(target_shard_bytes=1 << 30)


@pytest.fixture(scope="module")
def blob_files(tmp_path_factory) -> list[str]:
    """60 files of 1 KB to 200 KB: records under 64 KiB are spilled, larger ones read again by their writer."""
    return write_random_files(str(tmp_path_factory.mktemp("blobs")), 60, 1_000, 200_000, seed=5)


def _build(out: str, paths: list[str], *, local_workers: int, shard_writers: int = 1,
           splits: SplitConfig | None = None, dali_index: bool = False) -> dict[str, object]:
    """Builds the dataset; its counters, and the job summary's line on pieces (``summary``)."""
    pipeline = beam.Pipeline(argv=["--runner=DirectRunner"])
    _ = (pipeline
         | beam.Create([Sample(os.path.basename(p), {"blob": FileRef(p), "index": i}) for i, p in enumerate(paths)])
         | WriteTFRecordDataset(out, description=DatasetDescription(
                                    schema=SCHEMA, sharding=ONE_SHARD, splits=splits or SplitConfig.single(),
                                    dali_index=dali_index),
                                tuning=WriterTuning(local_workers=local_workers, shard_writers=shard_writers,
                                                    min_piece_bytes=256 << 10)))
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    return {**{c.key.metric.name: c.committed for c in counters}, "summary": describe_pieces(result)}


def _published(out: str) -> tuple[dict[str, bytes], list]:
    """Every file of the dataset but the manifest and its views, and the manifest's shards."""
    manifest = load_manifest(out)
    files = {name: pathlib.Path(out, name).read_bytes() for name in sorted(os.listdir(out))
             if name.startswith("data-")}
    return files, [shard for split in manifest.splits for shard in split.shards]


@pytest.mark.parametrize("splits, dali_index, shards, whole_too", [
    pytest.param(None, False, 1, True, id="one-shard-two-pieces"),
    # (two workers with --shard_writers=1 writing each shard whole: checked once, in the case above)
    pytest.param(SplitConfig.parse("train=0.8,test=0.2"), True, 2, False,
                 id="two-shards-the-larger-in-pieces-dali-index"),
])
def test_pieces_written_by_two_workers_give_the_one_writer_bytes(blob_files, tmp_path, splits, dali_index, shards,
                                                                 whole_too):
    pieces = _build(str(tmp_path / "pieces"), blob_files, local_workers=2, shard_writers=2, splits=splits,
                    dali_index=dali_index)
    alone = _build(str(tmp_path / "alone"), blob_files, local_workers=1, splits=splits, dali_index=dali_index)
    assert pieces["shard_pieces_written"] == 2  # the shard (the larger one) in two pieces, by two workers
    assert pieces["summary"] == ("  shard phase: 2 pieces written in parallel and joined (shards larger than their "
                                 "share of the workers; --shard_writers=1 writes each shard whole)")
    assert alone.get("shard_pieces_written", 0) == 0 and alone["summary"] is None
    files, infos = _published(str(tmp_path / "pieces"))
    assert len(infos) == shards and (files, infos) == _published(str(tmp_path / "alone"))
    assert not os.listdir(tmp_path / "pieces") or not any(".piece-" in n for n in os.listdir(tmp_path / "pieces"))
    if whole_too:
        whole = _build(str(tmp_path / "whole"), blob_files, local_workers=2, splits=splits, dali_index=dali_index)
        assert whole.get("shard_pieces_written", 0) == 0 and whole["summary"] is None
        assert _published(str(tmp_path / "whole")) == (files, infos)


def _pieces_on_disk(tmp_path, blob_files) -> tuple[ShardTarget, list[WrittenPiece], str, bytes]:
    """A one-shard plan cut into two pieces, each written by the spill writer; the shard written whole too."""
    from beam_tfrecord.beam.spill_path import EncodeToRunsFn
    from beam_tfrecord.core.hashing import HASH_SPACE
    from beam_tfrecord.spill.run_files import read_run_index, write_catalog

    runs_dir, shards_dir = str(tmp_path / "runs"), str(tmp_path / "shards")
    encode = EncodeToRunsFn(SCHEMA, runs_dir=runs_dir, salt="s", max_record_bytes=1 << 30, run_bytes=1 << 20,
                            feature_transforms={}, reread_min_bytes=64 << 10, direct_io=False)
    encode.setup()
    encode.start_bundle()
    runs = [r for i, p in enumerate(blob_files)
            for r in encode.process(Sample(os.path.basename(p), {"blob": FileRef(p), "index": i}))]
    encode.finish_bundle()
    encode.teardown()
    indexes = [read_run_index(r) for r in runs]
    hashes = np.concatenate([i.hashes for i in indexes])
    sizes = np.concatenate([i.framed_sizes for i in indexes])
    spec = ShardSpec("train", 0, 1, 0, HASH_SPACE, len(hashes), int(sizes.sum()))
    catalog = write_catalog(runs_dir, runs)
    fn = WriteShardFromRunsFn(SCHEMA, Compression.NONE, {}, dataset_name="d", shards_dir=shards_dir, direct_io=False)
    fn.setup()
    (_, info), = fn.process(((0, 0), [ShardTask(spec, catalog)]))
    whole = pathlib.Path(shards_dir, info.filename).read_bytes()
    for name in (info.filename, info.filename + ".finished.json"):  # as if it had not been written
        os.remove(os.path.join(shards_dir, name))
    written = [w for piece in cut_pieces(spec, hashes, sizes, 2)
               for _, w in fn.process(((0, piece.index), [ShardTask(spec, catalog, piece)]))]
    target = ShardTarget.of(spec, dataset_name="d", compression=Compression.NONE, file_format=FileFormat.TFRECORD,
                            shards_dir=shards_dir)
    return target, written, os.path.join(shards_dir, "pieces"), whole


def test_a_join_gives_the_whole_shards_bytes_and_removes_the_pieces(tmp_path, blob_files):
    target, written, pieces_dir, whole = _pieces_on_disk(tmp_path, blob_files)
    assert [w.piece.index for w in written] == [0, 1] and all(isinstance(w, WrittenPiece) for w in written)
    join = JoinPiecesFn(SCHEMA, Compression.NONE, {}, dataset_name="d", shards_dir=os.path.dirname(pieces_dir),
                        direct_io=False)
    join.setup()
    (info,) = join.process((0, list(reversed(written))))
    assert pathlib.Path(target.temp_path).read_bytes() == whole and info.num_bytes == len(whole)
    assert os.path.exists(target.temp_path + ".finished.json") and os.listdir(pieces_dir) == []


def test_a_join_that_finds_a_piece_of_the_wrong_size_names_the_shard_and_the_piece(tmp_path, blob_files):
    target, written, pieces_dir, _ = _pieces_on_disk(tmp_path, blob_files)
    second = os.path.join(pieces_dir, written[1].info.filename)
    with open(second, "r+b") as handle:
        handle.truncate(os.path.getsize(second) - 10)
    with pytest.raises(CorruptShardError) as raised:
        join_pieces(target, written, pieces_dir=pieces_dir, direct=False, dali_index=False)
    piece = written[1].piece
    crc32c, size = storage.crc32c_and_size(second)
    assert str(raised.value) == (
        f"shard {target.temp_path!r}: piece 2 of 2 ({written[1].info.filename}): its file has {size} bytes, "
        f"CRC32C {crc32c}; its writer wrote {piece.num_record_bytes} bytes, CRC32C {written[1].info.crc32c}; "
        f"the plan expected {piece.num_records} records / {piece.num_record_bytes} bytes")
    assert not os.path.exists(target.temp_path + ".finished.json")


def test_pieces_tile_the_shard_at_hash_boundaries():
    spec = ShardSpec("train", 0, 1, 100, 1_000, 6, 600)
    hashes = np.array([500, 200, 200, 200, 700, 900], np.uint64)
    pieces = cut_pieces(spec, hashes, np.full(6, 100), 3)
    assert pieces == (
        PieceSpec(spec, 0, 3, 100, 500, 3, 300),  # the three records of hash 200 stay in one piece
        PieceSpec(spec, 1, 3, 500, 700, 1, 100),
        PieceSpec(spec, 2, 3, 700, 1_000, 2, 200),
    )
    assert cut_pieces(spec, np.full(6, 300, np.uint64), np.full(6, 100), 3) == (PieceSpec(spec, 0, 1, 100, 1_000, 6,
                                                                                           600),)


@pytest.mark.parametrize("shard_bytes, writers, expected", [
    pytest.param([84 << 20], 2, [2], id="one-shard-two-writers-two-pieces"),
    pytest.param([90 << 20, 10 << 20], 2, [2, 1], id="the-larger-of-two-cut"),
    pytest.param([64 << 20, 64 << 20], 2, [1, 1], id="as-many-equal-shards-as-writers-stay-whole"),
    pytest.param([20 << 20], 4, [1], id="no-piece-under-min-piece-bytes"),
    pytest.param([400 << 20], 4, [4], id="at-most-one-piece-per-writer"),
    pytest.param([400 << 20], 1, [1], id="one-writer-never-cuts"),
])
def test_pieces_per_shard_gives_each_writer_a_share(shard_bytes, writers, expected):
    assert pieces_per_shard(shard_bytes, writers=writers, min_piece_bytes=16 << 20) == expected


def test_shard_writers_are_checked():
    with pytest.raises(WriterOptionError, match="shard_writers must be >= 1, got 0"):
        WriterTuning(shard_writers=0)
    with pytest.raises(WriterOptionError, match="min_piece_bytes must be >= 1, got 0"):
        ShardWriters(2, 0)
