"""Text files -> samples of UTF-8 strings, optionally with token ids from a user tokenizer.

One sample per file (key: the file's path relative to the glob) or per non-empty line (key:
``<file>:<line number>``, lines in chunks). Samples are ``{"text": str}`` plus ``{"tokens":
[int, ...]}`` when a tokenizer is given. Text that is not valid UTF-8 is passed on as bytes and
is rejected by the encoder, which names the first invalid byte and its position.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterator, Sequence

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.core.samples import DeadLetter, Sample, Stage
from beam_tfrecord.core.schema import DType, Feature, Scalar, Schema, VarList
from beam_tfrecord.errors import SampleReadError, SourceError, StoreError
from beam_tfrecord.sources.chunks import DEFAULT_CHUNK_SIZE, ReadEachFile, check_chunk_size, chunked

# str -> token ids. Must be picklable (a module-level function or a callable object).
Tokenizer = Callable[[str], Sequence[int]]


class TextUnit(enum.Enum):
    """What one sample is."""

    FILE = "file"
    LINE = "line"


def text_schema(*, tokens: bool = False) -> Schema:
    """The schema ReadTextFiles produces."""
    features: dict[str, Feature] = {"text": Scalar(DType.STRING)}
    if tokens:
        features["tokens"] = VarList(DType.INT64)
    return Schema(features)


def make_text_sample(key: str, data: bytes, tokenizer: Tokenizer | None) -> Sample | DeadLetter:
    """A text sample from raw bytes; a failing tokenizer gives a dead letter (stage decode)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Sample(key, {"text": data})  # the encoder names the invalid byte
    values: dict = {"text": text}
    if tokenizer is not None:
        try:
            values["tokens"] = list(tokenizer(text))
        except Exception as err:  # a user callable: whatever it raises is this sample's problem
            return DeadLetter(key=key, stage=Stage.DECODE, error_type=type(err).__name__, feature="tokens",
                              message=f"feature 'tokens': the tokenizer failed ({err}) in sample {key!r}")
    return Sample(key, values)


def read_text_file(name: str, path: str, *, unit: TextUnit = TextUnit.FILE, tokenizer: Tokenizer | None = None,
                   chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[list[Sample | DeadLetter]]:
    """Chunks of samples from one text file."""
    try:
        data = storage.read_bytes(path)
    except StoreError:
        raise  # the store failed, not this sample: the job stops with it
    except Exception as err:  # FileSystems raises BeamIOError, OSError and GCS client errors
        error = SampleReadError(name, "text", path, f"{type(err).__name__}: {err}")
        yield [DeadLetter.from_error(name, Stage.READ, error)]
        return
    if unit is TextUnit.FILE:
        yield [make_text_sample(name, data, tokenizer)]
        return
    lines = ((number, line.removesuffix(b"\r")) for number, line in enumerate(data.split(b"\n"), start=1))
    samples = (make_text_sample(f"{name}:{number}", line, tokenizer) for number, line in lines if line.strip())
    yield from chunked(samples, chunk_size)


class ReadTextFiles(beam.PTransform):
    """Text files -> samples ``{"text": str}`` (+ ``"tokens"``), one per file or per line.

    Args:
        pattern: file or glob, local or ``gs://``.
        unit: one sample per file or per non-empty line.
        tokenizer: optional str -> token ids callable (picklable), e.g. a tokenizer's ``encode``.
        chunk_size: samples per Beam element in line mode.
    """

    def __init__(self, pattern: str, *, unit: TextUnit = TextUnit.FILE, tokenizer: Tokenizer | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        super().__init__()
        check_chunk_size(chunk_size)
        if tokenizer is not None and not callable(tokenizer):
            raise SourceError(f"tokenizer must be callable, got {type(tokenizer).__name__}")
        self._pattern = pattern
        self._unit = unit
        self._tokenizer = tokenizer
        self._chunk_size = chunk_size

    def expand(self, pipeline: beam.pvalue.PBegin) -> beam.PCollection:
        # [Sample | DeadLetter]: a file, or up to chunk_size lines, per element.
        return pipeline | "ReadText" >> ReadEachFile(self._pattern, functools.partial(
            read_text_file, unit=self._unit, tokenizer=self._tokenizer, chunk_size=self._chunk_size))
