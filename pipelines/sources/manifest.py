"""CSV / JSONL / Parquet manifests as a source: a row per sample; a refresh's input is a row, keyed by
``--key_column`` (without one, FILE:ROW_NUMBER, which moves when rows are inserted), its token a digest of its
content and of the listing of any file it names. The client reads the manifests once to index them.
See docs/inputs.md, "CSV manifests".
"""

from __future__ import annotations

import argparse
import collections
import enum
import functools
import json
import posixpath
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import storage
from beam_tfrecord.core.infer import infer_schema
from beam_tfrecord.core.samples import FileRef, Sample
from beam_tfrecord.core.schema import Image, Schema
from beam_tfrecord.sources.chunks import chunked, list_inputs
from beam_tfrecord.sources.kept_records import ReadFreshInputs
from beam_tfrecord.sources.parquet import ReadParquetManifest, iter_parquet_rows, parquet_num_rows
from beam_tfrecord.sources.rows import RowOptions
from beam_tfrecord.sources.tabular import ReadCsvManifest, ReadJsonlManifest, ReadRows, RowReader, iter_csv_dicts
from beam_tfrecord.versions.input_index import IndexedInput, file_tokens, sample_token
from pipelines.common import DatasetOutputOptions
from pipelines.source_options import SchemaOptions, parse_bool, pinned_or_inferred, with_check_decode
from pipelines.sources import source_named
from pipelines.sources.spec import InputsIndex, SourcePlan, SourceSpec, add_input_option, lines_at_most

ENTRY = source_named("manifest")
# The options that shape a row's sample besides its content: a version built otherwise cannot lend records.
_SAMPLE_OPTIONS = ("key_column", "file_columns", "missing_values", "allowed_root", "restrict_paths", "csv_delimiter",
                   "format")


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
        add_input_option(parser, ENTRY)
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
    """An upper bound of the rows of the manifests matching ``pattern`` (what decides a small job): Parquet's
    row counts from its footers, a text manifest's lines (``lines_at_most``: a quoted cell may span lines)."""
    if fmt is not ManifestFormat.PARQUET:
        return lines_at_most(pattern)
    rows = 0
    for path, _ in storage.list_files(pattern):
        with storage.open_read(path) as handle:
            rows += parquet_num_rows(handle)
    return rows


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


def _plan(options: PipelineOptions, *, job: str) -> SourcePlan:
    source = options.view_as(ManifestOptions)
    checks = options.view_as(SchemaOptions)
    if options.view_as(DatasetOutputOptions).resume and _split(source.file_columns):
        raise SystemExit("--resume takes a killed build's records as they were: it knows when the manifest "
                         "changed, not the files its --file_columns name; rebuild without --resume")
    fmt = manifest_format(source)
    schema = manifest_schema(checks, source, fmt, job=job)
    return SourcePlan(schema=schema, read=manifest_reader(source, checks, schema, fmt),
                      files=list_inputs(source.manifest), samples_at_most=rows_at_most(source.manifest, fmt),
                      key_feature=source.key_column)


def _index(options: PipelineOptions, plan: SourcePlan) -> InputsIndex:
    source = options.view_as(ManifestOptions)
    if not source.key_column:
        print(f"{ENTRY.refresh_job}: no --key_column: rows are keyed FILE:ROW_NUMBER, so a row inserted or deleted "
              "re-encodes every row after it")
    reader = manifest_reader(source, options.view_as(SchemaOptions), plan.schema, manifest_format(source))
    names_files = bool(source.file_columns.strip()) or any(isinstance(f, Image) for f in plan.schema.features.values())
    inputs, rows = index_rows(plan.files, reader.read_rows, names_files=names_files)
    return InputsIndex(inputs, functools.partial(_read_fresh, files=plan.files, reader=reader), expected_inputs=rows)


SPEC = SourceSpec(
    entry=ENTRY, options=ManifestOptions,
    description="Builds a dataset from CSV, JSONL or Parquet manifests (one row per sample).",
    plan=_plan, index=_index, path_options=("allowed_root",), sample_options=_SAMPLE_OPTIONS)
