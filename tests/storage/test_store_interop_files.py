"""On every object store: DALI indexes written beside the shards, moved with them at publication and
checked by verify; croissant.json and schema.pbtxt beside the manifest; ArrayRecord shards read back."""

from __future__ import annotations

import json

import apache_beam as beam
import pytest

from beam_tfrecord import (
    DatasetDescription,
    DType,
    Scalar,
    Schema,
    ShardingConfig,
    WriteTFRecordDataset,
    load_manifest,
    read_numpy,
    storage,
    verify_dataset,
)
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.interop import INTEROP_FILENAMES, interop_files
from beam_tfrecord.interop.tfds import tfds_files

SCHEMA = Schema({"id": Scalar(DType.INT64), "text": Scalar(DType.STRING)})
BUCKETS = {"gs": "gcs_bucket", "s3": "s3_bucket", "az": "az_container"}  # a fresh bucket's fixture per store


@pytest.fixture(params=list(BUCKETS))
def bucket(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(BUCKETS[request.param]))


def _write(output: str, count: int, *, dali_index: bool = False, file_format: FileFormat = FileFormat.TFRECORD,
           ) -> None:
    with beam.Pipeline() as pipeline:
        _ = (pipeline
             | beam.Create([Sample(f"k{i}", {"id": i, "text": "x" * (i % 50)}) for i in range(count)])
             | WriteTFRecordDataset(output, description=DatasetDescription(
                 schema=SCHEMA, sharding=ShardingConfig(target_shard_bytes=4_000), dali_index=dali_index,
                 file_format=file_format)))


def test_dali_indexes_and_views_are_published_on_the_store(bucket: str) -> None:
    output = f"{bucket}/datasets/dali"
    _write(output, 300, dali_index=True)
    manifest = load_manifest(output)
    assert len(manifest.shards) > 2 and verify_dataset(output).num_records == 300  # indexes checked too
    listed = {p for p, _ in storage.list_files(f"{output}/**")}
    published = ["manifest.json", *tfds_files(manifest), *INTEROP_FILENAMES, *filter(None, [manifest.statistics]),
                 *(name for s in manifest.shards for name in (s.filename, s.dali_index))]
    assert listed == {f"{output}/{name}" for name in published}  # no temporary file left
    views = interop_files(manifest)
    assert {name: storage.read_bytes(f"{output}/{name}") for name in INTEROP_FILENAMES} == views
    assert json.loads(views["croissant.json"])["name"] == "data"
    index = storage.read_bytes(f"{output}/{manifest.shards[0].dali_index}")
    assert index.count(b"\n") == manifest.shards[0].num_records  # one "offset size" line per record


@pytest.mark.parametrize("bucket", ["s3", "az"], indirect=True)  # gs://: tests/remote_reads/test_remote_reads.py
def test_array_record_shards_are_read_back_from_the_store(bucket: str) -> None:
    output = f"{bucket}/datasets/array_record"
    _write(output, 120, file_format=FileFormat.ARRAY_RECORD)
    manifest = load_manifest(output)
    assert manifest.file_format is FileFormat.ARRAY_RECORD and len(manifest.shards) > 1
    assert verify_dataset(output).num_records == 120
    read = sorted((int(ex["id"]), bytes(ex["text"]).decode()) for ex in read_numpy(output))
    assert read == [(i, "x" * (i % 50)) for i in range(120)]
