"""Shards planned empty (num_shards larger than the records fill) on gs://: written at publication
through the same storage layer, listed, verified and read as no record (issue 30, item 3); a Beam prefix on gs://."""

from __future__ import annotations

import apache_beam as beam
import pytest

from beam_tfrecord import WriteBalancedTFRecord, load_manifest, read_numpy, storage, verify_dataset
from beam_tfrecord.core import proto
from beam_tfrecord.errors import OutputPathError
from beam_tfrecord.interop import INTEROP_FILENAMES
from beam_tfrecord.interop.tfds import tfds_files


def _example(i: int) -> bytes:
    example = proto.Example()
    example.features.feature["id"].int64_list.value.append(i)
    return example.SerializeToString(deterministic=True)


def test_empty_shards_are_published_on_gcs_and_read_as_no_record(gcs_bucket: str) -> None:
    output = f"{gcs_bucket}/datasets/few"
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create([_example(i) for i in range(2)])
             | WriteBalancedTFRecord(output_dir=output, num_shards=4))
    manifest = load_manifest(output)
    assert sorted(s.num_records for s in manifest.shards) == [0, 0, 1, 1]
    listed = {p for p, _ in storage.list_files(f"{output}/**")}
    published = ["manifest.json", "statistics.pb", *tfds_files(manifest), *INTEROP_FILENAMES,
                 *(s.filename for s in manifest.shards)]
    assert listed == {f"{output}/{name}" for name in published}  # the empty ones too, no temporary file left
    assert verify_dataset(output).num_records == 2
    assert sorted(int(e["id"]) for e in read_numpy(output)) == [0, 1]


def test_a_beam_prefix_on_gcs_gets_beams_names_and_refuses_a_prefix_under_an_object(gcs_bucket: str) -> None:
    prefix = f"{gcs_bucket}/beam/result"
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create([_example(i) for i in range(5)])
             | WriteBalancedTFRecord(prefix, num_shards=2, file_name_suffix=".tfrecord"))
    listed = {p for p, _ in storage.list_files(f"{gcs_bucket}/beam/**")}
    assert listed == {f"{prefix}-0000{i}-of-00002.tfrecord" for i in range(2)} | {
        f"{gcs_bucket}/beam/.result.beam-tfrecord/{name}" for name in ("manifest.json", "statistics.pb")
    }  # no staging or temporary object left
    assert sorted(int(e["id"]) for e in read_numpy(prefix)) == list(range(5))
    assert verify_dataset(prefix).num_records == 5
    with pytest.raises(OutputPathError, match="is a file"):
        WriteBalancedTFRecord(f"{prefix}-00000-of-00002.tfrecord/part")  # an object, where a folder would be
    storage.write_bytes_atomic(f"{prefix}-00000-of-00009.tfrecord", b"another job's")
    with pytest.raises(OutputPathError, match="another job wrote"):
        WriteBalancedTFRecord(prefix, num_shards=2, file_name_suffix=".tfrecord")
