"""What the report draws, per split: from the dataset's ``statistics.pb`` (``from_statistics``), else (a dataset
written before builds wrote it) from one streaming pass over its records, in bounded memory, the same on every run.

In that pass counts and extremes are exact; histograms come from a seeded reservoir per feature and split.
See docs/report.md.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.core.image_header import image_header
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.core.schema import ClassLabel, DType, FixedList, Image, Scalar, Tensor, VarList
from beam_tfrecord.dataset import LoadedDataset
from beam_tfrecord.reader.numpy_reader import iter_examples
from beam_tfrecord.reader.order.read_plan import plan_read
from beam_tfrecord.statistics.measures import Bucket

RESERVOIR = 20_000
SAMPLES_PER_CLASS = 6
MAX_SAMPLE_CLASSES = 12
_TENSOR_VALUES_PER_RECORD = 16
_RESERVOIR_BINS = 40
FROM_STATISTICS = "statistics.pb"
FROM_RECORDS = "a pass over the records (the dataset has no statistics.pb)"


class Reservoir:
    """At most ``capacity`` values drawn uniformly from a stream (Vitter's algorithm R), seeded."""

    def __init__(self, capacity: int, seed: str) -> None:
        self.capacity = capacity
        self.values: list[float] = []
        self.seen = 0
        self._rng = np.random.default_rng(zlib.crc32(seed.encode("utf-8")))

    def add(self, value: float) -> None:
        self.seen += 1
        if len(self.values) < self.capacity:
            self.values.append(value)
            return
        slot = int(self._rng.integers(0, self.seen))
        if slot < self.capacity:
            self.values[slot] = value


@dataclasses.dataclass
class NumericStats:
    """Exact count, min, max, mean and standard deviation, plus a reservoir for the histogram."""

    reservoir: Reservoir
    count: int = 0
    total: float = 0.0
    total_squares: float = 0.0
    minimum: float = float("inf")
    maximum: float = float("-inf")
    non_finite: int = 0

    def add(self, value: float) -> None:
        if not np.isfinite(value):
            self.non_finite += 1
            return
        self.count += 1
        self.total += value
        self.total_squares += value * value
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)
        self.reservoir.add(value)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else float("nan")

    @property
    def std(self) -> float:
        if not self.count:
            return float("nan")
        return float(np.sqrt(max(self.total_squares / self.count - self.mean**2, 0.0)))


    def distribution(self) -> "Distribution":
        """The reservoir's histogram, scaled to every value it stands for."""
        values = np.asarray(self.reservoir.values, dtype=np.float64)
        if not len(values):
            return Distribution(0, self.minimum, self.mean, self.maximum, self.non_finite, ())
        counts, edges = np.histogram(values, bins=_RESERVOIR_BINS)
        scale = self.count / len(values)
        return Distribution(self.count, self.minimum, self.mean, self.maximum, self.non_finite, tuple(
            Bucket(low, high, count * scale) for low, high, count in zip(edges[:-1].tolist(), edges[1:].tolist(),
                                                                         counts.tolist())),
            sampled=self.reservoir.seen > self.reservoir.capacity)


@dataclasses.dataclass(frozen=True)
class Distribution:
    """A numeric quantity of one split as plotted: exact count and extremes, and a histogram."""

    count: int
    minimum: float
    mean: float
    maximum: float
    non_finite: int
    buckets: tuple[Bucket, ...]
    sampled: bool = False  # the histogram is of a sample, scaled


@dataclasses.dataclass
class ImageStats:
    widths: NumericStats
    heights: NumericStats
    encoded_bytes: NumericStats
    formats: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    unreadable: int = 0
    samples: dict[str, list[bytes]] = dataclasses.field(default_factory=dict)  # class (or "") -> first images


@dataclasses.dataclass(frozen=True)
class ImageSizes:
    """One image feature of one split: widths, heights and encoded sizes, and how many had no readable header."""

    widths: Distribution
    heights: Distribution
    encoded_bytes: Distribution
    unreadable: int


@dataclasses.dataclass
class SplitStats:
    """What one split holds."""

    name: str
    num_records: int
    num_bytes: int
    shard_bytes: list[int]
    shard_records: list[int]
    numeric: dict[str, Distribution] = dataclasses.field(default_factory=dict)  # scalars, lists, tensors
    lengths: dict[str, Distribution] = dataclasses.field(default_factory=dict)  # var lists (and sequences)
    classes: dict[str, collections.Counter] = dataclasses.field(default_factory=dict)
    images: dict[str, ImageSizes] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class DatasetStats:
    """A dataset's manifest, what each split holds, its dead letters by reason, the first images of each class
    (per image feature: the split they are from and the images by class), and its TFDV statistics (serialized)
    with where they came from (``FROM_STATISTICS`` or ``FROM_RECORDS``)."""

    location: str
    manifest: Manifest
    splits: list[SplitStats]
    dead_letters: collections.Counter  # (stage, error type) -> count
    samples: dict[str, tuple[str, dict[str, list[bytes]]]]
    statistics: bytes
    source: str


def _numeric(name: str, split: str) -> NumericStats:
    return NumericStats(Reservoir(RESERVOIR, f"{split}/{name}"))


def _image_header(data: bytes) -> tuple[int, int, str] | None:
    """``statistics.image_header`` (Pillow's answer, read without Pillow for plain JPEGs), any error of a bad
    header counted as unreadable (a report reads whatever a dataset holds)."""
    try:
        return image_header(data)
    except Exception:  # Pillow raises many types for bad headers; counted as unreadable
        return None


