"""``SideFileBuffer``: the one buffer of a check's side file (``core.side_files``): rows in, one file at a time.

Invariant: a file is announced with its first row and written whole (when the buffer is full, or at the bundle's
end); a bundle run again writes new files. ``digest_files.DigestBuffer`` and ``near_signatures.SignatureBuffer``
are its two checks.
"""

from __future__ import annotations

import abc
import uuid
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.core.side_files import EncodedChunk


class SideFileBuffer(abc.ABC):
    """Buffers one check's rows into a file announced when its first row arrives (``SideFiles``).

    Args:
        directory: where the files go (the build's temp folder).
        suffix: the files' name suffix.
        limit: rows buffered before the file is written and the next row starts another.
    """

    def __init__(self, directory: str, *, suffix: str, limit: int) -> None:
        self._dir = directory
        self._suffix = suffix
        self._limit = limit
        self._path: str | None = None
        self._started: list[Any] = []

    @abc.abstractmethod
    def add(self, chunk: EncodedChunk) -> None:
        """Buffers the chunk's rows of this check (``_start`` first, ``_written_if_full`` after)."""

    @abc.abstractmethod
    def _announced(self, path: str) -> Any:
        """The value that announces the file at ``path`` (``DigestFile``, ``SignatureFile``)."""

    @abc.abstractmethod
    def _rows(self) -> int:
        """How many rows are buffered."""

    @abc.abstractmethod
    def _write(self, path: str) -> None:
        """Writes the buffered rows to ``path`` and empties the buffer."""

    def _start(self) -> None:
        """Opens a file for the rows that arrive, announced at the next ``announce``, if none is open."""
        if self._path is None:
            storage.make_dirs(self._dir)
            self._path = storage.join(self._dir, f"{uuid.uuid4().hex}{self._suffix}")
            self._started.append(self._announced(self._path))

    def _written_if_full(self) -> None:
        if self._rows() >= self._limit:
            self.finish()

    @property
    def is_open(self) -> bool:
        """Whether a file is started (announced) and takes the next rows."""
        return self._path is not None

    def announce(self) -> list[Any]:
        started, self._started = self._started, []
        return started

    def finish(self) -> None:
        """Writes the buffered rows to the announced file (the bundle's end, or a full buffer)."""
        if self._path is not None:
            path, self._path = self._path, None
            self._write(path)
