"""Duplicate groups: records whose content hashes are equal, found among digests where equal hashes meet.

Each group lists its members smallest key hash first (then by key): the first is the one ``drop`` keeps, the
same on every runner and run, whatever order the digests came in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from beam_tfrecord.quality.digest_files import Digests


@dataclasses.dataclass(frozen=True)
class DuplicateGroups:
    """Some duplicate groups: each group's size, and the members' key hashes and keys, group after group.

    Attributes:
        sizes: members of each group (>= 2).
        key_hashes: uint64 key hash of every member, group after group, each group's in ascending order.
        keys: every member's key, in the same order.
    """

    sizes: np.ndarray
    key_hashes: np.ndarray
    keys: tuple[str, ...]

    @property
    def num_groups(self) -> int:
        return len(self.sizes)

    @property
    def num_records(self) -> int:
        return len(self.keys)

    def _dropped(self) -> np.ndarray:
        """Which members ``drop`` leaves out: all but each group's first, less any sharing a kept one's key hash
        (the same key twice: one entry cannot be told from the other, both are kept)."""
        firsts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)[:len(self.sizes)]
        mask = np.ones(len(self.key_hashes), bool)
        mask[firsts] = False
        return mask & ~np.isin(self.key_hashes, self.key_hashes[firsts])

    @property
    def num_dropped(self) -> int:
        return int(self._dropped().sum())

    def dropped_key_hashes(self) -> np.ndarray:
        """Key hashes of the members ``drop`` leaves out, sorted, each once."""
        return np.unique(self.key_hashes[self._dropped()])


def find_groups(digests: Digests) -> DuplicateGroups:
    """The groups of equal content hashes among ``digests`` (any order in: the same groups out)."""
    by_hi = np.argsort(digests.hi, kind="stable")  # then only rows whose high half repeats are sorted whole
    sorted_hi = digests.hi[by_hi]
    repeats = np.zeros(len(by_hi), bool)
    repeats[1:] = sorted_hi[1:] == sorted_hi[:-1]
    repeats[:-1] |= repeats[1:]
    rows = by_hi[repeats]
    order = rows[np.lexsort((digests.key_hashes[rows], digests.lo[rows], digests.hi[rows]))]
    hi, lo = digests.hi[order], digests.lo[order]
    if len(order) < 2:
        return DuplicateGroups(np.zeros(0, np.int64), np.zeros(0, np.uint64), ())
    starts = np.flatnonzero(np.concatenate([[True], (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])]))
    sizes = np.diff(np.append(starts, len(order)))
    repeated = sizes >= 2
    sizes, starts = sizes[repeated], starts[repeated]
    sizes_out: list[int] = []
    hashes_out: list[int] = []
    keys_out: list[str] = []
    for start, size in zip(starts.tolist(), sizes.tolist()):
        rows = order[start:start + size].tolist()
        members = sorted((int(digests.key_hashes[row]), digests.keys[row]) for row in rows)
        sizes_out.append(size)
        hashes_out.extend(h for h, _ in members)
        keys_out.extend(k for _, k in members)
    return DuplicateGroups(np.array(sizes_out, np.int64), np.array(hashes_out, np.uint64), tuple(keys_out))


def merge_groups(parts: Sequence[DuplicateGroups]) -> DuplicateGroups:
    """Several tasks' groups as one value (content-hash ranges never overlap: no group spans two)."""
    if not parts:
        return DuplicateGroups(np.zeros(0, np.int64), np.zeros(0, np.uint64), ())
    return DuplicateGroups(np.concatenate([p.sizes for p in parts]).astype(np.int64),
                           np.concatenate([p.key_hashes for p in parts]).astype(np.uint64),
                           tuple(k for p in parts for k in p.keys))
