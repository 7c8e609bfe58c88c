"""A local build's progress display: its options (``--progress``) and the folder the writer's workers count in.

Invariant: remote runners get no folder (their workers cannot reach it); the job summary shows their counters.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
from collections.abc import Iterator

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.engine.table import traits_of_options
from beam_tfrecord.job.progress import ProgressDisplay, progress_folder


class ProgressOptions(PipelineOptions):
    """How a local build shows its progress while it runs."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--progress", default="auto", choices=[m.value for m in ProgressMode],
                            help="on the DirectRunner: a live line on stderr (bar), a plain line every "
                                 "--progress_interval_seconds (log), nothing (none), or bar on a terminal and "
                                 "log otherwise (auto, the default); remote runners show the job's Beam counters")
        parser.add_argument("--progress_interval_seconds", type=float, default=10.0,
                            help="seconds between plain progress lines")


class ProgressMode(enum.Enum):
    AUTO = "auto"
    BAR = "bar"
    LOG = "log"
    NONE = "none"


@contextlib.contextmanager
def progress_for(options: PipelineOptions, *, expected_inputs: int | None) -> Iterator[str | None]:
    """The progress folder to give the writer (None: no progress display), shown while the block runs."""
    settings = options.view_as(ProgressOptions)
    mode = ProgressMode(settings.progress)
    if mode is ProgressMode.NONE or not traits_of_options(options).workers_on_this_machine:
        yield None
        return
    live = None if mode is ProgressMode.AUTO else mode is ProgressMode.BAR
    with progress_folder() as folder, ProgressDisplay(folder, expected_inputs=expected_inputs, live=live,
                                                      interval_seconds=settings.progress_interval_seconds):
        yield folder
