"""On gs://: DALI indexes written beside the shards through the storage layer, moved with them at
publication and checked by verify; croissant.json and schema.pbtxt published beside the manifest."""

from __future__ import annotations

import json

import apache_beam as beam

from beam_tfrecord import (
    DType,
    Scalar,
    Schema,
    ShardingConfig,
    WriteTFRecordDataset,
    load_manifest,
    storage,
    verify_dataset,
)
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.tfds_info import tfds_files
from beam_tfrecord.interop import INTEROP_FILENAMES, interop_files

SCHEMA = Schema({"id": Scalar(DType.INT64), "text": Scalar(DType.STRING)})


def test_dali_indexes_and_views_are_published_on_gcs(gcs_bucket: str) -> None:
    output = f"{gcs_bucket}/datasets/dali"
    with beam.Pipeline() as pipeline:
        _ = (pipeline
             | beam.Create([Sample(f"k{i}", {"id": i, "text": "x" * (i % 50)}) for i in range(300)])
             | WriteTFRecordDataset(output, schema=SCHEMA, dali_index=True,
                                    sharding=ShardingConfig(target_shard_bytes=4_000)))
    manifest = load_manifest(output)
    assert len(manifest.shards) > 2 and verify_dataset(output).num_records == 300  # indexes checked too
    listed = {p for p, _ in storage.list_files(f"{output}/**")}
    published = ["manifest.json", *tfds_files(manifest), *INTEROP_FILENAMES,
                 *(name for s in manifest.shards for name in (s.filename, s.dali_index))]
    assert listed == {f"{output}/{name}" for name in published}  # no temporary file left
    views = interop_files(manifest)
    assert {name: storage.read_bytes(f"{output}/{name}") for name in INTEROP_FILENAMES} == views
    assert json.loads(views["croissant.json"])["name"] == "data"
