"""How a shard file is stored: its format (``FileFormat``) and its stream compression (``Compression``).

The pure facts of each; what reads and writes a format lives in ``beam_tfrecord.formats``, keyed by
``FileFormat``. Shard names (which carry both) are ``core.naming``'s.
"""

from __future__ import annotations

import dataclasses
import enum

from beam_tfrecord.errors import ShardNameError


class Compression(enum.Enum):
    """Shard compression, as TensorFlow's TFRecordDataset names it."""

    NONE = ""
    GZIP = "GZIP"
    ZLIB = "ZLIB"

    @property
    def suffix(self) -> str:
        return {Compression.NONE: "", Compression.GZIP: ".gz", Compression.ZLIB: ".zz"}[self]

    @classmethod
    def parse(cls, text: str) -> "Compression":
        """Accepts 'none', '', 'gzip', 'zlib' in any case."""
        normalized = text.strip().upper()
        if normalized in ("", "NONE", "UNCOMPRESSED"):
            return cls.NONE
        try:
            return cls(normalized)
        except ValueError as err:
            raise ValueError(f"compression must be one of none, gzip, zlib; got {text!r}") from err


class FileFormat(enum.Enum):
    """How records are stored in a shard file; the value is TFDS's name for it.

    Each member carries the facts the pure core needs about its format (what reads and writes it
    lives in ``beam_tfrecord.formats``, keyed by this enum):

    Attributes:
        stream_compression: whether the whole file may be compressed (``.gz``/``.zz``); a format
            that compresses inside itself takes only ``Compression.NONE``.
        stores_framed_records: whether an uncompressed file is exactly its records' TFRecord
            framing (then a shard's ``num_bytes`` equals its ``num_record_bytes``).
    """

    TFRECORD = "tfrecord"  # sequential: length, CRCs and payload per record
    ARRAY_RECORD = "array_record"  # random access by index (Riegeli chunks with an index)

    @property
    def stream_compression(self) -> bool:
        return _FORMAT_FACTS[self].stream_compression

    @property
    def stores_framed_records(self) -> bool:
        return _FORMAT_FACTS[self].stores_framed_records

    @classmethod
    def parse(cls, text: str) -> "FileFormat":
        """Accepts a format's name in any case, with '-' for '_' or without it ('array-record', 'arrayrecord')."""
        normalized = text.strip().lower().replace("-", "_")
        for member in cls:
            if normalized in (member.value, member.value.replace("_", "")):
                return member
        raise ValueError(f"file format must be one of {', '.join(f.value for f in cls)}; got {text!r}")

    def check_compression(self, compression: "Compression") -> None:
        """Raises ShardNameError when this format cannot take ``compression``."""
        if not self.stream_compression and compression is not Compression.NONE:
            raise ShardNameError(f"{self.value} shards compress inside the format; got compression "
                                 f"{compression.name}")


@dataclasses.dataclass(frozen=True)
class _FormatFacts:
    stream_compression: bool
    stores_framed_records: bool


_FORMAT_FACTS = {
    FileFormat.TFRECORD: _FormatFacts(stream_compression=True, stores_framed_records=True),
    FileFormat.ARRAY_RECORD: _FormatFacts(stream_compression=False, stores_framed_records=False),
}

# The writer's default, and what a manifest without ``file_format`` holds (it predates the field;
# a manifest leaves the field out for this format, so older versions still read it).
DEFAULT_FILE_FORMAT = FileFormat.TFRECORD
