"""A streaming write under a Beam prefix: each fired pane of an unbounded PCollection is one atomic commit.

Invariant: the windowing is ``WriteToTFRecord``'s (``triggering_frequency`` puts the input in fixed windows of that
many seconds, fired when the watermark passes them; without it the input's own windowing stays, and a global
window needs it), and every pane goes whole to ``pane_commit.commit_pane``. A runner that cannot stream is refused
before any work (``RunnerTraits.streams``). See docs/streaming.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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


class CommitPaneFn(beam.DoFn):
    """(None, [element]) of one pane -> the manifest that lists it: one ``commit_pane`` call."""

    def __init__(self, settings: PaneCommitSettings) -> None:
        self._settings = settings
        self._utc = "V" in settings.layout.names.template

    def process(self, group: tuple[None, Iterable[Any]], bounds=beam.DoFn.WindowParam,
                pane=beam.DoFn.PaneInfoParam) -> Iterator[Manifest]:
        pane_id = PaneId(int(bounds.start.micros), int(bounds.end.micros), int(pane.index),
                         window_text(bounds, int(pane.index), utc=self._utc))
        manifest = commit_pane(pane_id, group[1], self._settings)
        beam.metrics.Metrics.counter("beam_tfrecord", "panes_committed").inc()
        yield manifest


def _keyed_by_none(element: Any) -> tuple[None, Any]:
    return None, element


class WriteWindowedTFRecord(beam.PTransform):
    """Commits each fired pane of an unbounded PCollection of records (bytes or protobuf messages) as byte-balanced
    shards named ``PREFIX-[start, end)-SSSSS-of-NNNNN``, listed by the manifest beside the prefix.

    A pane's records are grouped on one worker (a GroupByKey per pane): a pane must fit in its memory; size the
    windows (``triggering_frequency``) for that. Output: the manifest after each pane's commit, in its window.

    Args:
        settings: the prefix (with ``W`` or ``V`` in its names), the dataset and its checks.
        triggering_frequency: seconds; fixed windows of this length replace the input's windowing, as Beam's
            ``WriteToTFRecord`` does (None keeps the input's, which must not be the global window).
    """

    def __init__(self, settings: PaneCommitSettings, *, triggering_frequency: float | None) -> None:
        super().__init__()
        self._settings = settings
        self._frequency = triggering_frequency

    def expand(self, records: beam.PCollection) -> beam.PCollection:
        if not traits_of(records.pipeline).streams:
            raise StreamingRunnerError(runner_name(records.pipeline))
        return (
            self._windowed(records)
            | "KeyByPane" >> beam.Map(_keyed_by_none)  # (None, record): one group per window and pane
            | "GroupPane" >> beam.GroupByKey()
            | "CommitPane" >> beam.ParDo(CommitPaneFn(self._settings))
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
