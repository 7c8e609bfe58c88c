"""NumPy inputs: ``.npy``/``.npz`` files, in-memory arrays, and Python iterables or generators.

Axis 0 indexes samples; keys are stable as long as the input and its order are. See docs/inputs.md, "NumPy".
"""

from __future__ import annotations

import dataclasses
import io
import math
import posixpath
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, BinaryIO

import apache_beam as beam
import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.errors import SourceError
from beam_tfrecord.sources.chunks import DEFAULT_CHUNK_SIZE, check_chunk_size, chunked, list_inputs
from beam_tfrecord.spill.resume import ReusedKeys

ArrayMap = Mapping[str, np.ndarray]


def _check_lengths(where: str, arrays: ArrayMap) -> int:
    if not arrays:
        raise SourceError(f"{where}: no arrays")
    lengths = {name: (np.shape(a)[0] if np.ndim(a) else None) for name, a in arrays.items()}
    if None in lengths.values() or len(set(lengths.values())) != 1:
        shapes = {name: np.shape(a) for name, a in arrays.items()}
        raise SourceError(f"{where}: every array needs the same first (sample) axis, got shapes {shapes}")
    return int(next(iter(lengths.values())))  # type: ignore[arg-type]  # None was ruled out above


def _per_sample(array: np.ndarray) -> list[Any]:
    """Per-sample values of a chunk: Python scalars for 1-d arrays (cheap to pickle), else sub-arrays."""
    return array.tolist() if array.ndim == 1 and array.dtype.kind in "biuf" else list(array)


def samples_from_arrays(arrays: ArrayMap, *, key_prefix: str, start: int, key_width: int) -> list[Sample]:
    """Samples ``start .. start+len`` of aligned array chunks, keyed ``<key_prefix><index>``."""
    length = _check_lengths(key_prefix or "arrays", arrays)
    columns = {name: _per_sample(np.asarray(a)) for name, a in arrays.items()}
    return [Sample(f"{key_prefix}{start + i:0{key_width}d}", {name: column[i] for name, column in columns.items()})
            for i in range(length)]


@dataclasses.dataclass(frozen=True)
class _NpyLayout:
    """Where a .npy file's rows are: its shape, dtype and order; the handle is at the first row's byte."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool

    @property
    def row_bytes(self) -> int:
        return self.dtype.itemsize * math.prod(self.shape[1:])


def _npy_layout(handle: BinaryIO, name: str) -> _NpyLayout:
    """Reads a .npy file's header (leaving ``handle`` at its data)."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(handle)
        shape, fortran_order, dtype = (fmt.read_array_header_1_0(handle) if version == (1, 0)
                                       else fmt.read_array_header_2_0(handle))
    except ValueError as err:
        raise SourceError(f"{name}: not a .npy file ({err})") from err
    if dtype.hasobject:
        raise SourceError(f"{name}: object arrays are not supported (they need pickle); save a numeric or "
                          "fixed-width string dtype")
    if not shape:
        raise SourceError(f"{name}: a 0-d array has no sample axis")
    return _NpyLayout(tuple(shape), dtype, bool(fortran_order))


def _npy_row_chunks(handle: BinaryIO, chunk_rows: int, name: str,
                    wanted: Callable[[int, int], np.ndarray] | None = None,
                    rows: tuple[int, int | None] = (0, None)) -> Iterator[tuple[int, np.ndarray]]:
    """Streams a .npy file's rows ``rows`` (first, end; None: to the last) as (first row, array of up to
    ``chunk_rows`` rows (first axis)).

    ``wanted(start, rows)`` (a boolean per row of a chunk): a chunk that wants none of its rows is
    skipped over with a seek, never read; others come whole (the caller leaves out their unwanted rows).
    """
    layout = _npy_layout(handle, name)
    shape, dtype = layout.shape, layout.dtype
    first, end = rows[0], shape[0] if rows[1] is None else min(rows[1], shape[0])
    if layout.fortran_order:  # rows are not contiguous: read it whole
        whole = np.frombuffer(handle.read(), dtype=dtype, count=math.prod(shape)).reshape(shape, order="F")
        for start in range(first, end, chunk_rows):
            yield start, np.ascontiguousarray(whole[start:min(start + chunk_rows, end)])
        return
    row_bytes = layout.row_bytes
    if first:
        handle.seek(first * row_bytes, io.SEEK_CUR)
    for start in range(first, end, chunk_rows):
        count = min(chunk_rows, end - start)
        if wanted is not None and not wanted(start, count).any():
            handle.seek(count * row_bytes, io.SEEK_CUR)  # every row of the chunk is left out: not read
            continue
        data = handle.read(count * row_bytes)
        if len(data) != count * row_bytes:
            raise SourceError(f"{name}: truncated .npy file: expected {shape[0]} rows of {row_bytes} bytes, "
                              f"the data ends in row {start + len(data) // max(row_bytes, 1)}")
        yield start, np.frombuffer(data, dtype=dtype).reshape((count, *shape[1:]))


KEY_WIDTH = 9  # a sample's key: "<file name>:<row, 9 digits>"


