"""Manifest rows (CSV, JSONL, Parquet) -> samples, typed by the schema. Pure: no Beam, no I/O.

A cell that does not parse is passed on unchanged, so the encoder rejects it with its exact reason.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from beam_tfrecord.core.samples import DeadLetter, FileRef, Sample, Stage
from beam_tfrecord.core.schema import ClassLabel, DType, Feature, FixedList, Image, Scalar, Schema, Tensor, VarList
from beam_tfrecord.errors import MalformedRowError, PathOutsideRootError, SourceError
from beam_tfrecord.storage.paths import is_inside, resolve_path

_INT_RE = re.compile(r"[+-]?\d+")


@dataclasses.dataclass(frozen=True)
class RowOptions:
    """How manifest rows become samples.

    Attributes:
        key_column: column holding each sample's stable key; default ``<manifest file name>:<row number>``
            (1-based data rows), stable as long as the manifest does not change.
        file_columns: columns whose cells are file paths or URIs, loaded as bytes. Image features
            are always file columns.
        missing_values: CSV cells that mean "absent" (the schema's default applies, or the sample is
            rejected when the feature is required).
        allowed_root: when set, every file a row points to must resolve inside this folder; other
            rows are rejected at stage ``read`` (``PathOutsideRootError``).
        restrict_to_manifest_dir: every file a row points to must resolve inside the folder of
            its manifest (checked per manifest file; combines with ``allowed_root``).
    """

    key_column: str | None = None
    file_columns: frozenset[str] = frozenset()
    missing_values: tuple[str, ...] = ("",)
    allowed_root: str | None = None
    restrict_to_manifest_dir: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "file_columns", frozenset(self.file_columns))
        object.__setattr__(self, "missing_values", tuple(self.missing_values))


def _int_or_text(text: str) -> Any:
    stripped = text.strip()
    return int(stripped) if _INT_RE.fullmatch(stripped) else text


def _float_or_text(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


def _text_value(text: str) -> str | bytes:
    """The text, or its raw bytes when the file held invalid UTF-8 (kept as surrogate escapes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape")
    return text


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_text_cell(feature: Feature, text: str) -> Any:
    """Parses one CSV cell by its feature type; what does not parse is returned unchanged."""
    if isinstance(feature, Scalar):
        if feature.dtype is DType.INT64:
            return _int_or_text(text)
        if feature.dtype is DType.FLOAT32:
            return _float_or_text(text)
        if feature.dtype is DType.BYTES:
            return text.encode("utf-8", "surrogateescape")
        return _text_value(text)
    if isinstance(feature, ClassLabel):
        return text if text in feature.names else _int_or_text(text)
    if isinstance(feature, (FixedList, VarList, Tensor)):
        return _json_or_text(text)  # lists and arrays are JSON in a CSV cell: [1, 2, 3]
    return text


def parse_typed_cell(feature: Feature, value: Any) -> Any:
    """Adapts one JSON or Arrow value to the feature type (JSON has no bytes: text is UTF-8)."""
    if isinstance(value, str):
        value = _text_value(value)  # invalid UTF-8 read with surrogate escapes goes back to bytes
    if isinstance(feature, Scalar) and feature.dtype is DType.BYTES and isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(feature, (FixedList, VarList)) and feature.dtype is DType.BYTES and isinstance(value, list):
        return [v.encode("utf-8") if isinstance(v, str) else v for v in value]
    return value


class RowConverter:
    """Turns manifest rows into samples (or dead letters) for one schema.

    Args:
        schema: the feature spec; its features (and sequence features) are the columns used.
        options: keys, file columns, missing values and the allowed root.
    """

    def __init__(self, schema: Schema, options: RowOptions) -> None:
        self._features: dict[str, Feature] = {**schema.features, **schema.sequence_features}
        self._sequence = set(schema.sequence_features)
        self._file_columns = set(options.file_columns) | {
            name for name, f in schema.features.items() if isinstance(f, Image)}
        unknown = self._file_columns - set(self._features)
        if unknown:
            raise SourceError(f"file columns {sorted(unknown)} are not features of the schema "
                              f"{sorted(self._features)}")
        self._options = options

    @property
    def feature_names(self) -> list[str]:
        return sorted(self._features)

    def key(self, source_name: str, row_number: int, row: Mapping[str, Any]) -> str:
        """The sample key of a row: its key column, or ``<source>:<row number>``."""
        column = self._options.key_column
        if column is None:
            return f"{source_name}:{row_number}"
        value = row.get(column)
        if value is None or value == "" or isinstance(value, (list, dict)):
            raise MalformedRowError(f"{source_name}:{row_number}", column, "a non-empty key",
                                    f"{value!r}")
        return str(value)

    def convert(self, source_name: str, base_dir: str, row_number: int, row: Mapping[str, Any], *,
                from_text: bool) -> Sample | DeadLetter:
        """One row -> a Sample, or a DeadLetter (stage ``read``) when the row itself is unusable.

        Args:
            source_name: the manifest's file name, used in default keys.
            base_dir: folder that relative paths are resolved against (the manifest's folder).
            row_number: 1-based data row number in the manifest.
            row: column name -> cell.
            from_text: cells are CSV text to parse (else typed JSON or Arrow values).
        """
        try:
            key = self.key(source_name, row_number, row)
        except MalformedRowError as err:
            return DeadLetter.from_error(err.sample_key, Stage.READ, err)
        values: dict[str, Any] = {}
        for name, feature in self._features.items():
            cell = row.get(name)
            if cell is None or (from_text and cell in self._options.missing_values):
                continue  # absent: the encoder applies the default or says the feature is required
            if name in self._file_columns:
                ref = self._file_ref(key, name, base_dir, cell)
                if isinstance(ref, DeadLetter):
                    return ref
                values[name] = ref
            elif name in self._sequence and from_text:
                values[name] = _json_or_text(cell)
            else:
                values[name] = parse_text_cell(feature, cell) if from_text else parse_typed_cell(feature, cell)
        return Sample(key, values)

    def _file_ref(self, key: str, name: str, base_dir: str, cell: Any) -> FileRef | DeadLetter:
        if not isinstance(cell, str):
            error = MalformedRowError(key, name, "a file path or URI", f"{type(cell).__name__} {cell!r}")
            return DeadLetter.from_error(key, Stage.READ, error)
        path = resolve_path(base_dir, cell.strip())
        roots = [self._options.allowed_root] if self._options.allowed_root is not None else []
        if self._options.restrict_to_manifest_dir:
            roots.append(base_dir)
        for root in roots:
            if not is_inside(path, root):
                return DeadLetter.from_error(key, Stage.READ, PathOutsideRootError(key, name, path, root))
        return FileRef(path)


def check_header(source_name: str, header: Sequence[str], converter: RowConverter,
                 key_column: str | None) -> None:
    """Raises SourceError when a CSV header lacks a required column (names what is missing)."""
    if len(set(header)) != len(header):
        duplicates = sorted({h for h in header if list(header).count(h) > 1})
        raise SourceError(f"{source_name}: duplicate column names {duplicates} in the header")
    if key_column is not None and key_column not in header:
        raise SourceError(f"{source_name}: key column {key_column!r} is not in the header {list(header)}")
    if not set(converter.feature_names) & set(header):
        raise SourceError(f"{source_name}: no header column matches a schema feature; header {list(header)}, "
                          f"features {converter.feature_names}")
