"""Every reader of a version with column files returns the records of a build with every feature from the start.

One root per format (session-scoped, ~100 records): a base build, then a version listing its shards with two
column files each (two adds) and deleted records; the reference is a native build of the same samples with the
final schema. Readers: NumPy (stored, shuffled, workers, resume), tf.data, PyTorch, ArrayRecord random access.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fixtures_gcs import fake_gcs  # noqa: F401  (a pytest fixture: one emulator per test process)
from fixtures_stores import az_container, azurite, moto_s3, s3_bucket  # noqa: F401  (pytest fixtures)
from read_fixtures import add_columns, first_version, record_keys, write_build

from beam_tfrecord import Sample
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.core.schema import DType, FixedList, Scalar, Schema
from beam_tfrecord.dataset import load_manifest as load_manifest_of
from beam_tfrecord.dataset import version_dir
from beam_tfrecord.reader.numpy_reader import read_numpy

BASE = Schema(features={"key": Scalar(DType.STRING), "i": Scalar(DType.INT64), "f": Scalar(DType.FLOAT32)})
EMB = {"emb": FixedList(DType.FLOAT32, 8), "score": Scalar(DType.FLOAT32)}
TAG = {"tag": Scalar(DType.STRING)}
FIRST, SECOND = "20260101T000000.000Z-a1a1a1", "20260102T000000.000Z-b2b2b2"
COUNT = 120


def _base(i: int) -> dict:
    return {"key": f"k{i:04d}", "i": i, "f": i / 4}


def _emb(key: str) -> dict:
    i = int(key[1:])
    return {"emb": [i + j / 8 for j in range(8)], "score": i / 2}


def _tag(key: str) -> dict:
    return {"tag": f"t{key}"}


@dataclasses.dataclass(frozen=True)
class Pair:
    """A root whose LATEST has column files, and a native build of its final schema."""

    root: str
    native: str
    deleted: frozenset[str]


def _pair(tmp: str, file_format: FileFormat) -> Pair:
    samples = [Sample(f"k{i:04d}", _base(i)) for i in range(COUNT)]
    root, native = f"{tmp}/root", f"{tmp}/native"
    manifest = first_version(root, FIRST, samples, BASE, file_format=file_format)
    shards = manifest.split("train").shards
    deleted = {shards[0].filename: [0, 3, 4], shards[1].filename: [shards[1].num_records - 1]}
    add_columns(root, FIRST, SECOND, adds=[(EMB, _emb), (TAG, _tag)], deleted=deleted)
    gone = set()
    for shard in shards:
        keys = record_keys(version_dir(root, FIRST), manifest, shard, FIRST)
        gone |= {keys[p] for p in deleted.get(shard.filename, ())}
    final = Schema(features={**BASE.features, **EMB, **TAG})
    live = [Sample(s.key, {**s.values, **_emb(s.key), **_tag(s.key)}) for s in samples if s.key not in gone]
    write_build(native, live, final, file_format=file_format)
    return Pair(root, native, frozenset(gone))


@pytest.fixture(scope="module", params=[FileFormat.TFRECORD, FileFormat.ARRAY_RECORD], ids=["tfrecord", "array_record"])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Pair:
    return _pair(str(tmp_path_factory.mktemp(request.param.value)), request.param)


def _by_key(examples: list[dict]) -> dict[str, dict]:
    return {bytes(e["key"]).decode(): e for e in examples}


def _equal(got: dict[str, dict], want: dict[str, dict]) -> None:
    assert sorted(got) == sorted(want)
    for key, example in want.items():
        assert sorted(got[key]) == sorted(example), key
        for name, value in example.items():
            np.testing.assert_array_equal(np.asarray(got[key][name]), np.asarray(value), err_msg=f"{key} {name}")


def test_numpy_stored_order_equals_native(pair: Pair) -> None:
    got = list(read_numpy(pair.root))
    want = list(read_numpy(pair.native))
    assert [bytes(e["key"]) for e in got] == [bytes(e["key"]) for e in want]  # both in key-hash order
    _equal(_by_key(got), _by_key(want))
    assert not pair.deleted & set(_by_key(got))


def _keys(examples) -> list[bytes]:
    return [bytes(e["key"]) for e in examples]


def test_numpy_shuffle_workers_resume_and_batches(pair: Pair) -> None:
    want = _by_key(list(read_numpy(pair.native)))
    shuffled = list(read_numpy(pair.root, shuffle=True, seed=5, shuffle_buffer=16))
    _equal(_by_key(shuffled), want)
    workers = [list(read_numpy(pair.root, num_workers=2, worker_index=index, shuffle=True, seed=4))
               for index in range(2)]
    assert [len(w) for w in workers] == [len(want) // 2] * 2
    resumed = list(read_numpy(pair.root, num_workers=2, worker_index=1, shuffle=True, seed=4, start=7))
    assert _keys(resumed) == _keys(workers[1])[7:]
    batches = list(read_numpy(pair.root, batch_size=32))
    assert [bytes(k) for batch in batches for k in batch["key"]] == _keys(read_numpy(pair.native))
    np.testing.assert_array_equal(np.concatenate([b["emb"] for b in batches]),
                                  np.stack([e["emb"] for e in read_numpy(pair.native)]))


@pytest.mark.parametrize("options", [{}, {"num_parallel_reads": 3}, {"shuffle": True, "seed": 3}],
                         ids=["stored", "interleaved", "shuffled"])
def test_tf_data_equals_native(pair: Pair, options: dict) -> None:
    from beam_tfrecord.reader.tf_data import read_dataset

    def examples(path: str) -> dict[str, dict]:
        out = {}
        for batch in read_dataset(path, batch_size=16, **options):
            for row in range(batch["key"].shape[0]):
                example = {name: value[row].numpy() for name, value in batch.items()}
                out[example["key"].decode()] = example
        return out

    _equal(examples(pair.root), examples(pair.native))
    assert len(read_dataset(pair.root, batch_size=16)) == len(read_dataset(pair.native, batch_size=16))


def test_tf_data_repeated_rows_stay_aligned(pair: Pair) -> None:
    """Column rows read whole (``tf_columns.column_rows``) stay aligned with the base's records across parse batches
    and epochs, deleted rows dropped with their records."""
    from beam_tfrecord.reader.tf_data import read_dataset

    def rows(path: str, batches: int) -> tuple[list[bytes], np.ndarray]:
        got = list(read_dataset(path, batch_size=48, repeat=True).take(batches))
        return [k for b in got for k in b["key"].numpy()], np.concatenate([b["emb"].numpy() for b in got])

    batches = 3 * (COUNT - len(pair.deleted)) // 48 + 1
    keys, emb = rows(pair.root, batches)
    assert (keys, emb.tolist()) == tuple(x.tolist() if isinstance(x, np.ndarray) else x
                                         for x in rows(pair.native, batches))
    assert emb.tolist() == [_emb(k.decode())["emb"] for k in keys]


def test_tf_data_fails_on_a_damaged_column_file(pair: Pair, tmp_path) -> None:
    import shutil

    import tensorflow as tf

    from beam_tfrecord.dataset import load_manifest
    from beam_tfrecord.reader.tf_data import read_dataset

    if load_manifest(pair.root).file_format is not FileFormat.TFRECORD:
        pytest.skip("column files read whole by tf.data are TFRecord files")
    copy = str(tmp_path / "root")
    shutil.copytree(pair.root, copy)
    column = load_manifest(copy).split("train").shards[1].columns[0].filename
    path = f"{version_dir(copy, SECOND)}/{column}"
    with open(path, "r+b") as file:
        file.seek(40)
        byte = file.read(1)
        file.seek(40)
        file.write(bytes([byte[0] ^ 1]))
    with pytest.raises(tf.errors.OpError, match=f"CorruptShardError.*{column}.*CRC32C"):
        list(read_dataset(copy, batch_size=16))


def test_torch_equals_native(pair: Pair) -> None:
    pytest.importorskip("torch")
    from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset

    got = list(TFRecordIterableDataset(pair.root, shuffle=True, seed=2))
    _equal(_by_key(got), _by_key(list(TFRecordIterableDataset(pair.native))))
    ranks = [list(TFRecordIterableDataset(pair.root, rank=rank, world_size=2)) for rank in range(2)]
    assert _keys(ranks[0] + ranks[1]) == _keys(read_numpy(pair.native))[:len(got) // 2 * 2]


def test_mixture_of_joined_and_native(pair: Pair) -> None:
    from beam_tfrecord.reader.tf_data import read_dataset

    mixture = {pair.root: 1.0, pair.native: 1.0}
    keys = [bytes(e["key"]) for e in read_numpy(mixture, seed=1)]
    assert sorted(keys) == sorted(_keys(read_numpy(pair.native)) * 2)
    tf_keys = [k for batch in read_dataset(mixture, batch_size=32, seed=1) for k in batch["key"].numpy().tolist()]
    assert sorted(tf_keys) == sorted(keys)


def test_random_access_joins(pair: Pair) -> None:
    from beam_tfrecord.reader.decode.numpy_decode import RecordDecoder
    from beam_tfrecord.reader.order.random_access import RandomAccessRecords
    from beam_tfrecord.reader.order.read_plan import plan_read

    plan = plan_read(pair.root)
    if not plan.format.random_access:
        pytest.skip("TFRecord has no random access")
    want = _by_key(list(read_numpy(pair.native)))
    records = RandomAccessRecords(plan)
    decoder = RecordDecoder(plan.manifest.schema)
    try:
        found = [decoder.decode(record, shard=path, offset=index)
                 for record, path, index in records.read(np.arange(len(records))[::-1])]
    finally:
        records.close()
    _equal(_by_key(found), want)


def _with_columns_of(manifest, target: int, source: int):
    """The manifest with shard ``target``'s column entries taken from shard ``source`` (its count kept)."""
    shards = list(manifest.split("train").shards)
    moved = tuple(dataclasses.replace(c, num_records=shards[target].num_records) for c in shards[source].columns)
    shards[target] = dataclasses.replace(shards[target], columns=moved)
    split = dataclasses.replace(manifest.split("train"), shards=tuple(shards))
    return dataclasses.replace(manifest, splits=tuple(split if s.name == "train" else s for s in manifest.splits))


