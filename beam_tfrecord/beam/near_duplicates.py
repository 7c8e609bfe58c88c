"""Near duplicates in a build: signatures written where images are encoded, pairs found where band values meet.

Encoders sign each image from the image they decode (``encoding.image_signatures``) and write signature files
(``quality.near_signatures.SignatureBuffer``, a side file); ``FindNearDuplicates`` reads them in parallel, images
meet by (band, band value) in the runner's shuffle (no table of every hash on one worker), each bucket gives its
pairs once (``quality.near_duplicates.bucket_pairs``), and a combiner tallies them in bounded memory.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam

from beam_tfrecord.beam.one_group import SIGNATURES, START, TaggedStart, by_kind, tag
from beam_tfrecord.core.sharding import SplitConfig
from beam_tfrecord.quality.near_duplicates import ImageSignature, NearDuplicateSettings, band_values, bucket_pairs
from beam_tfrecord.quality.near_report import split_pair_namer
from beam_tfrecord.quality.near_signatures import (
    read_signature_files,
)
from beam_tfrecord.quality.near_tally import NearTally, tally_capped, tally_not_hashed, tally_pairs

_FILES_PER_TASK = 1  # signature files one search task reads (~180 MB of band entries for 4 files of 65,536)


def _search_tasks(group: tuple[None, Iterable[tuple[str, Any]]]) -> Iterator[tuple[int, tuple[str, ...]]]:
    files = sorted(f.path for f in by_kind(group, (START, SIGNATURES))[SIGNATURES])
    for number, start in enumerate(range(0, len(files), _FILES_PER_TASK)):
        yield number, tuple(files[start:start + _FILES_PER_TASK])


class _BandEntriesFn(beam.DoFn):
    """(task, [files]) -> ((band, band value), [(key, signature), ...]) per bucket of its files' images, and
    ((``_UNHASHED``, task), [the tally of its unhashed images]) (one output: see ``encode_fn``)."""

    def __init__(self, bands: int) -> None:
        self._bands = bands

    def process(self, task: tuple[int, Iterable[tuple[str, ...]]]) -> Iterator[Any]:
        buckets: dict[tuple[int, int], list[tuple[str, ImageSignature]]] = {}
        unhashed: list[tuple[str, str]] = []
        for signatures in read_signature_files([path for files in task[1] for path in files]):
            unhashed.extend(signatures.not_hashed)
            for key, signature in signatures.rows():
                for band, band_value in enumerate(band_values(signature.phash, self._bands)):
                    buckets.setdefault((band, band_value), []).append((key, signature))
        yield from buckets.items()
        if unhashed:
            yield (_UNHASHED, task[0]), [tally_not_hashed(unhashed)]


_UNHASHED = -1  # the band of the entries that carry a task's unhashed images


def _bucket_tally(bucket: tuple[tuple[int, int], Iterable[list[tuple[str, ImageSignature]]]],
                  settings: NearDuplicateSettings, salt: str, ranges: Sequence[tuple[str, int, int]] | None,
                  cap: int) -> Iterator[NearTally]:
    (band, band_value), parts = bucket
    if band == _UNHASHED:
        yield from itertools.chain.from_iterable(parts)
        return
    found = bucket_pairs(band, itertools.chain.from_iterable(parts), settings)
    split_pair_of = split_pair_namer(ranges) if ranges is not None else None
    if found.pairs:
        yield tally_pairs(found.pairs, salt=salt, split_pair_of=split_pair_of, max_examples=cap)
    if found.capped_size is not None:
        yield tally_capped([(band, band_value, found.capped_size)])


class MergeTalliesFn(beam.CombineFn):
    """``NearTally``s -> one (bounded: see ``quality.near_tally``)."""

    def __init__(self, max_examples: int) -> None:
        self._max_examples = max_examples

    def create_accumulator(self) -> NearTally:
        return NearTally()

    def add_input(self, tally: NearTally, other: NearTally) -> NearTally:
        return tally.merge(other, self._max_examples)

    def merge_accumulators(self, tallies: Iterable[NearTally]) -> NearTally:
        merged = NearTally()
        for tally in tallies:
            merged.merge(tally, self._max_examples)
        return merged

    def extract_output(self, tally: NearTally) -> NearTally:
        return tally


class FindNearDuplicates(beam.PTransform):
    """``SignatureFile``s -> one ``NearTally`` (none when no file was written), which publication reports.

    Args:
        settings: how pairs are searched for.
        salt: the keys' hash salt (a pair's splits).
        splits: the dataset's; ratio splits place a pair here, count splits only with the plan (the pairs'
            key hashes wait for it: ``NearTally.waiting``).
    """

    def __init__(self, settings: NearDuplicateSettings, *, salt: str, splits: SplitConfig) -> None:
        super().__init__()
        self._settings = settings
        self._salt = salt
        self._ranges = tuple(splits.ratio_bounds()) if splits.is_ratio else None
        # before the plan, examples of every split pair are kept together: as many as there are split pairs
        count = len(splits.specs)
        self._cap = settings.max_examples * (1 if splits.is_ratio else count * (count + 1) // 2)

    def expand(self, files: beam.PCollection) -> beam.PCollection:
        entries = (
            (files.pipeline | "StartSearch" >> TaggedStart(), files | "TagSignatures" >> tag(SIGNATURES))
            | "GatherSignatureFiles" >> beam.Flatten()
            | "AllSignatureFiles" >> beam.GroupByKey()  # (None, [(kind, SignatureFile)]): the files, not their rows
            | "SearchTasks" >> beam.FlatMap(_search_tasks)
            | "ByTask" >> beam.GroupByKey()  # spreads the files over workers
            | "BandEntries" >> beam.ParDo(_BandEntriesFn(self._settings.bands))
            # ((band, band value), [(key, signature), ...]), and ((-1, task), [NearTally of unhashed images])
            | "MeetInBuckets" >> beam.GroupByKey()
            | "Pairs" >> beam.FlatMap(_bucket_tally, self._settings, self._salt, self._ranges, self._cap)
            | "Tally" >> beam.CombineGlobally(MergeTalliesFn(self._cap)).without_defaults()
        )
        return entries
