"""The values that flow through the writer: samples, file references and dead letters."""

from __future__ import annotations

import dataclasses
import enum
import numbers
from typing import Any, NamedTuple, final

from beam_tfrecord.errors import SourceError


class Sample(NamedTuple):
    """One training example before encoding.

    Attributes:
        key: a stable, unique key (source path, row id...). It decides the sample's split and its
            place in the shards, so it must not change between runs for the same input.
        values: feature name to value (Python or NumPy values, or a FileRef to load).
    """

    key: str
    values: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class FileRef:
    """A value to be loaded from a file (local or ``gs://``) when the sample is encoded.

    Sources emit references rather than bytes, so a file is read once, by the worker that
    encodes it, and a missing or unreadable file becomes a dead letter with stage ``read``.

    Attributes:
        path: the file.
        size_bytes: its size from a listing, if known. For a feature that takes any bytes
            (``Scalar(DType.BYTES)``), the writer then plans the record from the size alone and
            reads the file once, when it writes the shard (see ``WriteTFRecordDataset``).
    """

    path: str
    size_bytes: int | None = None

    def __post_init__(self) -> None:
        size = self.size_bytes
        if size is None:
            return
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 0:
            raise SourceError(f"FileRef {self.path!r}: size_bytes must be a byte count >= 0 or None, got {size!r}")
        object.__setattr__(self, "size_bytes", int(size))  # a NumPy integer from a listing becomes an int


class Stage(enum.Enum):
    """Where in the writer a sample was rejected."""

    READ = "read"  # its file could not be read
    DECODE = "decode"  # its payload could not be decoded (e.g. a corrupt image being resized)
    VALIDATE = "validate"  # a value does not match the schema
    ENCODE = "encode"  # the record could not be built or is too large


@final  # never subclassed: the writer's hot path tells it apart with ``type(x) is DeadLetter``
@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """A sample that was not written, with the reason.

    Attributes:
        key: the sample's key.
        stage: where it was rejected.
        error_type: the exception class name.
        message: the error message (names the feature and what was expected).
        feature: the feature at fault, if one is.
    """

    key: str
    stage: Stage
    error_type: str
    message: str
    feature: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "stage": self.stage.value, "error_type": self.error_type,
                "feature": self.feature, "message": self.message}

    @classmethod
    def from_error(cls, key: str, stage: Stage, err: BaseException) -> "DeadLetter":
        return cls(key=key, stage=stage, error_type=type(err).__name__, message=str(err),
                   feature=getattr(err, "feature", None))