def test_verify_checks_column_files(pair: Pair, tmp_path) -> None:
    import shutil

    from beam_tfrecord import storage
    from beam_tfrecord.core.manifest import MANIFEST_FILENAME
    from beam_tfrecord.dataset import load_manifest
    from beam_tfrecord.errors import CorruptShardError
    from beam_tfrecord.verify import verify_dataset

    report = verify_dataset(pair.root)
    assert report.num_column_files == 2 * len(load_manifest(pair.root).shards)
    assert "column files" in report.summary()
    copy = str(tmp_path / "root")
    shutil.copytree(pair.root, copy)
    manifest_path = f"{version_dir(copy, SECOND)}/{MANIFEST_FILENAME}"
    manifest = load_manifest(copy)
    shards = manifest.split("train").shards
    storage.write_bytes_atomic(manifest_path, _with_columns_of(manifest, 0, 1).dumps().encode())
    with pytest.raises(CorruptShardError, match=f"named for another shard.*|{shards[0].filename}") as error:
        verify_dataset(copy)
    assert shards[0].filename in str(error.value) and shards[1].filename in str(error.value)
    # The right name, but another shard's rows in it: counts differ, both named.
    storage.write_bytes_atomic(manifest_path, manifest.dumps().encode())
    column, other = (f"{version_dir(copy, SECOND)}/{s.columns[0].filename}" for s in shards[:2])
    shutil.copyfile(other, column)
    with pytest.raises(CorruptShardError) as error:
        verify_dataset(copy)
    assert shards[0].columns[0].filename in str(error.value) and shards[0].filename in str(error.value)
    with pytest.raises(CorruptShardError, match=shards[0].filename):  # a reader fails too, at the first bad record
        list(read_numpy(copy))


