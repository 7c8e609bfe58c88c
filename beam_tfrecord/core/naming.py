"""Shard file names: one template that both formats and parses them.

``{dataset}-{split}.{format}-{index:05d}-of-{count:05d}{suffix}``, Beam's and TensorFlow
Datasets' convention (TFDS's ``{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}``); the format is a
``FileFormat`` value (``tfrecord``, ``array_record``), the suffix names the compression (``.gz``
for GZIP, ``.zz`` for ZLIB; only for formats with ``stream_compression``).
"""

from __future__ import annotations

import dataclasses
import enum
import re

from beam_tfrecord.errors import ShardNameError

_NAME_PART = r"[A-Za-z0-9_]+"


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


@dataclasses.dataclass(frozen=True, order=True)
class ShardName:
    """The parts of a shard's file name."""

    dataset: str
    split: str
    index: int
    count: int
    compression: Compression = Compression.NONE
    file_format: FileFormat = DEFAULT_FILE_FORMAT

    def __post_init__(self) -> None:
        for part in ("dataset", "split"):
            if not re.fullmatch(_NAME_PART, getattr(self, part)):
                raise ShardNameError(f"{part} {getattr(self, part)!r} must match {_NAME_PART}")
        if not 0 <= self.index < self.count <= 99999:
            raise ShardNameError(f"need 0 <= index < count <= 99999, got index {self.index}, count {self.count}")
        self.file_format.check_compression(self.compression)

    def __str__(self) -> str:
        return (f"{self.dataset}-{self.split}.{self.file_format.value}-{self.index:05d}-of-{self.count:05d}"
                f"{self.compression.suffix}")

    @classmethod
    def parse(cls, filename: str) -> "ShardName":
        match = _PATTERN.fullmatch(filename)
        if match is None:
            formats = "|".join(f.value for f in FileFormat)
            raise ShardNameError(f"{filename!r} does not match DATASET-SPLIT.{{{formats}}}-SSSSS-of-NNNNN[.gz|.zz]")
        suffix = match["suffix"] or ""
        compression = next(c for c in Compression if c.suffix == suffix)
        return cls(match["dataset"], match["split"], int(match["index"]), int(match["count"]), compression,
                   FileFormat(match["format"]))


_PATTERN = re.compile(
    rf"(?P<dataset>{_NAME_PART})-(?P<split>{_NAME_PART})\.(?P<format>{'|'.join(f.value for f in FileFormat)})"
    rf"-(?P<index>\d{{5}})-of-(?P<count>\d{{5}})"
    rf"(?P<suffix>\.gz|\.zz)?"
)
