"""WriteBalancedTFRecord's exact duplicates (issue 48): planted copies counted exactly on the DirectRunner (both
fan-in paths), ``drop`` byte-identical on each path, ``fail`` publishing nothing."""

from __future__ import annotations

import os
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import Payload, WriteBalancedTFRecord, WriterTuning, load_manifest
from beam_tfrecord.beam.write import DEFAULT_SALT, FanIn
from beam_tfrecord.core import proto
from beam_tfrecord.core.framing import iter_records
from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.core.sharding import SplitConfig
from beam_tfrecord.errors import DuplicatesFoundError, WriterOptionError
from beam_tfrecord.quality.content import DuplicatesCheck
from beam_tfrecord.quality.duplicate_counts import describe_duplicates
from pipelines.common import job_pipeline

SPLITS = "train=0.5,test=0.5"
DISTINCT = 80
# copies of record i (under new uids): 0-9 once, 0-3 twice more: 10 groups, 18 extra records
COPIES = [*range(10), *range(4), *range(4)]


def _record(uid: str, payload: int) -> bytes:
    example = proto.Example()
    example.features.feature["uid"].bytes_list.value.append(uid.encode())
    example.features.feature["payload"].bytes_list.value.append(f"payload {payload:04d}".encode() * 4)
    return example.SerializeToString(deterministic=True)


def uid_of(record: bytes) -> str:
    """key_fn: the record's uid feature (module level: pickled to the workers)."""
    return proto.Example.FromString(record).features.feature["uid"].bytes_list.value[0].decode()


WITH_UIDS = [_record(f"u{i:03d}", i) for i in range(DISTINCT)] + [_record(f"c{n:03d}", i) for n, i in
                                                                   enumerate(COPIES)]
EXACT = [_record("same", i) for i in range(DISTINCT)] + [_record("same", i) for i in COPIES]  # equal bytes


def _write(out: str, records: list[bytes], options: list[str] | None = None, **writer) -> None:
    with job_pipeline(PipelineOptions(options or [])) as pipeline:
        _ = (pipeline | beam.Create(records, reshuffle=False)
             | WriteBalancedTFRecord(output_dir=out, splits=SPLITS, target_shard_bytes=2_000, **writer))


def _records_by_split(out: str) -> dict[str, list[bytes]]:
    found: dict[str, list[bytes]] = {}
    for split in load_manifest(out).splits:
        for shard in split.shards:
            with open(os.path.join(out, shard.filename), "rb") as handle:
                found.setdefault(split.name, []).extend(iter_records(handle, name=shard.filename))
    return found


def _payload(record: bytes) -> bytes:
    return proto.Example.FromString(record).features.feature["payload"].bytes_list.value[0]


def _shards(out: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(out).glob("data-*"))}


def test_report_counts_whole_records_on_both_fan_in_paths(tmp_path):
    # (in memory: the multi-process runner costs ~25 s here; WriteTFRecordDataset's duplicates tests run the same
    # digest files there and on Dask)
    direct, shuffle = str(tmp_path / "direct"), str(tmp_path / "shuffle")
    _write(direct, EXACT, duplicates="report", tuning=WriterTuning(spill_run_bytes=4_000))
    _write(shuffle, EXACT, duplicates="report", tuning=WriterTuning(fan_in=FanIn.SHUFFLE))
    assert _shards(direct) == _shards(shuffle) != {}
    written = _records_by_split(direct)
    within = {name: len(records) - len(set(records)) for name, records in written.items()}
    found = load_manifest(direct).metadata["duplicates"]
    assert found == load_manifest(shuffle).metadata["duplicates"]
    # no key_fn: equal records share their placing hash, so every group is in one split
    assert (found["records"], found["groups"], found["dropped"], found["across_splits"]) == (28, 10, 0, {})
    assert found["within_splits"] == {name: n for name, n in within.items() if n} and sum(within.values()) == 18
    assert describe_duplicates(load_manifest(direct).metadata)[0] == ("duplicates: 28 records in 10 groups; across "
                                                                   "splits: none")


def test_drop_keeps_each_groups_smallest_key_hash_with_the_same_bytes_on_both_fan_in_paths(tmp_path):
    spill, shuffle = str(tmp_path / "spill"), str(tmp_path / "shuffle")
    for out, fan_in in ((spill, FanIn.SPILL), (shuffle, FanIn.SHUFFLE)):
        _write(out, WITH_UIDS, key_fn=uid_of, payload=Payload.EXAMPLE, tuning=WriterTuning(fan_in=fan_in),
               duplicates=DuplicatesCheck("drop", excluded=("uid",)))
    assert _shards(spill) == _shards(shuffle) != {}
    groups: dict[bytes, list[str]] = {}
    for record in WITH_UIDS:
        groups.setdefault(_payload(record), []).append(uid_of(record))
    kept = sorted(min(uids, key=lambda uid: key_hash(uid, DEFAULT_SALT)) for uids in groups.values())
    written = [r for records in _records_by_split(spill).values() for r in records]
    assert sorted(map(uid_of, written)) == kept and len(kept) == DISTINCT
    manifest = load_manifest(shuffle)
    found = manifest.metadata["duplicates"]
    assert (found["records"], found["groups"], found["dropped"], found["excluded_features"]) == (28, 10, 18, ["uid"])
    assert (manifest.num_inputs, manifest.num_dropped) == (DISTINCT + len(COPIES), 18)
    assert found == load_manifest(spill).metadata["duplicates"]
    bounds = SplitConfig.parse(SPLITS).ratio_bounds()  # each uid's split, from its key hash alone
    split_of = {uid: next(name for name, lo, hi in bounds if lo <= key_hash(uid, DEFAULT_SALT) < hi)
                for uids in groups.values() for uid in uids}
    in_test = [sum(split_of[uid] == "test" for uid in uids) for uids in groups.values() if len(uids) > 1]
    in_train = [sum(split_of[uid] == "train" for uid in uids) for uids in groups.values() if len(uids) > 1]
    assert found["across_splits"] == {"train/test": sum(t for t, r in zip(in_test, in_train) if r)}
    assert found["within_splits"] == {name: n for name, n in (("train", sum(max(r - 1, 0) for r in in_train)),
                                                              ("test", sum(max(t - 1, 0) for t in in_test))) if n}


def test_fail_publishes_nothing_under_a_prefix(tmp_path):
    prefix = str(tmp_path / "beam" / "part")
    with pytest.raises(DuplicatesFoundError, match="duplicates: 28 records in 10 groups; across splits: none; "
                                                       r"the dataset was NOT published \(duplicates=fail\)"):
        with job_pipeline(PipelineOptions([])) as pipeline:
            _ = pipeline | beam.Create(EXACT, reshuffle=False) | WriteBalancedTFRecord(prefix, duplicates="fail")
    assert [p.name for p in (tmp_path / "beam").iterdir() if not p.name.startswith(".")] == []


@pytest.mark.parametrize("options, message", [
    (dict(duplicates="maybe"), r"duplicates must be one of \['report', 'drop', 'fail'\], got 'maybe'"),
    (dict(duplicates="drop"), "duplicates='drop' needs key_fn"),
    (dict(duplicates=DuplicatesCheck("report", excluded=("uid",))), r"excluded features \['uid'\] need payload"),
], ids=["unknown-mode", "drop-without-keys", "excluded-without-examples"])
def test_bad_duplicates_options_are_typed_errors_at_construction(options, message):
    with pytest.raises(WriterOptionError, match=message):
        WriteBalancedTFRecord(output_dir="/tmp/never-written", **options)
