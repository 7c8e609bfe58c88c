"""Reading a dataset as dicts of NumPy arrays, without TensorFlow's runtime.

Shards are read through Beam's ``FileSystems`` (local or ``gs://``), every record's CRCs are
checked, and each shard read to its end is checked against the manifest's record count. Work is
split between workers exactly as the tf.data reader splits it (same records, same counts).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Iterator, Sequence

from beam_tfrecord import storage
from beam_tfrecord.core.framing import FRAMING_BYTES, iter_records
from beam_tfrecord.errors import CorruptShardError, MissingShardError
from beam_tfrecord.reader.numpy_decode import Example, RecordDecoder
from beam_tfrecord.reader.options import ImageDecoding, check_positive
from beam_tfrecord.reader.read_plan import ReadPlan, plan_read
from beam_tfrecord.reader.slicing import ReadSegment


def iter_segment(plan: ReadPlan, segment: ReadSegment, *, verify: bool = True) -> Iterator[tuple[bytes, int]]:
    """Yields (record, offset) for the records of one segment, checking the shard against the manifest.

    Args:
        plan: the read plan the segment belongs to.
        segment: which records of which shard.
        verify: check every record's CRCs.

    Raises:
        MissingShardError: the shard is not on storage.
        CorruptShardError: a bad CRC, a truncated record, or fewer/more records than the manifest lists
            (more is only noticed when the segment reaches the shard's end).
    """
    path = plan.path(segment)
    if not storage.exists(path):
        raise MissingShardError(path)
    stop = segment.skip + segment.take
    offset = 0
    index = 0
    with storage.open_read(path, plan.manifest.compression) as handle:
        for record in iter_records(handle, name=path, verify=verify):
            if index == stop:
                raise CorruptShardError(path, f"more records than the {segment.shard.num_records} the manifest "
                                              "lists", offset)
            if index >= segment.skip:
                yield record, offset
            offset += len(record) + FRAMING_BYTES
            index += 1
            if index == stop and not segment.reaches_end:
                return
    if index < stop:
        raise CorruptShardError(path, f"ended after {index} records; the manifest lists "
                                      f"{segment.shard.num_records}", offset)


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
    decoder = RecordDecoder(plan.manifest.schema, image_decoding=image_decoding)
    chosen = list(plan.segments if segments is None else segments)
    rng = random.Random(seed)
    if shuffle:
        rng.shuffle(chosen)

    def records() -> Iterator[Example]:
        for segment in chosen:
            path = plan.path(segment)
            for record, offset in iter_segment(plan, segment, verify=verify):
                yield decoder.decode(record, shard=path, offset=offset)

    yield from shuffled(records(), shuffle_buffer, rng) if shuffle else records()


def read_numpy(path: str, *, split: str = "train", num_workers: int = 1, worker_index: int = 0,
               shuffle: bool = False, seed: int = 0, epoch: int = 0, shuffle_buffer: int = 10_000,
               image_decoding: ImageDecoding | None = None, verify: bool = True) -> Iterator[Example]:
    """Reads a split expression as one dict of NumPy values per example, without TensorFlow.

    Every worker gets the same number of examples (the manifest's per-shard counts decide the
    record-level split, as for ``read_dataset``).

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
        verify: check every record's CRCs.

    Raises:
        MissingShardError, CorruptShardError: on missing or damaged shards, naming the shard and offset.
    """
    plan = plan_read(path, split=split, num_workers=num_workers, worker_index=worker_index)
    return iter_examples(plan, shuffle=shuffle, seed=mix_seed(seed, epoch, worker_index), shuffle_buffer=shuffle_buffer,
                         image_decoding=image_decoding, verify=verify)
