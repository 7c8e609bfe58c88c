"""CSV / JSONL / Parquet manifest -> TFRecord dataset. ``python -m pipelines.build_from_manifest``.

Without ``--schema`` the schema is inferred from the first rows of the first manifest and
printed as JSON: check it, save it, and pin it with ``--schema FILE`` for production runs.
"""

from __future__ import annotations

import argparse
import enum
import json
import posixpath
from collections.abc import Iterator, Sequence

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import storage
from beam_tfrecord.core.infer import infer_schema
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.engine.dask_cluster import DaskClusterOptions
from beam_tfrecord.engine.local_workers import SMALL_JOB_MAX_INPUT_BYTES
from beam_tfrecord.job.process_exit import run_and_exit
from beam_tfrecord.sources.chunks import list_inputs
from beam_tfrecord.sources.parquet import ReadParquetManifest, iter_parquet_rows, parquet_num_rows
from beam_tfrecord.sources.rows import RowOptions
from beam_tfrecord.sources.tabular import ReadCsvManifest, ReadJsonlManifest, ReadRows, iter_csv_dicts
from pipelines.common import (
    DatasetOutputOptions,
    ProgressOptions,
    build_dataset,
    parse_job,
    require_worker_paths,
    run_as_command,
)
from pipelines.job_options import JobCommand
from pipelines.source_options import (
    QualityOptions,
    SchemaOptions,
    parse_bool,
    pinned_or_inferred,
    quality_writer_options,
    with_check_decode,
)


class ManifestFormat(enum.Enum):
    CSV = "csv"
    JSONL = "jsonl"
    PARQUET = "parquet"

    @classmethod
    def from_path(cls, path: str) -> "ManifestFormat":
        extension = posixpath.splitext(path.removesuffix("*"))[1].lower().lstrip(".")
        aliases = {"csv": cls.CSV, "tsv": cls.CSV, "jsonl": cls.JSONL, "ndjson": cls.JSONL, "json": cls.JSONL,
                   "parquet": cls.PARQUET, "pq": cls.PARQUET}
        if extension not in aliases:
            raise SystemExit(f"cannot tell the manifest format of {path!r} from its extension; pass --format")
        return aliases[extension]


class ManifestOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--manifest", help="CSV / JSONL / Parquet manifest file or glob (local or gs://)")
        parser.add_argument("--format", default=None, choices=[f.value for f in ManifestFormat],
                            help="manifest format (default: from the file extension)")
        parser.add_argument("--infer_rows", type=int, default=1000, help="rows read to infer a schema")
        parser.add_argument("--key_column", default=None,
                            help="column with a unique, stable key per row (default: FILE:ROW_NUMBER)")
        parser.add_argument("--file_columns", default="",
                            help="comma-separated columns holding file paths/URIs to load as bytes "
                                 "(image features always are)")
        parser.add_argument("--missing_values", default="",
                            help="comma-separated CSV cells meaning 'absent' (default: the empty cell)")
        parser.add_argument("--allowed_root", default=None,
                            help="reject rows pointing to files outside this folder")
        parser.add_argument("--restrict_paths", type=parse_bool, nargs="?", const=True, default=False,
                            help="reject rows pointing to files outside their manifest's folder "
                                 "(--restrict_paths or --restrict_paths=true|false)")
        parser.add_argument("--csv_delimiter", default=",", help="CSV field delimiter")


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _jsonl_objects(path: str, limit: int) -> Iterator[dict]:
    """The first ``limit`` JSON objects of a JSONL file; lines that are not objects are left to the job."""
    count = 0
    with storage.open_read(path) as handle:
        for line in handle:
            if count >= limit:
                return
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                count += 1
                yield row


def infer_manifest_schema(pattern: str, fmt: ManifestFormat, source: ManifestOptions) -> Schema:
    """Infers the schema from the first rows of the first manifest file."""
    _, first = list_inputs(pattern)[0]
    limit = source.infer_rows
    if fmt is ManifestFormat.CSV:
        rows = list(iter_csv_dicts(first, delimiter=source.csv_delimiter, limit=limit))
    elif fmt is ManifestFormat.JSONL:
        rows = list(_jsonl_objects(first, limit))
    else:
        rows = list(iter_parquet_rows(first, limit=limit))
    exclude = [source.key_column] if source.key_column else []
    return infer_schema(rows, from_text=fmt is ManifestFormat.CSV, file_columns=_split(source.file_columns),
                        exclude=exclude, missing_values=tuple(source.missing_values.split(",")))


def rows_at_most(pattern: str, fmt: ManifestFormat) -> int | None:
    """An upper bound of the rows of the manifests matching ``pattern`` (what decides a small job,
    ``beam_tfrecord.engine.local_workers.InputSize``): Parquet's row counts from its footers, a text
    manifest's lines (a quoted cell may span lines); None, not counted, beyond
    ``SMALL_JOB_MAX_INPUT_BYTES`` of text: such a job is not small whatever its rows."""
    files = storage.list_files(pattern)
    if fmt is not ManifestFormat.PARQUET and sum(size for _, size in files) > SMALL_JOB_MAX_INPUT_BYTES:
        return None
    rows = 0
    for path, _ in files:
        with storage.open_read(path) as handle:
            if fmt is ManifestFormat.PARQUET:
                rows += parquet_num_rows(handle)
            else:
                rows += handle.read().count(b"\n") + 1
    return rows


COMMAND = JobCommand(
    prog="python -m pipelines.build_from_manifest",
    description="Builds a dataset from CSV, JSONL or Parquet manifests (one row per sample).",
    groups=(("input", ManifestOptions), ("output and sharding", DatasetOutputOptions),
            ("schema checks", SchemaOptions), ("duplicates and splits", QualityOptions), ("progress", ProgressOptions),
            ("Dask cluster", DaskClusterOptions)),
)


def manifest_format(source: ManifestOptions) -> ManifestFormat:
    """``--format``, or the format the manifest's extension names (exits when it names none)."""
    return ManifestFormat(source.format) if source.format else ManifestFormat.from_path(source.manifest)


def manifest_schema(checks: SchemaOptions, source: ManifestOptions, fmt: ManifestFormat, *, job: str) -> Schema:
    """The schema of ``--schema``, or inferred from the manifest (and printed); ``--check_decode`` applied."""
    schema = pinned_or_inferred(checks, lambda: infer_manifest_schema(source.manifest, fmt, source), job=job)
    return with_check_decode(schema) if checks.check_decode else schema


def row_options(source: ManifestOptions) -> RowOptions:
    return RowOptions(key_column=source.key_column, file_columns=frozenset(_split(source.file_columns)),
                      missing_values=tuple(source.missing_values.split(",")),
                      allowed_root=source.allowed_root, restrict_to_manifest_dir=source.restrict_paths)


def manifest_reader(source: ManifestOptions, checks: SchemaOptions, schema: Schema, fmt: ManifestFormat) -> ReadRows:
    """The source transform reading every manifest matching ``--manifest`` into chunks of samples."""
    options = row_options(source)
    return {
        ManifestFormat.CSV: lambda: ReadCsvManifest(source.manifest, schema=schema, options=options,
                                                    delimiter=source.csv_delimiter, chunk_size=checks.chunk_size),
        ManifestFormat.JSONL: lambda: ReadJsonlManifest(source.manifest, schema=schema, options=options,
                                                        chunk_size=checks.chunk_size),
        ManifestFormat.PARQUET: lambda: ReadParquetManifest(source.manifest, schema=schema, options=options,
                                                            chunk_size=checks.chunk_size),
    }[fmt]()


def run(argv: Sequence[str] | None = None, *, prog: str | None = None) -> Manifest:
    """Builds the dataset, prints what was written and returns the manifest."""
    options, argv = parse_job(COMMAND, argv, prog=prog)
    source = options.view_as(ManifestOptions)
    checks = options.view_as(SchemaOptions)
    if not source.manifest:
        raise SystemExit("--manifest is required: a CSV, JSONL or Parquet manifest (file or glob)")
    shared = require_worker_paths(options, {"--manifest": source.manifest, "--allowed_root": source.allowed_root})
    if options.view_as(DatasetOutputOptions).resume and _split(source.file_columns):
        raise SystemExit("--resume takes a killed build's records as they were: it knows when the manifest "
                         "changed, not the files its --file_columns name; rebuild without --resume")
    fmt = manifest_format(source)
    schema = manifest_schema(checks, source, fmt, job="build_from_manifest")
    reader = manifest_reader(source, checks, schema, fmt)
    return build_dataset(options, reader, schema, ["build_from_manifest", *argv], shared_filesystem=shared,
                         input_patterns=[source.manifest], samples_at_most=rows_at_most(source.manifest, fmt),
                         **quality_writer_options(options, schema, key_feature=source.key_column))


if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=COMMAND.prog))  # ended without the interpreter's teardown
