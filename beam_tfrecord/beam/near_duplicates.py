"""FindNearDuplicates: image samples -> the near-duplicate pairs, capped buckets and unhashed images of a build.

Hashes are computed in parallel, meet by (band, band value) in the runner's shuffle (no table of every hash on
one worker), and each bucket gives its pairs once (``quality.near_duplicates.bucket_pairs``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

from beam_tfrecord.core.samples import Sample
from beam_tfrecord.encoding.records import load_file_refs
from beam_tfrecord.errors import ImageDecodeError, SampleReadError
from beam_tfrecord.quality.near_duplicates import (
    ImageSignature,
    NearDuplicateSettings,
    band_values,
    bucket_pairs,
    image_signature,
)
from beam_tfrecord.quality.near_report import BUCKET, CAPPED, NOT_HASHED, PAIRS

_FLUSH_IMAGES = 2_000  # a worker's band entries go out at least every this many images (~1 KB each)


class HashImagesFn(beam.DoFn):
    """Samples (or lists of them) -> ``(BUCKET, ((band, band value), [(key, ImageSignature), ...]))``, the images
    of a bundle gathered by band value (~4x fewer elements to shuffle), and ``(NOT_HASHED, (key, reason))`` for
    an image that cannot be read or decoded (reported, never skipped silently; the encoder judges the sample)."""

    def __init__(self, feature: str, bands: int) -> None:
        self._feature = feature
        self._bands = bands
        self._buckets: dict[tuple[int, int], list[tuple[str, ImageSignature]]] = {}
        self._held = 0

    def start_bundle(self) -> None:
        self._buckets, self._held = {}, 0

    def process(self, element: Sample | list[Sample]) -> Iterator[tuple[str, Any]]:
        for sample in element if isinstance(element, list) else [element]:
            value = sample.values.get(self._feature)
            if value is None:
                continue  # an optional image left out: nothing to compare
            try:
                data = load_file_refs(Sample(sample.key, {self._feature: value})).values[self._feature]
                if not isinstance(data, bytes):
                    raise ImageDecodeError(f"sample {sample.key!r}: near duplicates: feature {self._feature!r} "
                                           f"holds {type(data).__name__}, expected encoded image bytes")
                signature = image_signature(data, key=sample.key)
            except (SampleReadError, ImageDecodeError) as err:
                beam.metrics.Metrics.counter("near_duplicates", "not_hashed").inc()
                yield NOT_HASHED, (sample.key, str(err)[:300])
                continue
            for band, band_value in enumerate(band_values(signature.phash, self._bands)):
                self._buckets.setdefault((band, band_value), []).append((sample.key, signature))
            self._held += 1
            if self._held >= _FLUSH_IMAGES:
                yield from self._flush()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for entry in self._flush():
            yield GlobalWindows.windowed_value(entry)

    def _flush(self) -> Iterator[tuple[str, Any]]:
        buckets, self._buckets, self._held = self._buckets, {}, 0
        for band_key, members in buckets.items():
            yield BUCKET, (band_key, members)


def _pairs_of_bucket(bucket: tuple[tuple[int, int], Iterable[list[tuple[str, ImageSignature]]]],
                     settings: NearDuplicateSettings) -> Iterator[tuple[str, Any]]:
    (band, band_value), parts = bucket
    found = bucket_pairs(band, itertools.chain.from_iterable(parts), settings)
    if found.pairs:
        yield PAIRS, found.pairs
    if found.capped_size is not None:
        yield CAPPED, (band, band_value, found.capped_size)


class FindNearDuplicates(beam.PTransform):
    """Samples -> ``(kind, value)``: ``(PAIRS, (NearPair, ...))`` (a bucket's), ``(CAPPED, (band, band value,
    images))`` and ``(NOT_HASHED, (key, reason))``, which ``quality.near_report.near_duplicate_report`` reports."""

    def __init__(self, settings: NearDuplicateSettings) -> None:
        super().__init__()
        self._settings = settings

    def expand(self, samples: beam.PCollection) -> beam.PCollection:
        hashed = samples | "Hash" >> beam.ParDo(HashImagesFn(self._settings.feature, self._settings.bands))
        pairs = (
            hashed
            | "Buckets" >> beam.Filter(lambda entry: entry[0] == BUCKET)
            | "ByBandValue" >> beam.Map(lambda entry: entry[1])  # ((band, value), [(key, signature), ...])
            | "MeetInBuckets" >> beam.GroupByKey()
            | "Pairs" >> beam.FlatMap(_pairs_of_bucket, self._settings)
        )
        not_hashed = hashed | "NotHashed" >> beam.Filter(lambda entry: entry[0] == NOT_HASHED)
        return (pairs, not_hashed) | "Together" >> beam.Flatten()
