"""Content hashes of serialized records: equal features (less the excluded ones) give equal hashes.

A record's hash is MurmurHash3 x64 128 (``mmh3``) of its ``Example`` (or ``SequenceExample``) bytes less the
excluded features' map entries; not cryptographic: it finds equal content, not an attacker's collisions. The
encoders write features in schema order, so equal values give equal bytes.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

import mmh3

from beam_tfrecord.core.wire import read_varint
from beam_tfrecord.errors import WriterOptionError

CONTENT_HASH_BYTES = 16  # 128 bits: at 1e9 records, a false duplicate has odds of ~1e-21
_DIGEST = mmh3.mmh3_x64_128_digest  # 16 bytes; 0.6 us for a 3 KB record here, BLAKE2b-128 5.4 us


class DuplicatesMode(enum.Enum):
    """What a build does with exact duplicates: count them (REPORT), keep one of each group (DROP), or
    publish nothing (FAIL)."""

    REPORT = "report"
    DROP = "drop"
    FAIL = "fail"

    @classmethod
    def parse(cls, value: "DuplicatesMode | str") -> "DuplicatesMode":
        if isinstance(value, DuplicatesMode):
            return value
        try:
            return cls(value)
        except ValueError as err:
            raise WriterOptionError(f"duplicates must be one of {[m.value for m in cls]}, got {value!r}") from err


def _fields(data: memoryview) -> Iterable[tuple[int, memoryview, memoryview]]:
    """(field number, the whole field, its payload) of each length-delimited field of a message."""
    position = 0
    while position < len(data):
        start = position
        tag, position = read_varint(data, position)  # type: ignore[arg-type]
        if tag & 7 != 2:
            raise ValueError(f"wire type {tag & 7} at byte {start}: not an Example")
        length, position = read_varint(data, position)  # type: ignore[arg-type]
        yield tag >> 3, data[start:position + length], data[position:position + length]
        position += length


def _feature_name(entry: memoryview) -> bytes:
    """The key of a ``Features.feature`` map entry (field 1 of the entry)."""
    for number, _, payload in _fields(entry):
        if number == 1:
            return bytes(payload)
    return b""


class ContentHasher:
    """Hashes records for duplicate detection, leaving out the named features.

    Args:
        excluded: feature names whose values do not count (a key or path feature, a timestamp).
    """

    def __init__(self, excluded: Iterable[str] = ()) -> None:
        self.excluded = tuple(sorted(set(excluded)))
        self._excluded = frozenset(name.encode("utf-8") for name in self.excluded)

    def digest(self, record: bytes | memoryview) -> bytes:
        """The 16-byte content hash of one serialized record."""
        if not self._excluded:
            return _DIGEST(record)
        kept: list[memoryview] = []
        for number, whole, payload in _fields(memoryview(record)):
            if number != 1:  # a SequenceExample's feature lists: hashed whole
                kept.append(whole)
                continue
            kept.extend(entry for _, entry, entry_payload in _fields(payload)  # Features.feature map entries
                        if _feature_name(entry_payload) not in self._excluded)
        return _DIGEST(b"".join(kept))

    def digests(self, records: Iterable[bytes | memoryview]) -> bytes:
        """The content hashes of several records, concatenated (16 bytes each)."""
        return b"".join(map(_DIGEST if not self._excluded else self.digest, records))


@dataclasses.dataclass(frozen=True)
class DuplicatesCheck:
    """How a build checks exact duplicates.

    Attributes:
        mode: what to do with them (``DuplicatesMode``).
        excluded: features left out of the content hash (a key or path feature, a timestamp...).
    """

    mode: DuplicatesMode = DuplicatesMode.REPORT
    excluded: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", DuplicatesMode.parse(self.mode))
        object.__setattr__(self, "excluded", tuple(sorted(set(self.excluded))))
