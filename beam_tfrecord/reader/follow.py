"""Follow mode: after what is published, wait for each next commit and read only ITS new records.

A commit is a new version of a root, or a rewritten manifest of a directory or Beam prefix. Its new records: the
shards it lists that the previous commit read did not, less copies of records already read (a compaction rewrites
kept records: told apart by both versions' record locations and input indexes). Reader ``part`` of ``parts`` takes
new shards ``part::parts`` in the commit's order: each record once, deterministic per commit. Records deleted later
are not taken back. docs/reading.md, "Following a dataset as it grows".
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from beam_tfrecord.core.deletions import DeletionVector
from beam_tfrecord.core.manifest import ShardInfo, SplitInfo
from beam_tfrecord.dataset import LoadedDataset, open_dataset, read_latest, version_dir
from beam_tfrecord.errors import DatasetNotFoundError, ReaderError
from beam_tfrecord.versions.commit import COMMIT_KEY
from beam_tfrecord.versions.input_index import read_input_index
from beam_tfrecord.versions.locations import read_record_locations

DEFAULT_FOLLOW_POLL_SECONDS = 1.0  # how often LATEST (or the manifest) is read while waiting for a commit
_STATE_FORMAT = "beam-tfrecord-follow"
ShardKey = tuple[str | None, str]  # (version whose directory holds the file, file name); None: no versions


@dataclasses.dataclass(frozen=True)
class Follow:
    """How a follower waits.

    Attributes:
        poll_seconds: seconds between two looks for a new commit (> 0).
        timeout_seconds: end (the iterator simply stops) after this long without a new commit; None: never.
    """

    poll_seconds: float = DEFAULT_FOLLOW_POLL_SECONDS
    timeout_seconds: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.poll_seconds, bool) or not isinstance(self.poll_seconds, int | float) \
                or not math.isfinite(self.poll_seconds) or self.poll_seconds <= 0:
            raise ReaderError(f"follow_poll_seconds must be a number of seconds > 0, got {self.poll_seconds!r}")
        timeout = self.timeout_seconds
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                    or not math.isfinite(timeout) or timeout < 0):
            raise ReaderError(f"follow_timeout_seconds must be a number of seconds >= 0 or None, got {timeout!r}")


@dataclasses.dataclass(frozen=True)
class FollowState:
    """Where a follower stands: what a restarted reader resumes from, with no record lost or repeated.

    Attributes:
        commit: the last commit read from (a root's version id; else the digest of the manifest); None: none yet.
        position: this part's new records of ``commit`` already handed out.
        previous: the commit read before ``commit`` (its records are not ``commit``'s new ones); None: none.
        previous_shards: for a directory or a prefix (whose old manifests are gone), the shard files ``previous``
            listed; empty for a root (its versions are read back).
        part: which part of each commit's new shards this reader takes.
        parts: how many readers share them (DataLoader workers x ranks).
    """

    commit: str | None = None
    position: int = 0
    previous: str | None = None
    previous_shards: tuple[str, ...] = ()
    part: int = 0
    parts: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"format": _STATE_FORMAT, **dataclasses.asdict(self), "previous_shards": list(self.previous_shards)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FollowState":
        """Parses ``to_dict()``'s output; ``ReaderError`` on anything else."""
        try:
            if data.get("format") != _STATE_FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {_STATE_FORMAT!r}")
            state = cls(None if data["commit"] is None else str(data["commit"]), int(data["position"]),
                        None if data["previous"] is None else str(data["previous"]),
                        tuple(str(name) for name in data["previous_shards"]), int(data["part"]), int(data["parts"]))
        except (AttributeError, KeyError, TypeError, ValueError) as err:
            raise ReaderError(f"not a follow state ({err}): {dict(data)!r:.200}") from err
        if not 0 <= state.part < state.parts or state.position < 0:
            raise ReaderError(f"follow state: part {state.part} of {state.parts}, position {state.position}")
        return state


@dataclasses.dataclass(frozen=True)
class Commit:
    """One commit as a follower sees it.

    Attributes:
        commit_id: a root's version id, or the digest of a directory's or prefix's manifest.
        dataset: the commit's whole dataset.
        version: the version id for a root, None otherwise.
    """

    commit_id: str
    dataset: LoadedDataset
    version: str | None

    def shard_keys(self) -> set[ShardKey]:
        return {self.key(shard) for shard in self.dataset.manifest.shards}

    def key(self, shard: ShardInfo) -> ShardKey:
        return (shard.stored_in or self.version, shard.filename)


def load_commit(path: str) -> Commit | None:
    """The commit published at ``path`` now, or None when nothing is published there yet."""
    try:
        latest = read_latest(path)
        if latest is None:
            dataset = open_dataset(path)
            # A root whose first LATEST was written between the two reads opens too (at LATEST): taken as the root
            # it is, else its next poll would be another commit and its records read twice.
            latest = read_latest(path)
        if latest is not None:  # a root: the version LATEST names (never one published in between)
            return Commit(latest, open_dataset(version_dir(path, latest)), latest)
    except DatasetNotFoundError:
        return None
    digest = hashlib.sha256(dataset.manifest.dumps().encode("utf-8")).hexdigest()[:16]
    return Commit(digest, dataset, None)


def load_version(path: str, commit_id: str | None) -> Commit | None:
    """A root's commit named by a saved state (None: none), to compare the next one with."""
    if commit_id is None or read_latest(path) is None:
        return None
    try:
        return Commit(commit_id, open_dataset(version_dir(path, commit_id)), commit_id)
    except DatasetNotFoundError as err:
        raise ReaderError(f"the follow state names version {commit_id} of {path!r}, which retention deleted: "
                          "resume within --min_version_age of it, or start a new follower") from err


def new_records(current: Commit, *, previous: Commit | None, previous_shards: tuple[str, ...], split: str,
                part: int, parts: int) -> LoadedDataset:
    """``current``'s records of ``split`` that ``previous`` did not hold, this part's shards only, as a dataset.

    Raises:
        UnknownSplitError: ``current`` has no such split.
        ReaderError: a commit rewrote records of ``previous`` without record locations to tell them apart.
    """
    manifest = current.dataset.manifest
    seen: set[ShardKey] = previous.shard_keys() if previous is not None else {(None, n) for n in previous_shards}
    fresh = [shard for shard in manifest.split(split).shards if current.key(shard) not in seen]
    copies = _copied_positions(current, previous, {current.key(s) for s in fresh}) if previous is not None else {}
    kept = []
    for shard in fresh:
        deleted = copies.get(current.key(shard), ())
        if deleted:
            vector = DeletionVector.of(deleted) if shard.deletions is None else shard.deletions.union(deleted)
            shard = dataclasses.replace(shard, deletions=vector)
        if shard.num_live:
            kept.append(shard)
    mine = tuple(dataclasses.replace(shard, index=i) for i, shard in enumerate(kept[part::parts]))
    live = sum(shard.num_live for shard in mine)
    delta = dataclasses.replace(manifest, splits=(SplitInfo(split, mine),), num_inputs=live, num_rejected=0,
                                num_dropped=0, statistics=None)
    return dataclasses.replace(current.dataset, manifest=delta)


def _copied_positions(current: Commit, previous: Commit, fresh: set[ShardKey]) -> dict[ShardKey, list[int]]:
    """Positions, in ``current``'s new shards, of records that are copies of ``previous``'s (same key, same input
    content): empty for an append onto ``previous`` that rewrote no split (its new shards hold only new inputs)."""
    summary = current.dataset.manifest.metadata.get(COMMIT_KEY)
    if isinstance(summary, Mapping) and summary.get("base_version") == previous.version \
            and not summary.get("rewritten_splits"):
        return {}
    if current.version is None or previous.version is None:
        return {}  # a directory or prefix: its shards are written once, never rewritten under a new name
    directories = [current.dataset.directory, previous.dataset.directory]
    now, before = (read_record_locations(directory) for directory in directories)
    if now is None or before is None:
        raise ReaderError(f"version {current.version} ({current.dataset.directory!r}) rewrote records without record "
                          f"locations: a follower cannot tell its new records from those of {previous.version}")
    tokens_now, tokens_before = ({i.key: i.token for i in read_input_index(d).inputs} for d in directories)
    copies: dict[ShardKey, list[int]] = {}
    for key, location in now.by_key.items():
        if location.shard in fresh and key in before.by_key and tokens_now.get(key) \
                and tokens_now.get(key) == tokens_before.get(key):
            copies.setdefault(location.shard, []).append(location.position)
    return copies


def follow_commits(path: str, state: FollowState, follow: Follow, *, split: str,
                   closed: threading.Event | None = None) -> Iterator[tuple[FollowState, LoadedDataset]]:
    """This part's new records of each commit, as (state at the commit's start, dataset of them): first the rest
    of ``state.commit`` (a resumed reader), then each later commit as it is published. Ends after
    ``follow.timeout_seconds`` without a new commit, or when ``closed`` is set."""
    at = state
    previous = None
    if state.commit is not None:
        current = load_version(path, state.commit) or load_commit(path)
        if current is None:
            raise ReaderError(f"the follow state names commit {state.commit} of {path!r}, where nothing is published")
        before = load_version(path, state.previous)
        delta = new_records(current, previous=before, previous_shards=state.previous_shards, split=split,
                            part=state.part, parts=state.parts)
        if state.position < delta.manifest.num_written:
            yield state, delta
        at, previous = dataclasses.replace(state, commit=current.commit_id), current
    last = at.commit
    waited_since = time.monotonic()
    while closed is None or not closed.is_set():
        current = load_commit(path)
        if current is not None and current.commit_id != last:
            shards = () if previous is None or previous.version is not None else \
                tuple(sorted(shard.filename for shard in previous.dataset.manifest.shards))
            at = FollowState(current.commit_id, 0, last, shards, at.part, at.parts)
            yield at, new_records(current, previous=previous, previous_shards=at.previous_shards, split=split,
                                  part=at.part, parts=at.parts)
            previous, last, waited_since = current, current.commit_id, time.monotonic()
            continue
        if follow.timeout_seconds is not None and time.monotonic() - waited_since >= follow.timeout_seconds:
            return
        if closed is not None:
            closed.wait(follow.poll_seconds)
        else:
            time.sleep(follow.poll_seconds)
