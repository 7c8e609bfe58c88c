"""One fired pane of a streaming write, committed at once: its shards balanced as a batch build's, the manifest last.

Invariant: a reader sees a pane whole or not at all, and once. The pane's shards are planned by the batch build's
pure planner (``core.cut_planner.plan_dataset``) over its records in (hash, content) order, written under temporary
names, renamed under the prefix's commit lease and then listed by the manifest, written last. A pane the manifest
lists already (its window and index, ``PaneId``) commits nothing: a retried bundle or a restarted job writes the
same names with the same bytes, and publishes nothing twice. See docs/streaming.md.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import datetime
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.beam.beam_names import PrefixLayout
from beam_tfrecord.beam.pane_manifest import PaneId, PaneShards, committed_panes, with_pane
from beam_tfrecord.beam.serialized_records import KeyFn, Payload, PlacedRecord, RecordEntryMaker
from beam_tfrecord.beam.shards import ShardFileWriter, ShardTarget
from beam_tfrecord.core.cut_planner import plan_dataset
from beam_tfrecord.core.description import DatasetDescription
from beam_tfrecord.core.manifest import DEAD_LETTER_FILENAME, Manifest, ShardInfo
from beam_tfrecord.core.record_schema import RecordsSummary, merge_summaries
from beam_tfrecord.core.runs import ENTRY_HEADER_BYTES, HASH_BYTES
from beam_tfrecord.core.samples import DeadLetter
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.sharding import ShardSpec
from beam_tfrecord.errors import OutputLockedError, OutputPathError, RejectedSamplesError
from beam_tfrecord.job import lease

_Made = TypeVar("_Made")
PANES_DIRNAME = "panes"  # in the prefix's metadata folder: each pane's shards under temporary names
COMMIT_WAIT_SECONDS = 120.0  # how long a pane waits for another pane's commit (a manifest write: milliseconds)
# A commit lease older than this was left by a worker that died on another machine (one on this one: at once).
_STALE_LEASE = datetime.timedelta(minutes=10)


@dataclasses.dataclass(frozen=True)
class PaneCommitSettings:
    """What every pane of one streaming write is committed with.

    Attributes:
        layout: the prefix, its windowed shard names (``W`` or ``V``) and its metadata folder.
        description: the dataset's name, splits, sharding, compression and salt.
        payload: what the records are (``Payload``).
        key_fn: the element's stable key (None: a salted hash of its bytes).
        max_rejected_fraction: a pane rejecting more of its elements than this fails, and publishes nothing.
        metadata: facts every manifest records (the payload).
        command: what wrote the dataset.
        empty_schema: the schema of a dataset of no record.
    """

    layout: PrefixLayout
    description: DatasetDescription
    payload: Payload
    key_fn: KeyFn | None
    max_rejected_fraction: float
    metadata: Mapping[str, Any]
    command: tuple[str, ...]
    empty_schema: Schema


def _published(layout: PrefixLayout) -> Manifest | None:
    data = storage.read_bytes_or_none(layout.manifest_path)
    return None if data is None else Manifest.loads(data)


def _pane_token(pane: PaneId) -> str:
    return hashlib.sha256(pane.key.encode("ascii")).hexdigest()[:16]  # a plain file name, one per pane


def _pane_dir(layout: PrefixLayout, pane: PaneId) -> str:
    return storage.join(layout.metadata_dir, PANES_DIRNAME, _pane_token(pane))


def _temp_name(shard: ShardSpec | ShardInfo, count: int) -> str:
    """A shard's name in its pane's folder (the window's text in its final name is no plain file name)."""
    return f"{shard.split}-{shard.index:05d}-of-{count:05d}"


def split_rejected(made: Iterable[_Made | DeadLetter]) -> tuple[list[_Made], list[DeadLetter]]:
    """What an encode step made of a pane's elements: (the records, the dead letters)."""
    kept: list[_Made] = []
    rejected: list[DeadLetter] = []
    for one in made:
        if isinstance(one, DeadLetter):
            rejected.append(one)
        else:
            kept.append(one)
    return kept, rejected


def _placed(elements: Iterable[Any], settings: PaneCommitSettings) -> tuple[list[PlacedRecord], list[DeadLetter]]:
    description = settings.description
    maker = RecordEntryMaker(payload=settings.payload, salt=description.salt,
                             max_record_bytes=description.sharding.cap, key_fn=settings.key_fn)
    return split_rejected(maker.make(element) for element in elements)


def write_pane(pane: PaneId, elements: Iterable[Any], settings: PaneCommitSettings) -> PaneShards:
    """Writes the pane's shards under temporary names (the same bytes on every attempt); publishes nothing.

    Raises:
        RejectedSamplesError: when the pane rejects more of its elements than ``max_rejected_fraction`` (its dead
            letters are in ``dead_letters-<pane>.jsonl`` in the metadata folder).
    """
    placed, rejected = _placed(elements, settings)
    num_inputs = len(placed) + len(rejected)
    if rejected and len(rejected) > settings.max_rejected_fraction * num_inputs:
        path = storage.join(settings.layout.metadata_dir, f"dead_letters-{_pane_token(pane)}.jsonl")
        storage.write_bytes_atomic(path, dead_letter_lines(letter.to_json() for letter in rejected))
        raise RejectedSamplesError(len(rejected), num_inputs, settings.max_rejected_fraction, path,
                                   [f"{d.key} [{d.stage.value}] {d.message}" for d in rejected[:5]])
    summary = merge_summaries(RecordsSummary.of(shape) for shape in {p.shape for p in placed})
    description, layout = settings.description, settings.layout
    writer = ShardFileWriter(settings.empty_schema, description.compression, {}, direct_io=False,
                             file_format=description.file_format)
    folder = _pane_dir(layout, pane)
    storage.make_dirs(folder)

    def target(spec: ShardSpec) -> ShardTarget:
        filename = layout.names.format(spec.split, spec.index, spec.count, window=pane.window_text)
        return ShardTarget(spec, filename, storage.join(folder, _temp_name(spec, spec.count)))
    shards = write_planned([p.entry for p in placed], description, writer, target)
    return PaneShards(pane, shards, num_inputs, [letter.to_json() for letter in rejected], summary)


def write_planned(entries: list[bytes], description: DatasetDescription, writer: ShardFileWriter,
                  target: Callable[[ShardSpec], ShardTarget]) -> dict[str, list[ShardInfo]]:
    """Writes one pane's entries as the batch build's planner cuts them (``plan_dataset``, in (hash, content)
    order: the same records give the same shards in any order), each shard where ``target`` says; returns the
    shards by split, in index order (a count's empty shards too)."""
    entries = sorted(entries)
    keys = [int.from_bytes(e[:HASH_BYTES], "big") for e in entries]
    sizes = np.array([len(e) - ENTRY_HEADER_BYTES for e in entries], dtype=np.int64)
    plan = plan_dataset(np.array(keys, dtype=np.uint64), sizes, description.splits, description.sharding)
    shards: dict[str, list[ShardInfo]] = {split.name: [] for split in plan.splits}
    for spec in (*plan.shards, *plan.empty_shards):
        # [hash_lo, hash_hi): hash_hi may be 2**64, beyond uint64
        mine = entries[bisect.bisect_left(keys, spec.hash_lo):bisect.bisect_left(keys, spec.hash_hi)] \
            if spec.num_records else []
        info, _ = writer.write(target(spec), mine)
        shards[spec.split].append(info)
    return {name: sorted(found, key=lambda s: s.index) for name, found in shards.items()}


def commit_pane(pane: PaneId, elements: Iterable[Any], settings: PaneCommitSettings) -> Manifest:
    """Commits one pane (``write_pane``, then ``publish_pane``); a pane committed already is a no-op. Returns the
    manifest that lists it."""
    published = _published(settings.layout)
    if pane.key in committed_panes(published):
        return published  # type: ignore[return-value]
    return publish_pane(write_pane(pane, elements, settings), settings)


def publish_pane(written: PaneShards, settings: PaneCommitSettings) -> Manifest:
    """Under the prefix's commit lease: renames the pane's shards into place and writes the manifest that lists
    them, last. A pane listed already changes nothing. Returns the manifest that lists the pane.

    Raises:
        OutputPathError: when another pane (of another window with the same ``V`` text) listed the same names.
        OutputLockedError: when another commit held the lease for ``COMMIT_WAIT_SECONDS``.
    """
    layout, pane = settings.layout, written.pane
    folder = _pane_dir(layout, pane)
    with commit_lease(layout.metadata_dir, pane):
        published = _published(layout)
        if pane.key not in committed_panes(published):
            listed = {shard.filename for shard in published.shards} if published is not None else set()
            taken = sorted(listed & set(written.filenames))
            if taken:
                raise OutputPathError(layout.shard_path(taken[0]), f"pane {pane.key} of window {pane.window_text} "
                                      "takes names another pane's shards have: name windows apart (W, not V)")
            temps = [storage.join(folder, _temp_name(s, len(v))) for v in written.shards.values() for s in v]
            storage.rename(temps, [layout.shard_path(name) for name in written.filenames])
            if written.rejected:
                _append_dead_letters(layout, written.rejected)
            published = with_pane(published, written, description=settings.description, naming=layout.names,
                                  metadata=settings.metadata, command=settings.command,
                                  empty_schema=settings.empty_schema)
            storage.write_bytes_atomic(layout.manifest_path, published.dumps().encode("utf-8"))  # the pane is out
    storage.delete_tree(folder)
    return published  # type: ignore[return-value]


def dead_letter_lines(letters: Iterable[Mapping[str, Any]]) -> bytes:
    """Dead letters (as JSON objects) as the lines of a ``dead_letters`` file."""
    return b"".join(json.dumps(letter, sort_keys=True).encode("utf-8") + b"\n" for letter in letters)


def _append_dead_letters(layout: PrefixLayout, rejected: Iterable[Mapping[str, Any]]) -> None:
    path = storage.join(layout.metadata_dir, DEAD_LETTER_FILENAME)
    storage.write_bytes_atomic(path, (storage.read_bytes_or_none(path) or b"") + dead_letter_lines(rejected))


@contextlib.contextmanager
def commit_lease(folder: str, pane: PaneId) -> Iterator[lease.Lease]:
    """The commit lease on ``folder`` (a prefix's metadata folder, a versioned root), waited for: panes of one
    write commit one at a time (the manifest is read, extended and written). A lease left by a killed worker on
    this machine is taken over at once."""
    storage.make_dirs(folder)
    deadline = time.monotonic() + COMMIT_WAIT_SECONDS
    while True:
        try:
            held = lease.acquire(folder, run_id=f"pane-{pane.key}", stale_after=_STALE_LEASE)
            break
        except OutputLockedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    try:
        yield held
    finally:
        held.release()
