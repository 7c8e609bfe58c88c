"""Splits that keep a group together: a record's place hashed from its group's value, not only its key.

A record's hash decides its split and its place in the shards (``core.hashing``). With a split key, the hash is
the group value's hash with its low ``KEY_BITS`` bits taken from the key's hash, kept inside the split the group
value's hash falls in: every record of a group lands in one split, and records of a group still spread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from beam_tfrecord.core.hashing import HASH_SPACE, key_digests
from beam_tfrecord.core.sample_encoder import describe_value
from beam_tfrecord.errors import SampleError

SPLIT_BY_KEY = "split_by"  # the manifest metadata entry: what decided the splits (a column or a function's name)
KEY_BITS = 24  # a group's records share the top 40 bits: a range of 2**24 hashes, inside one split
_MASK = (1 << KEY_BITS) - 1

SplitKeyFn = Callable[[Any], Any]  # a sample -> the value its group is known by (a user or patient id)


class ColumnSplitKey:
    """A split key read from one feature (``--split_by COLUMN``). Picklable; ``column`` names it in the manifest."""

    def __init__(self, column: str) -> None:
        self.column = column

    def __call__(self, sample: Any) -> Any:
        value = sample.values.get(self.column)
        if value is None:
            raise SampleError(sample.key, self.column, "a value to split by (--split_by)", "none")
        return value


def split_key_name(split_key_fn: SplitKeyFn) -> str:
    """How the manifest and the summary name what decided the splits: the column, or the function's name."""
    column = getattr(split_key_fn, "column", None)
    return column if isinstance(column, str) else getattr(split_key_fn, "__qualname__", type(split_key_fn).__name__)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, np.generic):
        return str(value.item())
    return str(value)


class GroupPlacement:
    """Hashes records by their group (``split_key_fn``) and key, inside the group's split.

    Args:
        split_key_fn: a sample -> its group value (str, bytes or a number).
        salt: the build's hash salt.
        split_starts: the ratio splits' first hashes, ascending (the first is 0).
    """

    def __init__(self, split_key_fn: SplitKeyFn, *, salt: str, split_starts: Sequence[int]) -> None:
        self._fn = split_key_fn
        self._salt = salt
        self._starts = np.array(split_starts, np.uint64)
        self._ends = [*split_starts[1:], HASH_SPACE]

    def digests(self, samples: Sequence[Any]) -> list[bytes]:
        """Each sample's placing hash as 8 big-endian bytes (how a run entry starts)."""
        return self.place([_text(self._fn(sample)) for sample in samples], [sample.key for sample in samples])

    def place(self, group_values: Sequence[str], keys: Sequence[str]) -> list[bytes]:
        """The placing hash (8 big-endian bytes) of each record of a group value (as text) and a key."""
        out = []
        for group, key in zip(key_digests(list(group_values), self._salt), key_digests(list(keys), self._salt)):
            whole = int.from_bytes(group, "big")
            split = int(np.searchsorted(self._starts, np.uint64(whole), side="right")) - 1
            placed = (whole & ~_MASK) | (int.from_bytes(key, "big") & _MASK)
            if not int(self._starts[split]) <= placed < self._ends[split]:
                placed = whole  # the group's range crosses a split boundary: its records share one hash
            out.append(placed.to_bytes(8, "big"))
        return out


class RecordGroupPlacement:
    """``GroupPlacement`` for records that arrive serialized (``WriteBalancedTFRecord``): its ``split_key_fn``
    reads the element (a record's bytes or message, as ``key_fn`` does) and returns its group as str or bytes.

    Args:
        split_key_fn: an element -> its group value (str or bytes).
        salt: the build's hash salt.
        split_starts: the ratio splits' first hashes, ascending (the first is 0).
    """

    def __init__(self, split_key_fn: SplitKeyFn, *, salt: str, split_starts: Sequence[int]) -> None:
        self.split_key_fn = split_key_fn
        self._placement = GroupPlacement(split_key_fn, salt=salt, split_starts=split_starts)

    def digest(self, element: Any, key: str) -> bytes:
        """The element's placing hash (8 big-endian bytes); raises what ``split_key_fn`` raises, and SampleError
        (naming ``key``) for a group value that is not str or bytes."""
        value = self.split_key_fn(element)
        if not isinstance(value, (str, bytes)):
            raise SampleError(key, None, "split_key_fn to return the record's group as str or bytes",
                              describe_value(value))
        return self._placement.place([_text(value)], [key])[0]
