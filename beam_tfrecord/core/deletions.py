"""Deletion vectors: the records of an immutable shard that a version no longer holds.

A version of a root lists shards it shares with earlier versions; a record removed or replaced since is marked in
the shard's deletion vector, never cut out of the file. A vector is a portable Roaring bitmap (the serialization
Iceberg v3 and Delta use, from ``pyroaring``) of record positions in the shard, stored in the manifest as base64
with its CRC32C; read back it is untrusted input (``ManifestError`` naming the field). Every reader reads a shard
as its live runs (``live_runs``), so none returns a deleted record or misses a live one. See docs/manifest.md.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import google_crc32c
from pyroaring import FrozenBitMap

from beam_tfrecord.errors import ManifestError

_FIELDS = {"roaring", "count", "crc32c"}
_fail = ManifestError.field
MAX_SERIALIZED_BYTES = 64 << 20  # a vector of every record of a 1e9-record shard is ~128 MiB; none is that big


@dataclasses.dataclass(frozen=True)
class DeletionVector:
    """The deleted record positions of one shard (0-based, in the shard's record order).

    Attributes:
        positions: the positions, as a frozen Roaring bitmap (hashable: a ``ShardInfo`` holds it).
    """

    positions: FrozenBitMap

    def __post_init__(self) -> None:
        if not self.positions:
            raise ValueError("a deletion vector holds at least one position (no deletions: no vector)")

    @classmethod
    def of(cls, positions: Iterable[int]) -> "DeletionVector":
        return cls(FrozenBitMap(positions))

    @property
    def count(self) -> int:
        return len(self.positions)

    def union(self, positions: Iterable[int]) -> "DeletionVector":
        """This vector with ``positions`` deleted too."""
        return DeletionVector(self.positions | FrozenBitMap(positions))

    def live_runs(self, num_records: int) -> list[tuple[int, int]]:
        """The ``(start, length)`` runs of live records of a shard of ``num_records``, in order."""
        runs, start = [], 0
        for position in self.positions:
            if position > start:
                runs.append((start, position - start))
            start = position + 1
        if start < num_records:
            runs.append((start, num_records - start))
        return runs

    def to_json(self) -> dict[str, Any]:
        data = self.positions.serialize()
        return {"roaring": base64.b64encode(data).decode("ascii"), "count": self.count,
                "crc32c": f"{google_crc32c.value(data):08x}"}

    @classmethod
    def from_json(cls, value: Any, *, path: str, num_records: int) -> "DeletionVector":
        """Parses a manifest's ``deletions`` object of a shard of ``num_records`` records.

        Raises:
            ManifestError: naming ``path`` and what was expected, on any field that is missing, malformed,
                fails its checksum or names a position outside the shard.
        """
        if not isinstance(value, Mapping) or set(value) != _FIELDS:
            raise _fail(path, f"an object of {sorted(_FIELDS)}", value)
        encoded, count, crc = value["roaring"], value["count"], value["crc32c"]
        if not isinstance(encoded, str) or len(encoded) > MAX_SERIALIZED_BYTES * 4 // 3 + 4:
            raise _fail(f"{path}.roaring", "a base64 string", encoded)
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as err:
            raise _fail(f"{path}.roaring", f"base64 ({err})", encoded) from err
        if not isinstance(crc, str) or crc != f"{google_crc32c.value(data):08x}":
            raise _fail(f"{path}.crc32c", f"{google_crc32c.value(data):08x} (the CRC32C of the bitmap's bytes)", crc)
        try:
            positions = FrozenBitMap.deserialize(data)
        except (ValueError, OverflowError) as err:
            raise _fail(f"{path}.roaring", f"a portable Roaring bitmap ({err})", encoded) from err
        if type(count) is not int or count != len(positions) or count == 0:
            raise _fail(f"{path}.count", f"the bitmap's size ({len(positions)}, at least 1)", count)
        if positions.max() >= num_records:
            raise _fail(f"{path}.roaring", f"positions below the shard's {num_records} records",
                        f"position {positions.max()}")
        return cls(positions)
