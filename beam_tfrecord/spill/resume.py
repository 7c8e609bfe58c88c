"""Resuming a killed build from the spill runs and shards it finished.

The resumed build writes the same bytes as a clean one; a temp folder whose fingerprint differs is refused
(``ResumeMismatchError``). What is kept and the limits: docs/command-line.md, "A killed build resumes".
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.core.hashing import key_digests
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.core.runs import INDEX_SUFFIX, RUN_SUFFIX, RunIndex, SpilledRun
from beam_tfrecord.core.sharding import ShardSpec
from beam_tfrecord.errors import CorruptShardError, ResumeMismatchError

RESUME_FILENAME = "resume.json"
REUSED_HASHES_FILENAME = "reused-hashes.u64"
FINISHED_SHARD_SUFFIX = ".finished.json"  # beside a shard in the temp folder: written once the shard is complete
REUSED_SHARD_SUFFIX = ".reused"  # beside a shard a resumed build reused
TEMP_PREFIX = ".tmp-beam-tfrecord-"
_FORMAT_VERSION = 1


def fingerprint(facts: Mapping[str, Any]) -> str:
    """The canonical text of what decides a build's records (compared whole: equal text, same records)."""
    return json.dumps({"version": _FORMAT_VERSION, **facts}, sort_keys=True, default=repr)


def write_resume_file(temp_dir: str, text: str) -> None:
    """Writes the build's ``resume.json`` unless it is there (every encoding worker calls this; an object
    store limits the writes to one object to about one a second)."""
    path = storage.join(temp_dir, RESUME_FILENAME)
    if not storage.exists(path):
        storage.write_bytes_atomic(path, text.encode("utf-8"))


@dataclasses.dataclass(frozen=True)
class ResumePoint:
    """What a killed build left that a new one reuses.

    Attributes:
        temp_dir: the killed build's temp folder, which the new build takes over.
        run_id: its run id (the folder's suffix).
        runs: the finished runs kept, in path order.
        num_records: records they hold.
        hashes_path: the sorted key hashes they hold (``REUSED_HASHES_FILENAME``), for the encoders to skip.
        runs_left_out: finished runs left out (holding samples a kept run holds).
    """

    temp_dir: str
    run_id: str
    runs: tuple[SpilledRun, ...]
    num_records: int
    hashes_path: str
    runs_left_out: int

    def metadata(self) -> dict[str, Any]:
        """The manifest's ``metadata.resumed``."""
        return {"from_run": self.run_id, "reused_runs": len(self.runs), "reused_records": self.num_records}


def _finished_runs(runs_dir: str) -> list[RunIndex]:
    """The indexes of the runs under ``runs_dir`` whose data file is complete, in path order."""
    found = dict(storage.list_files(storage.join(runs_dir, "*")))
    indexes = []
    for path in sorted(found):
        if not path.endswith(RUN_SUFFIX) or path + INDEX_SUFFIX not in found:
            continue
        try:
            index = RunIndex.from_bytes(path, storage.read_bytes(path + INDEX_SUFFIX))
        except CorruptShardError:
            continue  # an index cut short by the kill: its run is encoded again
        if index.num_bytes == found[path]:
            indexes.append(index)
    return indexes


def killed_inputs(output_dir: str) -> list[str]:
    """The inputs' identity (``fingerprint``'s ``inputs``) of each killed build in ``output_dir``; those
    whose ``resume.json`` cannot be read are left out (nothing of them would be reused)."""
    found = []
    for path, _ in storage.list_files(storage.join(output_dir, f"{TEMP_PREFIX}*", RESUME_FILENAME)):
        try:
            found.append(str(json.loads(storage.read_bytes(path))["inputs"]))
        except (ValueError, KeyError, TypeError):
            continue
    return found


