"""Features added to LATEST of a versioned root without rewriting it: ``beam-tfrecord add-features --dataset_root ROOT
--features FILE.csv|.jsonl|.parquet --key_column id`` (``python -m pipelines.add_features``).

Reads the features file as a manifest build reads one (``--schema``, or the schema inferred from it, the key column
left out), joins its rows with the version's records by key, writes a column file per base shard and publishes a new
version under the root's lease. See docs/columns.md.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.beam.add_features import AddFeatures, PublishOptions
from beam_tfrecord.core.samples import DeadLetter
from beam_tfrecord.job import lease
from beam_tfrecord.job.process_exit import run_and_exit
from beam_tfrecord.versions.add_features import OnMissing, plan_add
from beam_tfrecord.versions.feature_changes import SchemaChange, drop, publish_change, rename
from pipelines.common import job_pipeline, parse_job, quiet_logging, require_worker_paths, run_as_command
from pipelines.job_options import JobCommand
from pipelines.refresh_driver import RefreshOptions, min_version_age
from pipelines.source_options import SchemaOptions, parse_bool
from pipelines.sources.manifest import ManifestOptions, manifest_format, manifest_reader, manifest_schema

ADD_PROG = "python -m pipelines.add_features"


class AddFeaturesOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--features", default=None,
                            help="CSV, JSONL or Parquet file (or glob) of the features to add: a row per record, "
                                 "its key in --key_column (local or a store's URL)")
        parser.add_argument("--on_missing", default=OnMissing.FAIL.value, choices=[m.value for m in OnMissing],
                            help="a record given no value: fail naming the first keys (default), or leave it "
                                 "missing (the schema's default; needs one, or a variable list)")
        parser.add_argument("--replace", type=parse_bool, nargs="?", const=True, default=False,
                            help="replace features of the same name (their old values stay in their files, dropped)")


_REFUSED_ROOT = (("append", "an add writes no shard"), ("incremental", "an add reads no source"),
                 ("max_small_shards", "an add writes no shard"), ("max_deleted_fraction", "an add deletes nothing"),
                 ("force", "an add always writes a version"))
COMMAND = JobCommand(ADD_PROG, "Add features to LATEST of a versioned root: a column file per shard, no shard "
                               "rewritten.",
                     (("add", AddFeaturesOptions), ("features file", ManifestOptions), ("root", RefreshOptions),
                      ("schema", SchemaOptions)),
                     refused=(("manifest", "the features file is --features"),
                              ("file_columns", "added features are values, not files"),
                              ("allowed_root", "added features are values, not files"),
                              ("restrict_paths", "added features are values, not files"), *_REFUSED_ROOT))


def _pairs(chunk: list[Any]) -> Iterator[tuple[str, Any]]:
    """A chunk of the reader's samples (or dead letters) -> ``(key, values)`` (or ``(key, DeadLetter)``)."""
    for item in chunk:
        yield (item.key, item) if isinstance(item, DeadLetter) else (item.key, dict(item.values))


