"""read_dataset: a published dataset as a fast, exactly sharded tf.data.Dataset of feature dicts."""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import itertools
import os
import random
from collections.abc import Callable, Iterator

import numpy as np

from beam_tfrecord.core.units import MiB
from beam_tfrecord.errors import ReaderError
from beam_tfrecord.reader.mixing import DatasetPaths, worker_plans
from beam_tfrecord.reader.options import ImageDecoding, VarLen, check_label_key, check_positive
from beam_tfrecord.reader.read_plan import ReadPlan, plan_read
from beam_tfrecord.reader.tf_spec import ParsedBatch, make_batch_parser, pad_var_len, tf  # imports TensorFlow quietly
from beam_tfrecord.remote_reads import RemoteReads, fetched_remotely, reads_with_cache
from beam_tfrecord.shard_fetch import FetchedShard

_PREFETCH_BATCHES = 2
_MAX_PARALLEL_READS = 16  # shards read at once per worker
# Records per parse_example call at least: small batches are parsed in groups of this size, then
# cut to size with rebatch (3x faster at batch size 32 than one parse_example per batch)...
_MIN_PARSE_BATCH = 1024
# ...unless they hold more bytes than this: large records gain nothing from grouping, and each byte of a
# group is copied once more and waits for the group's last record (150 KB images in groups of 1024 took
# 0.47 CPU-s an epoch of 300 MB locally against 0.34 in batches of 256).
_PARSE_BATCH_BYTES = 4 * MiB


