"""What the writers take as input: a bounded PCollection, in any windows.

A batch writer writes one dataset of its whole input: windows are merged, an unbounded input is refused
(``UnboundedInputError``) but by ``WriteBalancedTFRecord`` under a prefix, which commits each pane
(``windowed_write``). See docs/inputs.md, "Windows and streams".
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from beam_tfrecord.errors import UnboundedInputError


def require_bounded(pcoll: beam.PCollection, *, writer: str) -> None:
    """Raises ``UnboundedInputError`` (naming ``writer`` and the input's step) when ``pcoll`` is unbounded."""
    if pcoll.is_bounded:
        return
    step = getattr(pcoll.producer, "full_label", None) or str(pcoll)
    raise UnboundedInputError(
        f"{writer} is a batch writer: it writes one dataset of its whole input, which must be bounded; its input "
        f"{step!r} is unbounded (a streaming source). Give it a bounded source: files, a table, or a bounded read "
        "of the stream (e.g. ReadFromKafka(max_num_records=...)). To write a stream, write it under a Beam "
        "prefix: WriteBalancedTFRecord(file_path_prefix, triggering_frequency=SECONDS) commits each window's "
        "pane (docs/streaming.md).")


def in_global_window(pcoll: beam.PCollection) -> beam.PCollection:
    """``pcoll`` in the global window with the default trigger (as it is when already so).

    The writer's GroupByKeys are built for one window: Beam 2.77 otherwise fails at run time decoding a
    windowed element with the global window's coder (``Invalid PaneInfoEncoding``), and a non-default
    trigger would fire the plan early. ``WriteToTFRecord`` likewise writes every window of a bounded input.
    """
    if pcoll.windowing.is_default():
        return pcoll
    return pcoll | "IntoGlobalWindow" >> beam.WindowInto(GlobalWindows())
