"""The stream the streaming tests write: three 10-second windows, then late elements of the first, run on the
DirectRunner's streaming mode with windowing that fires each late element as its own pane."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream
from apache_beam.transforms import trigger, window
from apache_beam.utils.timestamp import Duration

WINDOW_SECONDS = 10
WINDOWS = 3


def run_late_stream(element: Callable[[int], Any], *, per_window: int, late: list[int],
                    writer: beam.PTransform) -> None:
    """Writes ``element(i)`` for ``i < WINDOWS * per_window`` (``per_window`` in each window), then ``late``'s, of
    the first window after the watermark passed it, with ``writer``: four panes, the last one late (index 1)."""
    stream = test_stream.TestStream()
    for w in range(WINDOWS):
        stream = stream.add_elements([window.TimestampedValue(element(w * per_window + i), w * WINDOW_SECONDS + i % 9)
                                      for i in range(per_window)]).advance_watermark_to((w + 1) * WINDOW_SECONDS + 1)
    stream = stream.add_elements([window.TimestampedValue(element(i), 5) for i in late])
    with beam.Pipeline(options=PipelineOptions(["--streaming"])) as pipeline:
        _ = (pipeline | stream.advance_watermark_to_infinity()
             | beam.WindowInto(window.FixedWindows(WINDOW_SECONDS), trigger=trigger.AfterWatermark(
                 late=trigger.AfterCount(1)), accumulation_mode=trigger.AccumulationMode.DISCARDING,
                 allowed_lateness=Duration(seconds=WINDOWS * WINDOW_SECONDS))
             | writer)
