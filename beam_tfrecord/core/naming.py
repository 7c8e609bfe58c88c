"""Shard file names: one template that both formats and parses them.

``{dataset}-{split}.tfrecord-{index:05d}-of-{count:05d}{suffix}``, Beam's and TensorFlow
Datasets' convention; the suffix names the compression (``.gz`` for GZIP, ``.zz`` for ZLIB).
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


@dataclasses.dataclass(frozen=True, order=True)
class ShardName:
    """The parts of a shard's file name."""

    dataset: str
    split: str
    index: int
    count: int
    compression: Compression = Compression.NONE

    def __post_init__(self) -> None:
        for part in ("dataset", "split"):
            if not re.fullmatch(_NAME_PART, getattr(self, part)):
                raise ShardNameError(f"{part} {getattr(self, part)!r} must match {_NAME_PART}")
        if not 0 <= self.index < self.count <= 99999:
            raise ShardNameError(f"need 0 <= index < count <= 99999, got index {self.index}, count {self.count}")

    def __str__(self) -> str:
        return (f"{self.dataset}-{self.split}.tfrecord-{self.index:05d}-of-{self.count:05d}"
                f"{self.compression.suffix}")

    @classmethod
    def parse(cls, filename: str) -> "ShardName":
        match = _PATTERN.fullmatch(filename)
        if match is None:
            raise ShardNameError(f"{filename!r} does not match DATASET-SPLIT.tfrecord-SSSSS-of-NNNNN[.gz|.zz]")
        suffix = match["suffix"] or ""
        compression = next(c for c in Compression if c.suffix == suffix)
        return cls(match["dataset"], match["split"], int(match["index"]), int(match["count"]), compression)


_PATTERN = re.compile(
    rf"(?P<dataset>{_NAME_PART})-(?P<split>{_NAME_PART})\.tfrecord-(?P<index>\d{{5}})-of-(?P<count>\d{{5}})"
    rf"(?P<suffix>\.gz|\.zz)?"
)
