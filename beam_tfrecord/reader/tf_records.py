"""The serialized records of a read plan as a ``tf.data.Dataset``: what ``read_dataset`` batches and parses.

tf.data's own file dataset where the format has one; otherwise, and shuffled from ``gs://``, the format's blocks.
"""

from __future__ import annotations

import collections
import itertools
import os
import random
import weakref
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from beam_tfrecord.errors import ReaderError
from beam_tfrecord.formats import TFDataFiles
from beam_tfrecord.reader.order.passes import ShardPass
from beam_tfrecord.reader.order.read_plan import ReadPlan
from beam_tfrecord.reader.tf_generated import generated
from beam_tfrecord.reader.tf_spec import tf  # imports TensorFlow quietly
from beam_tfrecord.remote_reads.cache import ShardCache
from beam_tfrecord.remote_reads.fetched import FetchedShard
from beam_tfrecord.remote_reads.options import COUNTERS, RemoteReads, fetched_remotely

_MAX_PARALLEL_READS = 16  # shards read at once per worker
FilesReader = Callable[[tf.Tensor | str | list[str] | tf.data.Dataset], tf.data.Dataset]


def files_reader(files: TFDataFiles) -> FilesReader:
    """A function giving the records of one or more files (paths, a string tensor, or a dataset of paths) as the
    format says."""
    dataset = getattr(tf.data, files.dataset)
    return lambda paths: dataset(paths, compression_type=files.compression_type)


def default_parallel_reads(plan: ReadPlan, shuffle: bool) -> int:
    """Sequential reading is fastest from a local disk; remote storage and shuffling want several shards at once."""
    remote = any("://" in plan.path(s) for s in plan.segments)
    return _MAX_PARALLEL_READS if shuffle or remote else 1


@tf.autograph.experimental.do_not_convert
def _flag(_: tf.Tensor, keep: tf.Tensor) -> tf.Tensor:
    return keep


@tf.autograph.experimental.do_not_convert
def _record(record: tf.Tensor, _: tf.Tensor) -> tf.Tensor:
    return record


def dropping(records: tf.data.Dataset, keep: tf.Tensor, *, beyond: bool = True) -> tf.data.Dataset:
    """``records`` but those where ``keep`` (bool, one per record) is False; any past its end are kept (so a count
    check sees them) when ``beyond`` (a stage per record), else left out.

    Each record is zipped with its flag, filtered and unzipped by functions that return one of their arguments:
    tf.data passes those through without running a function per record (a computed predicate cost 20x the read
    of a 3 KB record; a ``skip``/``take`` per live run re-reads the shard from its start per run).
    """
    flags = tf.data.Dataset.from_tensor_slices(keep)
    flags = flags.concatenate(tf.data.Dataset.from_tensors(True).repeat()) if beyond else flags
    # A map fused with the batch after it is called per record, not passed through (10x the read of 3 KB records).
    options = tf.data.Options()
    options.experimental_optimization.map_and_batch_fusion = False
    return tf.data.Dataset.zip((records, flags)).filter(_flag).map(_record).with_options(options)


def _pass_columns(passes: Sequence[ShardPass]) -> tuple[list[list[int]], np.ndarray | None]:
    """Each pass as ``start, span, first, last`` (columns): the file's records ``[start, start + span)`` but those
    at ``dropped[first:last]`` (relative to ``start``); and ``dropped``, every pass's in turn (None: none drops)."""
    bounds = np.cumsum([0, *(len(p.dropped) for p in passes)]).tolist()
    columns = [[p.start for p in passes], [p.stop - p.start for p in passes], bounds[:-1], bounds[1:]]
    return columns, np.concatenate([p.dropped for p in passes]) if bounds[-1] else None


def _read_pass(read: FilesReader, dropped: np.ndarray | None) -> Callable[..., tf.data.Dataset]:
    """A function of a pass's ``path`` and ``_pass_columns`` (tensors: a dataset's elements) giving its records."""
    table = None if dropped is None else tf.constant(dropped, tf.int64)

    def records(path: tf.Tensor, start: tf.Tensor, span: tf.Tensor, first: tf.Tensor,
                last: tf.Tensor) -> tf.data.Dataset:
        piece = read(path).skip(start).take(span)
        if table is None:
            return piece
        positions = table[first:last]
        deleted = tf.scatter_nd(positions[:, None], tf.ones_like(positions), tf.reshape(span, [1]))
        return dropping(piece, tf.equal(deleted, 0), beyond=False)  # ``take`` ended it

    return records


