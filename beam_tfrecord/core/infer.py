"""Schema inference from sample rows and arrays, for users who have no schema yet.

A starting point, not a contract: jobs print the inferred schema to be pinned (``--schema FILE``); class labels
are never inferred. Rules: docs/inputs.md, "CSV manifests".
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from beam_tfrecord.core.schema import (
    IMAGE_EXTENSIONS,
    DType,
    Feature,
    Image,
    Scalar,
    Schema,
    Tensor,
    TensorDType,
    VarList,
)
from beam_tfrecord.errors import SchemaError

_ZERO = {DType.INT64: 0, DType.FLOAT32: 0.0, DType.STRING: "", DType.BYTES: b""}
_NUMPY_TENSOR_DTYPES = {np.dtype(t.value): t for t in TensorDType}


def _typed_text(text: str) -> Any:
    """A CSV cell as the most specific value it spells: int, float, JSON list, else the text."""
    stripped = text.strip()
    for parse in (int, float):
        try:
            return parse(stripped)
        except ValueError:
            pass
    if stripped.startswith("["):
        try:
            return json.loads(stripped)
        except ValueError:
            pass
    return text


def _number_dtype(values: list[Any]) -> DType | None:
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return DType.INT64
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return DType.FLOAT32
    return None


def _file_feature(name: str, paths: list[Any]) -> Feature:
    formats = {IMAGE_EXTENSIONS.get(posixpath.splitext(str(p))[1].lower()) for p in paths}
    found = formats.pop() if len(formats) == 1 else None
    if found is not None:
        return Image(found)
    return Scalar(DType.BYTES)


def _all_image_paths(values: list[Any]) -> bool:
    return all(posixpath.splitext(v.strip())[1].lower() in IMAGE_EXTENSIONS and " " not in v.strip()
               for v in values)


def _list_feature(name: str, values: list[list[Any]]) -> Feature:
    shapes = set()
    flat: list[Any] = []
    for value in values:
        array = np.asarray(value, dtype=object)
        shapes.add(array.shape)
        flat.extend(array.reshape(-1).tolist())
    dtype = _number_dtype(flat)
    if dtype is None:
        if all(isinstance(v, str) for v in flat):
            return VarList(DType.STRING)
        kinds = sorted({type(v).__name__ for v in flat})
        raise SchemaError(f"column {name!r}: cannot infer a type for lists holding {kinds}; pin it in a schema")
    if all(len(shape) == 1 for shape in shapes):
        return VarList(dtype)
    if len(shapes) == 1:
        return Tensor(TensorDType.INT64 if dtype is DType.INT64 else TensorDType.FLOAT32, shapes.pop())
    raise SchemaError(f"column {name!r}: nested lists of different shapes {sorted(shapes)[:3]}; pin a schema "
                      "(e.g. sequence features)")


def infer_column(name: str, values: list[Any], *, missing: bool, is_file: bool) -> Feature:
    """The feature type of one column from its present (non-missing) values."""
    if is_file:
        feature = _file_feature(name, values)
    elif not values:
        feature = Scalar(DType.STRING)
    elif all(isinstance(v, list) for v in values):
        return _list_feature(name, values)
    else:
        dtype = _number_dtype(values)
        if dtype is None:
            kinds = {type(v) for v in values}
            if kinds == {bytes}:
                dtype = DType.BYTES
            elif kinds == {str}:
                dtype = DType.STRING
            else:
                raise SchemaError(f"column {name!r}: mixed value types {sorted(k.__name__ for k in kinds)}; "
                                  "pin it in a schema")
        feature = _file_feature(name, values) if dtype is DType.STRING and _all_image_paths(values) else Scalar(dtype)
    if missing and isinstance(feature, Scalar):
        return Scalar(feature.dtype, default=_ZERO[feature.dtype])
    return feature


def infer_schema(rows: Iterable[Mapping[str, Any]], *, from_text: bool, file_columns: Iterable[str] = (),
                 exclude: Iterable[str] = (), missing_values: tuple[str, ...] = ("",)) -> Schema:
    """Infers a schema from manifest rows (CSV text cells when ``from_text``, else JSON/Arrow values).

    Args:
        rows: a sample of the rows (e.g. the first 1000).
        from_text: cells are text to be parsed (CSV).
        file_columns: columns holding file paths (typed Image or bytes, never parsed).
        exclude: columns that are not features (e.g. the key column).
        missing_values: CSV cells that mean "absent".
    """
    files = set(file_columns)
    skip = set(exclude)
    present: dict[str, list[Any]] = {}
    missing: set[str] = set()
    num_rows = 0
    for row in rows:
        num_rows += 1
        for name, cell in row.items():
            if name in skip:
                continue
            present.setdefault(name, [])
            if cell is None or (from_text and cell in missing_values):
                missing.add(name)
            else:
                present[name].append(_typed_text(cell) if from_text and name not in files else cell)
        missing.update(set(present) - set(row) - skip)
    if not num_rows:
        raise SchemaError("cannot infer a schema from no rows")
    return Schema({name: infer_column(name, values, missing=name in missing, is_file=name in files)
                   for name, values in present.items()})


def infer_array_schema(arrays: Mapping[str, Any]) -> Schema:
    """Infers a schema from arrays whose first axis indexes samples (``{"x": [N, 28, 28], "y": [N]}``).

    Per-sample scalars become ``Scalar`` (int64/float32/string/bytes); anything with more
    dimensions becomes a ``Tensor`` keeping its dtype and per-sample shape.
    """
    features: dict[str, Feature] = {}
    for name, value in arrays.items():
        array = np.asarray(value)
        if array.ndim == 0:
            raise SchemaError(f"array {name!r}: expected a first axis indexing samples, got a 0-d array")
        kind = array.dtype.kind
        if array.ndim == 1 and kind in "iub":
            features[name] = Scalar(DType.INT64)
        elif array.ndim == 1 and kind == "f":
            features[name] = Scalar(DType.FLOAT32)
        elif array.ndim == 1 and kind in "UO":
            features[name] = Scalar(DType.STRING)
        elif array.ndim == 1 and kind == "S":
            features[name] = Scalar(DType.BYTES)
        elif kind in "iubf" and np.dtype(array.dtype.name) in _NUMPY_TENSOR_DTYPES:
            features[name] = Tensor(_NUMPY_TENSOR_DTYPES[np.dtype(array.dtype.name)], array.shape[1:])
        else:
            raise SchemaError(f"array {name!r}: no feature type for dtype {array.dtype} with shape {array.shape}")
    return Schema(features)


def schema_json_text(schema: Schema) -> str:
    """The schema as indented, sorted JSON: what jobs print so the user can pin it."""
    return json.dumps(schema.to_json(), indent=2, sort_keys=True)