@dataclasses.dataclass
class RecordPass:
    """One split as the pass over its records summarized it (what ``tfdv.statistics_list`` reads)."""

    name: str
    num_records: int
    numeric: dict[str, NumericStats] = dataclasses.field(default_factory=dict)
    lengths: dict[str, NumericStats] = dataclasses.field(default_factory=dict)
    classes: dict[str, collections.Counter] = dataclasses.field(default_factory=dict)
    images: dict[str, ImageStats] = dataclasses.field(default_factory=dict)


def split_sizes(manifest: Manifest, split: str) -> SplitStats:
    """A split's live records and stored bytes, in all and per shard (from the manifest), nothing more yet."""
    info = manifest.split(split)
    return SplitStats(split, info.num_records, info.num_bytes, [s.num_bytes for s in info.shards],
                      [s.num_live for s in info.shards])


class SplitCollector:
    """One split's pass over its records (a dataset without ``statistics.pb``)."""

    def __init__(self, manifest: Manifest, split: str) -> None:
        self.stats = RecordPass(split, manifest.split(split).num_records)
        schema = manifest.schema
        self._labels = {n: f for n, f in schema.features.items() if isinstance(f, ClassLabel)}
        self._first_label = next(iter(self._labels), None)
        for name, feature in schema.features.items():
            if isinstance(feature, ClassLabel):
                self.stats.classes[name] = collections.Counter()
            elif isinstance(feature, Image):
                self.stats.images[name] = ImageStats(_numeric(f"{name}/width", split),
                                                     _numeric(f"{name}/height", split),
                                                     _numeric(f"{name}/bytes", split))
            elif isinstance(feature, VarList):
                self.stats.lengths[name] = _numeric(f"{name}/length", split)
                if feature.dtype in (DType.INT64, DType.FLOAT32):
                    self.stats.numeric[name] = _numeric(name, split)
            elif isinstance(feature, Tensor) or (isinstance(feature, (Scalar, FixedList))
                                                 and feature.dtype in (DType.INT64, DType.FLOAT32)):
                self.stats.numeric[name] = _numeric(name, split)
        for name in schema.sequence_features:
            self.stats.lengths[name] = _numeric(f"{name}/steps", split)

    def add(self, example: dict[str, Any]) -> None:
        stats = self.stats
        label = ""
        if self._first_label is not None:
            feature = self._labels[self._first_label]
            label = feature.names[int(example[self._first_label])]
        for name in stats.classes:
            stats.classes[name][self._labels[name].names[int(example[name])]] += 1
        for name, numeric in stats.numeric.items():
            values = np.asarray(example[name]).ravel()
            if len(values) > _TENSOR_VALUES_PER_RECORD:
                values = values[:: max(1, len(values) // _TENSOR_VALUES_PER_RECORD)][:_TENSOR_VALUES_PER_RECORD]
            for value in values.tolist():
                numeric.add(float(value))
        for name, lengths in stats.lengths.items():
            lengths.add(float(len(example[name])))
        for name, image in stats.images.items():
            data = bytes(example[name])
            image.encoded_bytes.add(float(len(data)))
            header = _image_header(data)
            if header is None:
                image.unreadable += 1
                continue
            width, height, fmt = header
            image.widths.add(float(width))
            image.heights.add(float(height))
            image.formats[fmt] += 1
            add_sample(image.samples, label, data)

    def summary(self, manifest: Manifest) -> SplitStats:
        """What the report draws of this split."""
        out = split_sizes(manifest, self.stats.name)
        out.numeric = {name: s.distribution() for name, s in self.stats.numeric.items()}
        out.lengths = {name: s.distribution() for name, s in self.stats.lengths.items()}
        out.classes = dict(self.stats.classes)
        out.images = {name: ImageSizes(s.widths.distribution(), s.heights.distribution(),
                                       s.encoded_bytes.distribution(), s.unreadable)
                      for name, s in self.stats.images.items()}
        return out


def add_sample(samples: dict[str, list[bytes]], label: str, data: bytes) -> bool:
    """Keeps ``data`` if its class has fewer than ``SAMPLES_PER_CLASS`` (of at most ``MAX_SAMPLE_CLASSES``);
    whether it was kept."""
    if label not in samples and len(samples) >= MAX_SAMPLE_CLASSES:
        return False
    shown = samples.setdefault(label, [])
    if len(shown) < SAMPLES_PER_CLASS:
        shown.append(data)
        return True
    return False


def dead_letter_reasons(dataset: LoadedDataset) -> collections.Counter:
    reasons: collections.Counter = collections.Counter()
    path = dataset.dead_letters_path()
    if path is None:
        return reasons
    with storage.open_read(path) as handle:
        for line in handle:
            try:
                letter = json.loads(line)
                reasons[(str(letter["stage"]), str(letter["error_type"]))] += 1
            except (ValueError, KeyError, TypeError):
                reasons[("?", "unparseable dead-letter line")] += 1
    return reasons


def iter_split_examples(directory: str, manifest: Manifest, split: str) -> Iterator[dict[str, Any]]:
    """Every example of a split, shard after shard, images left encoded."""
    yield from iter_examples(plan_read(directory, split=split, manifest=manifest), verify=True)


def first_samples(collected: list[RecordPass]) -> dict[str, tuple[str, dict[str, list[bytes]]]]:
    """Per image feature, the first split that has images and its first images of each class."""
    out: dict[str, tuple[str, dict[str, list[bytes]]]] = {}
    for split in collected:
        for name, image in split.images.items():
            if image.samples and name not in out:
                out[name] = (split.name, image.samples)
    return out
