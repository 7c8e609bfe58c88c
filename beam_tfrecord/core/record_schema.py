"""The schema of records that arrive already serialized, inferred from every one of them.

Summaries merge in any order to the same schema (a join-semilattice). Inference rules:
docs/inputs.md, "From a pipeline that ends in beam.io.WriteToTFRecord".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf.message import DecodeError

from beam_tfrecord.core import proto
from beam_tfrecord.core.schema import DType, Feature, FixedList, Scalar, Schema, VarList
from beam_tfrecord.errors import RecordSchemaError, SchemaError

RAW_FEATURE = "record"  # the one bytes feature of a raw payload's Example
# The manifest's metadata key saying what the records are (WriteBalancedTFRecord's ``Payload`` value).
PAYLOAD_METADATA_KEY = "payload"
_VERBATIM = "verbatim"
_DTYPES = {"int64_list": DType.INT64, "float_list": DType.FLOAT32, "bytes_list": DType.BYTES}

# (name, kind or None for an empty Feature, number of values) of each context feature, sorted.
ContextShape = tuple[tuple[str, str | None, int], ...]
# (name, kinds of its steps, (fewest, most) values per step or None without steps), sorted.
StepsShape = tuple[tuple[str, frozenset[str], tuple[int, int] | None], ...]


@dataclasses.dataclass(frozen=True)
class RecordShape:
    """What one record says about the schema: hashable, so equal shapes are summarized once."""

    context: ContextShape
    steps: StepsShape = ()
    raw: bool = False


RAW_SHAPE = RecordShape(((RAW_FEATURE, "bytes_list", 1),), raw=True)


def wrap_raw(payload: bytes) -> bytes:
    """A raw payload as the Example that stores it (one bytes feature, ``RAW_FEATURE``)."""
    example = proto.Example()
    example.features.feature[RAW_FEATURE].bytes_list.value.append(payload)
    return example.SerializeToString(deterministic=True)


def _feature_shape(feature: Any) -> tuple[str | None, int]:
    kind = feature.WhichOneof("kind")
    return kind, (len(getattr(feature, kind).value) if kind is not None else 0)


def record_shape(record: bytes) -> RecordShape | None:
    """The shape of a serialized Example or SequenceExample, or None when ``record`` is neither.

    Both messages keep their features in field 1 (an Example's ``features``, a SequenceExample's
    ``context``), so one parse as SequenceExample reads both. A record whose parse leaves unknown
    fields (anything but these two messages) or that has no feature is not an Example.
    """
    message = proto.SequenceExample()
    try:
        message.ParseFromString(record)
    except DecodeError:
        return None
    size = message.ByteSize()
    message.DiscardUnknownFields()  # recursive; a smaller message had fields neither proto declares
    if message.ByteSize() != size:
        return None
    context = tuple(sorted((name, *_feature_shape(feature)) for name, feature in message.context.feature.items()))
    steps = []
    for name, feature_list in message.feature_lists.feature_list.items():
        shapes = [_feature_shape(step) for step in feature_list.feature]
        kinds = frozenset(kind for kind, _ in shapes if kind is not None)
        counts = [count for _, count in shapes]
        steps.append((name, kinds, (min(counts), max(counts)) if counts else None))
    if not context and not steps:
        return None
    return RecordShape(context, tuple(sorted(steps, key=lambda step: step[0])))


def unnameable_feature(shape: RecordShape) -> tuple[str, str] | None:
    """``(feature name, what is wrong)`` when one record's features can be in no schema, else None.

    A valid Example may name a feature ``""``, or (a SequenceExample) use one name for a context
    feature and a feature list; no ``Schema`` (nor a parse spec) can hold either. Found per record,
    so such a record is a dead letter, as any other bad record, rather than the whole job's
    ``RecordSchemaError`` when the records' summaries are turned into the schema.
    """
    context = {name for name, _, _ in shape.context}
    for name in sorted(context | {name for name, _, _ in shape.steps}):
        if not name:
            return name, "an empty feature name"
    both = sorted(context & {name for name, _, _ in shape.steps})
    if both:
        return both[0], "the name of both a context feature and a feature list"
    return None


@dataclasses.dataclass(frozen=True)
class FeatureSummary:
    """One feature over the records seen so far.

    Attributes:
        kinds: the value kinds seen (``int64_list``...); empty when only empty values were.
        lengths: (fewest, most) values (per step, for sequence features), None when none were seen.
        in_every_record: present in every record summarized (always True for sequence features:
            an absent feature list has no steps).
    """

    kinds: frozenset[str]
    lengths: tuple[int, int] | None
    in_every_record: bool = True

    def merge(self, other: "FeatureSummary") -> "FeatureSummary":
        lengths = (self.lengths if other.lengths is None else other.lengths if self.lengths is None
                   else (min(self.lengths[0], other.lengths[0]), max(self.lengths[1], other.lengths[1])))
        return FeatureSummary(self.kinds | other.kinds, lengths, self.in_every_record and other.in_every_record)

    def feature(self, what: str) -> Feature:
        """The schema feature of these values; ``what`` names it in an error."""
        if len(self.kinds) > 1:
            raise RecordSchemaError(f"{what} holds {sorted(self.kinds)} in different records; no schema reads "
                                    "both (write them under different names, or as one kind)")
        dtype = _DTYPES[next(iter(self.kinds))] if self.kinds else DType.BYTES
        allow_non_finite = dtype is DType.FLOAT32
        if self.in_every_record and self.lengths is not None and self.lengths[0] == self.lengths[1] >= 1:
            if self.lengths[0] == 1:
                return Scalar(dtype, allow_non_finite=allow_non_finite)
            return FixedList(dtype, self.lengths[0], allow_non_finite=allow_non_finite)
        return VarList(dtype, allow_non_finite=allow_non_finite)


def _merge_features(a: Mapping[str, FeatureSummary], b: Mapping[str, FeatureSummary]) -> dict[str, FeatureSummary]:
    """Joins two non-empty summaries' features: a name missing from one is not in every record."""
    merged = {}
    for name in sorted(set(a) | set(b)):
        if name in a and name in b:
            merged[name] = a[name].merge(b[name])
        else:
            merged[name] = dataclasses.replace(a.get(name) or b[name], in_every_record=False)
    return merged


