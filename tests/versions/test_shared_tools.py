"""The tools on a version that shares shards with an earlier one and deletes records: verify, inspect, statistics,
compare and the report count and read the live records only, finding each shard where it is stored; readers
outside this project (TFDS, Croissant, DALI, Ray) get no files for it and a typed error naming ``compact``."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest
from fixtures_stores import az_container, azurite, moto_s3, s3_bucket  # noqa: F401  (pytest fixtures)
from tools_fixtures import (
    EARLIER,
    LATER,
    LIVE_X,
    NUM_DELETED,
    SharedRoot,
    add_test_shard_named_as_earliers,
    build_shared_root,
)

from beam_tfrecord import cli, storage
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.core.manifest import MANIFEST_FILENAME
from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.errors import (
    CorruptShardError,
    ManifestError,
    MissingShardError,
    NotSelfContainedError,
    ReaderError,
)
from beam_tfrecord.interop import croissant, interop_files, tfds
from beam_tfrecord.interop.dali import dali_reader_args
from beam_tfrecord.interop.ray_data import ray_read_args
from beam_tfrecord.interop.self_contained import not_self_contained_reason
from beam_tfrecord.interop.tfds import DATASET_INFO_FILENAME, tfds_files
from beam_tfrecord.interop.tfmd_schema import SCHEMA_FILENAME
from beam_tfrecord.report import write_report
from beam_tfrecord.report.from_statistics import collect
from beam_tfrecord.report.stats import FROM_RECORDS
from beam_tfrecord.report.version_statistics import statistics_of
from beam_tfrecord.verify import verify_dataset
from beam_tfrecord.versions.refresh import commit_version

SHARED = "3 of its 4 shards are stored in earlier versions (shared with them)"
DELETED = f"{NUM_DELETED} records of its shards are deleted (deletion vectors)"
BUCKETS = {"gs": "gcs_bucket", "s3": "s3_bucket", "az": "az_container"}  # a fresh bucket's fixture per store


def _without_crc(line: str) -> str:
    """A line of ``inspect``, stripped, without a shard's ``  crc32c XXXXXXXX`` (the fixture's bytes decide it)."""
    return line.split("  crc32c")[0].strip() + line.partition("crc32c ")[2][8:]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> SharedRoot:
    return build_shared_root(str(tmp_path_factory.mktemp("shared") / "root"))


@pytest.fixture()
def damaged(shared: SharedRoot, tmp_path: Path) -> SharedRoot:
    """A private copy of the root, for a test to damage."""
    return SharedRoot(str(shutil.copytree(shared.root, tmp_path / "root")))


def test_verify_reads_shared_shards_where_stored_and_counts_live_records(shared, capsys):
    report = verify_dataset(shared.root)
    assert (report.num_shards, report.num_records, report.num_deleted, report.num_shared_shards) == (4, 11, 3, 3)
    assert report.num_bytes == sum(s.num_bytes for s in load_manifest(shared.root).shards)
    assert cli.main(["verify", shared.root]) == 0
    assert capsys.readouterr().out == (f"OK: 4 shards (3 stored in earlier versions), 11 records (3 deleted not "
                                       f"counted), {report.num_bytes} bytes verified in {shared.root}\n")


def test_verify_names_a_shared_shard_missing_from_the_version_that_stores_it(damaged):
    path = storage.join(damaged.earlier_dir, "d-train.tfrecord-00001-of-00002")
    os.remove(path)
    with pytest.raises(MissingShardError, match=f"shard '{path}': listed in the manifest but missing"):
        verify_dataset(damaged.root)


def test_verify_checks_a_shared_shards_dali_index_where_stored(damaged):
    index = storage.join(damaged.earlier_dir, "d-test.tfrecord-00000-of-00001.idx")
    Path(index).write_text("0 1\n")
    with pytest.raises(CorruptShardError, match=f"shard '{index}': the DALI index differs from the 3 records"):
        verify_dataset(damaged.root)


def test_two_shards_of_one_name_in_two_versions_are_two_files(damaged, capsys):
    add_test_shard_named_as_earliers(damaged, [300, 301])
    report = verify_dataset(damaged.root)
    assert (report.num_shards, report.num_records, report.num_shared_shards) == (5, 13, 3)
    count, x = _x_stats(statistics_of(damaged.root), "test")
    assert (count, x.min, x.max) == (4, 101, 301)
    assert cli.main(["inspect", damaged.root]) == 0
    test_shards = [_without_crc(line) for line in capsys.readouterr().out.splitlines() if "d-test" in line]
    assert test_shards == [f"d-test.tfrecord-00000-of-00001  2 records (1 of 3 deleted)  138 B  stored in version "
                           f"{EARLIER}", "d-test.tfrecord-00000-of-00001  2 records  94 B"]


def test_verify_of_a_version_copied_out_of_its_root_says_compact(shared, tmp_path):
    copy = shutil.copytree(shared.later_dir, tmp_path / LATER)
    with pytest.raises(ManifestError, match=f"is stored in version {EARLIER} of the dataset's root, but '{copy}' is "
                                            "not a version of a root .*compact the version first"):
        verify_dataset(str(copy))


def test_inspect_shows_where_shards_are_stored_deleted_and_live_counts(shared, capsys):
    assert cli.main(["inspect", shared.root]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("  11 records written, 0 rejected, of 11 inputs")
    assert lines[2] == (f"  not self-contained: {SHARED} and {DELETED}; readers outside beam-tfrecord (TFDS, DALI, "
                        "Ray, Croissant, a glob of its files) get no files for it and are refused: `beam-tfrecord "
                        "compact ROOT` writes a version they read")
    shards = [_without_crc(line) for line in lines[3:9]]
    assert shards == [
        "split train: 9 records in 3 shards (2 more deleted), 508 B, balance spread 0.00%",
        f"d-train.tfrecord-00000-of-00002  3 records (2 of 5 deleted)  230 B  stored in version {EARLIER}",
        f"d-train.tfrecord-00001-of-00002  4 records  184 B  stored in version {EARLIER}",
        "d-train.tfrecord-00000-of-00001  2 records  94 B",
        "split test: 2 records in 1 shards (1 more deleted), 138 B, balance spread 0.00%",
        f"d-test.tfrecord-00000-of-00001  2 records (1 of 3 deleted)  138 B  stored in version {EARLIER}",
    ]
    assert not any("TFDS metadata" in line for line in lines)  # said once, by the line above
    assert cli.main(["inspect", shared.earlier_dir]) == 0
    assert "not self-contained" not in capsys.readouterr().out


def _x_stats(statistics, split: str):
    dataset = next(d for d in statistics.datasets if d.name == split)
    x = next(f for f in dataset.features if f.path.step == ["x"])
    return dataset.num_examples, x.num_stats


def test_statistics_and_compare_read_live_records_only(shared, capsys):
    for split, xs in LIVE_X.items():
        count, x = _x_stats(statistics_of(shared.root), split)
        assert (count, x.min, x.max) == (len(xs), min(xs), max(xs))
        assert x.mean == pytest.approx(sum(xs) / len(xs))
    assert cli.main(["compare", shared.earlier_dir, shared.root]) == 1
    table = capsys.readouterr().out
    assert "test   *        record_count    0.3333  0.5        no        3 -> 2 records" in table
    assert "train  x        jensen_shannon" in table and "mean 4 -> 48.11" in table


def test_the_report_counts_and_reads_live_records(shared, tmp_path):
    stats = collect(shared.root)
    assert stats.source == FROM_RECORDS
    assert [(s.name, s.num_records, s.shard_records) for s in stats.splits] == [("train", 9, [3, 4, 2]),
                                                                                 ("test", 2, [2])]
    written = write_report(shared.root, str(tmp_path / "report"))
    page = Path(written.html_path).read_text()
    assert "not self-contained" in page and "11 records written" in page
    from tensorflow_metadata.proto.v0 import statistics_pb2
    statistics = statistics_pb2.DatasetFeatureStatisticsList.FromString(Path(written.statistics_path).read_bytes())
    assert [(d.name, d.num_examples) for d in statistics.datasets] == [("train", 9), ("test", 2)]


def test_no_file_for_an_outside_reader_is_written_for_a_version_that_is_not_self_contained(shared):
    later, earlier = set(os.listdir(shared.later_dir)), set(os.listdir(shared.earlier_dir))
    outside = {DATASET_INFO_FILENAME, "features.json", "label.labels.txt", "croissant.json"}
    assert outside <= earlier and not outside & later and SCHEMA_FILENAME in later  # the schema reads no shard
    manifest = load_manifest(shared.root)
    assert tfds_files(manifest) == {} and set(interop_files(manifest)) == {SCHEMA_FILENAME}
    for reason in (tfds.unsupported_reason(manifest), croissant.unsupported_reason(manifest)):
        assert reason is not None and f"not self-contained ({SHARED} and {DELETED})" in reason
        assert "`beam-tfrecord compact ROOT` writes a version" in reason


def test_committing_a_version_tfds_cannot_read_again_writes_nothing_and_moves_latest(damaged):
    before = sorted(os.listdir(damaged.later_dir))
    commit_version(damaged.root, EARLIER)
    commit_version(damaged.root, LATER)  # no dataset_info.json there: not an unfinished publication
    assert sorted(os.listdir(damaged.later_dir)) == before
    assert Path(damaged.root, "LATEST").read_text() == f"{LATER}\n"


@pytest.mark.parametrize("read_args, reader", [(ray_read_args, "Ray Data's read_tfrecords"),
                                               (dali_reader_args, "NVIDIA DALI's tfrecord reader")],
                         ids=["ray", "dali"])
def test_an_outside_readers_arguments_are_refused_naming_the_version_and_compact(shared, read_args, reader):
    with pytest.raises(NotSelfContainedError) as info:
        read_args(shared.root, split="train")
    assert isinstance(info.value, ReaderError)
    assert str(info.value) == (
        f"{reader} cannot read version {shared.later_dir!r}: {SHARED} and {DELETED}; it reads only a "
        "self-contained version (every shard in the version's directory, no record deleted). Run `beam-tfrecord "
        f"compact {shared.root}` and give it the compacted version, or read this one with beam-tfrecord's readers "
        "(read_dataset, read_numpy, TFRecordIterableDataset)")
    args = read_args(shared.earlier_dir, split="train")  # a self-contained version: its own files
    paths = args["paths"] if "paths" in args else args["path"]
    assert paths == [storage.join(shared.earlier_dir, f"d-train.tfrecord-0000{i}-of-00002") for i in (0, 1)]


def test_the_reason_names_what_is_shared_and_what_is_deleted(shared):
    manifest = load_manifest(shared.root)

    def only(keep: str):
        splits = tuple(dataclasses.replace(split, shards=tuple(
            dataclasses.replace(shard, **{keep: None}) for shard in split.shards)) for split in manifest.splits)
        return dataclasses.replace(manifest, splits=splits, num_inputs=sum(s.num_records for s in splits))

    assert not_self_contained_reason(manifest) == f"{SHARED} and {DELETED}"
    assert not_self_contained_reason(only("deletions")) == SHARED
    assert not_self_contained_reason(only("stored_in")) == DELETED
    assert not_self_contained_reason(load_manifest(shared.earlier_dir)) is None
    assert MANIFEST_FILENAME in os.listdir(shared.later_dir)


@pytest.mark.parametrize("store", list(BUCKETS))
def test_on_every_store_the_tools_find_shared_shards_and_count_live_records(store, request):
    shared = build_shared_root(f"{request.getfixturevalue(BUCKETS[store])}/root")
    report = verify_dataset(shared.root)
    assert (report.num_records, report.num_deleted, report.num_shared_shards) == (11, 3, 3)
    statistics = statistics_of(shared.root)
    assert [(d.name, d.num_examples) for d in statistics.datasets] == [("train", 9), ("test", 2)]
    count, x = _x_stats(statistics, "test")
    assert (count, x.min, x.max) == (2, 101, 102)
    listed = {path.rsplit("/", 1)[1] for path, _ in storage.list_files(f"{shared.later_dir}/**")}
    assert SCHEMA_FILENAME in listed and not {DATASET_INFO_FILENAME, "croissant.json"} & listed
    with pytest.raises(NotSelfContainedError, match=f"compact {shared.root}`"):
        ray_read_args(shared.root)


def test_array_record_shards_shared_and_deleted_are_verified_and_read_live(tmp_path, capsys):
    shared = build_shared_root(str(tmp_path / "root"), FileFormat.ARRAY_RECORD)
    report = verify_dataset(shared.root)
    assert (report.num_shards, report.num_records, report.num_deleted, report.num_shared_shards) == (4, 11, 3, 3)
    for split, xs in LIVE_X.items():
        count, x = _x_stats(statistics_of(shared.root), split)
        assert (count, x.min, x.max, x.mean) == (len(xs), min(xs), max(xs), pytest.approx(sum(xs) / len(xs)))
    assert cli.main(["inspect", shared.root]) == 0
    assert "d-test.array_record-00000-of-00001  2 records (1 of 3 deleted)" in capsys.readouterr().out
