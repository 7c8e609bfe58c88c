"""Retention of a root fed by a stream (issue 62): after each pane's version, the versions beyond
``VersionRetention`` are retired as after a refresh; every record still reads back once, and the root still compacts
into the very shards of a full build. (``docs/streaming.md``, "Into a versioned root".)"""

from __future__ import annotations

import datetime
from pathlib import Path

import apache_beam as beam
import pytest
from streams import PER_PANE, SCHEMA, assert_compacts_to_a_full_build, root_samples, root_stream

from beam_tfrecord import VersionRetention, WriterProvenance, WriteTFRecordDataset, read_numpy
from beam_tfrecord.core.manifest import MANIFEST_FILENAME
from beam_tfrecord.errors import WriterOptionError
from beam_tfrecord.versions.retention import list_versions

PANES = 20
KEEP = VersionRetention(keep_versions=3, min_version_age=datetime.timedelta(0))


def _metadata_bytes(root: str) -> int:
    """Bytes of every version's own files besides shards (manifests, indexes): what each pane adds, growing."""
    return sum(p.stat().st_size for p in Path(root, "versions").rglob("*.json"))


def test_a_streamed_root_keeps_the_versions_retention_keeps_and_compacts_to_a_full_build(tmp_path):
    kept, unbounded = root_stream(str(tmp_path / "kept"), KEEP), root_stream(str(tmp_path / "all"))
    for n in range(PANES):
        kept.commit(n)
        unbounded.commit(n)  # the default: every version younger than 24 h stays
    listing = list_versions(kept.path)
    assert len(listing.complete) == KEEP.keep_versions and len(list_versions(unbounded.path).complete) == PANES
    assert listing.retired and not listing.incomplete  # retired: their shards, which LATEST lists, stay
    assert not any(Path(kept.path, "versions", v, MANIFEST_FILENAME).exists() for v in listing.retired)
    # kept: the 3 newest versions' (each lists all panes so far); every version's grows as PANES squared
    assert _metadata_bytes(kept.path) * 3 < _metadata_bytes(unbounded.path)
    assert sorted(int(e["id"]) for e in read_numpy(kept.path)) == list(range(PANES * PER_PANE))
    samples = [sample for n in range(PANES) for sample in root_samples(n)]
    assert_compacts_to_a_full_build(kept.path, samples, str(tmp_path / "full"))


def test_retention_is_checked_and_refused_with_a_bounded_input(tmp_path):
    with pytest.raises(WriterOptionError, match="^retention.keep_versions must be an integer >= 1, got 0"):
        VersionRetention(keep_versions=0)
    with pytest.raises(WriterOptionError, match="^retention.min_version_age must be a timedelta"):
        VersionRetention(min_version_age=3600)
    with pytest.raises(WriterOptionError, match="^provenance.retention: keeps the versions an unbounded input's"), \
            beam.Pipeline() as pipeline:
        _ = pipeline | beam.Create(root_samples(0)) | WriteTFRecordDataset(str(tmp_path / "d"), schema=SCHEMA,
                                                                           provenance=WriterProvenance(retention=KEEP))