def _parse_batch(plan: ReadPlan, batch_size: int) -> int:
    """Records per ``parse_example`` call: the multiple of ``batch_size`` nearest above the smaller of
    ``_MIN_PARSE_BATCH`` records and ``_PARSE_BATCH_BYTES`` of the plan's mean record (framed, as stored)."""
    num_records = sum(segment.shard.num_records for segment in plan.segments)
    record_bytes = sum(segment.shard.num_record_bytes for segment in plan.segments) / max(num_records, 1)
    wanted = min(_MIN_PARSE_BATCH, max(1, int(_PARSE_BATCH_BYTES / max(record_bytes, 1.0))))
    return batch_size * -(-wanted // batch_size)


def _worker(num_workers: int | None, worker_index: int | None,
            input_context: tf.distribute.InputContext | None) -> tuple[int, int]:
    """(num_workers, worker_index) from an InputContext or the explicit arguments."""
    if input_context is not None:
        if num_workers is not None or worker_index is not None:
            raise ReaderError("pass either input_context or num_workers/worker_index, not both")
        return input_context.num_input_pipelines, input_context.input_pipeline_id
    if (num_workers is None) != (worker_index is None):
        raise ReaderError(f"pass num_workers and worker_index together, got num_workers={num_workers!r}, "
                          f"worker_index={worker_index!r}")
    return (num_workers, worker_index) if num_workers is not None else (1, 0)  # type: ignore[return-value]


def _default_parallel_reads(plan: ReadPlan, shuffle: bool) -> int:
    """Sequential reading is fastest from a local disk; remote storage and shuffling want several shards at once."""
    remote = any("://" in plan.path(s) for s in plan.segments)
    return _MAX_PARALLEL_READS if shuffle or remote else 1


def _chain(plan: ReadPlan, compression: str) -> tf.data.Dataset:
    """The plan's records read one shard after the other, with as few dataset stages as possible.

    Runs of whole shards become one ``TFRecordDataset`` over their files (exactly the raw reader);
    only partial shards get ``skip``/``take``, each a stage that costs per record.
    """
    pieces: list[tf.data.Dataset] = []
    whole: list[str] = []
    for segment in plan.segments:
        if segment.skip == 0 and segment.reaches_end:
            whole.append(plan.path(segment))
            continue
        if whole:
            pieces.append(tf.data.TFRecordDataset(whole, compression_type=compression))
            whole = []
        piece = tf.data.TFRecordDataset(plan.path(segment), compression_type=compression)
        piece = piece.skip(segment.skip) if segment.skip else piece
        pieces.append(piece if segment.reaches_end else piece.take(segment.take))
    if whole:
        pieces.append(tf.data.TFRecordDataset(whole, compression_type=compression))
    records = pieces[0]
    for piece in pieces[1:]:
        records = records.concatenate(piece)
    return records


def read_records(plan: ReadPlan, *, shuffle_files: bool = False, seed: int | None = None,
                 num_parallel_reads: int = 1, verify_count: bool = True,
                 reads: RemoteReads | None = None) -> tf.data.Dataset:
    """The serialized records of a read plan.

    Each shard segment is ``TFRecordDataset(shard).skip(skip).take(take)``. With one read at a time
    and no shuffling, segments are chained (as fast as the raw reader); otherwise they are
    interleaved, shard order shuffled each epoch if asked, in a deterministic order for a given seed.
    With ``verify_count``, reading more or fewer records than the plan is an error (a shard that
    does not hold its manifest count must not give one worker more steps than the others).

    ``gs://`` shards are fetched by ``shard_fetch`` (parallel ranged reads ahead of the reader; TensorFlow's
    own GCS filesystem reads one sequential stream per shard, and cannot be pointed at an emulator), so
    ``num_parallel_reads`` does not apply there (``reads.connections`` does): in stored order each
    fetched shard is a local file read by ``TFRecordDataset`` (``fetched_files``); shuffled, and for a
    random-access format (ArrayRecord, which tf.data has no reader for) wherever it is, the format's
    own reader feeds blocks through ``from_generator`` (``block_records``).

    Raises:
        ReaderError: the shards are in a format tf.data cannot read here (naming the readers that can).
    """
    plan.require_reader("read_dataset")
    remote = any(fetched_remotely(plan.path(s)) for s in plan.segments)
    if plan.format.random_access or (remote and shuffle_files):
        records = block_records(plan, shuffle=shuffle_files, seed=seed, reads=reads)
    elif remote:
        records = fetched_files(plan, reads or RemoteReads())
    else:
        records = _read_segments(plan, shuffle_files=shuffle_files, seed=seed, num_parallel_reads=num_parallel_reads)
    if verify_count:
        records = records.apply(tf.data.experimental.assert_cardinality(plan.num_records))
    return records


_FILES_AHEAD = 2  # shards made local files ahead of tf.data's reader, on a thread of their own
_KEPT_FILES = 2  # fetched files kept after the generator moved past them (a prefetch of the paths is harmless)


def fetched_files(plan: ReadPlan, reads: RemoteReads) -> tf.data.Dataset:
    """The records of a plan over ``gs://`` TFRecord shards, in stored order, read by ``TFRecordDataset``.

    A generator hands each shard's segment to tf.data as a local file: the shard's cache entry, or a
    private temporary file the fetcher wrote (parallel ranged reads, read ahead across shards,
    CRC32C checked), made ``_FILES_AHEAD`` shards ahead on a thread of its own and removed
    ``_KEPT_FILES`` shards later (``flat_map`` reads one shard at a time: the one before the
    generator's last is done). TensorFlow's reader checks every record's CRCs.
    """
    compression = plan.manifest.compression.value
    segments = plan.segments

    def files() -> Iterator[tuple[str, int, int]]:
        fetcher = plan.fetcher(segments, reads)
        if fetcher is None:
            raise ReaderError(f"{plan.dataset_dir!r}: no gs:// shard to fetch")  # read_records checked
        writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fetched-files")
        ahead: collections.deque[tuple[int, FetchedShard | None, concurrent.futures.Future[str] | None]] = (
            collections.deque())
        done: collections.deque[FetchedShard] = collections.deque()

        numbers = iter(range(len(segments)))

        def make_ahead() -> None:
            number = next(numbers, None)
            if number is not None:
                fetched = fetcher.open(number)
                ahead.append((number, fetched, writer.submit(fetched.local_file) if fetched is not None else None))

        try:
            for _ in range(_FILES_AHEAD):
                make_ahead()
            while ahead:
                number, fetched, local = ahead.popleft()
                segment = segments[number]
                make_ahead()
                if fetched is None or local is None:  # a local shard: read where it is
                    yield plan.path(segment), segment.skip, segment.take
                    continue
                done.append(fetched)
                yield local.result(), segment.skip, segment.take
                while len(done) > _KEPT_FILES:
                    done.popleft().close()
        finally:
            writer.shutdown(wait=True, cancel_futures=True)
            for _, fetched, _ in ahead:
                if fetched is not None:
                    fetched.close()
            for fetched in done:
                fetched.close()
            fetcher.close()

    paths = tf.data.Dataset.from_generator(files, output_signature=(
        tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int64)))
    if all(segment.skip == 0 and segment.reaches_end for segment in segments):  # no per-record skip/take stages
        return paths.flat_map(lambda path, skip, take: tf.data.TFRecordDataset(path, compression_type=compression))
    return paths.flat_map(lambda path, skip, take: tf.data.TFRecordDataset(
        path, compression_type=compression).skip(skip).take(take))


