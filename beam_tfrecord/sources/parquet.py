"""Parquet manifests: one row per sample, read with pyarrow in record batches.

Nested list columns arrive as (nested) Python lists: a ``list<float>`` column fits a ``VarList``
or ``FixedList``, a ``list<list<float>>`` of fixed inner size fits a ``Tensor`` or a sequence
feature. Binary columns stay bytes. Needs the ``parquet`` extra (pyarrow).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.errors import SourceError
from beam_tfrecord.sources.chunks import DEFAULT_CHUNK_SIZE
from beam_tfrecord.sources.rows import RowConverter, RowOptions
from beam_tfrecord.sources.tabular import ReadRows, Row
from beam_tfrecord.storage.paths import parent_dir


def _pyarrow_parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as err:
        raise SourceError("reading Parquet needs pyarrow: pip install 'beam-tfrecord[parquet]'") from err
    return pq


def parquet_num_rows(handle: Any) -> int:
    """The rows of the Parquet file open in ``handle``, from its footer (no row is read)."""
    return _pyarrow_parquet().ParquetFile(handle).metadata.num_rows


def iter_parquet_rows(path: str, *, columns: list[str] | None = None, batch_rows: int = DEFAULT_CHUNK_SIZE,
                      limit: int | None = None) -> Iterator[dict[str, Any]]:
    """The rows of a Parquet file as dicts, streaming record batches (used by inference too)."""
    pq = _pyarrow_parquet()
    count = 0
    with storage.open_read(path) as handle:
        parquet_file = pq.ParquetFile(handle)
        present = set(parquet_file.schema_arrow.names)
        wanted = [c for c in columns if c in present] if columns is not None else None
        for batch in parquet_file.iter_batches(batch_size=batch_rows, columns=wanted):
            for row in batch.to_pylist():
                if limit is not None and count >= limit:
                    return
                count += 1
                yield row


@dataclasses.dataclass(frozen=True)
class ParquetRowReader:
    """Reads one Parquet file into samples; rows are numbered from 1 in file order."""

    schema: Schema
    options: RowOptions
    batch_rows: int = DEFAULT_CHUNK_SIZE

    def __call__(self, name: str, path: str) -> Iterator[Row]:
        converter = RowConverter(self.schema, self.options)
        columns = converter.feature_names + ([self.options.key_column] if self.options.key_column else [])
        base_dir = parent_dir(path)
        for number, row in enumerate(iter_parquet_rows(path, columns=columns, batch_rows=self.batch_rows), start=1):
            yield converter.convert(name, base_dir, number, row, from_text=False)


class ReadParquetManifest(ReadRows):
    """Parquet files -> chunks of samples typed by the schema.

    Args:
        pattern: Parquet file or glob, local or ``gs://``.
        schema: the feature spec; a column per feature (null means absent).
        options: key column, file columns (string columns holding paths), allowed root.
        chunk_size: rows per Beam element (and per Arrow record batch).
    """

    def __init__(self, pattern: str, *, schema: Schema, options: RowOptions | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        _pyarrow_parquet()
        options = options if options is not None else RowOptions()
        RowConverter(schema, options)  # checks the options against the schema now, not on a worker
        super().__init__(pattern, ParquetRowReader(schema, options, chunk_size), chunk_size=chunk_size)
