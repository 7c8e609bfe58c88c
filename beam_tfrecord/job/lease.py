"""One writer per output: a build or refresh holds a lease on its output while it runs.

The lease is ``OUTPUT/.beam-tfrecord.lock`` (a refresh: on the dataset root), a small JSON object made
with the store's conditional create, so of two jobs exactly one gets it; the other fails at once with
``OutputLockedError`` naming the holder. A stale lease (dead holder on this host, or older than
``stale_after``; any with ``break_lock``) is replaced only if unchanged. See docs/operations.md#storage.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from beam_tfrecord import storage
from beam_tfrecord.core.processes import process_exists
from beam_tfrecord.errors import OutputLockedError  # defined in errors; still importable from here

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
        if self.host == socket.gethostname() and self.pid > 0 and not process_exists(self.pid):
            return True
        try:
            started = datetime.datetime.fromisoformat(self.started_at)
        except ValueError:
            return False  # unknown start: only --break_lock takes it over
        return (now or datetime.datetime.now(datetime.timezone.utc)) - started > stale_after



@dataclasses.dataclass(frozen=True)
class Lease:
    """A held lease: its path and holder."""

    path: str
    holder: LeaseHolder

    def release(self) -> None:
        """Removes the lease if it is still this job's (never another job's that took it over)."""
        found = storage.read_versioned(self.path)
        if found is not None and LeaseHolder.from_bytes(found.data).run_id == self.holder.run_id:
            storage.delete_if_unchanged(self.path, found)


def lease_path(output: str) -> str:
    return storage.join(output, LEASE_FILENAME)


def acquire(output: str, *, run_id: str, break_lock: bool = False,
            stale_after: datetime.timedelta = DEFAULT_STALE_AFTER) -> Lease:
    """Takes the lease on ``output`` or raises ``OutputLockedError`` naming the job that holds it."""
    path = lease_path(output)
    me = LeaseHolder.me(run_id)
    for _ in range(3):  # a lease that vanishes or is replaced between our steps: look again
        if storage.create_if_absent(path, me.to_bytes()):
            return Lease(path, me)
        found = storage.read_versioned(path)
        if found is None:
            continue
        holder = LeaseHolder.from_bytes(found.data)
        if not (break_lock or holder.is_stale(stale_after)):
            raise OutputLockedError(output, holder)
        storage.delete_if_unchanged(path, found)
    found = storage.read_versioned(path)
    raise OutputLockedError(output, LeaseHolder.from_bytes(found.data) if found else LeaseHolder.me("unknown"))


@contextmanager
def held(output: str, *, run_id: str, break_lock: bool = False,
         stale_after: datetime.timedelta = DEFAULT_STALE_AFTER) -> Iterator[Lease]:
    """Holds the lease on ``output`` for the ``with`` block; released however the block ends."""
    lease = acquire(output, run_id=run_id, break_lock=break_lock, stale_after=stale_after)
    try:
        yield lease
    finally:
        lease.release()