def block_records(plan: ReadPlan, *, shuffle: bool, seed: int | None,
                  reads: RemoteReads | None = None) -> tf.data.Dataset:
    """The records of a plan read by the format's own reader in blocks (``numpy_reader.iter_record_blocks``).

    Each block crosses into TensorFlow as its buffer (one string) and the start and length of each
    record in it, cut into records by one vectorized ``tf.strings.substr``: no Python object per record.
    With ``shuffle``, each pass over the dataset (each epoch) is a new shuffle, as ``read_numpy`` gives
    it: the worker's equal share of the epoch's order of every record of the split expression (a
    true global shuffle on a random-access format, shuffled shards and windows on a sequential
    one; a random seed when ``seed`` is None).
    """
    from beam_tfrecord.reader.numpy_reader import iter_record_blocks

    epochs = itertools.count()
    base_seed = seed if seed is not None else random.SystemRandom().randrange(2**63)

    def blocks() -> Iterator[tuple[bytes, np.ndarray, np.ndarray]]:
        for block in iter_record_blocks(plan, shuffle=shuffle, seed=base_seed, epoch=next(epochs), reads=reads):
            if not len(block):
                continue
            first = int(block.starts.min())
            last = int((block.starts + block.lengths).max())
            yield block.buffer[first:last].tobytes(), block.starts - first, block.lengths

    generated = tf.data.Dataset.from_generator(blocks, output_signature=(
        tf.TensorSpec([], tf.string), tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.int64)))
    return generated.map(lambda buffer, starts, lengths: tf.strings.substr(buffer, starts, lengths)).unbatch()


def _read_segments(plan: ReadPlan, *, shuffle_files: bool, seed: int | None,
                   num_parallel_reads: int) -> tf.data.Dataset:
    """The plan's segments, chained or interleaved (see ``read_records``)."""
    segments = plan.segments
    compression = plan.manifest.compression.value
    if not segments:
        return tf.data.Dataset.from_tensor_slices(tf.constant([], tf.string))
    cycle_length = min(len(segments), num_parallel_reads)
    if cycle_length == 1 and not shuffle_files:
        return _chain(plan, compression)
    files = tf.data.Dataset.from_tensor_slices((
        tf.constant([plan.path(s) for s in segments], tf.string),
        tf.constant([s.skip for s in segments], tf.int64),
        tf.constant([s.take for s in segments], tf.int64)))
    if shuffle_files:
        files = files.shuffle(len(segments), seed=seed, reshuffle_each_iteration=True)

    def read(path: tf.Tensor, skip: tf.Tensor, take: tf.Tensor) -> tf.data.Dataset:
        return tf.data.TFRecordDataset(path, compression_type=compression).skip(skip).take(take)

    if cycle_length == 1:
        return files.flat_map(read)
    return files.interleave(read, cycle_length=cycle_length, block_length=16, num_parallel_calls=cycle_length,
                            deterministic=True)


