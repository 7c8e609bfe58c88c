"""SplitStatistics: one split's feature statistics, fed a block of columns at a time, merged across workers.

Columns are as ``reader.decode.block_decode`` gives them (arrays with the records first, or lists). Context
features only; a SequenceExample's feature lists are not summarized.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import numpy as np

from beam_tfrecord.core.image_header import image_headers
from beam_tfrecord.core.schema import ClassLabel, DType, Feature, Image, Schema, Tensor
from beam_tfrecord.statistics.sketches import Frequencies, Numbers, label_counts, value_counts

# Numeric values summarized per record at most: a feature of more (a tensor) has every ``stride``-th value of
# each record summarized (the same values on every worker); counts stay exact. 32x32x3 uint8 images as tensors
# took 30% of a build when all 3,072 went through (write_benchmark.py, small).
MAX_VALUES_PER_RECORD = 8


class Kind(enum.Enum):
    """How a feature is summarized (and which TFMD statistics it gets)."""

    NUMBER = "number"  # num_stats
    STRING = "string"  # string_stats: top values, unique
    LABEL = "label"  # a class id: string_stats by class name (the feature's type stays INT)
    BYTES = "bytes"  # bytes_stats: lengths
    IMAGE = "image"  # bytes_stats, and width, height and format


def kind_of(feature: Feature) -> Kind:
    if isinstance(feature, ClassLabel):
        return Kind.LABEL
    if isinstance(feature, Image):
        return Kind.IMAGE
    if isinstance(feature, Tensor):
        return Kind.NUMBER
    return {DType.STRING: Kind.STRING, DType.BYTES: Kind.BYTES}.get(feature.dtype, Kind.NUMBER)


def is_integer(feature: Feature) -> bool:
    """Whether a feature's values are integers (TFMD's type INT, else FLOAT for numbers)."""
    if isinstance(feature, Tensor):
        return np.dtype(feature.dtype.value).kind in "biu"
    return isinstance(feature, ClassLabel) or getattr(feature, "dtype", None) is DType.INT64


class FeatureStats:
    """One feature's statistics: presence, values per record, and its values by ``Kind``."""

    def __init__(self, kind: Kind, names: tuple[str, ...] = (), *, integer: bool = False) -> None:
        self.kind = kind
        self.names = names  # class names of a LABEL
        self.integer = integer
        self.present = 0
        self.missing = 0
        self.stride = 1  # values summarized: every stride-th of a record's (``MAX_VALUES_PER_RECORD``)
        self.num_values = Numbers()
        self.values = Numbers()  # numbers, or the lengths of bytes and images
        self.frequencies = Frequencies()  # strings and labels
        self.widths, self.heights = Numbers(), Numbers()
        self.formats: dict[str, int] = {}
        self.undecodable = 0  # images whose header Pillow could not read

    def add(self, column: Any) -> None:
        """Adds one block's column of this feature (records first; None for a record without it)."""
        if isinstance(column, list) and any(value is None for value in column):  # absent variable-length lists
            present = [value for value in column if value is not None]
            self.missing += len(column) - len(present)
            if present:
                self.add(present)
        elif isinstance(column, np.ndarray):
            self._add_array(column)
        elif column and isinstance(column[0], np.ndarray):  # a variable-length list per record
            self.add_lists(np.fromiter(map(len, column), np.int64, len(column)),
                           np.concatenate(column) if self.kind in (Kind.NUMBER, Kind.LABEL) else
                           [v for values in column for v in values])
        else:  # one bytes value per record
            self.present += len(column)
            self.num_values.add(np.ones(len(column), np.int64))
            self._add_values(column)

    def add_lists(self, counts: np.ndarray, values: Any) -> None:
        """Adds records of ``counts`` values each, given as their values in a row (an array of numbers, or a
        list of bytes)."""
        self.present += len(counts)
        self.num_values.add(counts)
        self._add_values(values)

    def _add_array(self, column: np.ndarray) -> None:
        rows = column.reshape(len(column), -1)
        self.present += len(rows)
        self.num_values.add(np.full(len(rows), rows.shape[1], np.int64))
        if self.kind is Kind.NUMBER and rows.shape[1] > MAX_VALUES_PER_RECORD:
            self.stride = -(-rows.shape[1] // MAX_VALUES_PER_RECORD)
            rows = rows[:, ::self.stride]
        self._add_values(rows.ravel() if rows.dtype != object else rows.ravel().tolist())

    def _add_values(self, values: Any) -> None:
        if self.kind is Kind.NUMBER:
            self.values.add(np.asarray(values))
        elif self.kind is Kind.LABEL:
            self.frequencies.add_counts(label_counts(np.asarray(values), self.names))
        elif self.kind is Kind.STRING:
            self.frequencies.add_counts(value_counts(
                v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values))
        else:  # bytes, images: a column that holds its items' lengths (``RaggedArray``) gives them, and views, uncopied
            held = hasattr(values, "lengths")
            self.values.add(values.lengths() if held else np.fromiter(map(len, values), np.int64, len(values)))
            if self.kind is Kind.IMAGE:
                self._add_images([values.view(i) for i in range(len(values))] if held else values)

    def _add_images(self, images: list[bytes] | list[memoryview]) -> None:
        headers = image_headers(images)
        found = [h for h in headers if h is not None]
        self.undecodable += len(headers) - len(found)
        self.widths.add(np.array([h[0] for h in found], np.int64))
        self.heights.add(np.array([h[1] for h in found], np.int64))
        for _, _, name in found:
            self.formats[name] = self.formats.get(name, 0) + 1

    def merge(self, other: "FeatureStats") -> None:
        self.present += other.present
        self.missing += other.missing
        self.stride = max(self.stride, other.stride)
        self.num_values.merge(other.num_values)
        self.values.merge(other.values)
        self.frequencies.merge(other.frequencies)
        self.widths.merge(other.widths)
        self.heights.merge(other.heights)
        for name, count in other.formats.items():
            self.formats[name] = self.formats.get(name, 0) + count
        self.undecodable += other.undecodable


class SplitStatistics:
    """The statistics of one split's records, feature by feature (the schema's context features).

    Args:
        split: the split's name (the ``DatasetFeatureStatistics``'s name).
        schema: the dataset's schema.
    """

    def __init__(self, split: str, schema: Schema) -> None:
        self.split = split
        self.num_examples = 0
        self.features = {name: FeatureStats(kind_of(f), tuple(f.names) if isinstance(f, ClassLabel) else (),
                                            integer=is_integer(f)) for name, f in schema.features.items()}

    def add_columns(self, columns: Mapping[str, Any], num_records: int) -> None:
        """Adds a block of ``num_records`` records, decoded into columns (a feature absent from
        ``columns`` counts as missing in every one of them)."""
        self.num_examples += num_records
        for name, stats in self.features.items():
            if name in columns:
                stats.add(columns[name])
            else:
                stats.missing += num_records

    def merge(self, other: "SplitStatistics") -> None:
        self.num_examples += other.num_examples
        for name, stats in other.features.items():
            self.features[name].merge(stats)


def merge_by_split(parts: list[SplitStatistics]) -> dict[str, SplitStatistics]:
    """The parts merged per split (the first part of each split takes the others in)."""
    merged: dict[str, SplitStatistics] = {}
    for part in parts:
        if part.split in merged:
            merged[part.split].merge(part)
        else:
            merged[part.split] = part
    return merged
