"""``beam-tfrecord refresh``: the scheduled refresh of any source into a versioned dataset root.

The source is named first (``beam-tfrecord refresh manifest --manifest=...``) or told by its input option
(``--input``: an image folder, ``--manifest``, ``--arrays``), so a Flex Template, which passes only
``--name=value`` options, runs this file too. See docs/operations.md, "Scheduled refresh".
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from beam_tfrecord.job.process_exit import run_and_exit
from beam_tfrecord.versions.refresh import RefreshPlan
from pipelines.common import run_as_command

PROG = "beam-tfrecord refresh"
# source -> (job module, its input option, what that option names)
SOURCES: dict[str, tuple[str, str, str]] = {
    "image-folder": ("pipelines.refresh_image_dataset", "--input", "an image folder ROOT/<label>/<file>"),
    "manifest": ("pipelines.refresh_manifest", "--manifest",
                 "CSV / JSONL / Parquet manifests (file or glob), a row per sample, keyed by --key_column"),
    "arrays": ("pipelines.refresh_arrays", "--arrays", ".npy / .npz files (file or glob), axis 0 indexes samples"),
}

USAGE = f"""usage: {PROG} [SOURCE] --dataset_root=ROOT INPUT_OPTION=... [job and runner options]

Refreshes a versioned dataset root (ROOT/LATEST, ROOT/versions/<id>/) from its inputs: nothing to do when
they are unchanged since LATEST; else a new version whose records of unchanged inputs are kept from LATEST
and only new or changed ones are encoded; LATEST moves to it; old versions are deleted (--keep_versions,
--min_version_age); a killed refresh is resumed by the next one.

sources (named first, or told by the input option given):
""" + "".join(f"  {name:<13} {flag:<11} {what}\n" for name, (_, flag, what) in SOURCES.items()) + f"""
`{PROG} SOURCE --help` lists the options of a source."""


def source_of(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """(the source, the job's own arguments): the first argument when it names a source, else the one
    whose input option is given; None when neither says (or more than one input option is given)."""
    if argv and argv[0] in SOURCES:
        return argv[0], list(argv[1:])
    given = [name for name, (_, flag, _) in SOURCES.items()
             if any(arg == flag or arg.startswith(flag + "=") for arg in argv)]
    return (given[0] if len(given) == 1 else None), list(argv)


def run(argv: Sequence[str] | None = None, *, prog: str | None = None) -> RefreshPlan:
    """Runs the refresh of the source the arguments name; exits 2 with the usage when they name none."""
    args = list(sys.argv[1:] if argv is None else argv)
    source, job_args = source_of(args)
    if source is None:
        if any(arg in ("-h", "--help") for arg in args):
            print(USAGE)
            raise SystemExit(0)
        print(USAGE, file=sys.stderr)
        raise SystemExit(f"{prog or PROG}: name the source first ({', '.join(SOURCES)}) or give exactly one of "
                         f"{', '.join(flag for _, flag, _ in SOURCES.values())}")
    job = importlib.import_module(SOURCES[source][0])
    return job.run(job_args, prog=prog or PROG)


if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=PROG))  # ended without the interpreter's teardown
