"""Scheduled refresh of a CSV / JSONL / Parquet manifest dataset into a versioned root.

``beam-tfrecord refresh --manifest=... --key_column=... --dataset_root=...``. A row is an input: its key
(``--key_column``; without one, FILE:ROW_NUMBER, which moves when rows are inserted) and a digest of its
content (and of the listing of a file it names) decide whether its record is kept from LATEST or encoded
again. The client reads the manifests once to index them. See docs/operations.md, "Scheduled refresh".
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.core.samples import FileRef, Sample
from beam_tfrecord.core.schema import Image
from beam_tfrecord.job.process_exit import run_and_exit
from beam_tfrecord.sources.chunks import chunked, list_inputs
from beam_tfrecord.sources.kept_records import ReadFreshInputs
from beam_tfrecord.sources.tabular import ReadRows, RowReader
from beam_tfrecord.versions.input_index import IndexedInput, file_tokens, sample_token
from beam_tfrecord.versions.refresh import RefreshPlan
from pipelines.build_from_manifest import (
    ManifestOptions,
    manifest_format,
    manifest_reader,
    manifest_schema,
)
from pipelines.common import DatasetOutputOptions, parse_job, require_worker_paths, run_as_command
from pipelines.drift_options import DriftOptions
from pipelines.job_options import JobCommand
from pipelines.refresh_driver import (
    REFRESH_REJECTED_OPTIONS,
    PreparedSource,
    RefreshOptions,
    RefreshSource,
    recorded_command,
    refresh_groups,
    run_refresh,
    validated_refresh,
)
from pipelines.source_options import QualityOptions, SchemaOptions

MANIFEST_JOB = "refresh_manifest"
MANIFEST_OPTION_CLASSES: tuple[type[PipelineOptions], ...] = (
    ManifestOptions, SchemaOptions, DatasetOutputOptions, RefreshOptions, DriftOptions, QualityOptions)
MANIFEST_REJECTED_OPTIONS: dict[str, str] = {
    **REFRESH_REJECTED_OPTIONS,
}
# The options that shape a row's sample besides its content: a version built otherwise cannot lend records.
_SOURCE_OPTIONS = ("key_column", "file_columns", "missing_values", "allowed_root", "restrict_paths", "csv_delimiter",
                   "format")

COMMAND = JobCommand(
    prog="beam-tfrecord refresh",
    description="Refreshes a CSV / JSONL / Parquet manifest dataset into a versioned root: builds "
                "ROOT/versions/<id> when the manifests changed (encoding only new and changed rows), then moves "
                "ROOT/LATEST to it and deletes old versions.",
    groups=refresh_groups(("input", ManifestOptions)),
    refused=tuple(MANIFEST_REJECTED_OPTIONS.items()),
)


def run(argv: Sequence[str] | None = None, *, prog: str | None = None) -> RefreshPlan:
    """Refreshes the dataset (or does nothing when the manifests are unchanged); returns the decision taken."""
    options, _ = parse_job(COMMAND, argv, prog=prog)
    source = options.view_as(ManifestOptions)
    refresh = validated_refresh(options, input_flag="--manifest", input_value=source.manifest,
                               what="a CSV, JSONL or Parquet manifest (file or glob)")
    shared = require_worker_paths(options, {"--manifest": source.manifest, "--allowed_root": source.allowed_root,
                                            "--dataset_root": refresh.dataset_root})
    command = recorded_command(options, MANIFEST_JOB, MANIFEST_OPTION_CLASSES, MANIFEST_REJECTED_OPTIONS)
    return run_refresh(options, RefreshSource(patterns=[source.manifest], command=command,
                                              prepare=lambda: _prepare(source, options.view_as(SchemaOptions))),
                       shared_filesystem=shared)


def _prepare(source: ManifestOptions, checks: SchemaOptions) -> PreparedSource:
    if not source.key_column:
        print(f"{MANIFEST_JOB}: no --key_column: rows are keyed FILE:ROW_NUMBER, so a row inserted or deleted "
              "re-encodes every row after it")
    fmt = manifest_format(source)
    schema = manifest_schema(checks, source, fmt, job=MANIFEST_JOB)
    reader = manifest_reader(source, checks, schema, fmt)
    files = list_inputs(source.manifest)
    names_files = bool(source.file_columns.strip()) or any(isinstance(f, Image) for f in schema.features.values())
    inputs, rows = index_rows(files, reader.read_rows, names_files=names_files)
    return PreparedSource(
        schema=schema, feature_transforms={}, metadata={}, inputs=inputs, expected_inputs=rows,
        source_options={name: getattr(source, name) for name in _SOURCE_OPTIONS},
        read_all=lambda pipeline: pipeline | "ReadManifests" >> reader,
        read_fresh=functools.partial(_read_fresh, files=files, reader=reader), key_feature=source.key_column)


def index_rows(files: Sequence[tuple[str, str]], read_rows: RowReader, *,
               names_files: bool) -> tuple[list[IndexedInput], int]:
    """(every row's key, manifest path and content token; the rows read), reading the manifests as the
    workers will. A dead letter gets no token (it is read again), nor does a key on two rows (no path:
    every manifest is read for it)."""
    paths: set[str] = set()
    for name, path in files if names_files else ():  # rows name files: their listings go into the tokens
        paths.update(value.path for row in read_rows(name, path) if isinstance(row, Sample)
                     for value in row.values.values() if isinstance(value, FileRef))
    tokens = file_tokens(paths)
    found: dict[str, IndexedInput] = {}
    seen: collections.Counter[str] = collections.Counter()
    for name, path in files:
        for row in read_rows(name, path):
            seen[row.key] += 1
            token = sample_token(row.values, tokens) if isinstance(row, Sample) else ""
            found[row.key] = IndexedInput(row.key, path, token) if seen[row.key] == 1 else \
                IndexedInput(row.key, "", "")
    return list(found.values()), sum(seen.values())


def _read_file(element: tuple[str, str], *, read_rows: RowReader, chunk_size: int) -> Iterator[list[Any]]:
    name, path = element
    return chunked(read_rows(name, path), chunk_size)


def _read_fresh(pipeline: beam.Pipeline, fresh: tuple[IndexedInput, ...], *, files: Sequence[tuple[str, str]],
                reader: ReadRows) -> beam.PCollection:
    """The rows of ``fresh`` only, read from the manifests that hold one."""
    holding = {i.path for i in fresh}
    if "" in holding:  # a key on two rows
        holding = {path for _, path in files}
    read = functools.partial(_read_file, read_rows=reader.read_rows, chunk_size=reader.chunk_size)
    return pipeline | "ReadFreshRows" >> ReadFreshInputs([f for f in files if f[1] in holding], read,
                                                         [i.key for i in fresh])


if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=COMMAND.prog))  # ended without the interpreter's teardown
