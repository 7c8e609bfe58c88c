"""WriteBalancedTFRecord's split_key_fn: every record of a group in one split, read back from the shards.

Serialized Examples of 30 users (10 records each) on the DirectRunner; a split_key_fn that
fails, or gives a group of another type, is a dead letter naming the record, and then nothing is published.
"""

from __future__ import annotations

import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import WriteBalancedTFRecord, WriterTuning, load_manifest, read_numpy
from beam_tfrecord.beam.write import DEFAULT_SALT, FanIn
from beam_tfrecord.core import proto
from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.core.sharding import SplitConfig
from beam_tfrecord.errors import WriterOptionError
from pipelines.common import job_pipeline

USERS, PER_USER = 30, 10
SPLITS = "train=0.6,validation=0.2,test=0.2"


def _record(i: int) -> bytes:
    example = proto.Example()
    example.features.feature["id"].int64_list.value.append(i)
    example.features.feature["user"].bytes_list.value.append(f"u{i % USERS:02d}".encode())
    return example.SerializeToString(deterministic=True)


RECORDS = [_record(i) for i in range(USERS * PER_USER)]  # user i % 30: a user's records far apart in the input


def _id_of(record: bytes) -> str:
    return f"id-{proto.Example.FromString(record).features.feature['id'].int64_list.value[0]}"


def user_of(record: bytes) -> bytes:
    return proto.Example.FromString(record).features.feature["user"].bytes_list.value[0]


def _bad_user_of(record: bytes) -> object:
    key = _id_of(record)
    if key == "id-7":
        raise LookupError("no user for record 7")
    return 9 if key == "id-9" else user_of(record)


def _write(out: str, **options) -> None:
    with job_pipeline(PipelineOptions([])) as pipeline:
        _ = (pipeline | beam.Create(RECORDS, reshuffle=False)
             | WriteBalancedTFRecord(output_dir=out, splits=SPLITS, key_fn=_id_of, target_shard_bytes=2_000,
                                     **options))


def test_every_record_of_a_user_is_read_back_from_one_split(tmp_path):
    out = str(tmp_path / "ds")
    _write(out, split_key_fn=user_of, tuning=WriterTuning(fan_in=FanIn.SPILL))
    read = {split: [(e["id"].item(), e["user"]) for e in read_numpy(out, split=split)]
            for split in ("train", "validation", "test")}
    assert sorted(i for records in read.values() for i, _ in records) == list(range(USERS * PER_USER))
    users = {split: {user for _, user in records} for split, records in read.items()}
    assert sum(map(len, users.values())) == USERS  # no user in two splits
    assert all(users.values())  # and the users still spread over the three
    for records in read.values():
        for i, user in records:
            assert user == f"u{i % USERS:02d}".encode()
    manifest = load_manifest(out)
    assert manifest.metadata["split_by"] == "user_of"
    assert manifest.num_written == USERS * PER_USER
    # by their keys alone, the users' records would have spread over the splits
    bounds = SplitConfig.parse(SPLITS).ratio_bounds()
    by_key = {(i % USERS, next(name for name, lo, hi in bounds if lo <= key_hash(f"id-{i}", DEFAULT_SALT) < hi))
              for i in range(USERS * PER_USER)}
    assert len(by_key) > USERS


def test_a_failing_split_key_fn_or_a_group_of_another_type_names_the_record_and_publishes_nothing(tmp_path):
    """On the shuffle path (the other test takes the spill path): the same entry maker places the records."""
    out = str(tmp_path / "ds")
    with pytest.raises(Exception) as info:
        _write(out, split_key_fn=_bad_user_of, tuning=WriterTuning(fan_in=FanIn.SHUFFLE))
    assert "RejectedSamplesError" in repr(info.value)
    message = str(info.value)
    assert "2 of 300 input samples were rejected" in message
    assert "id-7 [validate] no user for record 7" in message
    assert ("id-9 [validate] expected split_key_fn to return the record's group as str or bytes, got int 9 in "
            "sample 'id-9'") in message
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    dead_letters = [name for name in os.listdir(out) if name.startswith("dead_letters-")]
    with open(os.path.join(out, dead_letters[0])) as handle:
        assert '"error_type": "LookupError"' in handle.read()


@pytest.mark.parametrize("options, expected", [
    (dict(split_key_fn="user"), "split_key_fn must be callable"),
    (dict(split_key_fn=user_of, splits="train=*,test=10"), "split_key_fn keeps groups whole in ratio"),
])
def test_a_split_key_fn_the_writer_cannot_follow_is_refused_at_construction(tmp_path, options, expected):
    with pytest.raises(WriterOptionError, match=expected):
        WriteBalancedTFRecord(output_dir=str(tmp_path / "ds"), **options)