def finished_runs(output_dir: str) -> list[RunIndex]:
    """The indexes of the finished runs of every killed (or running) build in ``output_dir``: what a
    resume could keep, before duplicates are left out."""
    temp_dirs = {posixpath.dirname(path) for path, _ in storage.list_files(
        storage.join(output_dir, f"{TEMP_PREFIX}*", RESUME_FILENAME))}
    return [index for temp_dir in sorted(temp_dirs) for index in _finished_runs(storage.join(temp_dir, "runs"))]


def find_resume_point(output_dir: str, text: str) -> ResumePoint | None:
    """The killed build in ``output_dir`` whose fingerprint is ``text``, with its finished runs; None
    when there is none.

    Raises:
        ResumeMismatchError: killed builds are there, none with this fingerprint.
    """
    pattern = storage.join(output_dir, f"{TEMP_PREFIX}*", RESUME_FILENAME)
    candidates = sorted(path for path, _ in storage.list_files(pattern))
    others = []
    for path in candidates:
        temp_dir = posixpath.dirname(path)
        if storage.read_bytes(path).decode("utf-8", "replace") == text:
            return _resume_point(temp_dir)
        others.append(temp_dir)
    if others:
        raise ResumeMismatchError(others[-1], output_dir)
    return None


def _resume_point(temp_dir: str) -> ResumePoint:
    kept: list[RunIndex] = []
    taken = np.zeros(0, np.uint64)
    left_out = 0
    for index in _finished_runs(storage.join(temp_dir, "runs")):
        hashes = np.unique(index.hashes)
        if np.isin(hashes, taken, assume_unique=True).any():
            left_out += 1
            continue
        kept.append(index)
        taken = np.union1d(taken, hashes)
    hashes_path = storage.join(temp_dir, REUSED_HASHES_FILENAME)
    storage.write_bytes_atomic(hashes_path, taken.astype("<u8").tobytes())
    return ResumePoint(temp_dir=temp_dir, run_id=temp_dir.rstrip("/").rsplit(TEMP_PREFIX, 1)[-1],
                       runs=tuple(SpilledRun(index.path) for index in kept),
                       num_records=sum(len(index.hashes) for index in kept), hashes_path=hashes_path,
                       runs_left_out=left_out)


def read_reused_hashes(path: str) -> np.ndarray:
    """The sorted key hashes a resumed build skips (``ResumePoint.hashes_path``), memory-mapped: the
    pages are the page cache's, shared by every worker on a machine, not each worker's own memory
    (8 bytes a record). A remote file is copied to a local temporary file first (deleted once mapped)."""
    if storage.is_remote(path):
        with tempfile.NamedTemporaryFile(prefix="reused-hashes-", suffix=".u64") as local:
            local.write(storage.read_bytes(path))
            local.flush()
            return _mapped(local.name)
    return _mapped(path)


def _mapped(path: str) -> np.ndarray:
    if os.path.getsize(path) == 0:  # numpy cannot map an empty file
        return np.zeros(0, np.uint64)
    return np.memmap(path, dtype="<u8", mode="r")


class ReusedKeys:
    """The keys of the samples a resumed build's runs hold, so that a source can leave them out before
    it reads them (the encoders skip them anyway: this only saves the reading and moving).

    Pickles as its path and salt; the hashes are mapped on the first ``held`` call in a worker.
    """

    def __init__(self, hashes_path: str, salt: str) -> None:
        self.hashes_path = hashes_path
        self.salt = salt
        self._hashes: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"hashes_path": self.hashes_path, "salt": self.salt, "_hashes": None}

    def held(self, keys: Sequence[str]) -> np.ndarray:
        """Whether a reused run holds each key's sample (a boolean per key)."""
        if self._hashes is None:
            self._hashes = read_reused_hashes(self.hashes_path)
        digests = np.frombuffer(b"".join(key_digests(keys, self.salt)), dtype=">u8").astype(np.uint64)
        return skipped(digests, self._hashes)