def sample_keys(name: str, start: int, rows: int, width: int = KEY_WIDTH) -> list[str]:
    """The keys of rows ``start .. start+rows`` of the file ``name`` (its name below the glob's folder)."""
    return [f"{name}:{start + i:0{width}d}" for i in range(rows)]


def read_numpy_file(name: str, path: str, *, npy_feature: str = "x", chunk_size: int = DEFAULT_CHUNK_SIZE,
                    skip: ReusedKeys | None = None, rows: tuple[int, int | None] = (0, None)
                    ) -> Iterator[list[Sample]]:
    """Chunks of samples from one .npy (feature ``npy_feature``) or .npz (a feature per member).

    Args:
        rows: the samples to read (first, end; None: to the last), from ``row_ranges``.
        skip: the samples a resumed build reuses, left out here (a .npy's rows of them are not even read).
    """
    width = KEY_WIDTH

    def kept(samples: list[Sample]) -> list[Sample]:
        if skip is None or not samples:
            return samples
        held = skip.held([sample.key for sample in samples])
        return [sample for sample, reused in zip(samples, held.tolist()) if not reused]

    with storage.open_read(path) as handle:
        if posixpath.splitext(path)[1].lower() == ".npz":
            try:
                with np.load(io.BytesIO(handle.read()), allow_pickle=False) as npz:
                    arrays = {member: npz[member] for member in npz.files}
            except ValueError as err:
                raise SourceError(f"{name}: cannot load .npz ({err})") from err
            total = _check_lengths(name, arrays)
            end = total if rows[1] is None else min(rows[1], total)
            for start in range(rows[0], end, chunk_size):
                part = {k: a[start:min(start + chunk_size, end)] for k, a in arrays.items()}
                if chunk := kept(samples_from_arrays(part, key_prefix=f"{name}:", start=start, key_width=width)):
                    yield chunk
            return
        wanted = None if skip is None else (lambda start, count: ~skip.held(sample_keys(name, start, count, width)))
        for start, chunk_rows in _npy_row_chunks(handle, chunk_size, name, wanted, rows):
            if chunk := kept(samples_from_arrays({npy_feature: chunk_rows}, key_prefix=f"{name}:", start=start,
                                                 key_width=width)):
                yield chunk


RANGE_BYTES = 64 << 20  # a .npy file is read in ranges of rows of about this size, one Beam element each


