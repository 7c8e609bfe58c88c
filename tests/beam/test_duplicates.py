"""Exact duplicates in a build (issue 48): planted copies counted exactly, within and across splits, on every
fan-in path; ``fail`` publishes nothing."""

from __future__ import annotations

import json
import os
import pathlib

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import DType, Scalar, Schema, SplitConfig, WriteTFRecordDataset, load_manifest
from beam_tfrecord.beam.tuning import FanIn, WriterTuning
from beam_tfrecord.core.framing import iter_records
from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.core.proto import Example
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.errors import DuplicatesFoundError
from beam_tfrecord.quality.content import DuplicatesCheck

SCHEMA = Schema({"id": Scalar(DType.STRING), "payload": Scalar(DType.BYTES), "label": Scalar(DType.INT64)})
SPLITS = SplitConfig.parse("train=0.6,validation=0.2,test=0.2")
SALT = "beam-tfrecord"


def planted(n: int = 300) -> list[Sample]:
    """``n`` distinct samples, then copies: every 10th sample's content again under a new key (and id)."""
    rng = np.random.default_rng(0)
    samples = [Sample(f"s{i:04d}", {"id": f"s{i:04d}", "payload": rng.bytes(40), "label": i % 3}) for i in range(n)]
    copies = [Sample(f"c{i:04d}", {**samples[i].values, "id": f"c{i:04d}"}) for i in range(0, n, 10)]
    twice = [Sample(f"d{i:04d}", {**samples[i].values, "id": f"d{i:04d}"}) for i in range(0, n, 50)]
    return samples + copies + twice


def expected_counts(samples: list[Sample]) -> dict:
    """What the counts must be, worked out from the keys' splits without the writer."""
    bounds = SPLITS.ratio_bounds()

    def split_of(key: str) -> int:
        h = key_hash(key, SALT)
        return next(i for i, (_, lo, hi) in enumerate(bounds) if lo <= h < hi)

    groups: dict[bytes, list[int]] = {}
    for sample in samples:
        groups.setdefault(sample.values["payload"], []).append(split_of(sample.key))
    names = [name for name, _, _ in bounds]
    within: dict[str, int] = {}
    across: dict[str, int] = {}
    repeated = [splits for splits in groups.values() if len(splits) > 1]
    for splits in repeated:
        for a, name_a in enumerate(names):
            if splits.count(a) > 1:
                within[name_a] = within.get(name_a, 0) + splits.count(a) - 1
            for b in range(a + 1, len(names)):
                if a in splits and b in splits:
                    pair = f"{name_a}/{names[b]}"
                    across[pair] = across.get(pair, 0) + splits.count(b)
    return {"records": sum(map(len, repeated)), "groups": len(repeated), "within_splits": within,
            "across_splits": across}


def build(out: str, samples: list[Sample], duplicates, *, fan_in: FanIn = FanIn.AUTO,
          options: PipelineOptions | None = None) -> None:
    with beam.Pipeline(options=options or PipelineOptions(["--direct_num_workers=1"])) as pipeline:
        _ = (pipeline | beam.Create([samples[i:i + 64] for i in range(0, len(samples), 64)])
             | WriteTFRecordDataset(out, schema=SCHEMA, splits=SPLITS, duplicates=duplicates,
                                    tuning=WriterTuning(fan_in=fan_in)))


@pytest.mark.parametrize("fan_in", [FanIn.SPILL, FanIn.SHUFFLE])
def test_planted_duplicates_are_counted_exactly_within_and_across_splits(tmp_path, fan_in):
    samples = planted()
    out = str(tmp_path / "ds")
    build(out, samples, DuplicatesCheck("report", excluded=("id",)), fan_in=fan_in)
    found = load_manifest(out).metadata["duplicates"]
    expected = expected_counts(samples)
    assert {k: found[k] for k in expected} == expected
    assert expected["groups"] == 30 and expected["records"] == 66
    assert found["mode"] == "report" and found["dropped"] == 0 and found["excluded_features"] == ["id"]
    for pairs in found["examples"].values():
        assert 1 <= len(pairs) <= 20 and pairs == sorted(pairs)
    assert not [name for name in os.listdir(out) if name.startswith(".tmp")]


def test_without_excluding_the_id_feature_no_record_is_a_duplicate(tmp_path):
    out = str(tmp_path / "ds")
    build(out, planted(), "report")
    found = load_manifest(out).metadata["duplicates"]
    assert (found["records"], found["groups"], found["across_splits"]) == (0, 0, {})


def test_fail_publishes_nothing_and_names_examples(tmp_path):
    out = str(tmp_path / "ds")
    build(out, planted()[:300], "report")  # an old dataset, with no duplicate
    before = {path.name: path.read_bytes() for path in sorted(pathlib.Path(out).iterdir())}
    with pytest.raises(Exception) as raised:
        build(out, planted(), DuplicatesCheck("fail", excluded=("id",)))
    error = raised.value
    while error is not None and not isinstance(error, DuplicatesFoundError):  # runners wrap what a DoFn raised
        error = error.__cause__ or error.__context__
    assert isinstance(error, DuplicatesFoundError), repr(raised.value)
    assert error.summary.startswith("duplicates: 66 records in 30 groups; across splits: ")
    assert len(error.examples) == 10 and all(" = " in line for line in error.examples)
    after = {path.name: path.read_bytes() for path in sorted(pathlib.Path(out).iterdir())}
    assert after == before
    assert json.loads(before["manifest.json"])["metadata"]["duplicates"]["groups"] == 0


def read_ids(out: str) -> dict[str, list[tuple[str, bytes]]]:
    """Each split's records as (id, payload), in stored order."""
    manifest = load_manifest(out)
    found: dict[str, list[tuple[str, bytes]]] = {}
    for split in manifest.splits:
        for shard in split.shards:
            with open(os.path.join(out, shard.filename), "rb") as handle:
                for data in iter_records(handle, name=shard.filename):
                    feature = Example.FromString(data).features.feature
                    found.setdefault(split.name, []).append((feature["id"].bytes_list.value[0].decode(),
                                                             feature["payload"].bytes_list.value[0]))
    return found


def shard_bytes(out: str) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(pathlib.Path(out).glob("data-*"))}


def test_drop_keeps_the_smallest_key_hash_of_each_group_the_same_bytes_on_both_fan_ins(tmp_path):
    samples = planted()
    spill, shuffle = str(tmp_path / "spill"), str(tmp_path / "shuffle")
    build(spill, samples, DuplicatesCheck("drop", excluded=("id",)), fan_in=FanIn.SPILL)
    build(shuffle, samples, DuplicatesCheck("drop", excluded=("id",)), fan_in=FanIn.SHUFFLE)
    assert shard_bytes(spill) == shard_bytes(shuffle)
    manifest = load_manifest(spill)
    counts = manifest.metadata["duplicates"]
    assert (counts["records"], counts["groups"], counts["dropped"]) == (66, 30, 36)
    assert (manifest.num_inputs, manifest.num_written, manifest.num_dropped) == (len(samples), len(samples) - 36, 36)
    kept = {payload: key for records in read_ids(spill).values() for key, payload in records}
    assert len(kept) == 300  # every content once
    members: dict[bytes, list[str]] = {}
    for sample in samples:
        members.setdefault(sample.values["payload"], []).append(sample.key)
    assert kept == {payload: min(keys, key=lambda k: key_hash(k, SALT)) for payload, keys in members.items()}
    # the plan saw the kept set: shard records add up to it
    assert sum(s.num_records for s in manifest.shards) == 300
