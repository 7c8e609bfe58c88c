"""EntryEncoder: samples to spill entries (one at a time, or a chunk column by column), or to dead letters.

Both fan-in paths encode through it, so a record is the same entry on either and the shards are byte-identical.
"""

from __future__ import annotations

import dataclasses
import itertools
import pickle
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from beam_tfrecord.core.batch_encoder import BatchEncoder
from beam_tfrecord.core.framing import framed_size
from beam_tfrecord.core.hashing import key_digests, key_hash
from beam_tfrecord.core.prebuilt import PrebuiltRecord
from beam_tfrecord.core.runs import (
    RunIndex,
    make_record_entries,
    make_record_entry,
    make_reference_entries,
    make_reference_entry,
)
from beam_tfrecord.core.samples import DeadLetter, FileRef, Sample, Stage
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.encoding.records import FeatureTransform, RecordBuilder, has_file_refs
from beam_tfrecord.errors import SampleError
from beam_tfrecord.quality.split_groups import GroupPlacement


class EntryEncoder:
    """Loads, transforms, validates and encodes samples into entries. Build in ``DoFn.setup``.

    Args:
        schema: the feature spec.
        salt: hash salt of the keys.
        max_record_bytes: the hard shard cap; a larger record is a dead letter (stage ``encode``).
        feature_transforms: per-feature functions applied before validation.
        reread_min_bytes: file-backed records at least this large become REFERENCE entries (their
            shard writer reads the files again); 0 turns this off, and so do transforms.
    """

    def __init__(self, schema: Schema, *, salt: str, max_record_bytes: int,
                 feature_transforms: Mapping[str, FeatureTransform], reread_min_bytes: int,
                 placement: GroupPlacement | None = None) -> None:
        self._placement = placement  # a split key: records placed by group (``quality.split_groups``)
        self._builder = RecordBuilder(schema, feature_transforms)
        # Chunks of in-memory samples without transforms are encoded column by column.
        self._batch = BatchEncoder(schema) if not self._builder.has_transforms else None
        self._salt = salt
        self._max_record_bytes = max_record_bytes
        self._reread_min_bytes = reread_min_bytes
        # Records rebuilt by the shard writers must come out byte-identical: never re-run transforms.
        self._reread = reread_min_bytes > 0 and not self._builder.has_transforms
        self.num_listed = 0  # records planned from listed file sizes (read once, by their shard writer)

    def encode(self, sample: Sample | PrebuiltRecord) -> bytes | DeadLetter:
        """The sample's entry, or its dead letter. An ``PrebuiltRecord`` is taken as it is."""
        if isinstance(sample, PrebuiltRecord):  # kept by an incremental refresh: only the cap applies
            return self._checked_entry(sample.key, sample.record)
        listed = self._listed_record_bytes(sample)
        if isinstance(listed, DeadLetter):
            return listed
        record: bytes | None = None
        if listed is None:
            built = self._builder.build(sample)
            if type(built) is DeadLetter:  # type() is: the hot path's cheapest check, and mypy narrows on it
                return built
            record, size = built, framed_size(len(built))
        else:
            size = framed_size(listed)
        if size > self._max_record_bytes:
            return self._over_cap(sample.key, size)
        if self._placement is None:
            hashed = key_hash(sample.key, self._salt)
        else:
            try:
                hashed = int.from_bytes(self._placement.digests([sample])[0], "big")
            except SampleError as err:
                return DeadLetter.from_error(sample.key, Stage.VALIDATE, err)
        if record is None or (self._reread and size >= self._reread_min_bytes and has_file_refs(sample)):
            # Large and file-backed: spill the reference; the shard writer reads the file (again,
            # unless it was planned from its listed size), so the payload is written once,
            # straight into its shard.
            return make_reference_entry(hashed, size, pickle.dumps(sample, protocol=pickle.HIGHEST_PROTOCOL))
        return make_record_entry(hashed, record)

    def encode_chunk(self, items: Sequence[Sample | DeadLetter]) -> Iterable[bytes | DeadLetter]:
        """``encode`` of every sample of a chunk, in order (a DeadLetter item stays as it is).

        Column by column (``core/batch_encoder.py``) when every sample is in memory and valid, and
        no transform applies; otherwise, or whenever the batch encoder declines, sample by sample.
        Either way the entries and dead letters are the same (one by one, made as they are
        consumed).
        """
        samples = [item for item in items if type(item) is not DeadLetter]
        entries = self._batch_entries(samples)
        if entries is None:
            return (item if type(item) is DeadLetter else self.encode(item) for item in items)
        if len(samples) == len(items):
            return entries
        it = iter(entries)
        return [item if type(item) is DeadLetter else next(it) for item in items]

    def _batch_entries(self, samples: list[Sample]) -> list[bytes] | None:
        """The entries of a chunk's samples at once, all valid, or None (then: one by one): RECORD
        entries of in-memory samples, REFERENCE entries of file-backed ones (``_batch_listed_entries``)."""
        if self._batch is None or {*map(type, samples)} != {Sample}:
            return None
        keys = [sample.key for sample in samples]
        values = [sample.values for sample in samples]
        if {*map(type, keys)} != {str} or {*map(type, values)} != {dict}:
            return None
        if FileRef in {*map(type, itertools.chain.from_iterable(map(dict.values, values)))}:
            return self._batch_listed_entries(self._batch, samples, keys)
        rows = self._batch.encode_rows(values)
        if rows is None or framed_size(max(rows.nbytes)) > self._max_record_bytes:
            return None
        digests = self._digests_of(samples, keys)
        return None if digests is None else make_record_entries(digests, rows.parts, rows.nbytes)

    def _batch_listed_entries(self, batch: BatchEncoder, samples: list[Sample], keys: list[str]) -> list[bytes] | None:
        """REFERENCE entries of file-backed samples, all planned from their listed file sizes at once
        (``RecordBuilder.listed_record_bytes_of_chunk``), or None (then: one by one, the same entries)."""
        if not self._reread:
            return None
        listed = self._builder.listed_record_bytes_of_chunk(samples, batch, min_file_bytes=self._reread_min_bytes)
        digests = self._digests_of(samples, keys)
        if listed is None or digests is None or framed_size(max(listed)) > self._max_record_bytes:
            return None
        self.num_listed += len(samples)
        pickles = [pickle.dumps(sample, protocol=pickle.HIGHEST_PROTOCOL) for sample in samples]
        return make_reference_entries(digests, map(framed_size, listed), pickles)

    def _digests_of(self, samples: list[Sample], keys: list[str]) -> list[bytes] | None:
        """The placing hashes of a chunk (8 big-endian bytes each), or None when a sample has no split key
        (then one by one: its dead letter says so)."""
        if self._placement is None:
            return key_digests(keys, self._salt)
        try:
            return self._placement.digests(samples)
        except SampleError:
            return None

    def _checked_entry(self, key: str, record: bytes) -> bytes | DeadLetter:
        size = framed_size(len(record))
        if size > self._max_record_bytes:
            return self._over_cap(key, size)
        return make_record_entry(key_hash(key, self._salt), record)

    def _over_cap(self, key: str, size: int) -> DeadLetter:
        error = SampleError(key, None, f"a record of at most {self._max_record_bytes} bytes "
                                       "(the hard shard-size cap)", f"{size} bytes")
        return DeadLetter.from_error(key, Stage.ENCODE, error)

    def _listed_record_bytes(self, sample: Sample) -> int | DeadLetter | None:
        """For a large file-backed sample whose record size follows from listed file sizes: that
        size (or its dead letter), so its files are read only once, by its shard writer."""
        if not self._reread or not has_file_refs(sample):  # the common case for rows, checked cheaply
            return None
        listed = self._builder.listed_record_bytes(sample, min_file_bytes=self._reread_min_bytes)
        if listed is not None and type(listed) is not DeadLetter:
            self.num_listed += 1
        return listed


@dataclasses.dataclass(frozen=True)
class EncodedBatch:
    """The entries and dead letters of one input element (a sample or a chunk of them).

    The element type of the shuffle path: the planner summarises its entries' hashes and sizes,
    and each entry is then keyed by its shard for the runner's shuffle.
    """

    entries: tuple[bytes, ...]
    dead_letters: tuple[DeadLetter, ...] = ()
    digest_files: tuple[Any, ...] = ()  # digest and signature files started meanwhile (``beam.duplicates``)

    def index(self) -> tuple[np.ndarray, np.ndarray]:
        """(uint64 hashes, int64 framed sizes) of the entries, in entry order."""
        if not self.entries:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64)
        index = RunIndex.of_entries("", self.entries)
        return index.hashes, index.framed_sizes
