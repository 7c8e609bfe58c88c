"""Reading a dataset as dicts of NumPy arrays, without TensorFlow's runtime.

Every record's CRCs and each shard's record count are checked; workers get the same records as with tf.data.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from beam_tfrecord.core.record_schema import holds_verbatim_payloads
from beam_tfrecord.errors import ReaderError
from beam_tfrecord.reader.decode.block_decode import BlockDecoder, rebatch, rows
from beam_tfrecord.reader.decode.numpy_decode import Example
from beam_tfrecord.reader.decode.ragged import packed_batches
from beam_tfrecord.reader.follow import DEFAULT_FOLLOW_POLL_SECONDS, FollowState
from beam_tfrecord.reader.follow_reader import Decoding, follow_reader
from beam_tfrecord.reader.options import ImageDecoding, check_positive
from beam_tfrecord.reader.order import mixing
from beam_tfrecord.reader.order.mixing import DatasetPaths, EpochOrder, open_sources
from beam_tfrecord.reader.order.orders import StoredOrder
from beam_tfrecord.reader.order.read_plan import ReadPlan
from beam_tfrecord.reader.order.resume import length, rank_share, take
from beam_tfrecord.remote_reads.options import RemoteReads, reads_with_cache
from beam_tfrecord.storage.deadlines import deadlines_in_force


def iter_examples(plan: ReadPlan, *, image_decoding: ImageDecoding | None = None,
                  verify: bool = True, reads: RemoteReads | None = None) -> Iterator[Example]:
    """Yields one dict of NumPy values per record of a read plan, in stored order.

    Args:
        plan: what to read (``plan_read``).
        image_decoding: decode ``Image`` features with Pillow; None keeps the encoded bytes.
        verify: check every record's CRCs.
        reads: how ``gs://`` shards are fetched (``remote_reads.RemoteReads``); default ``RemoteReads()``.

    Raises:
        MissingShardError, CorruptShardError: on missing or damaged shards (a shard read to its end
            is checked against the manifest's count).
    """
    decoder = BlockDecoder(plan.manifest.schema, image_decoding=image_decoding,
                           verbatim=holds_verbatim_payloads(plan.manifest.metadata))
    for block in StoredOrder(plan, verify=verify, reads=reads).iter_blocks(0, plan.num_records):
        yield from rows(decoder.decode(block))


def read_numpy(path: DatasetPaths, *, split: str = "train", num_workers: int = 1, worker_index: int = 0,
               shuffle: bool = False, seed: int = 0, epoch: int = 0, shuffle_buffer: int = 10_000,
               image_decoding: ImageDecoding | None = None, verify: bool = True, start: int = 0,
               cache_dir: str | None = None, cache_limit: int | None = None,
               remote_reads: RemoteReads | None = None, batch_size: int | None = None, follow: bool = False,
               follow_poll_seconds: float = DEFAULT_FOLLOW_POLL_SECONDS, follow_timeout_seconds: float | None = None,
               follow_state: FollowState | dict[str, Any] | None = None) -> Iterator[Any]:
    """Reads a split expression of one dataset, or a weighted mixture of several, as dicts of NumPy values.

    The epoch's order depends only on the datasets, the split expression, ``seed``, ``epoch`` and
    the shuffle options; each worker reads an equal, contiguous share of it (the
    manifests' per-shard counts decide the record-level split, as for ``read_dataset``; the last
    ``total % num_workers`` examples are left out). With ``shuffle``, an ArrayRecord dataset is
    read in a seeded permutation of all its records, a TFRecord dataset in shuffled shard order
    with records permuted in windows of ``shuffle_buffer`` (docs/reading.md, "Mixing datasets").

    Args:
        path: dataset directory (the one holding manifest.json), local or ``gs://``; or a mapping
            ``{path: weight}`` to mix datasets in proportion to their weights (the epoch ends when the
            first dataset is exhausted at its weight).
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
        cache_dir: a local directory to keep ``gs://`` shards in once read (a later epoch reads them
            from there; shared safely by the processes of one machine). None: no cache.
        cache_limit: the most bytes ``cache_dir`` keeps (least recently used shards are removed).
        remote_reads: how ``gs://`` shards are fetched (``RemoteReads``: connections, range size, bytes
            in flight); ``cache_dir`` and ``cache_limit`` given here take precedence over its own.
        batch_size: yield batches of this many examples (the last may be smaller) as columns: fixed-shape
            features as arrays, bytes and variable-length lists as ``RaggedArray`` (flat values and offsets;
            items are views of them); None: one example at a time.
        follow: after what is published, wait for each next commit of ``path`` (a root's LATEST moves, a
            directory's or prefix's manifest is rewritten) and yield its new records, exactly once each, in stored
            order; returns a ``FollowReader`` (``state()``, ``close()``). Workers take every ``num_workers``-th
            new shard of each commit. One dataset and one split name; no shuffle. docs/reading.md, "Following a
            dataset as it grows".
        follow_poll_seconds: with ``follow``, seconds between two looks for a new commit.
        follow_timeout_seconds: with ``follow``, end after this long without a new commit; None: never.
        follow_state: with ``follow``, a ``FollowReader.state()`` (or its ``to_dict()``) to resume from.

    Raises:
        ReaderError: on bad options (worker index, start, weights, batch size).
        IncompatibleSchemasError: when mixed datasets' schemas differ.
        MissingShardError, CorruptShardError: on missing or damaged shards, naming the shard and offset.
    """
    check_positive("shuffle_buffer", shuffle_buffer)
    if batch_size is not None:
        check_positive("batch_size", batch_size)
    reads = reads_with_cache(remote_reads, cache_dir=cache_dir, cache_limit=cache_limit)
    if not 0 <= worker_index < max(num_workers, 1):
        raise ReaderError(f"worker_index must be in [0, {num_workers}), got {worker_index}")
    if follow:
        return follow_reader(path, split=split, num_workers=num_workers, worker_index=worker_index, shuffle=shuffle,
                             poll_seconds=follow_poll_seconds, timeout_seconds=follow_timeout_seconds,
                             state=follow_state, decoding=Decoding(image_decoding, verify, reads, batch_size))
    with deadlines_in_force(reads.deadlines):
        sources = open_sources(path, split=split)
    order = EpochOrder(sources, seed=seed, epoch=epoch, shuffle=shuffle, shuffle_buffer=shuffle_buffer, verify=verify,
                       reads=reads)
    share = rank_share(((0, order.total),), num_workers, worker_index)
    if order.total and not share:
        raise ReaderError(f"{order.total} records cannot give each of {num_workers} workers at least one")
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= length(share):
        raise ReaderError(f"start must be in [0, {length(share)}] (this worker's examples), got {start!r}")
    positions = take(share, start, length(share))
    if batch_size is None:
        return mixing.iter_examples(order, positions, image_decoding=image_decoding)
    columns = mixing.iter_columns(order, positions, image_decoding=image_decoding, batch_rows=batch_size)
    return packed_batches(rebatch(columns, batch_size))