def _physical_chain(plan: ReadPlan, read: FilesReader,
                    paths: Sequence[str] | None = None) -> tuple[tf.data.Dataset, np.ndarray | None]:
    """The records the plan's passes read, one shard after the other, dropped ones included, with as few dataset
    stages as possible; and whether to keep each (None: every one).

    Runs of shards read from their start to their end become one dataset over their files (exactly the raw
    reader); only partial shards get ``skip``/``take``, each a stage that costs per record. ``paths``: each pass's
    local file, when not the plan's own path.
    """
    pieces: list[tf.data.Dataset] = []
    whole: list[str] = []
    for number, shard_pass in enumerate(plan.passes):
        path = plan.path(shard_pass) if paths is None else paths[number]
        if shard_pass.start == 0 and shard_pass.reaches_end:
            whole.append(path)
            continue
        if whole:
            pieces.append(read(whole))
            whole = []
        piece = read(path).skip(shard_pass.start) if shard_pass.start else read(path)
        pieces.append(piece if shard_pass.reaches_end else piece.take(shard_pass.stop - shard_pass.start))
    if whole:
        pieces.append(read(whole))
    records = pieces[0]
    for piece in pieces[1:]:
        records = records.concatenate(piece)
    keeps = [shard_pass.keep() for shard_pass in plan.passes]
    if all(keep is None for keep in keeps):
        return records, None
    return records, np.concatenate([np.ones(shard_pass.stop - shard_pass.start, dtype=bool) if keep is None else keep
                                    for shard_pass, keep in zip(plan.passes, keeps)])


def _chain(plan: ReadPlan, read: FilesReader, paths: Sequence[str] | None = None) -> tf.data.Dataset:
    """The plan's records read one shard after the other (``_physical_chain``), the dropped ones left out."""
    records, keep = _physical_chain(plan, read, paths)
    return records if keep is None else dropping(records, tf.constant(keep))


def stored_chain(plan: ReadPlan, *, num_parallel_reads: int) -> tuple[tf.data.Dataset, np.ndarray] | None:
    """When ``read_records`` would chain local shards with records to drop: the records its passes read, dropped
    ones included, and whether to keep each, for a reader that drops them a batch at a time (``read_dataset``:
    no stage per record on the thread that reads). Else None."""
    files = plan.format.tf_data_files(plan.manifest.compression)
    if files is None or num_parallel_reads != 1 or plan.joins or any(fetched_remotely(plan.path(s))
                                                                      for s in plan.passes):
        return None
    records, keep = _physical_chain(plan, files_reader(files)) if plan.passes else (None, None)
    return None if keep is None else (records, keep)


