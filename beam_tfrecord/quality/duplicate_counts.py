"""DuplicateCounts: exact duplicates counted within each split and across each pair of splits.

What the manifest keeps under ``duplicates`` (``to_json``), the summary's line (``summary_line``) and what
``inspect`` and the report show. Across ``a/b`` (``a`` first in split order) counts the records of ``b``
whose content is also in ``a``: the test records a model trained on ``a`` has seen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from beam_tfrecord.quality.content import DuplicatesMode
from beam_tfrecord.quality.groups import DuplicateGroups

DUPLICATES_KEY = "duplicates"  # the manifest metadata entry
MAX_EXAMPLES = 20  # example key pairs kept per split pair


@dataclasses.dataclass(frozen=True)
class DuplicateCounts:
    """Exact duplicates of a build.

    Attributes:
        mode: report, drop or fail.
        records: records in a group of two or more equal records.
        groups: such groups.
        dropped: records left out by ``drop`` (all but one of each group; 0 otherwise).
        within: split -> its records that repeat an earlier one of the same split (a group's extra copies).
        across: ``a/b`` -> records of ``b`` whose content is also in ``a`` (pairs with none left out).
        examples: ``a/b`` (``a/a`` within a split) -> up to ``MAX_EXAMPLES`` [key in a, key in b] pairs.
        excluded: features left out of the content hash.
        split_by: the column whose value decided each record's split (None: its key).
    """

    mode: DuplicatesMode
    records: int
    groups: int
    dropped: int
    within: Mapping[str, int]
    across: Mapping[str, int]
    examples: Mapping[str, Sequence[tuple[str, str]]]
    excluded: tuple[str, ...] = ()
    split_by: str | None = None

    def summary_line(self) -> str:
        """``duplicates: 120 records in 57 groups; across splits: train/test 31, train/validation 12``."""
        pairs = sorted(self.across.items(), key=lambda item: (-item[1], item[0]))
        across = ", ".join(f"{pair} {count}" for pair, count in pairs) or "none"
        line = f"duplicates: {self.records} records in {self.groups} groups; across splits: {across}"
        if self.mode is DuplicatesMode.DROP:
            line += f"; dropped {self.dropped} (one record of each group kept)"
        return line

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "records": self.records, "groups": self.groups, "dropped": self.dropped,
                "within_splits": dict(self.within), "across_splits": dict(self.across),
                "examples": {pair: [list(p) for p in pairs] for pair, pairs in self.examples.items()},
                "excluded_features": list(self.excluded), "split_by": self.split_by}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "DuplicateCounts":
        return cls(DuplicatesMode(data["mode"]), int(data["records"]), int(data["groups"]), int(data["dropped"]),
                   dict(data["within_splits"]), dict(data["across_splits"]),
                   {pair: [(a, b) for a, b in pairs] for pair, pairs in data["examples"].items()},
                   tuple(data.get("excluded_features", ())), data.get("split_by"))


def count_duplicates(groups: DuplicateGroups, split_names: Sequence[str],
                     split_of: Callable[[np.ndarray], np.ndarray], *, mode: DuplicatesMode,
                     excluded: Sequence[str] = (), split_by: str | None = None) -> DuplicateCounts:
    """The counts of ``groups``, each member placed in a split by ``split_of`` (key hashes -> split numbers).

    Examples are the pairs of smallest keys (the same whatever order the groups came in).
    """
    num_splits, num_groups = len(split_names), groups.num_groups
    splits = np.asarray(split_of(groups.key_hashes), np.int64)
    group_of = np.repeat(np.arange(num_groups), groups.sizes)
    counts = np.bincount(group_of * num_splits + splits, minlength=num_groups * num_splits).reshape(
        num_groups, num_splits)
    present = counts > 0
    cell = group_of * num_splits + splits  # (group, split) of each member
    order = np.argsort(cell, kind="stable")  # members by cell, each cell's in key-hash order
    cells, firsts = np.unique(cell[order], return_index=True)
    keys = groups.keys
    within: dict[str, int] = {}
    across: dict[str, int] = {}
    examples: dict[str, list[tuple[str, str]]] = {}

    def key_in(group_numbers: np.ndarray, split: int, nth: int = 0) -> list[str]:
        """The key of the ``nth`` member in ``split`` of each group (members in key-hash order)."""
        at = firsts[np.searchsorted(cells, group_numbers * num_splits + split)] + nth
        return [keys[i] for i in order[at].tolist()]

    for a, name_a in enumerate(split_names):
        extra = int(np.maximum(counts[:, a] - 1, 0).sum())
        if extra:
            within[name_a] = extra
            shown = np.flatnonzero(counts[:, a] >= 2)
            examples[f"{name_a}/{name_a}"] = _smallest(zip(key_in(shown, a), key_in(shown, a, 1)))
        for b in range(a + 1, num_splits):
            both = present[:, a] & present[:, b]
            if both.any():
                pair = f"{name_a}/{split_names[b]}"
                across[pair] = int(counts[both, b].sum())
                shown = np.flatnonzero(both)
                examples[pair] = _smallest(zip(key_in(shown, a), key_in(shown, b)))
    return DuplicateCounts(mode, groups.num_records, num_groups,
                           groups.num_dropped if mode is DuplicatesMode.DROP else 0,
                           within, across, examples, tuple(excluded), split_by)


def _smallest(pairs: Any) -> list[tuple[str, str]]:
    return sorted(pairs)[:MAX_EXAMPLES]


def describe_duplicates(metadata: Mapping[str, Any], *, examples_per_pair: int = 3) -> list[str]:
    """The summary's and ``inspect``'s lines on duplicates and on what decided the splits (none: unchecked)."""
    lines = []
    if metadata.get("split_by"):
        lines.append(f"splits decided by {metadata['split_by']!r} (every record of one value in one split)")
    data = metadata.get(DUPLICATES_KEY)
    if not isinstance(data, Mapping):
        return lines
    if "skipped" in data:
        return [*lines, f"duplicates: not checked ({data['skipped']})"]
    try:
        counts = DuplicateCounts.from_json(data)
    except (KeyError, TypeError, ValueError):
        return [*lines, "duplicates: unreadable entry in the manifest"]
    excluded = f" (excluded from the content: {', '.join(counts.excluded)})" if counts.excluded else ""
    lines.append(counts.summary_line() + excluded)
    for pair, pairs in sorted(counts.examples.items()):
        shown = "; ".join(" = ".join(p) for p in pairs[:examples_per_pair])
        lines.append(f"  {pair}: {shown}{' ...' if len(pairs) > examples_per_pair else ''}")
    return lines
