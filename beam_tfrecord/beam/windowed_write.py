"""A streaming write under a Beam prefix: each fired pane of an unbounded PCollection is one atomic commit.

Invariant: the windowing is ``WriteToTFRecord``'s (``triggering_frequency`` puts the input in fixed windows of that
many seconds, fired when the watermark passes them; without it the input's own windowing stays, and a global
window needs it), and every pane goes whole to ``pane_commit.commit_pane``. A runner that cannot stream is refused
before any work (``RunnerTraits.streams``). See docs/streaming.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.transforms import trigger, window
from apache_beam.utils.timestamp import Duration

from beam_tfrecord.beam.pane_commit import PaneCommitSettings, commit_pane
from beam_tfrecord.beam.pane_manifest import PaneId
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.engine import runner_name, traits_of
from beam_tfrecord.errors import StreamingRunnerError, WriterOptionError

_UTC_NAME = "%Y-%m-%dT%H-%M-%S"  # Beam's V: a window's bounds in UTC, to the second


def window_text(bounds: window.BoundedWindow, pane_index: int, *, utc: bool) -> str:
    """The window's text in its shards' names, as Beam's ``FileBasedSink`` writes it: ``W`` (``utc`` False) is
    ``[1614556800.0, 1614556805.0)``, ``V`` is ``[2021-03-01T00-00-00, 2021-03-01T00-00-05)``. A pane after the
    window's first adds its index (``-pane1``): Beam's names would write it over the first pane's files."""
    if utc:
        text = (f"[{bounds.start.to_utc_datetime().strftime(_UTC_NAME)}, "
                f"{bounds.end.to_utc_datetime().strftime(_UTC_NAME)})")
    else:
        text = str(bounds)
    return f"{text}-pane{pane_index}" if pane_index else text


# What commits one pane: (pane, its elements) -> the manifest that lists it (``functools.partial`` of
# ``pane_commit.commit_pane`` or ``pane_versions.commit_pane_version`` with their settings).
CommitPane = Callable[[PaneId, Iterable[Any]], Manifest]


class CommitPaneFn(beam.DoFn):
    """(None, [element]) of one pane -> the manifest that lists it: one ``commit`` call."""

    def __init__(self, commit: CommitPane, *, utc_names: bool) -> None:
        self._commit = commit
        self._utc = utc_names

    def process(self, group: tuple[None, Iterable[Any]], bounds=beam.DoFn.WindowParam,
                pane=beam.DoFn.PaneInfoParam) -> Iterator[Manifest]:
        pane_id = PaneId(int(bounds.start.micros), int(bounds.end.micros), int(pane.index),
                         window_text(bounds, int(pane.index), utc=self._utc))
        manifest = self._commit(pane_id, group[1])
        beam.metrics.Metrics.counter("beam_tfrecord", "panes_committed").inc()
        yield manifest


def _keyed_by_none(element: Any) -> tuple[None, Any]:
    return None, element


class WriteWindowedTFRecord(beam.PTransform):
    """Commits each fired pane of an unbounded PCollection: under a prefix (``pane_commit``), byte-balanced shards
    named ``PREFIX-[start, end)-SSSSS-of-NNNNN`` listed by the manifest beside it; into a versioned root
    (``pane_versions``), one append version.

    A pane's elements are grouped on one worker (a GroupByKey per pane): a pane must fit in its memory; size the
    windows (``triggering_frequency``) for that. Output: the manifest after each pane's commit, in its window.

    Args:
        commit: commits one pane (``CommitPane``).
        triggering_frequency: seconds; fixed windows of this length replace the input's windowing, as Beam's
            ``WriteToTFRecord`` does (None keeps the input's, which must not be the global window).
        utc_names: the window's text in names is Beam's ``V`` (UTC, to the second), else its ``W``.
    """

    def __init__(self, commit: CommitPane, *, triggering_frequency: float | None, utc_names: bool = False) -> None:
        super().__init__()
        self._commit = commit
        self._frequency = triggering_frequency
        self._utc_names = utc_names

    @classmethod
    def under_prefix(cls, settings: PaneCommitSettings, *, triggering_frequency: float | None
                     ) -> "WriteWindowedTFRecord":
        """Each pane committed under the prefix ``settings`` names (``pane_commit.commit_pane``)."""
        return cls(functools.partial(commit_pane, settings=settings), triggering_frequency=triggering_frequency,
                   utc_names="V" in settings.layout.names.template)

    def expand(self, records: beam.PCollection) -> beam.PCollection:
        if not traits_of(records.pipeline).streams:
            raise StreamingRunnerError(runner_name(records.pipeline))
        return (
            self._windowed(records)
            | "KeyByPane" >> beam.Map(_keyed_by_none)  # (None, record): one group per window and pane
            | "GroupPane" >> beam.GroupByKey()
            | "CommitPane" >> beam.ParDo(CommitPaneFn(self._commit, utc_names=self._utc_names))
        )

    def _windowed(self, records: beam.PCollection) -> beam.PCollection:
        """As ``WriteImpl._apply_windowing`` in Beam's ``iobase``; a pane that repeats earlier ones'
        elements (ACCUMULATING) is refused: it would publish them twice."""
        if self._frequency is not None:
            return records | "ApplyFixedWindows" >> beam.WindowInto(
                window.FixedWindows(self._frequency), trigger=trigger.AfterWatermark(),
                accumulation_mode=trigger.AccumulationMode.DISCARDING, allowed_lateness=Duration(seconds=0))
        windowing = records.windowing
        if isinstance(windowing.windowfn, window.GlobalWindows):
            raise WriterOptionError("triggering_frequency: an unbounded input in the global window needs it (seconds "
                                    "> 0: each interval's records are one commit), or window the input "
                                    "(beam.WindowInto(FixedWindows(...))), as for beam.io.WriteToTFRecord")
        if windowing.accumulation_mode == trigger.AccumulationMode.ACCUMULATING:
            raise WriterOptionError("the input's windowing accumulates (AccumulationMode.ACCUMULATING): each pane "
                                    "would publish the records of the window's earlier panes again; use DISCARDING "
                                    "(each pane, a late one too, is its own commit)")
        return records
