"""Reading a dataset as dicts of NumPy arrays, without TensorFlow's runtime.

Shards are read through ``storage`` (local or ``gs://``, no Beam), every record's CRCs are
checked, and each shard read to its end is checked against the manifest's record count. Work is
split between workers exactly as the tf.data reader splits it (same records, same counts).
Which records come in which order (mixtures, shuffles, resume) is decided in ``mixing``,
``orders`` and ``resume``.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterable, Iterator, Sequence

from beam_tfrecord.errors import ReaderError
from beam_tfrecord.reader import mixing
from beam_tfrecord.reader.mixing import DatasetPaths, EpochOrder, open_sources
from beam_tfrecord.reader.numpy_decode import Example, RecordDecoder
from beam_tfrecord.reader.options import ImageDecoding, check_positive
from beam_tfrecord.reader.read_plan import ReadPlan
from beam_tfrecord.reader.resume import length, rank_share, take
from beam_tfrecord.reader.slicing import ReadSegment


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


def read_numpy(path: DatasetPaths, *, split: str = "train", num_workers: int = 1, worker_index: int = 0,
               shuffle: bool = False, seed: int = 0, epoch: int = 0, shuffle_buffer: int = 10_000,
               image_decoding: ImageDecoding | None = None, verify: bool = True, start: int = 0) -> Iterator[Example]:
    """Reads a split expression of one dataset, or a weighted mixture of several, as dicts of NumPy values.

    The epoch's order depends only on the datasets, the split expression, ``seed``, ``epoch`` and
    the shuffle options (``mixing``); each worker reads an equal, contiguous share of it (the
    manifests' per-shard counts decide the record-level split, as for ``read_dataset``; the last
    ``total % num_workers`` examples are left out). With ``shuffle``, an ArrayRecord dataset is
    read in a seeded permutation of all its records, a TFRecord dataset in shuffled shard order
    with records permuted in windows of ``shuffle_buffer`` (``orders``).

    Args:
        path: dataset directory (the one holding manifest.json), local or ``gs://``; or a mapping
            ``{path: weight}`` to mix datasets in proportion to their weights (see ``mixing``: the
            epoch ends when the first dataset is exhausted at its weight).
        split: split expression: ``"train"``, ``"train[:10%]"``, ``"train[1000:2000]"``, ``"train+validation"``.
        num_workers: workers sharing the epoch.
        worker_index: this worker, in ``[0, num_workers)``.
        shuffle: shuffle each dataset, reproducibly from ``seed`` and ``epoch``.
        seed: the seed of the shuffle and of the mixture's interleaving, the same on every worker.
        epoch: epoch number, so that each epoch has its own order.
        shuffle_buffer: records in a TFRecord shuffle window.
        image_decoding: decode ``Image`` features with Pillow; None keeps the encoded bytes.
        verify: check every record's CRCs (ArrayRecord checks its own chunk hashes always).
        start: examples of this worker's share already consumed: the rest of the same order follows.

    Raises:
        ReaderError: on bad options (worker index, start, weights).
        IncompatibleSchemasError: when mixed datasets' schemas differ.
        MissingShardError, CorruptShardError: on missing or damaged shards, naming the shard and offset.
    """
    check_positive("shuffle_buffer", shuffle_buffer)
    if not 0 <= worker_index < max(num_workers, 1):
        raise ReaderError(f"worker_index must be in [0, {num_workers}), got {worker_index}")
    sources = open_sources(path, split=split)
    order = EpochOrder(sources, seed=seed, epoch=epoch, shuffle=shuffle, shuffle_buffer=shuffle_buffer, verify=verify)
    share = rank_share(((0, order.total),), num_workers, worker_index)
    if order.total and not share:
        raise ReaderError(f"{order.total} records cannot give each of {num_workers} workers at least one")
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= length(share):
        raise ReaderError(f"start must be in [0, {length(share)}] (this worker's examples), got {start!r}")
    return mixing.iter_examples(order, take(share, start, length(share)), image_decoding=image_decoding)
