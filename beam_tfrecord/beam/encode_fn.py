"""What the sample encoders of both fan-in paths share: samples -> entries and dead letters.

Each encoder has one output and emits nothing from ``finish_bundle``: the Dask runner sends every output of a
multi-output ParDo down every branch, and drops what ``finish_bundle`` emits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import apache_beam as beam

from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.core.samples import DeadLetter, Sample, Stage
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.side_files import EncodedChunk, SideFiles
from beam_tfrecord.encoding.entries import EntryEncoder
from beam_tfrecord.encoding.image_signatures import ImageSigner
from beam_tfrecord.encoding.records import FeatureTransform
from beam_tfrecord.job.progress import ProgressSink
from beam_tfrecord.quality.split_groups import GroupPlacement


class EncodeSamplesFn(beam.DoFn):
    """What both encoding DoFns share: the encoder, built in ``setup``, its side files, and the counters.

    Args:
        side_files: the side files each chunk goes to (``core.side_files``: digests, signatures; the spill path
            adds its runs), announced in this order.
        sign: the image feature the encoder signs for near duplicates (``ImageSigner``), or None.
        The others: as ``FanInSettings.encode_options`` gives them.
    """

    def __init__(self, schema: Schema, *, salt: str, max_record_bytes: int,
                 feature_transforms: Mapping[str, FeatureTransform], reread_min_bytes: int,
                 progress_dir: str | None = None, side_files: tuple[SideFiles, ...] = (),
                 placement: GroupPlacement | None = None, sign: str | None = None) -> None:
        self._schema = schema
        self._side_files = side_files
        self._sign = sign
        self._placement = placement
        self._progress_dir = progress_dir
        self._salt = salt
        self._max_record_bytes = max_record_bytes
        self._transforms = dict(feature_transforms)
        self._reread_min_bytes = reread_min_bytes
        self._encoded = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "samples_encoded")
        self._rejected = {stage: beam.metrics.Metrics.counter(METRICS_NAMESPACE, f"samples_rejected_{stage.value}")
                          for stage in Stage}
        self._listed = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "records_planned_from_listed_sizes")

    def setup(self) -> None:
        self._signer = None if self._sign is None else ImageSigner(self._sign)
        # the signer takes each image's signature from the transform that decodes it (``ImageSigner``)
        transforms = self._transforms if self._signer is None else self._signer.wrapped(self._transforms)
        self._encoder = EntryEncoder(self._schema, salt=self._salt, max_record_bytes=self._max_record_bytes,
                                     feature_transforms=transforms, reread_min_bytes=self._reread_min_bytes,
                                     placement=self._placement)
        self._progress = ProgressSink(self._progress_dir) if self._progress_dir else None

    def _announced(self) -> list:
        """The side files started since the last call, to emit."""
        return [started for side in self._side_files for started in side.announce()]

    def _finish_side_files(self) -> None:
        for side in self._side_files:
            side.finish()

    def _flush_progress(self) -> None:
        if self._progress is not None:
            self._progress.flush()

    def _encode_element(self, element: Sample | DeadLetter | list[Sample | DeadLetter]
                        ) -> tuple[list[bytes], list[DeadLetter]]:
        """(entries, dead letters) of one element, each in input order, given to the side files; counts them."""
        listed_before = self._encoder.num_listed
        # Sources emit a DeadLetter for an input they could not even turn into a sample (a
        # malformed row, a path outside the allowed root), so every input is counted here.
        if isinstance(element, list):
            outcomes = self._encoder.encode_chunk(element)
        else:
            outcomes = [element if type(element) is DeadLetter else self._encoder.encode(element)]
        entries: list[bytes] = []
        dead: list[DeadLetter] = []
        keys: list[str] = []
        signatures: list[tuple[str, Any]] = []
        items = element if isinstance(element, list) else [element]
        signer = self._signer
        if signer is None and type(outcomes) is list and DeadLetter not in map(type, outcomes):
            entries, keys = outcomes, [item.key for item in items]  # every item encoded: no step per record
            outcomes = []
        for item, outcome in zip(items, outcomes):  # ``outcomes`` may be made as they are read: in step
            if type(outcome) is DeadLetter:
                dead.append(outcome)
                if signer is not None:
                    signer.clear()
                continue
            entries.append(outcome)
            keys.append(item.key)
            if signer is not None and type(item) is Sample:  # not an incremental refresh's kept record
                signature = signer.take(item)
                if signature is not None:
                    signatures.append((item.key, signature))
        chunk = EncodedChunk(entries, keys, signatures)
        for side in self._side_files:
            side.add(chunk)
        for letter in dead:
            self._rejected[letter.stage].inc()
        self._encoded.inc(len(entries))
        if self._progress is not None:
            self._progress.add(encoded=len(entries), rejected=len(dead))
        if self._encoder.num_listed > listed_before:
            self._listed.inc(self._encoder.num_listed - listed_before)
        return entries, dead