@pytest.fixture(scope="module")
def renamed(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    """A version that adds ``emb``, ``score`` and ``tag``, then renames ``emb`` to ``vec`` and drops ``score`` (no
    file rewritten), and a native build of the final schema."""
    tmp = str(tmp_path_factory.mktemp("renamed"))
    samples = [Sample(f"k{i:04d}", _base(i)) for i in range(COUNT)]
    root, native = f"{tmp}/root", f"{tmp}/native"
    first_version(root, FIRST, samples, BASE, file_format=FileFormat.TFRECORD)
    manifest = add_columns(root, FIRST, SECOND, adds=[(EMB, _emb), (TAG, _tag)], renamed={"vec": "emb"},
                           dropped=["score"])
    assert set(manifest.schema.features) == {"key", "i", "f", "vec", "tag"}
    final = Schema(features={**BASE.features, "vec": EMB["emb"], **TAG})
    write_build(native, [Sample(s.key, {**s.values, "vec": _emb(s.key)["emb"], **_tag(s.key)}) for s in samples],
                final, file_format=FileFormat.TFRECORD)
    return Pair(root, native, frozenset())


def test_renamed_and_dropped_read_as_the_final_schema(renamed: Pair) -> None:
    from beam_tfrecord.reader.tf_data import read_dataset
    from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset

    want = _by_key(list(read_numpy(renamed.native)))
    _equal(_by_key(list(read_numpy(renamed.root))), want)
    _equal(_by_key(list(read_numpy(renamed.root, shuffle=True, seed=1))), want)
    _equal(_by_key(list(TFRecordIterableDataset(renamed.root))), want)
    got = {}
    for batch in read_dataset(renamed.root, batch_size=16):
        for row in range(batch["key"].shape[0]):
            got[batch["key"][row].numpy().decode()] = {name: value[row].numpy() for name, value in batch.items()}
    _equal(got, want)


def test_statistics_inspect_and_outside_readers_see_the_columns(pair: Pair) -> None:
    from beam_tfrecord.dataset import load_manifest, open_dataset
    from beam_tfrecord.describe import describe_manifest
    from beam_tfrecord.errors import NotSelfContainedError
    from beam_tfrecord.interop.self_contained import require_self_contained
    from beam_tfrecord.report.version_statistics import statistics_of

    statistics = statistics_of(pair.root)
    native = statistics_of(pair.native)
    names = {f.name or "/".join(f.path.step) for d in statistics.datasets for f in d.features}
    assert {"emb", "score", "tag"} <= names
    assert [d.num_examples for d in statistics.datasets] == [d.num_examples for d in native.datasets]
    text = describe_manifest(load_manifest(pair.root), pair.root)
    assert "+ column file columns/" in text and "emb: " in text and "[column files]" in text
    with pytest.raises(NotSelfContainedError, match="column files.*compact"):
        require_self_contained(open_dataset(pair.root), reader="tfds")


def test_beam_reads_joined_records(pair: Pair) -> None:
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from beam_tfrecord.beam.read_dataset import ReadTFRecordDataset
    from beam_tfrecord.dataset import load_manifest

    if load_manifest(pair.root).file_format is not FileFormat.TFRECORD:
        pytest.skip("ReadTFRecordDataset reads TFRecord shards")
    want = sorted((bytes(e["key"]), tuple(e["emb"].tolist()), bytes(e["tag"])) for e in read_numpy(pair.native))
    with beam.Pipeline() as pipeline:
        rows = (pipeline | ReadTFRecordDataset(pair.root)
                | beam.Map(lambda e: (bytes(e["key"]), tuple(e["emb"].tolist()), bytes(e["tag"]))))
        assert_that(rows, equal_to(want))


def test_gcs_reads_join_column_files(pair: Pair, fake_gcs, tmp_path) -> None:
    """On gs:// (the emulator): column files fetched and cached as shards are, each reader joins them."""
    from beam_tfrecord.reader.tf_data import read_dataset

    bucket = fake_gcs.create_bucket(f"columns-{FileFormat(load_manifest_of(pair.root).file_format).value}")
    fake_gcs.upload_tree(pair.root, f"{bucket}/root")
    remote = f"{bucket}/root"
    want = _by_key(list(read_numpy(pair.native)))
    _equal(_by_key(list(read_numpy(remote))), want)
    _equal(_by_key(list(read_numpy(remote, shuffle=True, seed=2, cache_dir=str(tmp_path / "cache")))), want)
    keys = [k for batch in read_dataset(remote, batch_size=16) for k in batch["key"].numpy().tolist()]
    assert keys == _keys(read_numpy(pair.native))


@pytest.mark.parametrize("store", ["s3_bucket", "az_container"], ids=["s3", "azure"])
def test_s3_and_azure_reads_join_column_files(pair: Pair, store: str, request: pytest.FixtureRequest) -> None:
    """On s3:// (moto) and Azure (Azurite): NumPy joins the column files, verify checks them (tf.data's remote
    reads: the gs:// test)."""
    import os

    from beam_tfrecord import storage
    from beam_tfrecord.verify import verify_dataset

    if load_manifest_of(pair.root).file_format is not FileFormat.TFRECORD:
        pytest.skip("one format is enough per store")
    remote = f"{request.getfixturevalue(store)}/root"
    for folder, _, files in os.walk(pair.root):
        for name in files:
            local = os.path.join(folder, name)
            storage.copy_file(local, f"{remote}/{os.path.relpath(local, pair.root)}")
    _equal(_by_key(list(read_numpy(remote))), _by_key(list(read_numpy(pair.native))))
    assert verify_dataset(remote).num_column_files == 2 * len(load_manifest_of(remote).shards)
