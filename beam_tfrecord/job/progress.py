"""Live progress of a local build: samples encoded and rejected, shards written of planned, MB/s, ETA.

DoFns keep their counts in small files the launching process sums; remote runners get no progress folder.
See docs/command-line.md, ``--progress``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from beam_tfrecord.job.fork_quiet import start_quiet_thread

FLUSH_SECONDS = 0.5
_SUFFIX = ".progress.json"


@dataclasses.dataclass
class ProgressCounts:
    """What the writer has done so far (summed over every DoFn instance)."""

    samples_encoded: int = 0
    samples_rejected: int = 0
    shards_written: int = 0
    bytes_written: int = 0
    shards_planned: dict[str, int] = dataclasses.field(default_factory=dict)  # split -> shard count

    def add(self, other: ProgressCounts) -> None:
        self.samples_encoded += other.samples_encoded
        self.samples_rejected += other.samples_rejected
        self.shards_written += other.shards_written
        self.bytes_written += other.bytes_written
        self.shards_planned.update(other.shards_planned)

    @property
    def samples_seen(self) -> int:
        return self.samples_encoded + self.samples_rejected

    @property
    def num_shards_planned(self) -> int:
        return sum(self.shards_planned.values())


class ProgressSink:
    """One DoFn instance's counts, kept in its own file of ``directory`` (create in ``setup``)."""

    def __init__(self, directory: str) -> None:
        self._path = os.path.join(directory, f"{os.getpid()}-{uuid.uuid4().hex[:8]}{_SUFFIX}")
        self.counts = ProgressCounts()
        self._flushed_at = 0.0

    def add(self, *, encoded: int = 0, rejected: int = 0, shards: int = 0, num_bytes: int = 0,
            planned: tuple[str, int] | None = None) -> None:
        self.counts.samples_encoded += encoded
        self.counts.samples_rejected += rejected
        self.counts.shards_written += shards
        self.counts.bytes_written += num_bytes
        if planned is not None:
            self.counts.shards_planned[planned[0]] = planned[1]
        if time.monotonic() - self._flushed_at >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Writes the counts (temporary name, then rename: a reader never sees half a file)."""
        self._flushed_at = time.monotonic()
        try:
            temp = f"{self._path}.tmp"
            with open(temp, "w", encoding="utf-8") as handle:
                json.dump(dataclasses.asdict(self.counts), handle)
            os.replace(temp, self._path)
        except OSError:
            pass  # progress is best effort: a vanished folder (the job is ending) must not fail a bundle


def read_progress(directory: str) -> ProgressCounts:
    """The sum of every sink's counts in ``directory`` (files being replaced are skipped)."""
    total = ProgressCounts()
    try:
        names = [n for n in os.listdir(directory) if n.endswith(_SUFFIX)]
    except OSError:
        return total
    for name in names:
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                total.add(ProgressCounts(**json.load(handle)))
        except (OSError, ValueError, TypeError):
            continue
    return total


def _duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def describe_progress(counts: ProgressCounts, *, elapsed_seconds: float, expected_inputs: int | None,
                      writing_seconds: float | None = None) -> str:
    """One line: samples, rejections, shards, MB/s and, when there is a rate to go by, an ETA.

    ``writing_seconds`` is the time since the shards were planned (writing began), when known.
    """
    seen = f"{counts.samples_seen:,}" + (f"/{expected_inputs:,}" if expected_inputs else "")
    shards = f"{counts.shards_written}/{counts.num_shards_planned or '?'}"
    rate = counts.bytes_written / 1e6 / elapsed_seconds if elapsed_seconds > 0 else 0.0
    line = (f"{seen} samples ({counts.samples_rejected:,} rejected) | shards {shards} | {rate:.1f} MB/s | "
            f"{_duration(elapsed_seconds)}")
    eta = _eta(counts, elapsed_seconds=elapsed_seconds, expected_inputs=expected_inputs,
               writing_seconds=writing_seconds)
    return line + (f" | ETA {_duration(eta)}" if eta is not None else "")


