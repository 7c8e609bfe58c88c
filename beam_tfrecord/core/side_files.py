"""The side-file seam: what an encoder writes beside its records (spill runs, content digests, image signatures).

Invariant: a side file is announced (emitted) when it starts and is on storage once ``finish`` has returned, at its
bundle's end; an encoder emits nothing from ``finish_bundle`` (the Dask runner drops it). docs/development.md lists
the implementations (``spill.run_files.RunWriting``, ``quality.digest_files.DigestBuffer``, ``quality.near_signatures
.SignatureBuffer``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol


@dataclasses.dataclass(frozen=True)
class EncodedChunk:
    """What an encoder made of one input element, in input order.

    Attributes:
        entries: the records' spill entries (``core.runs``), the rejected samples left out.
        keys: each entry's sample key.
        signatures: (key, ``ImageSignature`` or the reason there is none) of each image the encoder signed.
    """

    entries: Sequence[bytes]
    keys: Sequence[str]
    signatures: Sequence[tuple[str, Any]] = ()


class SideFiles(Protocol):
    """An encoder's writer of one kind of side file; built with the encoder (it pickles until first used)."""

    def add(self, chunk: EncodedChunk) -> None:
        """Buffers what ``chunk`` gives this kind of file (a full buffer may be written meanwhile)."""

    def announce(self) -> list[Any]:
        """The files started since the last call, to emit now (each on storage once ``finish`` has run)."""

    def finish(self) -> None:
        """Writes what is buffered and waits until every announced file is on storage (the bundle's end)."""
