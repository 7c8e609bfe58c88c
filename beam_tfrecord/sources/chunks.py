"""Helpers every source shares: chunking, listing input files, stable source names."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from beam_tfrecord import storage
from beam_tfrecord.errors import SourceError

T = TypeVar("T")
DEFAULT_CHUNK_SIZE = 256  # small samples per Beam element: amortizes the per-element overhead
_GLOB_CHARS = re.compile(r"[*?\[]")


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Yields lists of up to ``size`` items, in order."""
    if size < 1:
        raise SourceError(f"chunk_size must be >= 1, got {size}")
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def glob_base(pattern: str) -> str:
    """The folder part of a glob before its first wildcard, ending with '/'."""
    match = _GLOB_CHARS.search(pattern)
    fixed = pattern[:match.start()] if match else pattern
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