def _eta(counts: ProgressCounts, *, elapsed_seconds: float, expected_inputs: int | None,
         writing_seconds: float | None) -> float | None:
    """Seconds left: from the encoding rate while encoding, then from the shard-writing rate (over
    the time since writing began, not the whole build, when that is known).

    None until there is a rate worth extrapolating (1% of the inputs, or a shard, written), between
    the last sample encoded and the first shard written (no rate for the writing yet), and once
    every shard is written: a 0:00:00 there would claim an end that is not, or is already, there.
    """
    if counts.num_shards_planned and counts.shards_written:
        shards_left = counts.num_shards_planned - counts.shards_written
        per_shard = (elapsed_seconds if writing_seconds is None else writing_seconds) / counts.shards_written
        return per_shard * shards_left if shards_left > 0 else None
    if expected_inputs and expected_inputs > counts.samples_seen and counts.samples_seen * 100 >= expected_inputs:
        return elapsed_seconds * (expected_inputs - counts.samples_seen) / counts.samples_seen
    return None


def _has_tqdm() -> bool:
    """tqdm draws the live line (the ``[progress]`` extra); without it, plain lines are shown."""
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True


def _bar_class() -> type:
    """tqdm without its monitor thread (``monitor_interval = 0``): a thread of tqdm's own would keep
    the local engine from forking its workers; the display redraws the bar itself every 0.25 s."""
    from tqdm import tqdm

    class _Bar(tqdm):
        monitor_interval = 0

    return _Bar


class ProgressDisplay:
    """Shows a progress folder's sums while a build runs (``with ProgressDisplay(...)``).

    Args:
        directory: the progress folder the writer's DoFns fill.
        expected_inputs: inputs the source will emit, when known (for the bar and the ETA).
        stream: where to show it (stderr).
        live: a redrawn line (tqdm) rather than periodic plain lines; default: when ``stream``
            is a terminal.
        interval_seconds: seconds between plain lines.
    """

    def __init__(self, directory: str, *, expected_inputs: int | None = None, stream: IO[str] | None = None,
                 live: bool | None = None, interval_seconds: float = 10.0) -> None:
        self._directory = directory
        self._expected = expected_inputs
        self._stream = stream or sys.stderr
        self._live = (self._stream.isatty() if live is None else live) and _has_tqdm()
        self._interval = 0.25 if self._live else interval_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._writing_since: float | None = None  # when the shards were first seen planned
        self._bar: Any = None

    def __enter__(self) -> ProgressDisplay:
        self._started = time.monotonic()
        if self._live:
            # shutil's width falls back to 80 columns where a terminal reports 0 (some ptys do).
            self._bar = _bar_class()(total=self._expected, unit=" samples", file=self._stream, leave=False,
                             ncols=shutil.get_terminal_size().columns,
                             bar_format="{percentage:3.0f}%|{bar:12}| {desc}" if self._expected else "{desc}")
        # A quiet thread: the local engine may still fork its workers from this process (fork_quiet).
        self._thread = start_quiet_thread(self.show, every_seconds=self._interval, stop=self._stop,
                                          name="beam-tfrecord-progress")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.close()  # leave=False: the line is cleared, the summary prints on a clean terminal
        elif exc_info[0] is None:
            self.show()  # a log ends with the final counts, however short the build was (a failure
            # ends with its error instead)

    def show(self) -> None:
        counts = read_progress(self._directory)
        now = time.monotonic()
        if counts.num_shards_planned and self._writing_since is None:
            self._writing_since = now
        line = describe_progress(counts, elapsed_seconds=now - self._started, expected_inputs=self._expected,
                                 writing_seconds=None if self._writing_since is None else now - self._writing_since)
        if self._bar is not None:
            self._bar.n = counts.samples_seen
            self._bar.set_description_str(line, refresh=True)
        else:
            print(f"progress: {line}", file=self._stream, flush=True)


@contextmanager
def progress_folder() -> Iterator[str]:
    """A fresh local folder for one build's progress files, removed afterwards."""
    import tempfile

    directory = tempfile.mkdtemp(prefix="beam-tfrecord-progress-")
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
