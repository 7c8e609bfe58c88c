"""``beam-tfrecord refresh``: the scheduled refresh of any source into a versioned dataset root.

The source is named first (``beam-tfrecord refresh manifest --manifest=...``) or told by its input option
(``--input``: an image folder, ``--manifest``, ``--arrays``, ``--audio``, ``--text``: ``pipelines.sources.SOURCES``),
so a Flex Template, which passes only ``--name=value`` options, runs this file too. See docs/operations.md,
"Scheduled refresh".
"""

from __future__ import annotations

from beam_tfrecord.job.process_exit import run_and_exit
from pipelines.common import run_as_command
from pipelines.source_jobs import REFRESH_PROG, REFRESH_USAGE, refresh_any, source_of

__all__ = ["PROG", "USAGE", "run", "source_of"]  # what callers import from here

PROG, USAGE, run = REFRESH_PROG, REFRESH_USAGE, refresh_any

if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=PROG))  # ended without the interpreter's teardown
