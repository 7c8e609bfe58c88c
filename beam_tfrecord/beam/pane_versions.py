"""One fired pane of a streaming write into a versioned root, committed as one append version.

Invariant: LATEST moves (last) only to a complete version that lists every shard of the version before it
(``ShardInfo.stored_in``: never copied) and the pane's new shards, balanced by the batch build's planner; the
version's ``metadata.streaming.panes`` lists every pane committed so far, so a pane LATEST lists already commits
nothing (a retried bundle, a restarted job). A killed commit leaves at most a version without a manifest, which
nothing reads. See docs/streaming.md, "Into a versioned root".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.beam.pane_commit import commit_lease, dead_letter_lines, split_rejected, write_planned
from beam_tfrecord.beam.pane_manifest import STREAMING_KEY, PaneId, PaneShards, committed_panes, with_pane
from beam_tfrecord.beam.shards import ShardFileWriter, ShardTarget
from beam_tfrecord.core.description import DatasetDescription
from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.core.manifest import DEAD_LETTER_FILENAME, MANIFEST_FILENAME, Manifest
from beam_tfrecord.core.runs import make_record_entry
from beam_tfrecord.core.samples import DeadLetter, Sample
from beam_tfrecord.core.sharding import ShardSpec
from beam_tfrecord.dataset import load_manifest, read_latest, version_dir
from beam_tfrecord.encoding.records import FeatureTransform, RecordBuilder
from beam_tfrecord.errors import RejectedSamplesError
from beam_tfrecord.versions.commit import VersionCommit
from beam_tfrecord.versions.refresh import commit_version, new_version_id
from beam_tfrecord.versions.retention import list_versions


@dataclasses.dataclass(frozen=True)
class VersionPaneSettings:
    """What every pane of one streaming write into a versioned root is committed with.

    Attributes:
        root: the dataset root (``ROOT/LATEST``, ``ROOT/versions/<id>/``).
        description: the dataset: schema, name, splits, sharding, compression, format, salt.
        feature_transforms: per-feature functions applied before validation.
        max_rejected_fraction: a pane rejecting more of its samples than this fails, and publishes nothing.
        metadata: facts every version's manifest records.
        command: what wrote the dataset.
    """

    root: str
    description: DatasetDescription
    feature_transforms: Mapping[str, FeatureTransform]
    max_rejected_fraction: float
    metadata: Mapping[str, Any]
    command: tuple[str, ...]


def _encoded(samples: Iterable[Sample], settings: VersionPaneSettings) -> tuple[list[bytes], list[DeadLetter]]:
    builder = RecordBuilder(settings.description.schema, settings.feature_transforms)

    def entry(sample: Sample) -> bytes | DeadLetter:
        record = builder.build(sample)
        return record if isinstance(record, DeadLetter) else \
            make_record_entry(key_hash(sample.key, settings.description.salt), record)
    return split_rejected(map(entry, samples))


def commit_pane_version(pane: PaneId, samples: Iterable[Sample], settings: VersionPaneSettings) -> Manifest:
    """Commits one pane as an append version of ``settings.root`` and moves LATEST to it; a pane LATEST lists
    already is a no-op. Returns the manifest LATEST names after it.

    Raises:
        RejectedSamplesError: when the pane rejects more of its samples than ``max_rejected_fraction``.
    """
    root, description = settings.root, settings.description
    with commit_lease(root, pane):
        latest = read_latest(root)
        base = load_manifest(version_dir(root, latest)) if latest is not None else None
        if pane.key in committed_panes(base):
            return base  # type: ignore[return-value]
        entries, rejected = _encoded(samples, settings)
        num_inputs = len(entries) + len(rejected)
        listing = list_versions(root)  # after every version, a killed commit's incomplete one too
        version_id = new_version_id(after=[*listing.complete, *listing.incomplete, *([latest] if latest else [])])
        directory = version_dir(root, version_id)
        if rejected and len(rejected) > settings.max_rejected_fraction * num_inputs:
            path = storage.join(root, f"dead_letters-{version_id}.jsonl")
            storage.write_bytes_atomic(path, dead_letter_lines(d.to_json() for d in rejected))
            raise RejectedSamplesError(len(rejected), num_inputs, settings.max_rejected_fraction, path,
                                       [f"{d.key} [{d.stage.value}] {d.message}" for d in rejected[:5]])
        storage.make_dirs(directory)
        writer = ShardFileWriter(description.schema, description.compression, settings.feature_transforms,
                                 direct_io=False, file_format=description.file_format)

        def target(spec: ShardSpec) -> ShardTarget:
            return ShardTarget.of(spec, dataset_name=description.name, compression=description.compression,
                                  file_format=description.file_format, shards_dir=directory)
        shards = write_planned(entries, description, writer, target)
        written = with_pane(None, PaneShards(pane, shards, num_inputs, [d.to_json() for d in rejected], None),
                            description=description, naming=None, metadata=settings.metadata,
                            command=settings.command, empty_schema=description.schema)
        manifest = _appended(written, base, latest, version_id)
        if rejected:
            storage.write_bytes_atomic(storage.join(directory, DEAD_LETTER_FILENAME),
                                       dead_letter_lines(d.to_json() for d in rejected))
        storage.write_bytes_atomic(storage.join(directory, MANIFEST_FILENAME), manifest.dumps().encode("utf-8"))
        commit_version(root, version_id)  # LATEST moves: the pane is out
    return manifest


def _appended(written: Manifest, base: Manifest | None, latest: str | None, version_id: str) -> Manifest:
    """The version's manifest: every shard of ``base`` (stored where it is), then the pane's; every pane listed."""
    kept = {} if base is None else {split.name: tuple(dataclasses.replace(s, stored_in=s.stored_in or latest)
                                                      for s in split.shards) for split in base.splits}
    merged = VersionCommit(version_id, (), base_version=latest, kept=kept).merge(written)
    pane = dict(written.metadata[STREAMING_KEY]["panes"][0])  # where its shards are, after the kept ones
    pane["first_shard"] = {split.name: len(kept.get(split.name, ())) for split in merged.splits}
    pane["num_shards"] = {split.name: len(split.shards) - len(kept.get(split.name, ())) for split in merged.splits}
    panes = [*committed_panes(base).values(), pane]
    return dataclasses.replace(merged, metadata={**merged.metadata, STREAMING_KEY: {"summary": None, "panes": panes}})

