"""Shard file names: one template that both formats and parses them.

``{dataset}-{split}.{format}-{index:05d}-of-{count:05d}{suffix}``, Beam's and TensorFlow
Datasets' convention (TFDS's ``{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}``); the format is
``tfrecord`` or ``array_record``, the suffix names the compression (``.gz`` for GZIP, ``.zz`` for
ZLIB; TFRecord only).
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
    """How records are stored in a shard file; the value is TFDS's name for it."""

    TFRECORD = "tfrecord"  # sequential: length, CRCs and payload per record
    ARRAY_RECORD = "array_record"  # random access by index (Riegeli chunks with an index)

    @classmethod
    def parse(cls, text: str) -> "FileFormat":
        """Accepts 'tfrecord' or 'array_record' (also 'array-record', 'arrayrecord'), any case."""
        normalized = text.strip().lower().replace("-", "_")
        normalized = "array_record" if normalized == "arrayrecord" else normalized
        try:
            return cls(normalized)
        except ValueError as err:
            raise ValueError(f"file format must be one of tfrecord, array_record; got {text!r}") from err


@dataclasses.dataclass(frozen=True, order=True)
class ShardName:
    """The parts of a shard's file name."""

    dataset: str
    split: str
    index: int
    count: int
    compression: Compression = Compression.NONE
    file_format: FileFormat = FileFormat.TFRECORD

    def __post_init__(self) -> None:
        for part in ("dataset", "split"):
            if not re.fullmatch(_NAME_PART, getattr(self, part)):
                raise ShardNameError(f"{part} {getattr(self, part)!r} must match {_NAME_PART}")
        if not 0 <= self.index < self.count <= 99999:
            raise ShardNameError(f"need 0 <= index < count <= 99999, got index {self.index}, count {self.count}")
        if self.file_format is FileFormat.ARRAY_RECORD and self.compression is not Compression.NONE:
            raise ShardNameError(f"array_record shards compress inside the format; got compression "
                                 f"{self.compression.name}")

    def __str__(self) -> str:
        return (f"{self.dataset}-{self.split}.{self.file_format.value}-{self.index:05d}-of-{self.count:05d}"
                f"{self.compression.suffix}")

    @classmethod
    def parse(cls, filename: str) -> "ShardName":
        match = _PATTERN.fullmatch(filename)
        if match is None:
            raise ShardNameError(f"{filename!r} does not match DATASET-SPLIT.tfrecord-SSSSS-of-NNNNN[.gz|.zz] "
                                 "or DATASET-SPLIT.array_record-SSSSS-of-NNNNN")
        suffix = match["suffix"] or ""
        compression = next(c for c in Compression if c.suffix == suffix)
        return cls(match["dataset"], match["split"], int(match["index"]), int(match["count"]), compression,
                   FileFormat(match["format"]))


_PATTERN = re.compile(
    rf"(?P<dataset>{_NAME_PART})-(?P<split>{_NAME_PART})\.(?P<format>tfrecord|array_record)-(?P<index>\d{{5}})-of-(?P<count>\d{{5}})"
    rf"(?P<suffix>\.gz|\.zz)?"
)
