"""Helpers every source shares: chunking, listing input files, stable source names."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.errors import SourceError

T = TypeVar("T")
DEFAULT_CHUNK_SIZE = 256  # small samples per Beam element: amortizes the per-element overhead


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Yields lists of up to ``size`` items, in order."""
    if size < 1:
        raise SourceError(f"chunk_size must be >= 1, got {size}")
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def glob_base(pattern: str) -> str:
    """The folder part of a glob before its first wildcard, ending with '/'."""
    fixed = storage.literal_prefix(pattern)
    return fixed[:fixed.rfind("/") + 1]


def list_inputs(pattern: str) -> list[tuple[str, str]]:
    """(relative name, path) of every file matching a glob, sorted; SourceError when none does.

    The relative name (the path below the glob's fixed folder) is what sources use in sample
    keys, so keys do not change when the data moves to another folder or bucket.
    """
    if "://" not in pattern:
        pattern = os.path.abspath(pattern)  # local matches come back absolute
    base = glob_base(pattern)
    files = [(path[len(base):] if path.startswith(base) else path, path)
             for path, _ in storage.list_files(pattern)]
    if not files:
        raise SourceError(f"no input files match {pattern!r}")
    return files


def per_file(element: tuple[str, str], read: Callable[[str, str], Iterable[T]]) -> Iterable[T]:
    """Calls ``read(name, path)`` for a (name, path) element (``FlatMap`` glue; bind options with partial)."""
    name, path = element
    return read(name, path)


def check_chunk_size(chunk_size: int) -> int:
    """Returns ``chunk_size`` after checking it is at least 1 (sources call it in constructors)."""
    if chunk_size < 1:
        raise SourceError(f"chunk_size must be >= 1, got {chunk_size}")
    return chunk_size


class ReadEachFile(beam.PTransform):
    """The shape every file-based source shares: list the files of a glob (or root), spread them
    over workers, read each one with ``read``, and spread what it yields again.

    Args:
        pattern: what ``list_files`` takes (a glob, or a root folder), local or ``gs://``.
        read: ``read(name, path)`` yielding what the source emits (samples, chunks of samples,
            dead letters), or a DoFn taking ``(name, path)`` elements.
        list_files: ``pattern -> [(name, path)]``; default ``list_inputs``.
        spread_output: reshuffle the output (chunks of small rows from a few big files); leave
            off when every file gives one sample.
    """

    def __init__(self, pattern: str, read: Callable[[str, str], Iterable[T]] | beam.DoFn, *,
                 list_files: Callable[[str], list[tuple[str, str]]] = list_inputs,
                 spread_output: bool = True) -> None:
        super().__init__()
        self._pattern = pattern
        self._read = read
        self._list_files = list_files
        self._spread_output = spread_output

    def expand(self, pipeline: beam.pvalue.PBegin) -> beam.PCollection:
        files = (
            pipeline
            | "Pattern" >> beam.Create([self._pattern])
            | "ListFiles" >> beam.FlatMap(self._list_files)
            # (name relative to the pattern, path): one element per file, spread over workers.
            | "SpreadFiles" >> beam.Reshuffle()
        )
        read = beam.ParDo(self._read) if isinstance(self._read, beam.DoFn) else beam.FlatMap(per_file, self._read)
        output = files | "ReadFiles" >> read
        return output | "SpreadOutput" >> beam.Reshuffle() if self._spread_output else output
