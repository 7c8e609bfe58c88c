"""Schema inference from serialized records: shapes, the rules, and summaries that merge in any order."""

from __future__ import annotations

import itertools

import pytest

from beam_tfrecord.core import proto
from beam_tfrecord.core.record_schema import (
    RAW_FEATURE,
    RecordsSummary,
    SummaryTracker,
    merge_summaries,
    record_shape,
    wrap_raw,
)
from beam_tfrecord.core.schema import DType, FixedList, Scalar, Schema, VarList
from beam_tfrecord.errors import RecordSchemaError


def _example(**features: list) -> bytes:
    example = proto.Example()
    for name, values in features.items():
        feature = example.features.feature[name]  # an empty list: a Feature of no kind
        if values and isinstance(values[0], bytes):
            feature.bytes_list.value.extend(values)
        elif values and isinstance(values[0], float):
            feature.float_list.value.extend(values)
        elif values:
            feature.int64_list.value.extend(values)
    return example.SerializeToString(deterministic=True)


def _schema(*records: bytes) -> Schema:
    summary = merge_summaries(RecordsSummary.of(record_shape(r)) for r in records)  # type: ignore[arg-type]
    assert summary is not None
    return summary.schema()


@pytest.mark.parametrize("records, expected", [
    ([_example(x=[1]), _example(x=[2])], Scalar(DType.INT64)),
    ([_example(x=[1.5, 2.5]), _example(x=[0.5, 1.0])], FixedList(DType.FLOAT32, 2, allow_non_finite=True)),
    ([_example(x=[b"a"]), _example(x=[b"b", b"c"])], VarList(DType.BYTES)),
    ([_example(x=[1]), _example(y=[1])], VarList(DType.INT64)),  # absent from a record
    ([_example(x=[]), _example(y=[1])], VarList(DType.BYTES)),  # only ever empty: no kind to go by
], ids=["scalar", "fixed-list", "lengths-differ", "absent-somewhere", "never-a-value"])
def test_inference_rules(records, expected):
    assert _schema(*records).features["x"] == expected


@pytest.mark.parametrize("payload", [b"", b"hello world", b"\x00\x01\x02", b'{"json": 1}', _example()],
                         ids=["empty", "text", "binary", "json", "example-without-features"])
def test_payloads_that_are_no_example_have_no_shape(payload):
    assert record_shape(payload) is None


def test_a_raw_payload_is_stored_as_one_bytes_feature():
    example = proto.Example.FromString(wrap_raw(b"\x00payload"))
    assert list(example.features.feature) == [RAW_FEATURE]
    assert list(example.features.feature[RAW_FEATURE].bytes_list.value) == [b"\x00payload"]


def test_an_unknown_field_makes_a_record_raw():
    assert record_shape(_example(x=[1]) + b"\x18\x05") is None  # field 3, a varint: neither message has it


def test_conflicting_kinds_name_the_feature():
    with pytest.raises(RecordSchemaError, match=r"feature 'x' holds \['float_list', 'int64_list'\] in different"):
        _schema(_example(x=[1]), _example(x=[1.5]))


def test_summaries_merge_to_the_same_value_in_any_order_and_grouping():
    records = [_example(x=[1], y=[b"a"]), _example(x=[2, 3]), _example(x=[4], z=[0.5]), _example(y=[b"b", b"c"])]
    summaries = [RecordsSummary.of(record_shape(r)) for r in records]  # type: ignore[arg-type]
    expected = merge_summaries(summaries)
    for order in itertools.permutations(summaries):
        assert merge_summaries(order) == expected
        assert merge_summaries([merge_summaries(order[:2]), merge_summaries(order[2:])]) == expected
    assert merge_summaries([expected, *summaries]) == expected  # idempotent: a summary seen twice changes nothing


def test_the_tracker_reports_only_changes_and_its_last_report_covers_every_record():
    records = [_example(x=[1])] * 5 + [_example(x=[1, 2])] + [_example(x=[7])] * 5
    tracker = SummaryTracker()
    reports = [report for r in records if (report := tracker.add(record_shape(r))) is not None]  # type: ignore
    assert len(reports) == 2
    assert reports[-1] == merge_summaries(RecordsSummary.of(record_shape(r)) for r in records)  # type: ignore


def test_sequence_example_steps_are_typed_per_step():
    example = proto.SequenceExample()
    example.context.feature["id"].int64_list.value.append(1)
    for step in range(3):
        example.feature_lists.feature_list["v"].feature.add().int64_list.value.append(step)
    schema = _schema(example.SerializeToString())
    assert schema == Schema({"id": Scalar(DType.INT64)}, sequence_features={"v": Scalar(DType.INT64)})
