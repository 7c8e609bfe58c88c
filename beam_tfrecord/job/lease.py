"""One writer per output: a build or refresh holds a lease on its output while it runs.

The lease is a small JSON object, ``OUTPUT/.beam-tfrecord.lock`` (for a refresh: on the dataset
root), created atomically: ``O_CREAT | O_EXCL`` on local filesystems, an upload with the
precondition ``ifGenerationMatch=0`` ("only if no object exists") on gs://. A second job on the
same output fails at once with ``OutputLockedError`` naming the holder and when it started.

Staleness rule (a crashed job leaves its lease behind): a lease is taken over when its holder
ran on this host and its process no longer exists, or when it is older than ``stale_after``
(default 24 hours: longer than any build should run). ``break_lock=True`` (``--break_lock``)
takes it over regardless. Taking over replaces the lease only if it is still the one that was
read (local: compared before the rename; gs://: ``ifGenerationMatch`` of the stale object).

On gs:// every request is retried (``beam_tfrecord.storage.gcs``). A create whose first try succeeded but
whose answer was lost fails its retry with 412, against our own lease: a 412 is therefore followed
by a read, and a lease holding exactly the bytes this job wrote (its run id, host, pid and start
time) is this job's. A delete retried after its first try removed the lease finds nothing: done.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from beam_tfrecord import storage
from beam_tfrecord.errors import OutputLockedError  # defined in errors; still importable from here
from beam_tfrecord.storage import gcs
from beam_tfrecord.storage.disk_space import raise_typed_when_full

LEASE_FILENAME = ".beam-tfrecord.lock"
DEFAULT_STALE_AFTER = datetime.timedelta(hours=24)


@dataclasses.dataclass(frozen=True)
class LeaseHolder:
    """Who holds a lease: enough to tell a live holder from a dead one and to tell a user."""

    run_id: str
    host: str
    pid: int
    started_at: str

    @classmethod
    def me(cls, run_id: str) -> "LeaseHolder":
        return cls(run_id, socket.gethostname(), os.getpid(),
                   datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))

    def to_bytes(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> "LeaseHolder":
        """The holder in a lease object; an unreadable one counts as held by an unknown job."""
        try:
            fields = json.loads(data)
            return cls(str(fields["run_id"]), str(fields["host"]), int(fields["pid"]), str(fields["started_at"]))
        except (ValueError, KeyError, TypeError):
            return cls("unknown", "unknown", -1, "unknown")

    def is_stale(self, stale_after: datetime.timedelta, now: datetime.datetime | None = None) -> bool:
        if self.host == socket.gethostname() and self.pid > 0 and not _process_exists(self.pid):
            return True
        try:
            started = datetime.datetime.fromisoformat(self.started_at)
        except ValueError:
            return False  # unknown start: only --break_lock takes it over
        return (now or datetime.datetime.now(datetime.timezone.utc)) - started > stale_after


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _create_exclusive(path: str, data: bytes) -> bool:
    """Creates ``path`` holding ``data`` if it does not exist, atomically; False if it exists."""
    if storage.scheme(path) == "gs":
        from google.api_core.exceptions import PreconditionFailed

        try:
            storage.gcs_blob(path).upload_from_string(data, if_generation_match=0, retry=gcs.retry_policy())
        except PreconditionFailed:
            found = _read(path)  # a retry may have met our own first try's lease
            return found is not None and found[0] == data
        return True
    storage.make_dirs(os.path.dirname(path))
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    # A disk too full for the lease leaves no empty lease behind (it would look held by nobody readable).
    with raise_typed_when_full(path, len(data), partial=path), os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return True


def _read(path: str) -> tuple[bytes, int | None] | None:
    """(content, generation on gs://) of the lease, or None if there is none."""
    if storage.scheme(path) == "gs":
        from google.api_core.exceptions import NotFound

        blob = storage.gcs_blob(path)
        try:
            data = blob.download_as_bytes(retry=gcs.retry_policy())
        except NotFound:
            return None
        return data, blob.generation
    try:
        with open(path, "rb") as handle:
            return handle.read(), None
    except FileNotFoundError:
        return None


def _delete_if_same(path: str, content: bytes, generation: int | None) -> None:
    """Deletes the lease if it is still the one read (``content`` / ``generation``)."""
    if storage.scheme(path) == "gs":
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:
            storage.gcs_blob(path).delete(if_generation_match=generation, retry=gcs.retry_policy())
        except (NotFound, PreconditionFailed):
            pass  # someone else replaced or removed it: the next create decides
        return
    # Local: move it aside first, so two jobs taking over the same stale lease cannot both delete a new one.
    aside = f"{path}.stale-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    with open(aside, "rb") as handle:
        moved = handle.read()
    if moved != content and not os.path.exists(path):
        os.replace(aside, path)  # not the lease we judged stale: put it back
        return
    os.remove(aside)


@dataclasses.dataclass(frozen=True)
class Lease:
    """A held lease: its path and holder."""

    path: str
    holder: LeaseHolder

    def release(self) -> None:
        """Removes the lease if it is still this job's (never another job's that took it over)."""
        found = _read(self.path)
        if found is not None and LeaseHolder.from_bytes(found[0]).run_id == self.holder.run_id:
            _delete_if_same(self.path, found[0], found[1])


def lease_path(output: str) -> str:
    return storage.join(output, LEASE_FILENAME)


def acquire(output: str, *, run_id: str, break_lock: bool = False,
            stale_after: datetime.timedelta = DEFAULT_STALE_AFTER) -> Lease:
    """Takes the lease on ``output`` or raises ``OutputLockedError`` naming the job that holds it."""
    path = lease_path(output)
    me = LeaseHolder.me(run_id)
    for _ in range(3):  # a lease that vanishes or is replaced between our steps: look again
        if _create_exclusive(path, me.to_bytes()):
            return Lease(path, me)
        found = _read(path)
        if found is None:
            continue
        holder = LeaseHolder.from_bytes(found[0])
        if not (break_lock or holder.is_stale(stale_after)):
            raise OutputLockedError(output, holder)
        _delete_if_same(path, found[0], found[1])
    found = _read(path)
    raise OutputLockedError(output, LeaseHolder.from_bytes(found[0]) if found else LeaseHolder.me("unknown"))


@contextmanager
def held(output: str, *, run_id: str, break_lock: bool = False,
         stale_after: datetime.timedelta = DEFAULT_STALE_AFTER) -> Iterator[Lease]:
    """Holds the lease on ``output`` for the ``with`` block; released however the block ends."""
    lease = acquire(output, run_id=run_id, break_lock=break_lock, stale_after=stale_after)
    try:
        yield lease
    finally:
        lease.release()
