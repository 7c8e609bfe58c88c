"""Shard names: one template formats and parses."""

import pytest

from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.naming import ShardName
from beam_tfrecord.errors import ShardNameError


@pytest.mark.parametrize("name, text", [
    (ShardName("data", "train", 0, 4), "data-train.tfrecord-00000-of-00004"),
    (ShardName("mnist_v2", "validation", 12, 100, Compression.GZIP), "mnist_v2-validation.tfrecord-00012-of-00100.gz"),
    (ShardName("d", "test", 0, 1, Compression.ZLIB), "d-test.tfrecord-00000-of-00001.zz"),
])
def test_format_and_parse_are_inverse(name, text):
    assert str(name) == text
    assert ShardName.parse(text) == name


@pytest.mark.parametrize("make", [
    pytest.param(lambda: ShardName("data", "train", 4, 4), id="index-too-big"),
    pytest.param(lambda: ShardName("my-data", "train", 0, 1), id="dash-in-name"),
    pytest.param(lambda: ShardName.parse("data-train-00000-of-00001"), id="no-tfrecord"),
])
def test_bad_names_are_typed_errors(make):
    with pytest.raises(ShardNameError):
        make()


def test_compression_parse():
    assert Compression.parse("gzip") is Compression.GZIP
    assert Compression.parse("none") is Compression.NONE
    with pytest.raises(ValueError, match="none, gzip, zlib"):
        Compression.parse("lz4")