def skipped(hashes: np.ndarray, reused: np.ndarray) -> np.ndarray:
    """Which of ``hashes`` are in the sorted ``reused`` (a boolean per hash)."""
    if not len(reused):
        return np.zeros(len(hashes), bool)
    at = np.searchsorted(reused, hashes)
    return reused[np.minimum(at, len(reused) - 1)] == hashes


@runtime_checkable
class SkipsReusedKeys(Protocol):
    """A source that can leave out the samples a resumed build reuses before it reads them (``ReadNumpyFiles``)."""

    def skipping(self, reused: ReusedKeys) -> Any:
        """The same source, leaving out ``reused``."""


def reused_keys_of(point: ResumePoint | None, salt: str) -> ReusedKeys | None:
    """What a source leaves out when resuming ``point`` (None: not resuming, or nothing to leave out)."""
    return ReusedKeys(point.hashes_path, salt) if point is not None and point.num_records else None


def finished_shard(path: str, spec: ShardSpec) -> ShardInfo | None:
    """The shard an earlier attempt of this build finished at ``path`` for ``spec``, reused as it is;
    None when it must be written (no record of it, planned otherwise, or not the bytes recorded).

    A shard writer records a shard (``record_finished_shard``) after its file is complete: a file
    without that record, or whose size or CRC32C differ from it, was cut by a kill and is written
    again, as is a record whose shard file is gone. The record names the planned spec, so a plan that
    differs (other runs) writes it again.
    A reused shard is marked (``REUSED_SHARD_SUFFIX``) for the manifest's count (``with_reused_shards``).
    """
    record_path = path + FINISHED_SHARD_SUFFIX
    if not storage.exists(record_path):
        return None
    try:
        record = json.loads(storage.read_bytes(record_path))
        fields = dict(record["info"])
        if fields.pop("columns", None):  # a shard a writer finished holds no column file (asdict made () a list)
            return None
        info = ShardInfo(**fields)
    except (ValueError, KeyError, TypeError):
        return None  # a record from another version of this file: the shard is written again
    if record.get("spec") != dataclasses.asdict(spec) or not storage.exists(path):
        return None  # planned otherwise, or the record outlived its shard file
    if storage.crc32c_and_size(path) != (info.crc32c, info.num_bytes):
        return None
    storage.write_bytes_atomic(path + REUSED_SHARD_SUFFIX, b"")
    return info


def record_finished_shard(path: str, spec: ShardSpec, info: ShardInfo) -> None:
    """Records that the shard at ``path`` is complete, written for ``spec`` (see ``finished_shard``)."""
    record = {"spec": dataclasses.asdict(spec), "info": dataclasses.asdict(info)}
    storage.write_bytes_atomic(path + FINISHED_SHARD_SUFFIX, json.dumps(record, sort_keys=True).encode("utf-8"))


def with_reused_shards(metadata: Mapping[str, Any], temp_dir: str) -> dict[str, Any]:
    """``metadata`` with the shards a resumed build reused counted in ``resumed.reused_shards``."""
    if "resumed" not in metadata:
        return dict(metadata)
    reused = len(storage.list_files(storage.join(temp_dir, "shards", f"*{REUSED_SHARD_SUFFIX}")))
    return {**metadata, "resumed": {**metadata["resumed"], "reused_shards": reused}}


def describe_reused_shards(metadata: Mapping[str, Any]) -> str | None:
    """The job summary's line on the shards a resumed build reused (from the manifest's metadata;
    None when it reused none)."""
    reused = metadata.get("resumed", {}).get("reused_shards", 0)
    return f"  {reused} shard(s) the killed build finished were reused as they were" if reused else None


def describe(point: ResumePoint) -> str:
    """The job summary's line on what a resumed build reused."""
    left = f"; {point.runs_left_out} duplicate run(s) left out" if point.runs_left_out else ""
    return (f"  resumed run {point.run_id}: {point.num_records} records reused from {len(point.runs)} finished "
            f"spill runs{left}")
