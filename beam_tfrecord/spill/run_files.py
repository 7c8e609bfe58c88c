"""Spill runs on storage: naming, writing and reading them back (their byte layout is ``core/runs.py``).

Free of Beam: the DoFns only adapt it. Only the runs announced by the attempt a runner kept are read.
See docs/performance.md, "How a dataset is written".
"""

from __future__ import annotations

import bisect
import concurrent.futures
import contextlib
import hashlib
import itertools
import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.core.runs import (
    RUN_SUFFIX,
    RunIndex,
    SpilledRun,
    entry_sizes_of,
    merge_slices,
    write_run,
)
from beam_tfrecord.core.side_files import EncodedChunk
from beam_tfrecord.errors import CorruptShardError
from beam_tfrecord.storage import direct_io
from beam_tfrecord.storage.disk_space import raise_typed_when_full

DEFAULT_RUN_BYTES = 64 << 20
CACHED_RUN_SUFFIX = ".cached.run"  # a run written through the page cache, to be read through it
# The runs of a job may fill the page cache up to 9/10 of the point where the kernel starts slowing
# writers (``direct_io.throttle_ratio``: 1.5 times the background writeback level with the default
# settings, so 1.35 times it): the rest is room for the runs other workers have announced and not yet
# written, and for the machine's other writers. Above the background level the kernel writes some runs
# back while the encoders run (the device has little else to do then); every cached run is still read
# from memory by the shard writers, where an O_DIRECT run is read from the device while the shards are
# written to it (docs/performance.md, "Spill runs up to the throttle").
RUN_SHARE_OF_THROTTLE = 0.9


def run_page_cache_share(throttle_ratio: float) -> float:
    """The share of the background writeback level the runs may fill (``page_cache_takes``' ``share``)."""
    return RUN_SHARE_OF_THROTTLE * throttle_ratio


def page_cache_holds_run(run_bytes: int) -> bool:
    """Whether a new run of ``run_bytes`` goes through the page cache (``direct_io.page_cache_takes``)."""
    return direct_io.page_cache_takes(run_bytes, share=run_page_cache_share(direct_io.throttle_ratio()))


def through_page_cache(run: SpilledRun) -> bool:
    """Whether ``run`` was written through the page cache (and is best read through it)."""
    return run.path.endswith(CACHED_RUN_SUFFIX)


class RunWriting:
    """A spilling encoder's runs, as a side file (``core.side_files.SideFiles``): each bundle's entries in sorted
    runs (a ``RunSpiller`` per bundle), written by one thread that serves every bundle.

    Built with the DoFn (it pickles until its first ``add``, which starts the thread); ``stop`` in ``teardown``.
    """

    def __init__(self, runs_dir: str, *, run_bytes: int, direct: bool) -> None:
        self._runs_dir = runs_dir
        self._run_bytes = run_bytes
        self._direct = direct
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None
        self._spiller: RunSpiller | None = None
        self._started: list[SpilledRun] = []

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_writer": None, "_spiller": None, "_started": []}

    def add(self, chunk: EncodedChunk) -> None:
        if self._spiller is None:
            if self._writer is None:  # runs are written by a thread while the next one fills (writes release the GIL)
                self._writer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="spill-run")
            self._spiller = RunSpiller(self._runs_dir, run_bytes=self._run_bytes, direct=self._direct,
                                       writer=self._writer)
        self._started.extend(self._spiller.add_many(chunk.entries))

    def announce(self) -> list[SpilledRun]:
        started, self._started = self._started, []
        return started

    def finish(self) -> None:
        """The bundle's end: every run it announced on storage (the next ``add`` starts another bundle's runs)."""
        if self._spiller is not None:
            spiller, self._spiller = self._spiller, None
            spiller.finish()

    def stop(self) -> None:
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None