def read_records(plan: ReadPlan, *, shuffle_files: bool = False, seed: int | None = None,
                 num_parallel_reads: int = 1, verify_count: bool = True,
                 reads: RemoteReads | None = None) -> tf.data.Dataset:
    """The serialized records of a read plan.

    Each pass over a shard (``ReadPlan.passes``) is the format's own dataset (``TFRecordDataset(shard)``)
    ``.skip(start).take(stop - start)``, its deleted records dropped (``dropping``). With one read at a time
    and no shuffling, passes are chained (as fast as the raw reader); otherwise they are
    interleaved, shard order shuffled each epoch if asked, in a deterministic order for a given seed.
    With ``verify_count``, reading more or fewer records than the plan is an error (a shard that
    does not hold its manifest count must not give one worker more steps than the others).

    ``gs://`` shards are fetched by ``shard_fetch`` (parallel ranged reads ahead of the reader; TensorFlow's
    own GCS filesystem reads one sequential stream per shard, and cannot be pointed at an emulator), so
    ``num_parallel_reads`` does not apply there (``reads.connections`` does): in stored order each
    fetched shard is a local file (``fetched_files``), or, all in the cache when the dataset is made, the
    entries held open (``_held_cache_entries``) are read as local files; shuffled, and for a format tf.data
    has no reader for (ArrayRecord: ``tf_data_files`` is None) wherever it is, the format's own reader feeds blocks
    through ``tf_generated.generated`` (``block_records``; not ``from_generator``, whose op slows every
    later read of the process: see ``tf_generated``).

    Raises:
        ReaderError: the shards are in a format tf.data cannot read here (naming the readers that can).
    """
    plan.require_reader("read_dataset")
    remote = any(fetched_remotely(plan.path(s)) for s in plan.segments)
    files = plan.format.tf_data_files(plan.manifest.compression)
    if files is None or (remote and shuffle_files) or plan.joins:  # joins: ``formats.joined``, block by block
        records = block_records(plan, shuffle=shuffle_files, seed=seed, reads=reads)
    elif remote:
        held = _held_cache_entries(plan, reads or RemoteReads())
        if held is None:
            records = fetched_files(plan, files_reader(files), reads or RemoteReads())
        else:  # all cached: read as local files are, without a generator (its graph alone took 30 ms to build)
            records = _chain(plan, files_reader(files), [f"/proc/self/fd/{descriptor}" for descriptor in held])
            weakref.finalize(records, _close_all, held)
    else:
        records = _read_passes(plan, files_reader(files), shuffle_files=shuffle_files, seed=seed,
                               num_parallel_reads=num_parallel_reads)
    if verify_count:
        records = records.apply(tf.data.experimental.assert_cardinality(plan.num_records))
    return records


# A dataset read from the cache holds a descriptor of each shard's entry as long as it lives: at most this many.
_MAX_HELD_ENTRIES = 256
_DESCRIPTOR_PATHS = os.path.isdir("/proc/self/fd")  # a descriptor read by path (Linux)


def _held_cache_entries(plan: ReadPlan, reads: RemoteReads) -> list[int] | None:
    """A read-only descriptor of every pass's cache entry (each a cache hit), or None when one is not cached.

    Held by the dataset (closed when it is collected), its passes read the same bytes as the manifest's
    shards (an entry is named by their CRC32C and size) even when the cache evicts or replaces them
    meanwhile. None too without a cache, beyond ``_MAX_HELD_ENTRIES`` shards, or without ``/proc/self/fd``.
    """
    passes = plan.passes
    if reads.cache_dir is None or not _DESCRIPTOR_PATHS or not 0 < len(passes) <= _MAX_HELD_ENTRIES:
        return None
    cache = ShardCache(reads.cache_dir, limit_bytes=reads.cache_limit)
    held: list[int] = []
    for shard in plan.remote_shards(passes):
        descriptor = cache.open_entry(shard.key) if fetched_remotely(shard.path) else None
        if descriptor is None:
            _close_all(held)
            return None
        held.append(descriptor)
    COUNTERS.add("cache_hits", len(held))
    return held


def _close_all(descriptors: list[int]) -> None:
    for descriptor in descriptors:
        os.close(descriptor)
    descriptors.clear()


# Shards copied whole ahead of tf.data's reader by the fetcher (``copies_ahead``); 4 rather than 2 keeps the copies
# ahead when TensorFlow reads in bursts.
_FILES_AHEAD = 4
_KEPT_FILES = 2  # fetched files kept after the generator moved past them (a prefetch of the paths is harmless)


