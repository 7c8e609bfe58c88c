"""CSV and JSONL manifests: one row per sample, columns typed by the schema.

A row that cannot become a sample leaves as a ``DeadLetter`` in the same stream. See docs/inputs.md, "CSV manifests".
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.core.samples import DeadLetter, Sample, Stage
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.errors import MalformedRowError, SourceError
from beam_tfrecord.sources.chunks import DEFAULT_CHUNK_SIZE, ReadEachFile, check_chunk_size, chunked
from beam_tfrecord.sources.rows import RowConverter, RowOptions, check_header
from beam_tfrecord.storage.paths import parent_dir

Row = Sample | DeadLetter
# (manifest name, path) -> the manifest's rows as samples or dead letters, in file order.
RowReader = Callable[[str, str], Iterator[Row]]


def _open_text(path: str) -> io.TextIOWrapper:
    return io.TextIOWrapper(storage.open_read(path), encoding="utf-8-sig", errors="surrogateescape", newline="")


def iter_csv_dicts(path: str, *, delimiter: str = ",", limit: int | None = None) -> Iterator[dict[str, str]]:
    """The first ``limit`` data rows of a CSV file with a header, as dicts (used by inference)."""
    with _open_text(path) as handle:
        for number, row in enumerate(csv.DictReader(handle, delimiter=delimiter), start=1):
            if limit is not None and number > limit:
                return
            yield {k: v for k, v in row.items() if k is not None and v is not None}


@dataclasses.dataclass(frozen=True)
class CsvRowReader:
    """Reads one CSV manifest into samples. See ``ReadCsvManifest`` for the arguments."""

    schema: Schema
    options: RowOptions
    delimiter: str = ","
    column_names: tuple[str, ...] | None = None

    def __call__(self, name: str, path: str) -> Iterator[Row]:
        converter = RowConverter(self.schema, self.options)
        base_dir = parent_dir(path)
        with _open_text(path) as handle:
            reader = csv.reader(handle, delimiter=self.delimiter)
            header = list(self.column_names) if self.column_names else next(reader, None)
            if not header:
                raise SourceError(f"{path}: empty CSV file, expected a header row")
            check_header(name, header, converter, self.options.key_column)
            number = 0
            for cells in reader:
                if not cells:
                    continue  # an empty line is not a row
                number += 1
                row = dict(zip(header, cells))
                if len(cells) != len(header):
                    yield self._malformed(converter, name, number, row, header, cells)
                    continue
                yield converter.convert(name, base_dir, number, row, from_text=True)

    def _malformed(self, converter: RowConverter, name: str, number: int, row: dict[str, str],
                   header: Sequence[str], cells: Sequence[str]) -> DeadLetter:
        try:
            key = converter.key(name, number, row)
        except MalformedRowError:
            key = f"{name}:{number}"
        error = MalformedRowError(key, None, f"{len(header)} columns ({', '.join(header)})",
                                  f"{len(cells)} columns in CSV row {number} of {name}")
        return DeadLetter.from_error(key, Stage.READ, error)


@dataclasses.dataclass(frozen=True)
class JsonlRowReader:
    """Reads one JSONL manifest (one JSON object per line) into samples."""

    schema: Schema
    options: RowOptions

    def __call__(self, name: str, path: str) -> Iterator[Row]:
        converter = RowConverter(self.schema, self.options)
        base_dir = parent_dir(path)
        with _open_text(path) as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row: Any = json.loads(line)
                except ValueError as err:
                    row = err
                if not isinstance(row, dict):
                    got = f"invalid JSON ({row})" if isinstance(row, ValueError) else f"a JSON {type(row).__name__}"
                    error = MalformedRowError(f"{name}:{number}", None, "a JSON object per line",
                                              f"{got} on line {number} of {name}")
                    yield DeadLetter.from_error(error.sample_key, Stage.READ, error)
                    continue
                yield converter.convert(name, base_dir, number, row, from_text=False)


class _ReadRowsFn(beam.DoFn):
    """(name, path) of a manifest -> chunks (lists) of its rows."""

    def __init__(self, read_rows: RowReader, chunk_size: int) -> None:
        self._read_rows = read_rows
        self._chunk_size = chunk_size
        self._rows = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "manifest_rows_read")

    def process(self, element: tuple[str, str]) -> Iterator[list[Row]]:
        name, path = element
        for chunk in chunked(self._read_rows(name, path), self._chunk_size):
            self._rows.inc(len(chunk))
            yield chunk


class ReadRows(beam.PTransform):
    """Lists the files matching a glob at run time and reads each with ``read_rows``, in chunks.

    Output: lists of ``Sample`` / ``DeadLetter`` (feed them to ``WriteTFRecordDataset``).

    Args:
        pattern: file glob, local or ``gs://``.
        read_rows: reads one file: (name, path) -> rows.
        chunk_size: rows per output element.
    """

    def __init__(self, pattern: str, read_rows: RowReader, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        super().__init__()
        self._pattern = pattern
        self._read_rows = read_rows
        self._chunk_size = check_chunk_size(chunk_size)

    @property
    def read_rows(self) -> RowReader:
        """How one file is read: (name, path) -> its rows (an incremental refresh reads some files with it)."""
        return self._read_rows

    @property
    def chunk_size(self) -> int:
        return self._chunk_size

    def expand(self, pipeline: beam.pvalue.PBegin) -> beam.PCollection:
        # [Sample | DeadLetter]: chunks of up to chunk_size rows.
        return pipeline | "ReadRows" >> ReadEachFile(self._pattern, _ReadRowsFn(self._read_rows, self._chunk_size))


class ReadCsvManifest(ReadRows):
    """CSV manifests -> chunks of samples typed by the schema.

    Args:
        pattern: CSV file or glob, local or ``gs://``.
        schema: the feature spec; a column per feature (missing columns mean absent values).
        options: key column, file columns, missing values, allowed root.
        delimiter: the field delimiter.
        column_names: the columns, for files without a header row.
        chunk_size: rows per Beam element.
    """

    def __init__(self, pattern: str, *, schema: Schema, options: RowOptions | None = None, delimiter: str = ",",
                 column_names: Sequence[str] | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        if len(delimiter) != 1:
            raise SourceError(f"delimiter must be one character, got {delimiter!r}")
        options = options if options is not None else RowOptions()
        RowConverter(schema, options)  # checks the options against the schema now, not on a worker
        reader = CsvRowReader(schema, options, delimiter, tuple(column_names) if column_names else None)
        super().__init__(pattern, reader, chunk_size=chunk_size)


class ReadJsonlManifest(ReadRows):
    """JSONL manifests (one JSON object per line) -> chunks of samples typed by the schema.

    Args:
        pattern: JSONL file or glob, local or ``gs://``.
        schema: the feature spec; a key per feature (absent or null means absent).
        options: key column, file columns, allowed root (``missing_values`` applies to CSV only).
        chunk_size: rows per Beam element.
    """

    def __init__(self, pattern: str, *, schema: Schema, options: RowOptions | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        options = options if options is not None else RowOptions()
        RowConverter(schema, options)  # checks the options against the schema now, not on a worker
        super().__init__(pattern, JsonlRowReader(schema, options), chunk_size=chunk_size)