@dataclasses.dataclass(frozen=True)
class RecordsSummary:
    """What at least one record says about the schema; ``merge`` joins summaries in any order.

    Attributes:
        context: the features of the Examples (the context of the SequenceExamples).
        steps: the per-step features of the SequenceExamples' feature lists.
        raw: whether some record was a raw payload (stored in an Example with one bytes feature, ``RAW_FEATURE``).
    """

    context: Mapping[str, FeatureSummary]
    steps: Mapping[str, FeatureSummary]
    raw: bool = False

    @classmethod
    def of(cls, shape: RecordShape) -> "RecordsSummary":
        context = {name: FeatureSummary(frozenset({kind} if kind else ()), (count, count))
                   for name, kind, count in shape.context}
        steps = {name: FeatureSummary(kinds, lengths) for name, kinds, lengths in shape.steps}
        return cls(context, steps, shape.raw)

    def merge(self, other: "RecordsSummary") -> "RecordsSummary":
        steps = {name: self.steps[name].merge(other.steps[name]) if name in self.steps and name in other.steps
                 else self.steps.get(name) or other.steps[name] for name in sorted(set(self.steps) | set(other.steps))}
        return RecordsSummary(_merge_features(self.context, other.context), steps, self.raw or other.raw)

    def schema(self) -> Schema:
        """The schema every summarized record fits; raises RecordSchemaError when none does."""
        context = {name: summary.feature(f"feature {name!r}") for name, summary in self.context.items()}
        steps = {name: summary.feature(f"sequence feature {name!r}") for name, summary in self.steps.items()}
        try:
            return Schema(context, steps)
        except SchemaError as err:
            raise RecordSchemaError(f"the records' features make no schema: {err}") from err


def merge_summaries(summaries: Iterable[RecordsSummary | None]) -> RecordsSummary | None:
    """The join of ``summaries`` (None, the summary of no record, is skipped)."""
    merged = None
    for summary in summaries:
        if summary is not None:
            merged = summary if merged is None else merged.merge(summary)
    return merged


class SummaryTracker:
    """A worker's summary of its records, reported only when a record changes it.

    Records of a pipeline mostly share a few shapes: each new shape is merged once (a repeated
    one changes nothing, the join being idempotent), so a bundle reports a handful of summaries,
    each covering every record before it. Start one per bundle: what a bundle reports must cover
    its own records, whatever an earlier (maybe discarded) attempt saw.
    """

    MAX_SEEN = 4096  # shapes remembered; forgetting one costs a merge, never a wrong summary

    def __init__(self) -> None:
        self._seen: set[RecordShape] = set()
        self._summary: RecordsSummary | None = None

    def add(self, shape: RecordShape) -> RecordsSummary | None:
        """Adds one record's shape; returns the new summary when it changed, else None."""
        if shape in self._seen:
            return None
        if len(self._seen) >= self.MAX_SEEN:  # variable lengths can make every record's shape new
            self._seen.clear()
        self._seen.add(shape)
        merged = RecordsSummary.of(shape) if self._summary is None else self._summary.merge(RecordsSummary.of(shape))
        if merged == self._summary:
            return None
        self._summary = merged
        return merged


def holds_verbatim_payloads(metadata: Mapping[str, Any]) -> bool:
    """Whether a manifest's records include raw payloads written as given (``Payload.VERBATIM``, not inside an
    Example): a reader returns each record whole as ``RAW_FEATURE`` instead of parsing it."""
    inferred = metadata.get("schema_inferred")
    return metadata.get(PAYLOAD_METADATA_KEY) == _VERBATIM and isinstance(inferred, Mapping) \
        and inferred.get("raw_payloads") is True
