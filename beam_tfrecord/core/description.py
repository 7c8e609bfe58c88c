"""``DatasetDescription``: what a dataset is (name, schema, splits, shards, files, salt, side files), checked once.

Invariant: it owns these defaults; the writer, its fan-in paths and publication read them from here, never
repeat them. docs/inputs.md shows it in use.
"""

from __future__ import annotations

import dataclasses

from beam_tfrecord.core.dali_index import unsupported_reason
from beam_tfrecord.core.naming import DEFAULT_FILE_FORMAT, Compression, FileFormat, ShardName
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.sharding import ShardingConfig, SplitConfig
from beam_tfrecord.errors import WriterOptionError

# The hash salt when none is given: the same salt and keys give the same splits and order.
DEFAULT_SALT = "beam-tfrecord"
DEFAULT_DATASET_NAME = "data"  # the name in shard file names when none is given


@dataclasses.dataclass(frozen=True)
class DatasetDescription:
    """A dataset as its manifest describes it: every field is part of what is published.

    Attributes:
        schema: the feature spec (with inputs other than ``Sample``s, only an empty dataset's).
        name: the name in shard file names.
        splits: how samples are divided into splits (default: all in ``train``).
        sharding: target size, hard cap, or fixed count of shards.
        compression: shard compression (TFRecord only; ArrayRecord compresses inside the format).
        file_format: TFRECORD, or ARRAY_RECORD for random access by index (needs ``array-record``).
        salt: hash salt; the same salt and keys give the same splits and order.
        statistics: write ``statistics.pb`` (TFDV's feature statistics, computed as the shards are
            written: ``beam_tfrecord.statistics``); False writes none (the shards are the same).
        dali_index: also write each shard's NVIDIA DALI index (``<shard>.idx``, listed in the
            manifest); uncompressed TFRecord shards only.

    Raises:
        WriterOptionError: at construction, naming the field and the bad value.
        ShardNameError: for a name that cannot name shards, or a format with a compression it has not.
    """

    schema: Schema
    name: str = DEFAULT_DATASET_NAME
    splits: SplitConfig = dataclasses.field(default_factory=SplitConfig.single)
    sharding: ShardingConfig = dataclasses.field(default_factory=ShardingConfig)
    compression: Compression = Compression.NONE
    file_format: FileFormat = DEFAULT_FILE_FORMAT
    salt: str = DEFAULT_SALT
    statistics: bool = True
    dali_index: bool = False

    def __post_init__(self) -> None:
        for field, kind in (("schema", Schema), ("splits", SplitConfig), ("sharding", ShardingConfig),
                            ("compression", Compression), ("file_format", FileFormat), ("salt", str)):
            if not isinstance(getattr(self, field), kind):
                raise WriterOptionError(f"{field} must be a {kind.__name__}, got {getattr(self, field)!r}")
        for field in ("statistics", "dali_index"):
            if not isinstance(getattr(self, field), bool):
                raise WriterOptionError(f"{field} must be a bool, got {getattr(self, field)!r}")
        if self.dali_index and unsupported_reason(self.compression, self.file_format) is not None:
            raise WriterOptionError(f"dali_index: {unsupported_reason(self.compression, self.file_format)}")
        ShardName(self.name, "train", 0, 1, self.compression, self.file_format)  # the name, the format's compression
