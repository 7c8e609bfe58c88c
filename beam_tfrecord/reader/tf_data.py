"""read_dataset: a published dataset as a fast, exactly sharded tf.data.Dataset of feature dicts."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import numpy as np

from beam_tfrecord.core.record_schema import holds_verbatim_payloads
from beam_tfrecord.core.units import MiB
from beam_tfrecord.errors import ReaderError
from beam_tfrecord.reader.follow import DEFAULT_FOLLOW_POLL_SECONDS, Follow
from beam_tfrecord.reader.options import ImageDecoding, VarLen, check_label_key, check_positive
from beam_tfrecord.reader.order.mixing import DatasetPaths, worker_plans
from beam_tfrecord.reader.order.read_plan import ReadPlan, plan_read
from beam_tfrecord.reader.tf_columns import Batch, batched, column_rows, joined_parser, on_part, part_rows, part_schemas
from beam_tfrecord.reader.tf_follow import following_batches
from beam_tfrecord.reader.tf_records import default_parallel_reads, read_records, stored_chain
from beam_tfrecord.reader.tf_spec import ParsedBatch, make_batch_parser, pad_var_len, tf  # imports TensorFlow quietly
from beam_tfrecord.remote_reads.options import RemoteReads, reads_with_cache
from beam_tfrecord.storage.deadlines import deadlines_in_force

_PREFETCH_BATCHES = 2
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


def _parse_verified(batches: tf.data.Dataset, plan: ReadPlan, num_records: int, batch_size: int,
                    parse_at: Callable[..., ParsedBatch], *, drop_remainder: bool,
                    parallel_calls: int) -> tf.data.Dataset:
    """Batches of records parsed, failing when the shards hold more or fewer records than planned.

    The check costs nothing per record: the number of batches and the size of each are known
    from the plan, and any difference in the record count changes one or the other. It runs in
    the parallel parse calls, not on the thread that reads the records (the pipeline's slowest
    stage, which must stay as lean as the raw reader). ``num_records``: the records read (dropped ones included);
    ``batches``: the records in batches of ``batch_size`` (a tuple of batches per step for aligned streams:
    ``tf_columns.batched``); ``parse_at(index, *batch)`` parses batch ``index``.
    """
    num_batches = -(-num_records // batch_size)
    last_size = num_records - (num_batches - 1) * batch_size

    def check_and_parse(index: tf.Tensor, batch: Batch) -> ParsedBatch:
        batch = batch if isinstance(batch, tuple) else (batch,)
        expected = tf.where(index == num_batches - 1, tf.constant(last_size, tf.int64), batch_size)
        check_size = tf.debugging.assert_equal(
            part_rows(batch[0]), expected,
            message=f"the shards at {plan.dataset_dir} hold a different number of records than the manifest "
                    f"lists ({num_records} planned for split {plan.split}, worker {plan.worker_index})")
        with tf.control_dependencies([check_size]):
            batch = tuple(on_part(tf.identity, part) for part in batch)
        return parse_at(index, tuple(on_part(lambda value: tf.ensure_shape(value, [batch_size, *value.shape[1:]]),
                                             part) for part in batch) if drop_remainder else batch)

    batches = batches.apply(tf.data.experimental.assert_cardinality(num_batches)).enumerate()
    if drop_remainder and last_size != batch_size:
        batches = batches.take(num_batches - 1)
    return batches.map(check_and_parse, num_parallel_calls=parallel_calls, deterministic=True)


def _dropping_at(parse: Callable[..., ParsedBatch], keep: np.ndarray,
                 batch_size: int) -> Callable[..., ParsedBatch]:
    """``parse`` of batch ``index`` of records read with the ones to drop (``keep``: per record read, repeated each
    epoch), those left out of what it parsed: in the parallel parse calls, not a stage per record on the reading
    thread (which cost a third of the read rate of 3 KB records); after parsing, one copy per feature, not one
    per record."""
    table = tf.constant(keep)

    def parse_at(index: tf.Tensor, batch: Batch) -> ParsedBatch:
        batch = batch if isinstance(batch, tuple) else (batch,)
        kept = tf.gather(table, (index * batch_size + tf.range(part_rows(batch[0]))) % len(keep))
        if len(batch) > 1:  # column files: a deleted record's row is empty (no feature to parse), left out first
            return parse(*(on_part(lambda value: tf.boolean_mask(value, kept), part) for part in batch))
        return {name: tf.ragged.boolean_mask(value, kept) if isinstance(value, tf.RaggedTensor)
                else tf.boolean_mask(value, kept) for name, value in parse(*batch).items()}

    return parse_at


def _shaped(dataset: tf.data.Dataset, *, var_len: VarLen, label_key: str | None,
            parallel_calls: int) -> tf.data.Dataset:
    """Parsed batches with variable-length features padded (``VarLen.PADDED``) and split into (features, label)."""
    if var_len is VarLen.PADDED:
        dataset = dataset.map(pad_var_len, num_parallel_calls=parallel_calls, deterministic=True)
    if label_key is not None:
        dataset = dataset.map(lambda features: (
            {name: value for name, value in features.items() if name != label_key}, features[label_key]))
    return dataset


def read_dataset(path: DatasetPaths, *, split: str = "train", batch_size: int = 32, shuffle: bool = False,
                 seed: int | None = None, shuffle_buffer: int = 10_000, repeat: bool = False,
                 cache: bool = False, drop_remainder: bool = False, num_workers: int | None = None,
                 worker_index: int | None = None, input_context: tf.distribute.InputContext | None = None,
                 label_key: str | None = None, var_len: VarLen = VarLen.RAGGED,
                 image_decoding: ImageDecoding | None = None, num_parallel_reads: int | None = None,
                 verify_count: bool = True, cache_dir: str | None = None, cache_limit: int | None = None,
                 remote_reads: RemoteReads | None = None, follow: bool = False,
                 follow_poll_seconds: float = DEFAULT_FOLLOW_POLL_SECONDS,
                 follow_timeout_seconds: float | None = None) -> tf.data.Dataset:
    """Reads a split expression of a published dataset as batches of feature dicts.

    The parse spec, dtypes and shapes come from the manifest's schema. Records are batched
    *before* parsing (one ``parse_example`` per 1024 records or more; smaller batches are cut from
    those; rates in docs/performance.md, "Reading"), parsing is parallel (one call per CPU) and
    prefetched, and tf.data's per-record autotuning instrumentation is off. Every worker reads the
    same number of records (record-level skip/take from the manifest's per-shard counts; ``total % num_workers``
    records are left out), and the dataset's cardinality is exact, so ``len(dataset)`` gives
    ``steps_per_epoch`` (unless ``repeat``).
    Iterators can be saved and restored mid-epoch with ``tf.train.Checkpoint(iterator=...)``.

    Args:
        path: dataset directory (the one holding manifest.json) or versioned root, local or ``gs://``;
            or a mapping ``{path: weight}`` to mix datasets in proportion to their weights, in the
            order ``read_numpy`` reads its epoch 0 (the epoch ends when the first dataset is exhausted
            at its weight; each dataset's part is read as one dataset is, and with
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
        remote_reads: how ``gs://`` shards are fetched (``RemoteReads``: connections, range size, bytes
            in flight); ``cache_dir`` and ``cache_limit`` given here take precedence over its own.
        follow: after what is published, wait for each next commit and yield batches of its new records
            (``read_numpy``'s ``follow``; waits for the first commit, whose schema shapes the batches). A
            generator-based dataset (``tf_follow``): no cardinality, no ``repeat``/``shuffle``/``cache``, not saved
            by ``tf.train.Checkpoint`` (resume a follower with ``read_numpy`` or the PyTorch dataset).
        follow_poll_seconds: with ``follow``, seconds between two looks for a new commit.
        follow_timeout_seconds: with ``follow``, end after this long without a new commit; None: never.

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
    if follow:
        if repeat or cache:
            raise ReaderError("follow=True reads each commit once as it comes: repeat and cache must be False")
        following, schema = following_batches(path, split=split, batch_size=batch_size, num_workers=workers,
                                              worker_index=index, shuffle=shuffle, image_decoding=image_decoding,
                                              reads=reads, follow=Follow(follow_poll_seconds, follow_timeout_seconds))
        check_label_key(schema, label_key)
        return _shaped(following, var_len=var_len, label_key=label_key, parallel_calls=os.cpu_count() or 1)
    with deadlines_in_force(reads.deadlines):
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
    verbatim = {holds_verbatim_payloads(p.manifest.metadata) for p in plans}
    if len(verbatim) > 1:
        raise ReaderError("a mixture of datasets of verbatim payloads and of Examples: read them apart")
    verbatim_records = verbatim.pop()
    parse: Callable[..., ParsedBatch] = make_batch_parser(schema, image_decoding=image_decoding,
                                                          verbatim=verbatim_records)
    # A version with column files in stored order: aligned streams of the base shards and each column file.
    parts = plan.part_plans() if choices is None and not shuffle and not cache else None
    if parts is not None:
        parse = joined_parser([make_batch_parser(part, image_decoding=image_decoding, verbatim=verbatim_records)
                               for part in part_schemas(plan)], plan.dataset_dir)

    # Without repeat, counts are checked per batch (free) rather than per record (~4% of the read rate).
    # One ArrayRecord dataset is globally shuffled by its reader; a mixture's parts are shuffled below.
    # One dataset in stored order with deleted records: they are read, and dropped a batch at a time (``keep``).
    # Column files read whole in local stored-order reads (``column_rows``: one element per file, its rows or their
    # features decoded, no element per row), after the base's records; else each read as the base is.
    reading = (plan,) if parts is None else parts
    rows = [column_rows(p, s) for p, s in zip(reading[1:], part_schemas(plan)[1:])] if parts is not None and all(
        (num_parallel_reads or default_parallel_reads(p, shuffle)) == 1 for p in parts) else [None]
    bulk = [] if None in rows else rows
    reading = reading[:1] if bulk else reading
    stored = [stored_chain(p, num_parallel_reads=num_parallel_reads or default_parallel_reads(p, shuffle))
              for p in reading] if choices is None and not shuffle else [None]
    keep = None if stored[0] is None else stored[0][1]
    if keep is not None:
        chains = [found[0] for found in stored if found is not None]
        streams = [chain.apply(tf.data.experimental.assert_cardinality(len(keep))) if verify_count and repeat
                   else chain for chain in chains]
    else:
        streams = [read_records(p, shuffle_files=shuffle and (choices is None or not p.format.random_access),
                                seed=seed, verify_count=verify_count and repeat, reads=reads,
                                num_parallel_reads=num_parallel_reads or default_parallel_reads(p, shuffle))
                   for p in (reading if choices is None else plans)]
    streams = [*streams, *bulk]
    if choices is not None:
        streams = [tf.data.Dataset.choose_from_datasets(
            streams, tf.data.Dataset.from_tensor_slices(choices).map(lambda choice: tf.cast(choice, tf.int64)))]
    if cache:
        streams = [streams[0].cache()]
    if shuffle and (choices is not None or not plan.format.random_access):  # else globally shuffled already
        streams = [streams[0].shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)]
    if repeat:
        streams = [stream.repeat() for stream in streams]
    parse_batch = _parse_batch(plan, batch_size)
    # Batches of serialized records -> dicts of batched tensors, one parse per CPU at once.
    parallel_calls = os.cpu_count() or 1
    rebatched = parse_batch != batch_size or keep is not None  # batches cut to size after parsing
    parse_at = _dropping_at(parse, keep, parse_batch) if keep is not None else (
        lambda _, batch: parse(*batch) if isinstance(batch, tuple) else parse(batch))
    if keep is not None and (repeat or not verify_count):
        dataset = batched(streams, parse_batch).enumerate().map(parse_at, num_parallel_calls=parallel_calls,
                                                                 deterministic=True)
    elif repeat or not verify_count:
        dataset = batched(streams, parse_batch, drop_remainder=drop_remainder and not rebatched)
        dataset = dataset.map(parse, num_parallel_calls=parallel_calls, deterministic=True)
    else:
        dataset = _parse_verified(batched(streams, parse_batch), plan, plan.num_records if keep is None else len(keep),
                                  parse_batch, parse_at, parallel_calls=parallel_calls,
                                  drop_remainder=drop_remainder and not rebatched)
    if rebatched:
        dataset = dataset.rebatch(batch_size, drop_remainder=drop_remainder)
    # Known again after rebatch, and exact: len(dataset) is the number of steps.
    steps = (tf.data.INFINITE_CARDINALITY if repeat and plan.num_records
             else plan.num_records // batch_size if drop_remainder
             else -(-plan.num_records // batch_size))
    dataset = _shaped(dataset.apply(tf.data.experimental.assert_cardinality(steps)), var_len=var_len,
                      label_key=label_key, parallel_calls=parallel_calls)
    options = tf.data.Options()
    # The records are already split between workers: tf.distribute must not shard them again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    # Autotuning times every record of every stage (~15% of the raw record rate on 3 KB records);
    # parallelism is set instead: one parse per CPU, a few batches ahead.
    options.autotune.enabled = False
    dataset = dataset.with_options(options)
    # Small batches are cut by the iterating thread from parses the parallel map holds ready: a
    # prefetch would only add a thread handoff per small batch.
    return dataset.prefetch(_PREFETCH_BATCHES) if not rebatched else dataset