def row_ranges(element: tuple[str, str], *, chunk_size: int,
               range_bytes: int = RANGE_BYTES) -> Iterator[tuple[str, str, tuple[int, int | None]]]:
    """(name, path, rows) elements that together read a file: a .npy in C order in ranges of whole chunks
    of about ``range_bytes`` (its header is read here), anything else whole."""
    name, path = element
    if posixpath.splitext(path)[1].lower() == ".npz":
        yield name, path, (0, None)
        return
    with storage.open_read(path) as handle:
        layout = _npy_layout(handle, name)
    if layout.fortran_order:
        yield name, path, (0, None)
        return
    step = max(1, range_bytes // max(layout.row_bytes * chunk_size, 1)) * chunk_size
    for start in range(0, max(layout.shape[0], 1), step):
        yield name, path, (start, start + step)


def _read_range(element: tuple[str, str, tuple[int, int | None]], **options: Any) -> Iterator[list[Sample]]:
    name, path, rows = element
    return read_numpy_file(name, path, rows=rows, **options)


class ReadNumpyFiles(beam.PTransform):
    """``.npy`` / ``.npz`` files -> chunks of samples.

    A ``.npy`` file holds one feature (named ``npy_feature``); a ``.npz`` file holds one feature
    per member, all with the same number of samples.

    Args:
        pattern: file or glob, local or ``gs://``.
        npy_feature: the feature name for the array of a ``.npy`` file.
        chunk_size: samples per Beam element.
        skip: the samples a resumed build reuses (``WriteTFRecordDataset.reused_keys``), left out
            before they are read; see ``skipping``.
    """

    def __init__(self, pattern: str, *, npy_feature: str = "x", chunk_size: int = DEFAULT_CHUNK_SIZE,
                 skip: ReusedKeys | None = None) -> None:
        super().__init__()
        self._pattern = pattern
        self._npy_feature = npy_feature
        self._chunk_size = check_chunk_size(chunk_size)
        self._skip = skip

    def skipping(self, reused: ReusedKeys) -> "ReadNumpyFiles":
        """This source, leaving out the samples of ``reused``: a resumed build reads only the rest."""
        return ReadNumpyFiles(self._pattern, npy_feature=self._npy_feature, chunk_size=self._chunk_size, skip=reused)

    def expand(self, pipeline: beam.pvalue.PBegin) -> beam.PCollection:
        # No reshuffle after the read: a range's chunks are encoded by the worker that read them (the
        # payload never crosses the runner), and the ranges spread the work over the workers.
        return (
            pipeline
            | "Pattern" >> beam.Create([self._pattern])
            | "ListFiles" >> beam.FlatMap(list_inputs)  # (name relative to the pattern, path)
            | "RowRanges" >> beam.FlatMap(row_ranges, chunk_size=self._chunk_size)  # (name, path, (first, end))
            | "SpreadRanges" >> beam.Reshuffle()
            | "ReadRanges" >> beam.FlatMap(_read_range, npy_feature=self._npy_feature, chunk_size=self._chunk_size,
                                           skip=self._skip)  # [Sample]: up to chunk_size samples per element
        )


class SamplesFromArrays(beam.PTransform):
    """In-memory arrays (first axis = samples) -> chunks of samples: the tutorials' simple case.

    The arrays travel inside the pipeline definition, so this suits data that fits in memory
    (tens of MB on Dataflow); write larger data to ``.npy`` files and use ``ReadNumpyFiles``.

    Args:
        arrays: feature name -> array, all with the same length.
        key_prefix: prefix of the keys ``<key_prefix><index>``.
        chunk_size: samples per Beam element.
    """

    def __init__(self, arrays: ArrayMap, *, key_prefix: str = "", chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        super().__init__()
        check_chunk_size(chunk_size)
        arrays = {name: np.asarray(a) for name, a in arrays.items()}
        total = _check_lengths("SamplesFromArrays", arrays)
        width = max(9, len(str(total)))
        self._chunks = [samples_from_arrays({k: a[s:s + chunk_size] for k, a in arrays.items()},
                                            key_prefix=key_prefix, start=s, key_width=width)
                        for s in range(0, total, chunk_size)]

    def expand(self, pipeline: beam.pvalue.PBegin) -> beam.PCollection:
        return pipeline | "CreateChunks" >> beam.Create(self._chunks)


def _keyed(items: Iterable[Mapping[str, Any] | Sample], key_prefix: str) -> Iterator[Sample]:
    for index, item in enumerate(items):
        if isinstance(item, Sample):
            yield item
        elif isinstance(item, Mapping):
            yield Sample(f"{key_prefix}{index:09d}", dict(item))
        else:
            raise SourceError(f"item {index}: expected a Sample or a mapping of feature names to values, "
                              f"got {type(item).__name__}")


def _generate_chunks(_: Any, make: Callable[[], Iterable[Any]], key_prefix: str,
                     chunk_size: int) -> Iterator[list[Sample]]:
    return chunked(_keyed(make(), key_prefix), chunk_size)


class SamplesFromIterable(beam.PTransform):
    """Samples from Python: a callable returning an iterable (run on a worker), or an iterable.

    Items are ``Sample`` (with their own keys) or dicts of feature values, keyed
    ``<key_prefix><index>`` in iteration order, so the iteration must be deterministic for keys
    (and hence splits) to be stable. A callable (e.g. a generator function) is called once, on
    one worker, and streams; a plain iterable or generator object is consumed at construction.

    Args:
        source: a zero-argument callable returning an iterable, or an iterable.
        key_prefix: prefix of generated keys.
        chunk_size: samples per Beam element.
    """

    def __init__(self, source: Callable[[], Iterable[Any]] | Iterable[Any], *, key_prefix: str = "",
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        super().__init__()
        check_chunk_size(chunk_size)
        self._key_prefix = key_prefix
        self._chunk_size = chunk_size
        self._make = source if callable(source) else None
        self._chunks = None if callable(source) else list(chunked(_keyed(source, key_prefix), chunk_size))

    def expand(self, pipeline: beam.pvalue.PBegin) -> beam.PCollection:
        if self._chunks is not None:
            return pipeline | "CreateChunks" >> beam.Create(self._chunks)
        return (
            pipeline
            | "Start" >> beam.Create([None])
            | "Generate" >> beam.FlatMap(_generate_chunks, self._make, self._key_prefix, self._chunk_size)
            | "SpreadChunks" >> beam.Reshuffle()
        )


def count_samples(paths: Iterable[str]) -> int | None:
    """The samples of the .npy files ``paths`` (their first axis, read from their headers only), or
    None when one is a .npz (its members' headers are inside a zip) or not a readable .npy: a job
    that does not know its count runs as a large one."""
    total = 0
    for path in paths:
        if posixpath.splitext(path)[1].lower() != ".npy":
            return None
        with storage.open_read(path) as handle:
            try:
                version = np.lib.format.read_magic(handle)
                shape = (np.lib.format.read_array_header_1_0(handle) if version == (1, 0)
                         else np.lib.format.read_array_header_2_0(handle))[0]
            except ValueError:
                return None
        if not shape:
            return None
        total += shape[0]
    return total


def peek_arrays(path: str, *, npy_feature: str = "x", rows: int = 16) -> dict[str, np.ndarray]:
    """The first ``rows`` samples of a .npy / .npz file as arrays (for schema inference)."""
    name = posixpath.basename(path)
    with storage.open_read(path) as handle:
        if posixpath.splitext(path)[1].lower() == ".npz":
            with np.load(io.BytesIO(handle.read()), allow_pickle=False) as npz:
                return {member: npz[member][:rows] for member in npz.files}
        return {npy_feature: next(_npy_row_chunks(handle, rows, name))[1]}
