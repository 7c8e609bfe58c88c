"""Errors of a dataset as stored and read: its schema, manifest, shard names and bytes, and read options."""

from __future__ import annotations

from beam_tfrecord.errors.base import BeamTFRecordError


class SchemaError(BeamTFRecordError, ValueError):
    """A schema (feature spec) is malformed: a bad dtype, shape or option."""


class RecordSchemaError(SchemaError):
    """Serialized records given to ``WriteBalancedTFRecord`` share no schema (a feature holds int64
    values in some records and floats in others): no parse spec reads them all."""


class ManifestError(BeamTFRecordError, ValueError):
    """A manifest is missing, unreadable or malformed."""

    @classmethod
    def field(cls, path: str, expected: str, value: object) -> "ManifestError":
        """The error for manifest field ``path`` (a JSON path) holding ``value`` instead of ``expected``."""
        return cls(f"manifest field {path!r}: expected {expected}, got {repr(value)[:200]}")


class ManifestVersionError(ManifestError):
    """A manifest was written by a format version this code does not read."""

    def __init__(self, found: object, supported: int) -> None:
        self.found = found
        self.supported = supported
        super().__init__(
            f"manifest format version {found!r} is not supported; this beam-tfrecord reads version {supported} "
            "and earlier ones"
        )


class UnknownSplitError(ManifestError, LookupError):
    """A split name that the dataset does not have."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"split {name!r} is not in this dataset; it has {known}")


class DatasetNotFoundError(BeamTFRecordError, FileNotFoundError):
    """No published dataset (no manifest) exists at a path."""


class ShardNameError(BeamTFRecordError, ValueError):
    """A file name does not follow the shard naming template."""


class CorruptShardError(BeamTFRecordError):
    """A shard's bytes do not match the TFRecord framing or the manifest.

    Attributes:
        shard: the shard's path.
        offset: byte offset (in the uncompressed record stream) where the problem was found,
            or None when the problem concerns the whole file (size, checksum, count).
        reason: what was wrong.
    """

    def __init__(self, shard: str, reason: str, offset: int | None = None) -> None:
        self.shard = shard
        self.offset = offset
        self.reason = reason
        at = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"shard {shard!r}{at}: {reason}")


class MissingShardError(CorruptShardError, FileNotFoundError):
    """A shard the manifest lists is not on storage."""

    def __init__(self, shard: str) -> None:
        super().__init__(shard, "listed in the manifest but missing from storage")


class ShardChangedError(BeamTFRecordError):
    """A shard changed or was removed after a DataLoader worker read it, before the main process took its batch.

    A worker sends bytes of a local shard as a reference (path, size, mtime, inode) that the main process maps;
    the message names the shard and both identities. It takes the message alone, so that a DataLoader, which
    re-raises a worker's error by its type and message, raises it as such.
    """


class StatisticsFileError(BeamTFRecordError, ValueError):
    """A dataset's ``statistics.pb`` is missing, does not parse, or disagrees with its manifest.

    Attributes:
        path: the file's path.
        reason: what was wrong.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"statistics file {path!r}: {reason}")


class ReaderError(BeamTFRecordError, ValueError):
    """Read options are invalid: a malformed split expression, a bad worker index or batch size."""


class NotSelfContainedError(ReaderError):
    """A reader outside this project (TFDS, NVIDIA DALI, Ray Data, Croissant, a glob of shard files) was given a
    version that is not self-contained: it lists shards stored in earlier versions of its root, or records of its
    shards it no longer holds (deletion vectors), which such a reader would miss or return. The remedy,
    ``beam-tfrecord compact ROOT``, writes a version that is, or this project's readers read it as it is.

    Attributes:
        reader: the outside reader refused.
        version: the version's directory.
        reason: what is shared or deleted.
        root: the versioned root to compact (the version's directory when it is in none).
    """

    def __init__(self, *, reader: str, version: str, reason: str, root: str) -> None:
        self.reader, self.version, self.reason, self.root = reader, version, reason, root
        super().__init__(f"{reader} cannot read version {version!r}: {reason}; it reads only a self-contained "
                         "version (every shard in the version's directory, no record deleted). Run "
                         f"`beam-tfrecord compact {root}` and give it the compacted version, or read this one with "
                         "beam-tfrecord's readers (read_dataset, read_numpy, TFRecordIterableDataset)")


class IncompatibleSchemasError(ReaderError):
    """Datasets mixed in one read have schemas that differ, so their examples cannot share batches.

    Attributes:
        first, second: the two datasets' paths.
        feature: the first feature that differs.
        reason: how it differs.
    """

    def __init__(self, first: str, second: str, feature: str, reason: str) -> None:
        self.first, self.second, self.feature, self.reason = first, second, feature, reason
        super().__init__(f"datasets {first!r} and {second!r} cannot be mixed: feature {feature!r} {reason}")

