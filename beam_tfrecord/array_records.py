"""Moved to ``beam_tfrecord.formats.array_record``; these names stay importable from here."""

from beam_tfrecord.formats.array_record import (
    WRITER_OPTIONS,
    ArrayRecordShardReader,
    ArrayRecordShardWriter,
    local_copy,
)

__all__ = ["WRITER_OPTIONS", "ArrayRecordShardReader", "ArrayRecordShardWriter", "local_copy"]