def _parse_verified(records: tf.data.Dataset, plan: ReadPlan, batch_size: int,
                    parse: Callable[[tf.Tensor], ParsedBatch], *, drop_remainder: bool,
                    parallel_calls: int) -> tf.data.Dataset:
    """Batches of records parsed, failing when the shards hold more or fewer records than planned.

    The check costs nothing per record: the number of batches and the size of each are known
    from the plan, and any difference in the record count changes one or the other. It runs in
    the parallel parse calls, not on the thread that reads the records (the pipeline's slowest
    stage, which must stay as lean as the raw reader).
    """
    num_batches = -(-plan.num_records // batch_size)
    last_size = plan.num_records - (num_batches - 1) * batch_size

    def check_and_parse(index: tf.Tensor, batch: tf.Tensor) -> ParsedBatch:
        expected = tf.where(index == num_batches - 1, tf.constant(last_size, tf.int64), batch_size)
        check_size = tf.debugging.assert_equal(
            tf.size(batch, out_type=tf.int64), expected,
            message=f"the shards at {plan.dataset_dir} hold a different number of records than the manifest "
                    f"lists ({plan.num_records} planned for split {plan.split}, worker {plan.worker_index})")
        with tf.control_dependencies([check_size]):
            batch = tf.identity(batch)
        return parse(tf.ensure_shape(batch, [batch_size]) if drop_remainder else batch)

    batches = records.batch(batch_size).apply(tf.data.experimental.assert_cardinality(num_batches)).enumerate()
    if drop_remainder and last_size != batch_size:
        batches = batches.take(num_batches - 1)
    return batches.map(check_and_parse, num_parallel_calls=parallel_calls, deterministic=True)


def read_dataset(path: DatasetPaths, *, split: str = "train", batch_size: int = 32, shuffle: bool = False,
                 seed: int | None = None, shuffle_buffer: int = 10_000, repeat: bool = False,
                 cache: bool = False, drop_remainder: bool = False, num_workers: int | None = None,
                 worker_index: int | None = None, input_context: tf.distribute.InputContext | None = None,
                 label_key: str | None = None, var_len: VarLen = VarLen.RAGGED,
                 image_decoding: ImageDecoding | None = None, num_parallel_reads: int | None = None,
                 verify_count: bool = True, cache_dir: str | None = None, cache_limit: int | None = None,
                 remote_reads: RemoteReads | None = None) -> tf.data.Dataset:
    """Reads a split expression of a published dataset as batches of feature dicts.

    The parse spec, dtypes and shapes come from the manifest's schema. Records are batched
    *before* parsing (one ``parse_example`` per 1024 records or more, several times faster than the
    common ``map(parse_single_example).batch()``; smaller batches are cut from those with
    ``rebatch``), parsing is parallel (one call per CPU) and prefetched, and tf.data's per-record
    autotuning instrumentation is off. Every worker reads the same number of
    records (record-level skip/take from the manifest's per-shard counts; ``total % num_workers``
    records are left out), and the dataset's cardinality is exact, so ``len(dataset)`` gives
    ``steps_per_epoch`` (unless ``repeat``).
    Iterators can be saved and restored mid-epoch with ``tf.train.Checkpoint(iterator=...)``.

    Args:
        path: dataset directory (the one holding manifest.json) or versioned root, local or ``gs://``;
            or a mapping ``{path: weight}`` to mix datasets in proportion to their weights, in the
            order ``read_numpy`` reads its epoch 0 (``mixing``: the epoch ends when the first dataset
            is exhausted at its weight; each dataset's part is read as one dataset is, and with
            ``shuffle`` the mixed records pass through the shuffle buffer). Every iteration
            (and every repetition) reads the same examples of each dataset.
        split: split expression: ``"train"``, ``"train[:10%]"``, ``"train[1000:2000]"``, ``"train+validation"``.
        batch_size: records per batch (per worker; with an InputContext pass
            ``input_context.get_per_replica_batch_size(global_batch_size)``).
        shuffle: shuffle shard order and records; reproducible when ``seed`` is set, different each epoch.
            On one ArrayRecord dataset, a true global shuffle (``shuffle_buffer`` is not used); in a
            mixture, an ArrayRecord dataset's part is read in stored order, through the shuffle buffer.
        seed: shuffle seed (and the mixture's interleaving, with 0 for None).
        shuffle_buffer: records held in the shuffle buffer.
        repeat: repeat forever (the cardinality becomes infinite).
        cache: cache the worker's serialized records in memory after the first epoch.
        drop_remainder: drop the last, smaller batch (static batch dimension, for TPUs).
        num_workers: workers sharing the split (with ``worker_index``); default 1.
        worker_index: this worker, in ``[0, num_workers)``.
        input_context: a ``tf.distribute.InputContext`` giving the worker count and index instead.
        label_key: return ``(features, features.pop(label_key))`` pairs, as Keras ``fit`` expects.
        var_len: variable-length features as ``tf.RaggedTensor`` or padded dense tensors.
        image_decoding: decode (and resize) ``Image`` features to pixels; None keeps encoded bytes.
        num_parallel_reads: shards read at once. Default: 1 for local files without shuffling (sequential
            reading is the fastest from a local disk), 16 for ``gs://`` or when shuffling (mixes shards).
        verify_count: fail (``tf.errors.InvalidArgumentError`` or ``FailedPreconditionError``) when
            the shards hold more or fewer records than the manifest says, instead of silently giving
            workers unequal counts. Checked per batch (free), or per record with ``repeat``.
        cache_dir: a local directory to keep ``gs://`` shards in once read, so that later epochs read
            them locally (unlike ``cache``, which keeps records in memory); shared safely by the
            processes of one machine.
        cache_limit: the most bytes ``cache_dir`` keeps (least recently used shards are removed).
        remote_reads: how ``gs://`` shards are fetched: parallel ranged reads, read ahead across
            shards, bytes in flight (``remote_reads.RemoteReads``; ``cache_dir``/``cache_limit`` override its own).

    Raises:
        DatasetNotFoundError, UnknownSplitError: no such dataset or split.
        IncompatibleSchemasError: when mixed datasets' schemas differ.
        ReaderError: on invalid options (split expression, worker arguments, label key, image size, weights),
            or shards in a format it does not read (naming the readers that do).
    """
    check_positive("batch_size", batch_size)
    check_positive("shuffle_buffer", shuffle_buffer)
    reads = reads_with_cache(remote_reads, cache_dir=cache_dir, cache_limit=cache_limit)
    if num_parallel_reads is not None:
        check_positive("num_parallel_reads", num_parallel_reads)
    workers, index = _worker(num_workers, worker_index, input_context)
    if isinstance(path, str):
        plans, choices = [plan_read(path, split=split, num_workers=workers, worker_index=index)], None
    else:  # a mixture: each dataset's part of this worker's share, and the order to take them in
        plans, choices = worker_plans(path, split=split, num_workers=workers, worker_index=index, seed=seed or 0)
    for plan in plans:
        plan.require_reader("read_dataset")
    plan = plans[0] if choices is None else dataclasses.replace(
        plans[0], dataset_dir=" + ".join(p.dataset_dir for p in plans), segments=tuple(
            segment for p in plans for segment in p.segments))  # for the counts only
    schema = plan.manifest.schema
    check_label_key(schema, label_key)
    parse = make_batch_parser(schema, image_decoding=image_decoding)

    # Without repeat, counts are checked per batch (free) rather than per record (~4% of the read rate).
    # One ArrayRecord dataset is globally shuffled by its reader; a mixture's parts are shuffled below.
    components = [read_records(p, shuffle_files=shuffle and (choices is None or not p.format.random_access),
                               seed=seed, verify_count=verify_count and repeat, reads=reads,
                               num_parallel_reads=num_parallel_reads or _default_parallel_reads(p, shuffle))
                  for p in plans]
    dataset = components[0] if choices is None else tf.data.Dataset.choose_from_datasets(
        components, tf.data.Dataset.from_tensor_slices(choices).map(lambda choice: tf.cast(choice, tf.int64)))
    if cache:
        dataset = dataset.cache()
    if shuffle and (choices is not None or not plan.format.random_access):  # else globally shuffled already
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    parse_batch = _parse_batch(plan, batch_size)
    # Batches of serialized records -> dicts of batched tensors, one parse per CPU at once.
    parallel_calls = os.cpu_count() or 1
    if repeat or not verify_count:
        dataset = dataset.batch(parse_batch, drop_remainder=drop_remainder and parse_batch == batch_size)
        dataset = dataset.map(parse, num_parallel_calls=parallel_calls, deterministic=True)
    else:
        dataset = _parse_verified(dataset, plan, parse_batch, parse, parallel_calls=parallel_calls,
                                  drop_remainder=drop_remainder and parse_batch == batch_size)
    if parse_batch != batch_size:
        dataset = dataset.rebatch(batch_size, drop_remainder=drop_remainder)
    # Known again after rebatch, and exact: len(dataset) is the number of steps.
    steps = (tf.data.INFINITE_CARDINALITY if repeat and plan.num_records
             else plan.num_records // batch_size if drop_remainder
             else -(-plan.num_records // batch_size))
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(steps))
    if var_len is VarLen.PADDED:
        dataset = dataset.map(pad_var_len, num_parallel_calls=parallel_calls, deterministic=True)
    if label_key is not None:
        dataset = dataset.map(lambda features: (
            {name: value for name, value in features.items() if name != label_key}, features[label_key]))
    options = tf.data.Options()
    # The records are already split between workers: tf.distribute must not shard them again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    # Autotuning times every record of every stage (~15% of the raw record rate on 3 KB records);
    # parallelism is set instead: one parse per CPU, a few batches ahead.
    options.autotune.enabled = False
    dataset = dataset.with_options(options)
    # Small batches are cut by the iterating thread from parses the parallel map holds ready: a
    # prefetch would only add a thread handoff per small batch.
    return dataset.prefetch(_PREFETCH_BATCHES) if parse_batch == batch_size else dataset
