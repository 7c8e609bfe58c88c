"""Reading a dataset as dicts of NumPy arrays, without TensorFlow's runtime.

Shards are read through ``storage`` (local or ``gs://``, no Beam), every record's CRCs are
checked, and each shard read to its end is checked against the manifest's record count. Work is
split between workers exactly as the tf.data reader splits it (same records, same counts).

ArrayRecord datasets are read the same way in order; shuffled, they get a true global shuffle
(see ``random_access``) instead of shard order plus a buffer.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterable, Iterator, Sequence

from beam_tfrecord.core.blocks import RecordBlock
from beam_tfrecord.dataset import open_dataset
from beam_tfrecord.errors import ReaderError
from beam_tfrecord.formats import shard_format
from beam_tfrecord.reader.block_decode import BlockDecoder, Columns, rows
from beam_tfrecord.reader.numpy_decode import Example
from beam_tfrecord.reader.options import ImageDecoding, check_positive
from beam_tfrecord.reader.random_access import RandomAccessRecords, global_order
from beam_tfrecord.reader.read_plan import ReadPlan, plan_read
from beam_tfrecord.reader.slicing import ReadSegment, split_evenly, sub_range


def iter_segment(plan: ReadPlan, segment: ReadSegment, *, verify: bool = True) -> Iterator[tuple[bytes, int]]:
    """Yields (record, offset) for the records of one segment, checking the shard against the manifest.

    The offset is where the record is: a byte offset for TFRecord, the record's index for ArrayRecord.

    Args:
        plan: the read plan the segment belongs to.
        segment: which records of which shard.
        verify: check every record's CRCs.

    Raises:
        MissingShardError: the shard is not on storage.
        CorruptShardError: a bad CRC, a truncated record, or fewer/more records than the manifest lists
            (more is only noticed when the segment reaches the shard's end).
    """
    with plan.open_shard(segment, verify=verify) as reader:
        yield from reader.iter_records(segment.skip, segment.skip + segment.take)


def iter_blocks(plan: ReadPlan, segments: Sequence[ReadSegment], *, verify: bool = True) -> Iterator[RecordBlock]:
    """Yields the records of ``segments`` in blocks (``core.blocks``), in order, checked as ``iter_segment`` checks.

    Raises:
        MissingShardError, CorruptShardError: as ``iter_segment``.
    """
    for segment in segments:
        with plan.open_shard(segment, verify=verify) as reader:
            yield from reader.iter_blocks(segment.skip, segment.skip + segment.take)


def iter_record_blocks(plan: ReadPlan, segments: Sequence[ReadSegment], *,
                       verify: bool = True) -> Iterator[list[bytes]]:
    """``iter_blocks`` as lists of records (what tf.data is fed for formats it cannot read)."""
    for block in iter_blocks(plan, segments, verify=verify):
        yield [block.record(i) for i in range(len(block))]


def iter_columns(plan: ReadPlan, segments: Sequence[ReadSegment], *, image_decoding: ImageDecoding | None = None,
                 verify: bool = True) -> Iterator[Columns]:
    """Yields the records of ``segments`` decoded a block at a time, as columns (``block_decode``), in order.

    Raises:
        MissingShardError, CorruptShardError: as ``iter_segment``, and on records that do not match the schema.
    """
    decoder = BlockDecoder(plan.manifest.schema, image_decoding=image_decoding)
    for block in iter_blocks(plan, segments, verify=verify):
        yield decoder.decode(block)


def mix_seed(*parts: int) -> int:
    """One seed from several (seed, epoch, worker...), the same in every process (unlike ``hash``)."""
    digest = hashlib.sha256(",".join(str(p) for p in parts).encode("ascii")).digest()
    return int.from_bytes(digest[:8], "little")


def shuffled(items: Iterable[Example], buffer_size: int, rng: random.Random) -> Iterator[Example]:
    """Shuffles a stream through a buffer of ``buffer_size`` items (as tf.data's ``shuffle``)."""
    buffer: list[Example] = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        index = rng.randrange(buffer_size)
        yield buffer[index]
        buffer[index] = item
    rng.shuffle(buffer)
    yield from buffer


def iter_examples(plan: ReadPlan, *, segments: Sequence[ReadSegment] | None = None, shuffle: bool = False,
                  seed: int = 0, shuffle_buffer: int = 10_000, image_decoding: ImageDecoding | None = None,
                  verify: bool = True) -> Iterator[Example]:
    """Yields one dict of NumPy values per record of a read plan.

    Args:
        plan: what to read (``plan_read``).
        segments: a sub-range of the plan's segments to read instead of all of them.
        shuffle: shuffle segment order and records (through ``shuffle_buffer``), reproducibly from ``seed``.
        seed: shuffle seed.
        shuffle_buffer: records held in the shuffle buffer.
        image_decoding: decode ``Image`` features with Pillow; None keeps the encoded bytes.
        verify: check every record's CRCs.
    """
    check_positive("shuffle_buffer", shuffle_buffer)
    chosen = list(plan.segments if segments is None else segments)
    rng = random.Random(seed)
    if shuffle:
        rng.shuffle(chosen)

    def records() -> Iterator[Example]:
        for columns in iter_columns(plan, chosen, image_decoding=image_decoding, verify=verify):
            yield from rows(columns)

    yield from shuffled(records(), shuffle_buffer, rng) if shuffle else records()


def iter_global_shuffle(plan: ReadPlan, *, seed: int, epoch: int, rank: int = 0, world_size: int = 1,
                        start: int = 0, image_decoding: ImageDecoding | None = None, worker: int = 0,
                        num_workers: int = 1) -> Iterator[Example]:
    """Yields rank ``rank``'s examples of an ArrayRecord read plan in the epoch's global order.

    Args:
        plan: the read plan of every rank's records (``plan_read`` with one worker).
        seed, epoch: decide the permutation, the same on every rank.
        rank, world_size: this rank's equal share of the permutation.
        start: examples of this rank's epoch already consumed (to resume).
        image_decoding: decode ``Image`` features with Pillow; None keeps the encoded bytes.
        worker, num_workers: read only this worker's near-equal run of the rank's share (the
            DataLoader workers of one rank split it so).
    """
    yield from (example for columns in iter_global_columns(
        plan, seed=seed, epoch=epoch, rank=rank, world_size=world_size, start=start, image_decoding=image_decoding,
        worker=worker, num_workers=num_workers) for example in rows(columns))


def worker_share(count: int, num_workers: int, worker: int, *, unit: int = 1) -> tuple[int, int]:
    """[start, stop) of ``count`` items for one of ``num_workers`` workers: near-equal runs of whole
    ``unit``s (batches), so that only the last run can end with a partial unit."""
    lo, hi = split_evenly(-(-count // unit), num_workers, worker)
    return min(lo * unit, count), min(hi * unit, count)


def iter_global_columns(plan: ReadPlan, *, seed: int, epoch: int, rank: int = 0, world_size: int = 1,
                        start: int = 0, image_decoding: ImageDecoding | None = None, worker: int = 0,
                        num_workers: int = 1, unit: int = 1) -> Iterator[Columns]:
    """``iter_global_shuffle``'s examples, decoded a block at a time, as columns (``block_decode``);
    workers split the rank's share in whole ``unit``s (``worker_share``)."""
    decoder = BlockDecoder(plan.manifest.schema, image_decoding=image_decoding)
    records = RandomAccessRecords(plan)
    positions = global_order(len(records), seed=seed, epoch=epoch, rank=rank, world_size=world_size, start=start)
    lo, hi = worker_share(len(positions), num_workers, worker, unit=unit)
    try:
        for found in records.iter_blocks(positions[lo:hi]):
            yield decoder.decode(RecordBlock.of_records("", [record for record, _, _ in found],
                                                        [index for _, _, index in found],
                                                        paths=[path for _, path, _ in found]))
    finally:
        records.close()


def iter_global_blocks(plan: ReadPlan, *, seed: int, epoch: int, rank: int = 0,
                       world_size: int = 1) -> Iterator[list[bytes]]:
    """Rank ``rank``'s records of an ArrayRecord read plan in the epoch's global order, a block at a time."""
    records = RandomAccessRecords(plan)
    try:
        positions = global_order(len(records), seed=seed, epoch=epoch, rank=rank, world_size=world_size)
        for found in records.iter_blocks(positions):
            yield [record for record, _, _ in found]
    finally:
        records.close()


def read_numpy(path: str, *, split: str = "train", num_workers: int = 1, worker_index: int = 0,
               shuffle: bool = False, seed: int = 0, epoch: int = 0, shuffle_buffer: int = 10_000,
               image_decoding: ImageDecoding | None = None, verify: bool = True, start: int = 0) -> Iterator[Example]:
    """Reads a split expression as one dict of NumPy values per example, without TensorFlow.

    Every worker gets the same number of examples (the manifest's per-shard counts decide the
    record-level split, as for ``read_dataset``). On an ArrayRecord dataset, ``shuffle`` is a true
    global shuffle: each epoch, a seeded permutation of every record of the split expression,
    dealt out to the workers in equal shares (``shuffle_buffer`` is not used).

    Args:
        path: dataset directory (the one holding manifest.json), local or ``gs://``.
        split: split expression: ``"train"``, ``"train[:10%]"``, ``"train[1000:2000]"``, ``"train+validation"``.
        num_workers: workers sharing the split.
        worker_index: this worker, in ``[0, num_workers)``.
        shuffle: shuffle shard order and records, reproducibly from ``seed`` and ``epoch``.
        seed: shuffle seed, the same on every worker.
        epoch: epoch number, so that each epoch has its own order.
        shuffle_buffer: records held in the shuffle buffer.
        image_decoding: decode ``Image`` features with Pillow; None keeps the encoded bytes.
        verify: check every record's CRCs (ArrayRecord checks its own chunk hashes always).
        start: examples of this worker's epoch already consumed: resume after them (same seed,
            epoch and worker: the rest of the same order).

    Raises:
        MissingShardError, CorruptShardError: on missing or damaged shards, naming the shard and offset.
    """
    dataset = open_dataset(path)
    if shuffle and shard_format(dataset.manifest.file_format).random_access:
        return iter_global_shuffle(plan_read(path, split=split, dataset=dataset), seed=seed, epoch=epoch,
                                   rank=worker_index, world_size=num_workers, start=start,
                                   image_decoding=image_decoding)
    plan = plan_read(path, split=split, num_workers=num_workers, worker_index=worker_index, dataset=dataset)
    if not 0 <= start <= plan.num_records:
        raise ReaderError(f"start must be in [0, {plan.num_records}] (this worker's examples), got {start}")
    if shuffle:  # the buffered order is fixed by the seed: a resume reads (and drops) what was consumed
        examples = iter_examples(plan, shuffle=True, seed=mix_seed(seed, epoch, worker_index),
                                 shuffle_buffer=shuffle_buffer, image_decoding=image_decoding, verify=verify)
        return itertools.islice(examples, start, None)
    return iter_examples(plan, segments=sub_range(plan.segments, start, plan.num_records),
                         image_decoding=image_decoding, verify=verify)
