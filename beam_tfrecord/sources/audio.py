"""Audio files (WAV) -> samples: float samples and sample rate, or the file's bytes passed through.

Values match ``tf.audio.decode_wav``'s; compressed WAV is rejected with its format code. See docs/inputs.md.
"""

from __future__ import annotations

import dataclasses
import functools
import posixpath
import struct
from collections.abc import Iterator, Sequence

import apache_beam as beam
import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.core.samples import DeadLetter, FileRef, Sample, Stage
from beam_tfrecord.core.schema import ClassLabel, DType, Feature, Scalar, Schema, VarList
from beam_tfrecord.errors import AudioDecodeError, SampleReadError, StoreError
from beam_tfrecord.sources.chunks import ReadEachFile, list_inputs

AUDIO_EXTENSIONS = (".wav",)
_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE


@dataclasses.dataclass(frozen=True)
class DecodedAudio:
    """Samples as float32 [frames, channels] in [-1, 1), and the sample rate in Hz."""

    samples: np.ndarray
    sample_rate: int


def _pcm_to_float(data: bytes, bits: int) -> np.ndarray:
    if bits == 8:
        return (np.frombuffer(data, np.uint8).astype(np.float32) - 128.0) / 128.0
    if bits == 16:
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
    if bits == 24:
        raw = np.frombuffer(data, np.uint8).reshape(-1, 3).astype(np.int32)
        values = raw[:, 0] | (raw[:, 1] << 8) | (raw[:, 2] << 16)
        values = np.where(values >= 1 << 23, values - (1 << 24), values)
        return values.astype(np.float32) / float(1 << 23)
    if bits == 32:
        return (np.frombuffer(data, "<i4").astype(np.float64) / 2147483648.0).astype(np.float32)
    raise AudioDecodeError(f"unsupported PCM sample width {bits} bits (expected 8, 16, 24 or 32)")


def decode_wav(data: bytes) -> DecodedAudio:
    """Decodes a RIFF/WAVE file. Raises AudioDecodeError naming what is wrong."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise AudioDecodeError(f"not a WAV file: {len(data)} bytes starting {data[:12]!r}, expected 'RIFF....WAVE'")
    fmt: tuple[int, int, int, int] | None = None
    offset = 12
    while offset + 8 <= len(data):
        chunk_id, size = data[offset:offset + 4], struct.unpack("<I", data[offset + 4:offset + 8])[0]
        body = data[offset + 8:offset + 8 + size]
        if chunk_id == b"fmt ":
            if len(body) < 16:
                raise AudioDecodeError(f"'fmt ' chunk of {len(body)} bytes, expected at least 16")
            code, channels, rate, _, _, bits = struct.unpack("<HHIIHH", body[:16])
            if code == _EXTENSIBLE and len(body) >= 26:
                code = struct.unpack("<H", body[24:26])[0]
            fmt = (code, channels, rate, bits)
        elif chunk_id == b"data":
            if fmt is None:
                raise AudioDecodeError("'data' chunk before the 'fmt ' chunk")
            if len(body) < size:
                raise AudioDecodeError(f"truncated 'data' chunk: header says {size} bytes, file has {len(body)}")
            return _decode_data(body, *fmt)
        offset += 8 + size + (size & 1)  # chunks are padded to even sizes
    raise AudioDecodeError("no 'data' chunk" if fmt else "no 'fmt ' chunk")


def _decode_data(body: bytes, code: int, channels: int, rate: int, bits: int) -> DecodedAudio:
    if channels < 1 or rate < 1:
        raise AudioDecodeError(f"invalid header: {channels} channels at {rate} Hz")
    frame_bytes = channels * bits // 8
    if frame_bytes < 1 or len(body) % frame_bytes:
        raise AudioDecodeError(f"'data' chunk of {len(body)} bytes is not a whole number of {frame_bytes}-byte frames")
    if code == _PCM:
        values = _pcm_to_float(body, bits)
    elif code == _FLOAT and bits in (32, 64):
        values = np.frombuffer(body, "<f4" if bits == 32 else "<f8").astype(np.float32)
    else:
        raise AudioDecodeError(f"unsupported WAV format code {code} with {bits}-bit samples "
                               "(expected PCM 1 or IEEE float 3)")
    return DecodedAudio(values.reshape(-1, channels), rate)


def audio_schema(*, decode: bool = True, class_names: tuple[str, ...] | None = None) -> Schema:
    """The schema ReadAudioFiles produces: decoded floats + rate + channels, or the file bytes."""
    features: dict[str, Feature] = (
        {"audio": VarList(DType.FLOAT32), "sample_rate": Scalar(DType.INT64), "num_channels": Scalar(DType.INT64)}
        if decode else {"audio": Scalar(DType.BYTES)})
    if class_names:
        features["label"] = ClassLabel(class_names)
    return Schema(features)


def audio_class_names(root: str, files: Sequence[tuple[str, str]] | None = None) -> tuple[str, ...]:
    """Sorted names of the folders directly holding audio files under root (labels from folders);
    ``files``: ``list_audio_files(root)``, when the caller listed them already."""
    listed = list_audio_files(root) if files is None else files
    return tuple(sorted({posixpath.dirname(name) for name, _ in listed if "/" in name}))


def list_audio_files(root: str) -> list[tuple[str, str]]:
    """(name relative to root, path) of every ``.wav`` file under root, at any depth, sorted."""
    return [(name, path) for name, path in list_inputs(root.rstrip("/") + "/**")
            if posixpath.splitext(name)[1].lower() in AUDIO_EXTENSIONS]


def audio_samples(name: str, path: str, *, decode: bool = True,
                  labels: bool = False) -> Iterator[Sample | DeadLetter]:
    """The sample of one file (or its dead letter), keyed by ``name``."""
    values: dict = {"label": posixpath.dirname(name)} if labels else {}
    if not decode:
        yield Sample(name, {**values, "audio": FileRef(path)})
        return
    try:
        data = storage.read_bytes(path)
    except StoreError:
        raise  # the store failed, not this sample: the job stops with it
    except Exception as err:  # FileSystems raises BeamIOError, OSError and GCS client errors
        error = SampleReadError(name, "audio", path, f"{type(err).__name__}: {err}")
        yield DeadLetter.from_error(name, Stage.READ, error)
        return
    try:
        audio = decode_wav(data)
    except AudioDecodeError as err:
        yield DeadLetter(key=name, stage=Stage.DECODE, error_type=type(err).__name__, feature="audio",
                         message=f"feature 'audio': {err} in sample {name!r}")
        return
    yield Sample(name, {**values, "audio": audio.samples.reshape(-1), "sample_rate": audio.sample_rate,
                        "num_channels": audio.samples.shape[1]})


class ReadAudioFiles(beam.PTransform):
    """Every ``.wav`` file under root (any depth) -> one sample each, keyed by its relative path.

    Args:
        root: folder, local or ``gs://``.
        decode: decode to float samples (default), or pass the file bytes through.
        labels_from_folders: add ``label`` = the file's folder relative to root (use
            ``audio_class_names(root)`` for the schema's ClassLabel).
    """

    def __init__(self, root: str, *, decode: bool = True, labels_from_folders: bool = False) -> None:
        super().__init__()
        self._root = root
        self._decode = decode
        self._labels = labels_from_folders

    def expand(self, pipeline: beam.pvalue.PBegin) -> beam.PCollection:
        # Sample: one per file.
        return pipeline | "ReadAudio" >> ReadEachFile(
            self._root, functools.partial(audio_samples, decode=self._decode, labels=self._labels),
            list_files=list_audio_files, spread_output=False)