def fetched_files(plan: ReadPlan, read: FilesReader, reads: RemoteReads) -> tf.data.Dataset:
    """The records of a plan over ``gs://`` shards, in stored order, read by tf.data from local files (``read``).

    A generator (``tf_generated.generated``) hands each shard's pass to tf.data as a local file: the
    shard's cache entry, or a private copy the fetcher made (``FetchedShard.memory_file``: parallel ranged
    reads, read ahead across shards, CRC32C checked; ``_FILES_AHEAD`` shards ahead on a thread of its own; in
    memory while the copies open fit in ``reads.bytes_in_flight``, else on the temporary directory's disk),
    closed ``_KEPT_FILES`` shards later (``flat_map`` reads one shard at a time: the one before the
    generator's last is done). TensorFlow's reader checks every record's CRCs.
    """
    passes = plan.passes
    whole = all(shard_pass.whole for shard_pass in passes)  # no per-record skip, take or filter
    columns, dropped = _pass_columns(passes)

    def files() -> Iterator[str | tuple[str, int, int, int, int]]:
        """Each pass's local path, with its ``_pass_columns`` unless ``whole``."""
        fetcher = plan.fetcher(passes, reads, copies_ahead=_FILES_AHEAD)
        if fetcher is None:
            raise ReaderError(f"{plan.dataset_dir!r}: no gs:// shard to fetch")  # read_records checked
        done: collections.deque[FetchedShard] = collections.deque()
        try:
            for number, shard_pass in enumerate(passes):
                fetched = fetcher.open(number)
                if fetched is None:  # a local shard: read where it is
                    path = plan.path(shard_pass)
                else:
                    done.append(fetched)
                    path = fetched.memory_file()
                start, span, first, last = (column[number] for column in columns)
                yield path if whole else (path, start, span, first, last)
                while len(done) > _KEPT_FILES:
                    done.popleft().close()
        finally:
            for fetched in done:
                fetched.close()
            fetcher.close()

    if whole:  # the paths as the reader's own input: one flat_map per record, as from local files, not two
        return read(generated(files, tf.TensorSpec([], tf.string)))
    pass_paths = generated(files, (tf.TensorSpec([], tf.string), *[tf.TensorSpec([], tf.int64)] * len(columns)))
    return pass_paths.flat_map(_read_pass(read, dropped))


def block_records(plan: ReadPlan, *, shuffle: bool, seed: int | None,
                  reads: RemoteReads | None = None) -> tf.data.Dataset:
    """The records of a plan read by the format's own reader in blocks (``mixing.iter_record_blocks``).

    Each block crosses into TensorFlow as its buffer (one string) and the start and length of each
    record in it, cut into records by one vectorized ``tf.strings.substr``: no Python object per record.
    With ``shuffle``, each pass over the dataset (each epoch) is a new shuffle, as ``read_numpy`` gives
    it: the worker's equal share of the epoch's order of every record of the split expression (a
    true global shuffle on a random-access format, shuffled shards and windows on a sequential
    one; a random seed when ``seed`` is None).
    """
    from beam_tfrecord.reader.order.mixing import iter_record_blocks

    epochs = itertools.count()
    base_seed = seed if seed is not None else random.SystemRandom().randrange(2**63)

    def blocks() -> Iterator[tuple[bytes, np.ndarray, np.ndarray]]:
        for block in iter_record_blocks(plan, shuffle=shuffle, seed=base_seed, epoch=next(epochs), reads=reads):
            if not len(block):
                continue
            block = block.joined()  # a base record and its column rows: one Example (``formats.joined``)
            first = int(block.starts.min())
            last = int((block.starts + block.lengths).max())
            yield block.buffer[first:last].tobytes(), block.starts - first, block.lengths

    buffers = generated(blocks, (tf.TensorSpec([], tf.string), tf.TensorSpec([None], tf.int64),
                                 tf.TensorSpec([None], tf.int64)))
    return buffers.map(lambda buffer, starts, lengths: tf.strings.substr(buffer, starts, lengths)).unbatch()


def _read_passes(plan: ReadPlan, read: FilesReader, *, shuffle_files: bool, seed: int | None,
                   num_parallel_reads: int) -> tf.data.Dataset:
    """The plan's passes, chained or interleaved (see ``read_records``)."""
    passes = plan.passes
    if not passes:
        return tf.data.Dataset.from_tensor_slices(tf.constant([], tf.string))
    cycle_length = min(len(passes), num_parallel_reads)
    if cycle_length == 1 and not shuffle_files:
        return _chain(plan, read)
    columns, dropped = _pass_columns(passes)
    files = tf.data.Dataset.from_tensor_slices((tf.constant([plan.path(p) for p in passes], tf.string),
                                                *(tf.constant(column, tf.int64) for column in columns)))
    if shuffle_files:
        files = files.shuffle(len(passes), seed=seed, reshuffle_each_iteration=True)
    one_pass = _read_pass(read, dropped)
    if cycle_length == 1:
        return files.flat_map(one_pass)
    return files.interleave(one_pass, cycle_length=cycle_length, block_length=16, num_parallel_calls=cycle_length,
                            deterministic=True)