class RunSpiller:
    """Buffers one bundle's entries into hash-sorted runs of about ``run_bytes`` and writes them.

    Memory: up to two runs (one filling, one being written by ``writer``, a one-thread executor
    the caller owns so that it outlives bundles). A run is announced (returned by ``add``) when its first
    entry arrives, under a name unique to this attempt, so nothing is emitted when the bundle ends (Beam's
    DaskRunner drops what ``finish_bundle`` emits); a re-executed bundle writes new files.

    Args:
        runs_dir: where runs and their indexes go.
        run_bytes: entry bytes buffered before a run is written.
        direct: write runs with ``O_DIRECT`` where the filesystem allows (``beam_tfrecord.storage.direct_io``),
            except those the page cache holds.
        writer: the executor that writes runs (file writes release the GIL, so encoding goes on).
        page_cache_holds: whether a new run of ``run_bytes`` goes through the page cache (asked as
            each run starts; ``page_cache_holds_run`` unless a test decides).
    """

    def __init__(self, runs_dir: str, *, run_bytes: int, direct: bool, writer: concurrent.futures.Executor,
                 page_cache_holds: Callable[[int], bool] = page_cache_holds_run) -> None:
        self._runs_dir = runs_dir
        self._run_bytes = run_bytes
        self._direct = direct and not storage.is_remote(runs_dir)
        self._page_cache_holds = page_cache_holds
        self._writer = writer
        self._attempt = uuid.uuid4().hex  # run names: unique to this attempt at this bundle
        self._number = 0
        self._buffer: list[bytes] = []
        self._buffered_bytes = 0
        self._current: SpilledRun | None = None
        self._writing: concurrent.futures.Future | None = None

    def add(self, entry: bytes) -> SpilledRun | None:
        """Buffers ``entry``; returns the run it starts when it is the first of one (to announce)."""
        started = None
        run = self._current
        if run is None:
            run = started = self._start_run()
        self._buffer.append(entry)
        self._buffered_bytes += len(entry)
        if self._buffered_bytes >= self._run_bytes:
            self._flush(run)
        return started

    def add_many(self, entries: Sequence[bytes]) -> list[SpilledRun]:
        """``add`` of each entry in turn (the same runs), without a Python call per entry; returns
        the runs they start."""
        started = []
        ends = list(itertools.accumulate(map(len, entries)))
        position = 0
        while position < len(entries):
            run = self._current
            if run is None:
                run = self._start_run()
                started.append(run)
            before = ends[position - 1] if position else 0
            # The run ends with the entry that brings the buffer to run_bytes, as with ``add``.
            end = min(bisect.bisect_left(ends, before + self._run_bytes - self._buffered_bytes, lo=position) + 1,
                      len(entries))
            self._buffer.extend(entries[position:end])
            self._buffered_bytes += ends[end - 1] - before
            position = end
            if self._buffered_bytes >= self._run_bytes:
                self._flush(run)
        return started

    def _start_run(self) -> SpilledRun:
        """The next run of this attempt, named by how it will be written (``CACHED_RUN_SUFFIX``)."""
        cached = self._direct and self._page_cache_holds(self._run_bytes)  # without O_DIRECT, all are cached
        name = f"{self._attempt}-{self._number:05d}{CACHED_RUN_SUFFIX if cached else RUN_SUFFIX}"
        self._number += 1
        self._current = SpilledRun(storage.join(self._runs_dir, name))
        return self._current

    def finish(self) -> None:
        """Writes what is buffered and waits until every announced run and index is on storage.

        Raises:
            OSError: a run or index could not be written (the bundle must fail, not count).
        """
        if self._current is not None:
            self._flush(self._current)
        self._wait()

    def _flush(self, run: SpilledRun) -> None:
        entries = sorted(self._buffer)  # entries start with the big-endian hash: bytes order is hash order
        self._buffer, self._buffered_bytes, self._current = [], 0, None
        self._wait()
        self._writing = self._writer.submit(self._write, run, entries)

    def _write(self, run: SpilledRun, entries: list[bytes]) -> None:
        sizes = entry_sizes_of(entries)
        with raise_typed_when_full(run.path, int(sizes.sum()), partial=run.path), \
                direct_io.open_write(run.path, direct=self._direct and not through_page_cache(run)) as handle:
            write_run(handle, entries, entry_sizes=sizes)
        # The index last, and whole (written aside, then renamed): an index exists only complete, and
        # only beside a complete run, so a job killed at any moment leaves no index a resume must doubt.
        storage.write_bytes_atomic(run.index_path, RunIndex.of_entries(run.path, entries, sizes).to_bytes())

    def _wait(self) -> None:
        if self._writing is not None:
            writing, self._writing = self._writing, None
            writing.result()


def read_run_index(run: SpilledRun) -> RunIndex:
    """A spilled run's index, from the file beside it.

    Raises:
        CorruptShardError: the index is missing, cut short or damaged.
    """
    try:
        data = storage.read_bytes(run.index_path)
    except FileNotFoundError as err:
        raise CorruptShardError(run.index_path, "missing: the run was announced but its bundle never finished "
                                                "writing it") from err
    return RunIndex.from_bytes(run.path, data)


def write_catalog(runs_dir: str, runs: Sequence[SpilledRun]) -> str:
    """Writes the list of ``runs`` once; returns its path (named by its content: the same runs, the same file).

    A shard task then names one file instead of carrying every run, and no runner needs a side input.
    """
    data = json.dumps(sorted(run.path for run in runs)).encode()
    path = storage.join(runs_dir, f"catalog-{hashlib.blake2b(data, digest_size=12).hexdigest()}.json")
    storage.write_bytes_atomic(path, data)
    return path


def read_catalog(path: str) -> list[SpilledRun]:
    """The runs a catalog lists, in path order.

    Raises:
        CorruptShardError: the catalog is not a JSON list of paths.
    """
    try:
        paths = json.loads(storage.read_bytes(path))
    except (ValueError, FileNotFoundError) as err:
        raise CorruptShardError(path, f"unreadable run catalog: {err}") from err
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise CorruptShardError(path, "a run catalog must be a JSON list of run paths")
    return [SpilledRun(p) for p in paths]


@contextlib.contextmanager
def shard_entries(runs: Sequence[SpilledRun], hash_lo: int, hash_hi: int, *,
                  direct: bool) -> Iterator[Iterator[bytes | memoryview]]:
    """The entries with hash in ``[hash_lo, hash_hi)`` of every run, in (hash, content) order.

    Each run's index says where its slice lies; the slices are read in ranges into reused buffers
    and merged (``core.runs.merge_slices``): memory is bounded by two read groups, whatever the
    shard size and however many runs there are. A run written through the page cache is read
    through it (an ``O_DIRECT`` read would first make the kernel write the run to the device).
    """
    slices = []
    for run in sorted(runs, key=lambda r: r.path):
        piece = read_run_index(run).slice(hash_lo, hash_hi)
        if piece.num_entries:
            slices.append(piece)
    direct_reader = direct_io.RangeReader(direct=direct)
    cached_reader = direct_io.RangeReader(direct=False)
    reader_of = {piece.path: cached_reader if through_page_cache(SpilledRun(piece.path)) else direct_reader
                 for piece in slices}

    def read(path: str, offset: int, length: int) -> bytes | memoryview:
        return reader_of[path].read(path, offset, length)

    try:
        yield merge_slices(slices, read)
    finally:
        direct_reader.close()
        cached_reader.close()
