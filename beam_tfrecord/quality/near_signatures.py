"""Signature files: the image signatures one encoder computed (key, pHash, colour layout) and the images it
could not hash, written where the images were decoded, so the near-duplicate search never decodes again.

A file holds one encoder's buffer; each search task reads whole files (~100 bytes an image).
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator, Sequence

import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.core.side_files import EncodedChunk
from beam_tfrecord.errors import PipelineInvariantError
from beam_tfrecord.quality.near_duplicates import ImageSignature
from beam_tfrecord.quality.side_buffer import SideFileBuffer

_SIGNATURES_MAGIC = b"BTFRSIG1"
BUFFER_IMAGES = 1 << 16  # signatures an encoder buffers before writing a file (~6 MB)


@dataclasses.dataclass(frozen=True)
class SignatureFile:
    """A signature file an encoder announced (on storage once its bundle has finished)."""

    path: str


@dataclasses.dataclass(frozen=True)
class Signatures:
    """Signatures of some images, row by row, and the (key, reason) of those that could not be hashed."""

    keys: tuple[str, ...]
    phashes: np.ndarray  # uint64
    colours: bytes  # the colour layouts, one after another (all of one length)
    not_hashed: tuple[tuple[str, str], ...] = ()

    def rows(self) -> Iterator[tuple[str, ImageSignature]]:
        width = len(self.colours) // len(self.keys) if self.keys else 0
        for n, (key, phash) in enumerate(zip(self.keys, self.phashes.tolist())):
            yield key, ImageSignature(phash, self.colours[n * width:(n + 1) * width])


class SignatureRows:
    """Rows gathered by an encoder, then written in one file (``write_signature_file``)."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.phashes: list[int] = []
        self.colours: list[bytes] = []
        self.not_hashed: list[tuple[str, str]] = []

    def __len__(self) -> int:
        return len(self.keys) + len(self.not_hashed)

    def add(self, key: str, signature: ImageSignature | str) -> None:
        """One image's signature, or the reason it could not be hashed."""
        if isinstance(signature, str):
            self.not_hashed.append((key, signature))
        else:
            self.keys.append(key)
            self.phashes.append(signature.phash)
            self.colours.append(signature.colour)

    def signatures(self) -> Signatures:
        return Signatures(tuple(self.keys), np.array(self.phashes, np.uint64), b"".join(self.colours),
                          tuple(self.not_hashed))


def write_signature_file(path: str, signatures: Signatures) -> None:
    with storage.open_write(path) as handle:
        handle.write(_SIGNATURES_MAGIC)
        handle.write(pickle.dumps((signatures.keys, signatures.phashes.astype("<u8").tobytes(), signatures.colours,
                                   signatures.not_hashed), protocol=pickle.HIGHEST_PROTOCOL))


def read_signature_files(paths: Sequence[str]) -> Iterator[Signatures]:
    for path in paths:
        with storage.open_read(path) as handle:
            data = handle.read()
        magic, body = data[:len(_SIGNATURES_MAGIC)], data[len(_SIGNATURES_MAGIC):]
        if magic != _SIGNATURES_MAGIC:
            raise PipelineInvariantError(path, f"a signature file (magic {_SIGNATURES_MAGIC!r}), got {magic!r}")
        keys, phashes, colours, not_hashed = pickle.loads(body)
        yield Signatures(keys, np.frombuffer(phashes, "<u8").astype(np.uint64), colours, not_hashed)


class SignatureBuffer(SideFileBuffer):
    """Near duplicates' side file: the signature of each image an encoder signed, in a ``SignatureFile``."""

    def __init__(self, signatures_dir: str) -> None:
        super().__init__(signatures_dir, suffix=".sig", limit=BUFFER_IMAGES)
        self._buffered = SignatureRows()

    def add(self, chunk: EncodedChunk) -> None:
        for key, signature in chunk.signatures:
            self._start()
            self._buffered.add(key, signature)
            self._written_if_full()

    def _announced(self, path: str) -> SignatureFile:
        return SignatureFile(path)

    def _rows(self) -> int:
        return len(self._buffered)

    def _write(self, path: str) -> None:
        write_signature_file(path, self._buffered.signatures())
        self._buffered = SignatureRows()
