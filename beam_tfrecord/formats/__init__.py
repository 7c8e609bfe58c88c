"""Shard formats, one module each, keyed by the manifest's ``file_format``.

``shard_format(manifest.file_format)`` gives the writer, the reader and the facts of a format
(``base.ShardFormat``). Adding a format: a ``FileFormat`` member (its name and the two facts the
pure core checks), one module here with its ``ShardFormat`` subclass, one line in ``_FORMATS``,
and its tests in ``tests/formats/``.
"""

from __future__ import annotations

from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.formats.array_record import ArrayRecordFormat
from beam_tfrecord.formats.base import ShardCount, ShardFormat, ShardReader, ShardWriter, TFDataFiles
from beam_tfrecord.formats.tfrecord import TFRecordFormat

_FORMATS: dict[FileFormat, ShardFormat] = {fmt.file_format: fmt for fmt in (TFRecordFormat(), ArrayRecordFormat())}


def shard_format(file_format: FileFormat) -> ShardFormat:
    """The format registered for ``file_format`` (every ``FileFormat`` member has one)."""
    return _FORMATS[file_format]


__all__ = ["ShardCount", "ShardFormat", "ShardReader", "ShardWriter", "TFDataFiles", "shard_format"]
