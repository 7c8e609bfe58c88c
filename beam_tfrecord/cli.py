"""The ``beam-tfrecord`` command: build, refresh, inspect, verify, report, compare."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from beam_tfrecord.dataset import load_manifest, open_dataset
from beam_tfrecord.describe import describe_manifest
from beam_tfrecord.errors import BeamTFRecordError
from beam_tfrecord.job.process_exit import run_and_exit
from beam_tfrecord.statistics.drift_record import read_drift_record
from beam_tfrecord.verify import verify_dataset
from pipelines.sources import SOURCES

# Subcommands that run a Beam job (their arguments are the job's pipeline options): each source's build, and the
# refresh of any source, from the table of sources (Beam-free: the jobs are imported only when one runs).
_JOBS: dict[str, str] = {
    **{source.command: source.build_help for source in SOURCES},
    "refresh": "scheduled refresh of a versioned dataset root from any source (--dataset_root, and the source's "
               f"input option: {', '.join(source.input_flag for source in SOURCES)}): new versions, LATEST, "
               "incremental, retention; see `beam-tfrecord refresh --help`",
    "compact": "rewrite LATEST of a versioned root into balanced shards of its own (no shared shard, no deletion): "
               "byte-identical to a full build, readable by TFDS, DALI, Ray and globs; see `beam-tfrecord compact "
               "--help`",
    "add-features": "add features (CSV, JSONL or Parquet rows keyed by --key_column) to LATEST of a versioned root as "
                    "column files: no shard rewritten; see `beam-tfrecord add-features --help` and docs/columns.md",
    "drop-features": "drop features of LATEST of a versioned root (--drop a,b): a new version, no file rewritten",
    "rename-features": "rename features of LATEST of a versioned root (--rename old=new): a new version, no file "
                       "rewritten",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="beam-tfrecord", description="Build, inspect and verify TFRecord datasets.")
    commands = parser.add_subparsers(dest="command", required=True)
    for job, job_help in _JOBS.items():
        commands.add_parser(job, add_help=False, help=job_help)
    inspect = commands.add_parser("inspect", help="summarize a dataset's manifest")
    inspect.add_argument("dataset", help="dataset directory")
    inspect.add_argument("--json", action="store_true", help="print the manifest as JSON")
    verify = commands.add_parser("verify", help="read every record and check CRCs, counts and checksums")
    verify.add_argument("dataset", help="dataset directory")
    report = commands.add_parser("report", help="write an HTML report (plots of shards, classes, features, images "
                                                "and dead letters) and TFDV statistics of a dataset")
    report.add_argument("dataset", help="dataset directory or versioned root, local or gs://")
    report.add_argument("--output", default=None,
                        help="folder for report.html and statistics.pb (default: ./<dataset name>-report)")
    compare = commands.add_parser("compare", help="drift of NEW against OLD (TFDV's L-infinity and Jensen-Shannon, "
                                                  "schema, missing rate, record count); exits 1 past the thresholds, "
                                                  "2 when it cannot compare (docs/drift.md)")
    compare.add_argument("old", help="the reference: a dataset directory, a version or a versioned root (its LATEST)")
    compare.add_argument("new", help="the dataset to check, as OLD")
    compare.add_argument("--thresholds", default=None, help="JSON thresholds file (docs/drift.md); default: built-in")
    compare.add_argument("--only_exceeded", action="store_true", help="print only the rows past their thresholds")
    return parser


def _compare(args: argparse.Namespace) -> int:
    """Prints the drift table; 1 when a measure is past its threshold, else 0."""
    from beam_tfrecord.report.version_statistics import statistics_of  # reads records only without statistics.pb
    from beam_tfrecord.statistics.drift import compare
    from beam_tfrecord.statistics.thresholds import load_thresholds

    thresholds = load_thresholds(args.thresholds)
    report = compare(statistics_of(args.old), statistics_of(args.new), thresholds, old_name=args.old,
                     new_name=args.new)
    print(report.table(only_exceeded=args.only_exceeded))
    return 1 if report.drifted else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in _JOBS:
        from pipelines.common import run_as_command  # the Beam jobs are imported only when building
        from pipelines.source_jobs import job_of_command

        return run_as_command(job_of_command(argv[0]), argv[1:], prog=f"beam-tfrecord {argv[0]}")
    args = _parser().parse_args(argv)
    try:
        if args.command == "compare":
            return _compare(args)
        if args.command == "inspect":
            dataset = open_dataset(args.dataset)
            print(json.dumps(dataset.manifest.to_json(), indent=2) if args.json else
                  describe_manifest(dataset.manifest, args.dataset, drift=read_drift_record(dataset.directory)))
        elif args.command == "report":
            from beam_tfrecord.report import write_report  # matplotlib only when a report is made

            output = args.output or f"{load_manifest(args.dataset).dataset_name}-report"
            written = write_report(args.dataset, output)
            print(f"wrote {written.html_path} ({len(written.plot_ids)} plots) and {written.statistics_path}, "
                  f"statistics from {written.source}")
        else:
            report = verify_dataset(args.dataset)
            print(f"OK: {report.summary()} verified in {args.dataset}")
    except (BeamTFRecordError, OSError) as err:
        print(f"beam-tfrecord {args.command}: {type(err).__name__}: {err}", file=sys.stderr)
        return 2 if args.command == "compare" else 1
    return 0


def command() -> None:
    """The ``beam-tfrecord`` console script: ``main()``, its process ended without Python's teardown
    once the command is done (``process_exit.run_and_exit``: ~1-2 s less to wait after a build)."""
    run_and_exit(main)


if __name__ == "__main__":
    command()
