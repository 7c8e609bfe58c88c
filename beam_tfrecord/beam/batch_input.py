"""What the writers take as input: a bounded PCollection, in any windows.

``WriteTFRecordDataset`` (and ``WriteBalancedTFRecord`` on top of it) is a batch writer: it
writes ONE dataset of its whole input, planned over every record and published once, and its
stages meet in GroupByKeys on a single key (runs for the plan, shard infos for publication).

- Windows do not split the dataset. A bounded input in non-global windows (``FixedWindows``...)
  is put back into the global window, with the default trigger, at the writer's input: the
  internal GroupByKeys then see one window, as they are built for (Beam 2.77 otherwise fails at
  run time, decoding a windowed element with the global window's coder: ``Invalid PaneInfoEncoding``).
  A non-default trigger on the global window is reset the same way (it would fire the plan early).
  ``beam.io.WriteToTFRecord`` likewise writes all windows of a bounded input into one set of files.
- An unbounded input (a streaming source) is refused when the pipeline is built, with
  ``UnboundedInputError``: the dataset would never be complete, so never published.
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
        "of the stream (e.g. ReadFromKafka(max_num_records=...)). To write a stream, window it "
        "(beam.WindowInto(FixedWindows(...))), land each window in files (beam.io.fileio.WriteToFiles), and run "
        "this writer as a batch job over each window's files.")


def in_global_window(pcoll: beam.PCollection) -> beam.PCollection:
    """``pcoll`` in the global window with the default trigger (as it is when already so)."""
    if pcoll.windowing.is_default():
        return pcoll
    return pcoll | "IntoGlobalWindow" >> beam.WindowInto(GlobalWindows())
