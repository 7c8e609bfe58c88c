"""core.example_parts: joined records are one Example; fold gives the protobuf library's deterministic bytes."""

from __future__ import annotations

import pytest

from beam_tfrecord.core import proto
from beam_tfrecord.core.example_parts import fold, map_entries
from beam_tfrecord.errors import CorruptShardError


def _example(**features: list) -> bytes:
    example = proto.Example()
    for name, values in features.items():
        feature = example.features.feature[name]
        if isinstance(values[0], bytes):
            feature.bytes_list.value.extend(values)
        elif isinstance(values[0], float):
            feature.float_list.value.extend(values)
        else:
            feature.int64_list.value.extend(values)
    return example.SerializeToString(deterministic=True)


BASE = _example(id=[7], text=[b"x" * 300], zeta=[1.5])
ROW = _example(emb=[0.25] * 64, alpha=[-3])


def test_a_joined_record_parses_as_one_example_holding_both() -> None:
    joined = proto.Example.FromString(BASE + ROW)
    assert sorted(joined.features.feature) == ["alpha", "emb", "id", "text", "zeta"]
    assert [name for name, _ in map_entries(BASE + ROW)] == ["id", "text", "zeta", "alpha", "emb"]


def test_fold_is_the_deterministic_serialization_of_the_final_schema() -> None:
    assert fold([BASE, ROW], logical_names={}, dropped=frozenset()) == _example(
        id=[7], text=[b"x" * 300], zeta=[1.5], emb=[0.25] * 64, alpha=[-3])
    renamed = fold([BASE, ROW], logical_names={"emb": "vector"}, dropped=frozenset({"zeta"}))
    assert renamed == _example(id=[7], text=[b"x" * 300], vector=[0.25] * 64, alpha=[-3])
    assert fold([BASE, b""], logical_names={}, dropped=frozenset()) == BASE  # an empty row adds nothing


def test_bad_parts_are_refused_naming_the_record() -> None:
    with pytest.raises(CorruptShardError, match="'id' is held by two"):
        fold([BASE, _example(id=[8])], logical_names={}, dropped=frozenset(), where="s-00000 at offset 0")
    with pytest.raises(CorruptShardError, match="runs past the end"):
        list(map_entries(BASE[:-3], where="s-00000"))
