"""FindNearDuplicates: image samples -> the near-duplicate pairs, capped buckets and unhashed images of a build.

Hashes are computed in parallel, meet by (band, band value) in the runner's shuffle (no table of every hash on
one worker), and each bucket gives its pairs once (``quality.near_duplicates.bucket_pairs``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam

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
from beam_tfrecord.quality.near_report import CAPPED, HASHED, NOT_HASHED, PAIR


class HashImagesFn(beam.DoFn):
    """Sample (or list of them) -> ``(HASHED, (key, ImageSignature))``, or ``(NOT_HASHED, (key, reason))`` for an image
    that cannot be read or decoded (reported, never skipped silently; the encoder judges the sample itself)."""

    def __init__(self, feature: str) -> None:
        self._feature = feature

    def process(self, element: Sample | list[Sample]) -> Iterator[tuple[str, tuple[str, Any]]]:
        for sample in element if isinstance(element, list) else [element]:
            value = sample.values.get(self._feature)
            if value is None:
                continue  # an optional image left out: nothing to compare
            try:
                data = load_file_refs(Sample(sample.key, {self._feature: value})).values[self._feature]
                if not isinstance(data, bytes):
                    raise ImageDecodeError(f"sample {sample.key!r}: near duplicates: feature {self._feature!r} "
                                           f"holds {type(data).__name__}, expected encoded image bytes")
                yield HASHED, (sample.key, image_signature(data, key=sample.key))
            except (SampleReadError, ImageDecodeError) as err:
                beam.metrics.Metrics.counter("near_duplicates", "not_hashed").inc()
                yield NOT_HASHED, (sample.key, str(err)[:300])


def _band_entries(hashed: tuple[str, tuple[str, Any]], bands: int,
                  ) -> Iterator[tuple[tuple[int, int], tuple[str, ImageSignature]]]:
    kind, (key, signature) = hashed
    if kind == HASHED:
        for band, band_value in enumerate(band_values(signature.phash, bands)):
            yield (band, band_value), (key, signature)


def _pairs_of_bucket(bucket: tuple[tuple[int, int], Iterable[tuple[str, ImageSignature]]],
                     settings: NearDuplicateSettings) -> Iterator[tuple[str, Any]]:
    (band, band_value), members = bucket
    found = bucket_pairs(band, members, settings)
    for pair in found.pairs:
        yield PAIR, pair
    if found.capped_size is not None:
        yield CAPPED, (band, band_value, found.capped_size)


class FindNearDuplicates(beam.PTransform):
    """Samples -> ``(kind, value)``: ``(PAIR, NearPair)``, ``(CAPPED, (band, band value, images))`` and
    ``(NOT_HASHED, (key, reason))``, which ``quality.near_report.near_duplicate_report`` turns into the report."""

    def __init__(self, settings: NearDuplicateSettings) -> None:
        super().__init__()
        self._settings = settings

    def expand(self, samples: beam.PCollection) -> beam.PCollection:
        hashed = samples | "Hash" >> beam.ParDo(HashImagesFn(self._settings.feature))
        pairs = (
            hashed
            | "Bands" >> beam.FlatMap(_band_entries, self._settings.bands)  # ((band, value), (key, signature))
            | "MeetInBuckets" >> beam.GroupByKey()
            | "Pairs" >> beam.FlatMap(_pairs_of_bucket, self._settings)
        )
        not_hashed = hashed | "NotHashed" >> beam.Filter(lambda entry: entry[0] == NOT_HASHED)
        return (pairs, not_hashed) | "Together" >> beam.Flatten()