def run(argv: Sequence[str] | None = None, *, prog: str | None = None) -> str:
    """Adds ``--features`` to LATEST of ``--dataset_root``; returns the new version's id."""
    options, args = parse_job(COMMAND, argv, prog=prog)
    add = options.view_as(AddFeaturesOptions)
    root = options.view_as(RefreshOptions)
    source = options.view_as(ManifestOptions)
    if not root.dataset_root or not add.features:
        raise SystemExit("--dataset_root (a versioned root) and --features (the file of features to add) are required")
    if not source.key_column:
        raise SystemExit("--key_column is required: the column of --features holding each record's key (the "
                         "dataset's sample key, or a feature of the dataset)")
    require_worker_paths(options, {"--dataset_root": root.dataset_root, "--features": add.features})
    source.manifest = add.features
    checks = options.view_as(SchemaOptions)
    fmt = manifest_format(source)
    added = manifest_schema(checks, source, fmt, job="add-features")
    age = min_version_age(root)
    with lease.held(root.dataset_root, run_id=uuid.uuid4().hex[:12]):
        plan, sources = plan_add(root.dataset_root, added, key_column=source.key_column, replace=add.replace,
                                 on_missing=OnMissing(add.on_missing))
        print(f"add-features {root.dataset_root}: adding {sorted(added.features)} to version {plan.base_version} "
              f"({plan.base.num_written} records in {len(plan.shards)} shards) as version {plan.version_id}")
        quiet_logging()
        publish = PublishOptions(("beam-tfrecord add-features", *args), keep_versions=root.keep_versions,
                                 min_version_age=age)
        with job_pipeline(options) as pipeline:
            _ = (pipeline
                 | "ReadFeatures" >> manifest_reader(source, checks, added, fmt)  # [Sample | DeadLetter] chunks
                 | "KeyedValues" >> beam.FlatMap(_pairs)  # (key, {feature: value}) or (key, DeadLetter)
                 | "AddFeatures" >> AddFeatures(plan, sources, publish=publish))
    print(f"add-features {root.dataset_root}: published version {plan.version_id} (LATEST updated)")
    return plan.version_id


class FeatureChangeOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--drop", default=None, help="drop-features: comma-separated features to drop")
        parser.add_argument("--rename", default=None, help="rename-features: comma-separated OLD=NEW names")


_CHANGE_GROUPS = (("change", FeatureChangeOptions), ("root", RefreshOptions))
DROP_COMMAND = JobCommand("beam-tfrecord drop-features", "Drop features of LATEST of a versioned root: a new version "
                          "whose manifest says so; no file rewritten.", _CHANGE_GROUPS,
                          refused=(("rename", "rename-features renames"), *_REFUSED_ROOT))
RENAME_COMMAND = JobCommand("beam-tfrecord rename-features", "Rename features of LATEST of a versioned root: a new "
                            "version whose manifest says so; no file rewritten.", _CHANGE_GROUPS,
                            refused=(("drop", "drop-features drops"), *_REFUSED_ROOT))


def _names(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _change(command: JobCommand, argv: Sequence[str] | None, prog: str | None, flag: str,
            change: Callable[[list[str]], SchemaChange]) -> str:
    options, args = parse_job(command, argv, prog=prog)
    root = options.view_as(RefreshOptions)
    names = _names(getattr(options.view_as(FeatureChangeOptions), flag))
    if not root.dataset_root or not names:
        raise SystemExit(f"--dataset_root (a versioned root) and --{flag} are required")
    age = min_version_age(root)
    with lease.held(root.dataset_root, run_id=uuid.uuid4().hex[:12]):
        version_id = publish_change(root.dataset_root, change(names), command=(command.prog, *args),
                                    keep_versions=root.keep_versions, min_version_age=age)
    print(f"{command.prog} {root.dataset_root}: published version {version_id} (LATEST updated; no file rewritten)")
    return version_id


def run_drop(argv: Sequence[str] | None = None, *, prog: str | None = None) -> str:
    """Drops ``--drop`` features of LATEST of ``--dataset_root``; returns the new version's id."""
    return _change(DROP_COMMAND, argv, prog, "drop", drop)


def _renames(pairs: list[str]) -> SchemaChange:
    if not all(pair.count("=") == 1 and all(pair.split("=")) for pair in pairs):
        raise SystemExit(f"--rename: expected OLD=NEW[,OLD=NEW...], got {','.join(pairs)!r}")
    return rename(dict(pair.split("=") for pair in pairs))


def run_rename(argv: Sequence[str] | None = None, *, prog: str | None = None) -> str:
    """Renames ``--rename`` features (OLD=NEW) of LATEST of ``--dataset_root``; returns the new version's id."""
    return _change(RENAME_COMMAND, argv, prog, "rename", _renames)


if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=ADD_PROG))  # ended without the interpreter's teardown
