"""Exact duplicates in a build: digests written where records are encoded, groups found where equal hashes meet.

Encoders write digest files (``quality.digest_files.DigestBuffer``, a side file) and announce them;
``FindDuplicates`` gives each task a range of content-hash sections of every file, so no worker holds every hash;
publication counts the groups by split (``quality.duplicate_counts``), records them, or fails (``duplicates=fail``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.beam.one_group import DIGESTS, START, TaggedStart, by_kind, tag
from beam_tfrecord.core.sharding import DatasetPlan
from beam_tfrecord.errors import DuplicatesFoundError, PipelineInvariantError
from beam_tfrecord.quality.content import DuplicatesCheck, DuplicatesMode
from beam_tfrecord.quality.digest_files import SECTIONS, DigestFile, Digests, read_sections
from beam_tfrecord.quality.duplicate_counts import DUPLICATES_KEY, DuplicateCounts, count_duplicates
from beam_tfrecord.quality.groups import DuplicateGroups, find_groups, merge_groups

_Task = tuple[int, int, tuple[str, ...]]  # (first section, end section, every digest file)


def _finding_tasks(group: tuple[None, Iterable[tuple[str, Any]]]) -> Iterator[tuple[int, _Task]]:
    return _tasks_of(by_kind(group, (START, DIGESTS))[DIGESTS])


def _tasks_listed(element: Any, files_of: Callable[[Any], Iterable[DigestFile]]) -> Iterator[tuple[int, _Task]]:
    return _tasks_of(files_of(element))


def _tasks_of(digest_files: Iterable[DigestFile]) -> Iterator[tuple[int, _Task]]:
    """(task number, (first section, end section, every digest file)): as many tasks as files, up to SECTIONS."""
    files = sorted(f.path for f in digest_files)
    if not files:
        return
    tasks = min(len(files), SECTIONS)
    bounds = np.linspace(0, SECTIONS, tasks + 1).astype(int).tolist()
    for number, (first, end) in enumerate(itertools.pairwise(bounds)):
        yield number, (first, end, tuple(files))


def _find_in_sections(group: tuple[int, Iterable[_Task]]) -> Iterator[DuplicateGroups]:
    for first, end, files in group[1]:
        found = find_groups(Digests.concatenate([read_sections(path, first, end) for path in files]))
        if found.num_groups:
            yield found


class FindDuplicates(beam.PTransform):
    """``DigestFile``s -> ``DuplicateGroups`` (one per task that found any), each content-hash range in one task."""

    def expand(self, files: beam.PCollection) -> beam.PCollection:
        return (
            (files.pipeline | "StartFind" >> TaggedStart(), files | "TagDigests" >> tag(DIGESTS))
            | "GatherDigests" >> beam.Flatten()
            | "AllDigests" >> beam.GroupByKey()  # (None, [(kind, DigestFile)]): the files, not their rows
            | "Tasks" >> beam.FlatMap(_finding_tasks)
            | "ByTask" >> beam.GroupByKey()  # spreads the tasks over workers
            | "FindGroups" >> beam.FlatMap(_find_in_sections)
        )


class FindDuplicatesAmong(beam.PTransform):
    """One element that lists every ``DigestFile`` (``files_of(element)``: the spill path's plan) ->
    ``DuplicateGroups``, as ``FindDuplicates`` finds them, with no stage to gather the files first.

    Args:
        files_of: the element -> the build's digest files.
    """

    def __init__(self, files_of: Callable[[Any], Iterable[DigestFile]]) -> None:
        super().__init__()
        self._files_of = files_of

    def expand(self, listing: beam.PCollection) -> beam.PCollection:
        return (
            listing
            | "Tasks" >> beam.FlatMap(_tasks_listed, self._files_of)
            | "ByTask" >> beam.GroupByKey()  # spreads the tasks over workers
            | "FindGroups" >> beam.FlatMap(_find_in_sections)
        )


def split_numbers(plan: DatasetPlan, key_hashes: np.ndarray) -> np.ndarray:
    """The split (its position in ``plan.splits``) of each key hash."""
    starts = np.array([split.hash_lo for split in plan.splits], np.uint64)
    return np.searchsorted(starts, np.asarray(key_hashes, np.uint64), side="right") - 1


def counted(check: DuplicatesCheck, plan: DatasetPlan | None, found: Sequence[DuplicateGroups], *,
            split_by: str | None = None) -> DuplicateCounts:
    """The build's duplicate counts, by the plan's splits."""
    groups = merge_groups(found)
    names = [split.name for split in plan.splits] if plan is not None else ["train"]
    if plan is None and groups.num_groups:
        raise PipelineInvariantError("duplicates", "duplicate groups found but no plan was made")
    return count_duplicates(groups, names, (lambda h: split_numbers(plan, h)) if plan else (lambda h: h * 0),
                            mode=check.mode, excluded=check.excluded, split_by=split_by)


def checked_metadata(check: DuplicatesCheck, counts: DuplicateCounts, metadata: dict[str, Any],
                     temp_dir: str) -> dict[str, Any]:
    """The manifest metadata with the counts; raises DuplicatesFoundError (temp files gone) for ``fail``."""
    if check.mode is DuplicatesMode.FAIL and counts.groups:
        storage.delete_tree(temp_dir)  # nothing is published; the old dataset, if any, stays
        examples = [" = ".join(pair) + f"  ({name})" for name, pairs in sorted(counts.examples.items())
                    for pair in pairs[:3]][:10]
        raise DuplicatesFoundError(counts.summary_line(), examples)
    return {**metadata, DUPLICATES_KEY: counts.to_json()}
