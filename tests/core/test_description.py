"""``DatasetDescription``: checked once when made, errors naming the field and the value; it owns the defaults."""

import dataclasses

import pytest

from beam_tfrecord.core.description import DEFAULT_SALT, DatasetDescription
from beam_tfrecord.core.naming import Compression, FileFormat
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.core.sharding import COUNTED_SHARD_CAP_BYTES, ShardingConfig, SplitConfig
from beam_tfrecord.errors import ShardingError, ShardNameError, WriterOptionError

SCHEMA = Schema({"id": Scalar(DType.INT64)})


@pytest.mark.parametrize("fields, error, message", [
    pytest.param({"schema": {"id": "int64"}}, WriterOptionError, "schema must be a Schema, got {'id': 'int64'}",
                 id="schema-as-dict"),
    pytest.param({"splits": "train=1.0"}, WriterOptionError, "splits must be a SplitConfig, got 'train=1.0'",
                 id="splits-as-text"),
    pytest.param({"compression": "gzip"}, WriterOptionError, "compression must be a Compression, got 'gzip'",
                 id="compression-as-text"),
    pytest.param({"statistics": 1}, WriterOptionError, "statistics must be a bool, got 1", id="statistics-as-int"),
    pytest.param({"dali_index": True, "compression": Compression.GZIP}, WriterOptionError, "dali_index: a DALI index",
                 id="dali-of-gzip"),
    pytest.param({"name": "no/slash"}, ShardNameError, "", id="bad-name"),
])
def test_a_bad_field_is_an_error_naming_it(fields, error, message):
    with pytest.raises(error) as raised:
        DatasetDescription(**{"schema": SCHEMA, **fields})
    assert str(raised.value).startswith(message)


def test_it_is_a_value_with_the_defaults_in_one_place():
    description = DatasetDescription(schema=SCHEMA)
    assert (description.name, description.splits, description.sharding, description.salt, description.file_format,
            description.statistics, description.dali_index) == (
        "data", SplitConfig.single(), ShardingConfig(), DEFAULT_SALT, FileFormat.TFRECORD, True, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        description.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize("num_shards, max_shard_bytes, expected", [
    pytest.param(0, None, ShardingConfig(target_shard_bytes=100), id="zero-sized-by-bytes"),
    pytest.param(4, None, ShardingConfig(target_shard_bytes=100, max_shard_bytes=COUNTED_SHARD_CAP_BYTES,
                                         num_shards=4), id="count-uncapped"),
    pytest.param(4, 300, ShardingConfig(target_shard_bytes=100, max_shard_bytes=300, num_shards=4), id="count-capped"),
])
def test_beams_count_has_one_meaning_of_auto(num_shards, max_shard_bytes, expected):
    assert ShardingConfig.of_beam_count(num_shards, target_shard_bytes=100, max_shard_bytes=max_shard_bytes) == expected


def test_a_negative_beam_count_is_refused():
    with pytest.raises(ShardingError, match=r"^num_shards must be an int >= 0"):
        ShardingConfig.of_beam_count(-1)
