"""One fired pane of a streaming write into a versioned root, committed as one append version.

Invariant: LATEST moves (last) only to a complete version that lists every shard of the version before it
(``ShardInfo.stored_in``: never copied) and the pane's new shards, balanced by the batch build's planner; the
version's ``metadata.streaming.panes`` lists every pane committed so far, so a pane LATEST lists already commits
nothing (a retried bundle, a restarted job). A killed commit leaves at most a version without a manifest, which
nothing reads. See docs/streaming.md, "Into a versioned root".
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.beam.pane_commit import commit_lease, dead_letter_lines, split_rejected, write_planned
from beam_tfrecord.beam.pane_manifest import STREAMING_KEY, PaneId, PaneShards, committed_panes, with_pane
from beam_tfrecord.beam.shards import ShardFileWriter, ShardTarget
from beam_tfrecord.beam.write_options import VersionRetention
from beam_tfrecord.core.description import DatasetDescription
from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.core.manifest import DEAD_LETTER_FILENAME, MANIFEST_FILENAME, Manifest
from beam_tfrecord.core.runs import make_record_entry
from beam_tfrecord.core.samples import DeadLetter, Sample
from beam_tfrecord.core.sharding import ShardSpec
from beam_tfrecord.dataset import load_manifest, read_latest, split_path, version_dir
from beam_tfrecord.encoding.records import FeatureTransform, RecordBuilder
from beam_tfrecord.errors import RejectedSamplesError
from beam_tfrecord.versions.commit import WRITER_KEY, VersionCommit, writer_metadata
from beam_tfrecord.versions.input_index import (
    INPUT_INDEX_FILENAME,
    IndexedInput,
    InputIndex,
    encoding_digest,
    read_input_index,
    write_input_index,
)
from beam_tfrecord.versions.locations import RECORD_LOCATIONS_FILENAME, read_record_locations, write_record_locations
from beam_tfrecord.versions.refresh import commit_version, new_version_id
from beam_tfrecord.versions.retention import apply_retention, list_versions

STREAM_INPUT = "stream:"  # the "path" of a streamed sample in a version's input index (it has no file)


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
        retention: the versions kept: retention runs after each pane's version, under the commit lease.
    """

    root: str
    description: DatasetDescription
    feature_transforms: Mapping[str, FeatureTransform]
    max_rejected_fraction: float
    metadata: Mapping[str, Any]
    command: tuple[str, ...]
    retention: VersionRetention = dataclasses.field(default_factory=VersionRetention)


def _encoded(samples: Iterable[Sample], settings: VersionPaneSettings
             ) -> tuple[list[tuple[IndexedInput, bytes]], list[DeadLetter]]:
    """Each sample's input-index entry (its token: its record's digest) and record entry, or its dead letter."""
    builder = RecordBuilder(settings.description.schema, settings.feature_transforms)

    def entry(sample: Sample) -> tuple[IndexedInput, bytes] | DeadLetter:
        record = builder.build(sample)
        if isinstance(record, DeadLetter):
            return record
        indexed = IndexedInput(sample.key, STREAM_INPUT, hashlib.sha256(record).hexdigest()[:32])
        return indexed, make_record_entry(key_hash(sample.key, settings.description.salt), record)
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
        encoded, rejected = _encoded(samples, settings)
        num_inputs = len(encoded) + len(rejected)
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
        shards = write_planned([e for _, e in encoded], description, writer, target)
        metadata = {**settings.metadata, WRITER_KEY: writer_metadata(
            description.splits, statistics=description.statistics, dali_index=description.dali_index)}
        written = with_pane(None, PaneShards(pane, shards, num_inputs, [d.to_json() for d in rejected], None),
                            description=description, naming=None, metadata=metadata,
                            command=settings.command, empty_schema=description.schema)
        base_dir = version_dir(root, latest) if latest is not None else None
        manifest, commit = _appended(written, base, base_dir, version_id, [i.key for i, _ in encoded])
        _write_lending_files(directory, settings, commit, written, [i for i, _ in encoded], rejected, base_dir)
        if rejected:
            storage.write_bytes_atomic(storage.join(directory, DEAD_LETTER_FILENAME),
                                       dead_letter_lines(d.to_json() for d in rejected))
        storage.write_bytes_atomic(storage.join(directory, MANIFEST_FILENAME), manifest.dumps().encode("utf-8"))
        commit_version(root, version_id)  # LATEST moves: the pane is out
        apply_retention(root, settings.retention.keep_versions, min_version_age=settings.retention.min_version_age)
    return manifest


def _appended(written: Manifest, base: Manifest | None, base_dir: str | None, version_id: str,
              keys: list[str]) -> tuple[Manifest, VersionCommit]:
    """The version's manifest: every shard of ``base`` (stored where it is), then the pane's; every pane listed.
    With the commit that made it (what it keeps, with the base's record locations)."""
    latest = None if base_dir is None else split_path(base_dir)[1]
    kept = {} if base is None else {split.name: tuple(dataclasses.replace(s, stored_in=s.stored_in or latest)
                                                      for s in split.shards) for split in base.splits}
    locations = read_record_locations(base_dir) if base_dir is not None else None
    commit = VersionCommit(version_id, tuple(keys), base_version=latest, kept=kept,
                           kept_locations=locations.by_key if locations is not None else {})
    merged = commit.merge(written)
    pane = dict(written.metadata[STREAMING_KEY]["panes"][0])  # where its shards are, after the kept ones
    pane["first_shard"] = {split.name: len(kept.get(split.name, ())) for split in merged.splits}
    pane["num_shards"] = {split.name: len(split.shards) - len(kept.get(split.name, ())) for split in merged.splits}
    panes = [*committed_panes(base).values(), pane]
    return dataclasses.replace(merged, metadata={**merged.metadata, STREAMING_KEY: {"summary": None, "panes": panes}}
                               ), commit


def _write_lending_files(directory: str, settings: VersionPaneSettings, commit: VersionCommit, written: Manifest,
                         indexed: list[IndexedInput], rejected: list[DeadLetter], base_dir: str | None) -> None:
    """``record_locations.json`` and ``input_index.json`` (every pane's samples are the inputs): what lets
    ``compact`` read the version's records by key. Neither when the base lends nothing (then nor does this one)."""
    base_index = None
    if base_dir is not None:
        if not all(storage.exists(storage.join(base_dir, name)) for name in (RECORD_LOCATIONS_FILENAME,
                                                                             INPUT_INDEX_FILENAME)):
            return
        base_index = read_input_index(base_dir)
    locations = commit.locations(written, [d.key for d in rejected])
    if locations is None:  # equal key hashes: the records cannot be placed by key
        return
    description = settings.description
    inputs = {i.key: i for i in (*(base_index.inputs if base_index is not None else ()), *indexed)}
    write_record_locations(directory, locations)
    write_input_index(directory, InputIndex(encoding_digest(
        schema_json=description.schema.to_json(), transforms=settings.feature_transforms, salt=description.salt),
        tuple(inputs[key] for key in sorted(inputs))))
