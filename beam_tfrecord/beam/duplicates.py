"""Exact duplicates in a build: digests written where records are encoded, groups found where equal hashes meet.

Encoders write digest files (``quality.digest_files``) and announce them; ``FindDuplicates`` gives each task a
range of content-hash sections of every file, so no worker holds every hash; publication counts the groups by
split (``quality.duplicate_counts``), records them in the manifest, or fails (``duplicates=fail``).
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import pickle
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.beam.one_group import DIGESTS, START, TaggedStart, by_kind, tag
from beam_tfrecord.core.runs import ENTRY_HEADER_BYTES, HASH_BYTES, RECORD, entry_reference
from beam_tfrecord.core.sharding import DatasetPlan
from beam_tfrecord.errors import DuplicatesFoundError, PipelineInvariantError
from beam_tfrecord.quality.content import ContentHasher, DuplicatesCheck, DuplicatesMode
from beam_tfrecord.quality.digest_files import SECTIONS, DigestFile, Digests, read_sections, write_digest_file
from beam_tfrecord.quality.duplicate_counts import DUPLICATES_KEY, DuplicateCounts, count_duplicates
from beam_tfrecord.quality.groups import DuplicateGroups, find_groups, merge_groups

# Digests an encoder buffers before writing a file (~40 MB with short keys): a finding task reads about one
# file's worth of rows, as tasks are as many as files (up to ``SECTIONS``).
BUFFER_DIGESTS = 1 << 20
_FRAME_HEADER, _FRAME_FOOTER = 12, 4  # a framed record: length (8) and its CRC (4), data, the data's CRC (4)
_RECORD_AT = ENTRY_HEADER_BYTES + _FRAME_HEADER
_KIND, _KEY_HASH = operator.itemgetter(HASH_BYTES), operator.itemgetter(slice(0, HASH_BYTES))
_RECORD = operator.itemgetter(slice(_RECORD_AT, -_FRAME_FOOTER))  # of an entry's memoryview: its record


@dataclasses.dataclass(frozen=True)
class DigestSettings:
    """What an encoder needs to write digests: the check, and where its files go."""

    check: DuplicatesCheck
    digests_dir: str


class DigestBuffer:
    """One encoder's digests: buffered, written to a file announced when its first digest arrives.

    ``add`` returns the files it started (to emit: they are on storage once ``finish`` has run, at the end
    of the bundle). A REFERENCE entry's record is built again from its sample to be hashed (``rebuild``).
    """

    def __init__(self, settings: DigestSettings, rebuild: Any) -> None:
        self._dir = settings.digests_dir
        self._hasher = ContentHasher(settings.check.excluded)
        self._rebuild = rebuild
        # content hashes and key hashes as bytes, keys as str: made numpy columns once, when the file is written
        self._content: list[bytes] = []
        self._key_hashes: list[bytes] = []
        self._keys: list[str] = []
        self._file: DigestFile | None = None

    def add(self, entries: Sequence[bytes], keys: Sequence[str]) -> list[DigestFile]:
        if not entries:
            return []
        if len(entries) != len(keys):
            raise PipelineInvariantError("digests", f"{len(entries)} entries but {len(keys)} keys")
        started = []
        if self._file is None:
            storage.make_dirs(self._dir)
            self._file = DigestFile(storage.join(self._dir, f"{uuid.uuid4().hex}.dig"))
            started.append(self._file)
        if bytes(map(_KIND, entries)).count(RECORD) == len(entries):  # C-level maps: no Python step per record
            records: Iterable[bytes | memoryview] = map(_RECORD, map(memoryview, entries))  # type: ignore[arg-type]
        else:
            records = [memoryview(entry)[_RECORD_AT:-_FRAME_FOOTER] if entry[HASH_BYTES] == RECORD
                       else self._rebuilt(entry) for entry in entries]
        self._content.append(self._hasher.digests(records))
        self._key_hashes.append(b"".join(map(_KEY_HASH, entries)))
        self._keys.extend(keys)
        if len(self._keys) >= BUFFER_DIGESTS:
            self.finish()
        return started

    @property
    def is_open(self) -> bool:
        """Whether a file is started (announced) and takes the next digests."""
        return self._file is not None

    def _rebuilt(self, entry: bytes) -> bytes:
        """A REFERENCE entry's record, built again from its sample (its files read again)."""
        built = self._rebuild(pickle.loads(entry_reference(entry)[1]))
        if not isinstance(built, bytes):
            raise PipelineInvariantError("digests", f"a spilled sample no longer encodes: {built}")
        return built

    def finish(self) -> None:
        """Writes the buffered digests to the announced file (a bundle's end, or a full buffer)."""
        if self._file is not None:
            write_digest_file(self._file.path, Digests.of(b"".join(self._content), b"".join(self._key_hashes),
                                                          self._keys))
        self._content, self._key_hashes, self._keys, self._file = [], [], [], None


_RECORDS_PER_ADD = 4096  # records that arrive one at a time, handed to the buffer in chunks


class RecordDigests:
    """A ``DigestBuffer`` fed one record at a time (``WriteBalancedTFRecord``'s encoders), in chunks.

    A record that finds no file open goes to the buffer at once, so the file it starts is announced from
    ``process``; the others wait for their chunk. Build in ``start_bundle``; call ``finish`` at the bundle's end.
    """

    def __init__(self, settings: DigestSettings) -> None:
        self._buffer = DigestBuffer(settings, rebuild=None)  # record entries only: nothing to rebuild
        self._entries: list[bytes] = []
        self._keys: list[str] = []

    def add(self, entry: bytes, key: str) -> list[DigestFile]:
        """Adds one record entry and its key; returns the digest files it started (to emit)."""
        if not self._buffer.is_open:
            return self._buffer.add([entry], [key])
        self._entries.append(entry)
        self._keys.append(key)
        if len(self._entries) < _RECORDS_PER_ADD:
            return []
        return self._flush()

    def _flush(self) -> list[DigestFile]:
        started = self._buffer.add(self._entries, self._keys)
        self._entries, self._keys = [], []
        return started

    def finish(self) -> None:
        if self._flush():  # records wait only while a file is open: they never start one
            raise PipelineInvariantError("digests", "a digest file started at the end of a bundle")
        self._buffer.finish()


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
