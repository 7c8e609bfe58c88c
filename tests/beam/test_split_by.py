"""Splits that keep a group together (issue 48): ``split_key_fn`` hashes the group's value, so reading every
split back finds no group in two splits; the manifest says which column decided."""

from __future__ import annotations

import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import DType, Scalar, Schema, SplitConfig, WriteTFRecordDataset, load_manifest
from beam_tfrecord.core.framing import iter_records
from beam_tfrecord.core.proto import Example
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.errors import WriterOptionError
from beam_tfrecord.quality.split_groups import ColumnSplitKey

SCHEMA = Schema({"user": Scalar(DType.STRING), "value": Scalar(DType.INT64)})
SPLITS = SplitConfig.parse("train=0.7,validation=0.15,test=0.15")


def rows(users: int = 60, per_user: int = 8) -> list[Sample]:
    """``per_user`` rows of each user, under unique row keys (a key alone would spread a user over splits)."""
    rng = np.random.default_rng(1)
    return [Sample(f"row{u:03d}-{i}", {"user": f"user{u:03d}", "value": int(rng.integers(1 << 30))})
            for u in range(users) for i in range(per_user)]


def users_by_split(out: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for split in load_manifest(out).splits:
        for shard in split.shards:
            with open(os.path.join(out, shard.filename), "rb") as handle:
                for data in iter_records(handle, name=shard.filename):
                    user = Example.FromString(data).features.feature["user"].bytes_list.value[0].decode()
                    found.setdefault(split.name, set()).add(user)
    return found


def test_every_row_of_a_user_lands_in_one_split(tmp_path):
    samples = rows()
    out = str(tmp_path / "ds")
    with beam.Pipeline(options=PipelineOptions(["--direct_num_workers=1"])) as pipeline:
        _ = (pipeline | beam.Create([samples[i:i + 50] for i in range(0, len(samples), 50)])
             | WriteTFRecordDataset(out, schema=SCHEMA, splits=SPLITS, split_key_fn=ColumnSplitKey("user")))
    by_split = users_by_split(out)
    assert set(by_split) == {"train", "validation", "test"}
    assert sum(map(len, by_split.values())) == 60  # no user in two splits
    manifest = load_manifest(out)
    assert manifest.num_written == 480 and manifest.metadata["split_by"] == "user"
    assert {split.name: split.num_records % 8 for split in manifest.splits} == dict.fromkeys(by_split, 0)


def test_a_split_key_needs_ratio_splits(tmp_path):
    with pytest.raises(WriterOptionError, match="ratio splits"):
        WriteTFRecordDataset(str(tmp_path), schema=SCHEMA, splits=SplitConfig.parse("train=*,test=10"),
                             split_key_fn=ColumnSplitKey("user"))
