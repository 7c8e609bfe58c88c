"""A shard written in pieces by several workers, then joined (spill fan-in; the pure part is ``core/pieces.py``).

The joined shard is byte for byte what one writer makes, and looks finished only once joined.
See docs/performance.md, "The shard phase with fewer shards than workers".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import google_crc32c
import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.beam.shards import ShardTarget, WriteShardFn
from beam_tfrecord.core.dali_index import dali_index_name
from beam_tfrecord.core.file_format import Compression, FileFormat
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.core.pieces import (
    PIECES_COUNTER,
    PieceSpec,
    ShardWriters,
    concatenable,
    cut_pieces,
    pieces_per_shard,
)
from beam_tfrecord.core.runs import SpilledRun
from beam_tfrecord.core.sharding import DatasetPlan
from beam_tfrecord.errors import CorruptShardError, PipelineInvariantError
from beam_tfrecord.interop.dali import DaliIndexBuilder
from beam_tfrecord.spill.resume import record_finished_shard
from beam_tfrecord.spill.run_files import read_run_index
from beam_tfrecord.storage import direct_io
from beam_tfrecord.storage.disk_space import raise_typed_when_full

JOIN_CHUNK_BYTES = 8 << 20


@dataclasses.dataclass(frozen=True)
class WrittenPiece:
    """A piece on storage: its plan and what its writer wrote (``ShardInfo`` of the piece file)."""

    piece: PieceSpec
    info: ShardInfo


def describe_pieces(result: Any) -> str | None:
    """A line for a job's summary when shards were written in pieces (None when none were, or the runner
    reports no counters)."""
    try:
        counters = result.metrics().query(beam.metrics.MetricsFilter().with_name(PIECES_COUNTER))
    except (AttributeError, NotImplementedError):
        return None
    pieces = sum(counter.committed or 0 for counter in counters["counters"])
    return (f"  shard phase: {pieces} pieces written in parallel and joined (shards larger than their share of "
            "the workers; --shard_writers=1 writes each shard whole)") if pieces else None


def plan_pieces(plan: DatasetPlan, runs: Sequence[SpilledRun], writers: ShardWriters, *,
                compression: Compression, file_format: FileFormat) -> dict[int, tuple[PieceSpec, ...]]:
    """The pieces of each shard cut into more than one (by shard number in ``plan.shards``); empty when
    every shard stays whole (one writer, joinable formats only: ``core.pieces.concatenable``).

    Reads every run's index once (the cuts need the records' hashes and sizes of the shards cut).
    """
    if writers.writers <= 1 or not concatenable(compression, file_format) or not plan.shards:
        return {}
    counts = pieces_per_shard([s.num_record_bytes for s in plan.shards], writers=writers.writers,
                              min_piece_bytes=writers.min_piece_bytes)
    cut = {number: plan.shards[number] for number, count in enumerate(counts) if count > 1}
    if not cut:
        return {}
    found: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {number: [] for number in cut}
    for run in sorted(runs, key=lambda r: r.path):
        index = read_run_index(run)
        for number, spec in cut.items():
            part = index.slice(spec.hash_lo, spec.hash_hi)
            if part.num_entries:
                a = int(np.searchsorted(index.hashes, part.hashes[0], side="left"))
                found[number].append((part.hashes, index.framed_sizes[a:a + part.num_entries]))
    pieces = {}
    for number, spec in cut.items():
        hashes = np.concatenate([h for h, _ in found[number]]) if found[number] else np.zeros(0, np.uint64)
        sizes = np.concatenate([s for _, s in found[number]]) if found[number] else np.zeros(0, np.int64)
        shard_pieces = cut_pieces(spec, hashes, sizes, counts[number])
        if len(shard_pieces) > 1:
            pieces[number] = shard_pieces
    return pieces


def join_pieces(target: ShardTarget, written: Sequence[WrittenPiece], *, pieces_dir: str, direct: bool,
                dali_index: bool) -> ShardInfo:
    """Concatenates a shard's pieces (any order of ``written``) into ``target.temp_path``; its ``ShardInfo``.

    Part of a crash-safe order: every piece written (again, to the same bytes, after a retry); the shard file
    (a kill leaves it with no finished record); its DALI index from the pieces' (offsets shifted); the shard's
    finished record (only now does it look finished); then the pieces are deleted (``JoinPiecesFn``).

    Raises:
        CorruptShardError: a piece is missing, or its records, bytes or CRC32C are not what the plan
            and its writer say (the message names the shard and the piece).
        DiskFullError: when the disk fills (the partial shard file is removed).
    """
    spec = target.spec
    pieces = sorted(written, key=lambda w: w.piece.index)
    count = pieces[0].piece.count if pieces else 0
    if [w.piece.index for w in pieces] != list(range(count)) or any(w.piece.shard != spec for w in pieces):
        raise PipelineInvariantError(f"shard {target.filename}", f"expected its {count} planned pieces, got "
                                                                 f"{[w.piece.index for w in pieces]}")
    for w in pieces:
        if (w.info.num_records, w.info.num_record_bytes) != (w.piece.num_records, w.piece.num_record_bytes):
            raise _piece_error(target, w, f"its writer wrote {w.info.num_records} records / "
                                          f"{w.info.num_record_bytes} bytes")
    with raise_typed_when_full(target.temp_path, spec.num_record_bytes, partial=target.temp_path):
        out = storage.HashingWriter(direct_io.open_write(target.temp_path, direct=direct), Compression.NONE)
        try:
            for w in pieces:
                _copy_piece(target, w, storage.join(pieces_dir, w.info.filename), out)
        except BaseException:
            out.close()
            raise
        crc32c = out.close()
    if dali_index:
        _join_dali_indexes(target, pieces, pieces_dir)
    return ShardInfo(filename=target.filename, split=spec.split, index=spec.index, num_records=spec.num_records,
                     num_bytes=out.num_bytes, num_record_bytes=spec.num_record_bytes, crc32c=crc32c,
                     dali_index=dali_index_name(target.filename) if dali_index else None)


def _copy_piece(target: ShardTarget, written: WrittenPiece, path: str, out: storage.HashingWriter) -> None:
    """Appends the piece at ``path`` to ``out``, checking its size and CRC32C as it goes. Read through the
    page cache: its writer has just written it there (``WriteShardFn._write_piece``)."""
    checksum = google_crc32c.Checksum()
    size = 0
    try:
        with storage.open_read(path) as handle:
            while chunk := handle.read(JOIN_CHUNK_BYTES):
                checksum.update(chunk)
                size += len(chunk)
                out.write(chunk)
    except FileNotFoundError as err:
        raise _piece_error(target, written, f"its file {path!r} is missing") from err
    crc32c = checksum.hexdigest().decode("ascii")
    if size != written.piece.num_record_bytes or crc32c != written.info.crc32c:
        raise _piece_error(target, written, f"its file has {size} bytes, CRC32C {crc32c}; its writer wrote "
                                            f"{written.info.num_bytes} bytes, CRC32C {written.info.crc32c}")


def _piece_error(target: ShardTarget, written: WrittenPiece, found: str) -> CorruptShardError:
    piece = written.piece
    return CorruptShardError(target.temp_path, f"piece {piece.index + 1} of {piece.count} ({written.info.filename}): "
                                               f"{found}; the plan expected {piece.num_records} records / "
                                               f"{piece.num_record_bytes} bytes")


def _join_dali_indexes(target: ShardTarget, pieces: Sequence[WrittenPiece], pieces_dir: str) -> None:
    """The shard's DALI index from its pieces' (the records' framed sizes, in order; offsets made again)."""
    builder = DaliIndexBuilder()
    for w in pieces:
        fields = storage.read_bytes(storage.join(pieces_dir, dali_index_name(w.info.filename))).split()
        for size in fields[1::2]:  # "<offset> <size>" per record
            builder.add(int(size))
    storage.write_bytes_atomic(dali_index_name(target.temp_path), builder.text())


class JoinPiecesFn(WriteShardFn):
    """``(shard number, [ShardInfo] | [WrittenPiece...])`` in, the shard's ``ShardInfo`` out.

    A shard written whole passes through; one written in pieces is joined (``join_pieces``), recorded
    as finished, and its pieces deleted. One reused from a killed build (every piece task found it
    finished) passes through too.
    """

    def process(self, group: tuple[int, Iterable[ShardInfo | WrittenPiece]]) -> Iterator[ShardInfo]:
        number, values = group
        found = list(values)
        whole = [v for v in found if isinstance(v, ShardInfo)]
        if whole:
            yield whole[0]  # written whole, or reused (each piece task found the same finished shard)
            return
        pieces = [v for v in found if isinstance(v, WrittenPiece)]
        if not pieces:
            raise PipelineInvariantError(f"shard {number}", "nothing written for it")
        spec = pieces[0].piece.shard
        target = self._target(spec)
        info = join_pieces(target, pieces, pieces_dir=self._pieces_dir, direct=self._direct_io,
                           dali_index=self._dali_index)
        with raise_typed_when_full(target.temp_path, 1 << 10):
            record_finished_shard(target.temp_path, spec, info)
        self._count_shard(spec, info.num_bytes)
        paths = [storage.join(self._pieces_dir, w.info.filename) for w in pieces]
        if self._dali_index:
            paths += [dali_index_name(path) for path in paths]
        storage.delete_if_exists(paths)
        yield info
