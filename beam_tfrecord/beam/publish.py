"""Publication: move finished shards into place and write the manifest last.

A crash at any step leaves no manifest, or the old one untouched, never one that lists missing or foreign
shards; running it again is harmless. See docs/performance.md, "How a dataset is written" (atomic output).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from beam_tfrecord import storage
from beam_tfrecord._version import __version__
from beam_tfrecord.beam.shard_statistics import gather_statistics
from beam_tfrecord.beam.shards import ShardFileWriter, ShardTarget
from beam_tfrecord.beam.write_options import WriterChecks, WriterProvenance
from beam_tfrecord.core.cut_planner import plan_dataset
from beam_tfrecord.core.description import DatasetDescription
from beam_tfrecord.core.manifest import DEAD_LETTER_FILENAME, MANIFEST_FILENAME, Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.samples import DeadLetter
from beam_tfrecord.core.sharding import DatasetPlan, balance_spread
from beam_tfrecord.describe import empty_shards_note
from beam_tfrecord.errors import (
    BeamTFRecordError,
    DiskFullError,
    InputsMismatchError,
    PipelineInvariantError,
    RejectedSamplesError,
)
from beam_tfrecord.interop import INTEROP_FILENAMES, write_interop_files
from beam_tfrecord.interop.tfds import DATASET_INFO_FILENAME, tfds_files, write_tfds_files
from beam_tfrecord.statistics import APPENDED_STATISTICS_FILE, STATISTICS_FILE
from beam_tfrecord.versions.commit import VersionCommit
from beam_tfrecord.versions.locations import (
    RECORD_LOCATIONS_FILENAME,
    key_file_name,
    write_key_files,
    write_record_locations,
)

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PublishSettings:
    """What publication needs besides the shards: where, which run, what the dataset is, its checks and records.

    ``provenance.metadata`` grows on the way to publication (counts, reports): ``with_metadata``.
    """

    output_dir: str
    temp_dir: str
    run_id: str
    description: DatasetDescription
    checks: WriterChecks = dataclasses.field(default_factory=WriterChecks)
    provenance: WriterProvenance = dataclasses.field(default_factory=WriterProvenance)

    def with_metadata(self, metadata: Mapping[str, Any]) -> PublishSettings:
        """These settings with ``metadata`` to record instead."""
        return dataclasses.replace(self, provenance=dataclasses.replace(self.provenance, metadata=metadata))


def _read_old_manifest(path: str) -> Manifest | None:
    if not storage.exists(path):
        return None
    try:
        return Manifest.loads(storage.read_bytes(path))
    except BeamTFRecordError as err:
        _LOG.warning("replacing an unreadable manifest at %s (%s); its shards are not cleaned up", path, err)
        return None


def _move_shards(settings: PublishSettings, shard_infos: Sequence[ShardInfo]) -> None:
    """Renames finished shards (and their DALI indexes) into place; one already there from an earlier
    attempt is left as it is."""
    storage.make_dirs(settings.output_dir)  # a temp_dir elsewhere leaves the output directory to make
    sources, destinations = [], []
    for info in shard_infos:
        if info.dali_index is not None:  # moved unless an earlier attempt did (a missing one: rename's error)
            index_source = storage.join(settings.temp_dir, "shards", info.dali_index)
            index_destination = storage.join(settings.output_dir, info.dali_index)
            if storage.exists(index_source) or not storage.exists(index_destination):
                sources.append(index_source)
                destinations.append(index_destination)
        source = storage.join(settings.temp_dir, "shards", info.filename)
        destination = storage.join(settings.output_dir, info.filename)
        if not storage.exists(source) and storage.exists(destination) and \
                storage.crc32c_and_size(destination) == (info.crc32c, info.num_bytes):
            continue
        sources.append(source)
        destinations.append(destination)
    storage.rename(sources, destinations)


def publish(settings: PublishSettings, plan: DatasetPlan | None, shard_infos: Sequence[ShardInfo],
            dead_letters: Sequence[DeadLetter], *, num_dropped: int = 0) -> Manifest:
    """Checks the rejection threshold, then publishes the dataset. Returns the manifest written.

    ``plan`` is None when no record was encoded (the plan of nothing is made here). The crash-safe order:
    the old manifest is removed (the directory no longer looks finished); shards (and DALI indexes) are
    renamed in; stale files of the old dataset go; then the dead letters, the interop views, the manifest
    and TFDS's metadata (``dataset_info.json`` last), each to a temporary name and renamed. A full disk
    meanwhile (``DiskFullError``) removes the manifest, then the shards just moved in. Run again, a manifest
    carrying this run's id is returned as it is, and a shard already in place (same size and CRC32C) stays.
    """
    manifest_path = storage.join(settings.output_dir, MANIFEST_FILENAME)
    old = _read_old_manifest(manifest_path)
    if old is not None and old.run_id == settings.run_id:  # this run published already; this is a re-execution
        if old.self_contained:  # a crash may have come between the manifest and dataset_info.json
            write_tfds_files(settings.output_dir, old)
        return old
    rejected = sorted(dead_letters, key=lambda d: (d.key, d.stage.value, d.message))
    num_inputs = sum(s.num_records for s in shard_infos) + len(rejected) + num_dropped  # dropped: duplicates=drop
    _refuse_other_inputs(settings, num_inputs)
    # A version's fraction: of its inputs, the records it keeps of its base included.
    kept = settings.provenance.commit.kept_records if settings.provenance.commit is not None else 0
    _refuse_too_many_rejected(settings, rejected, num_inputs + kept)
    if plan is None:
        plan = plan_dataset(np.zeros(0, np.uint64), np.zeros(0, np.int64), settings.description.splits,
                            settings.description.sharding)
    shard_infos = [*shard_infos, *_write_empty_shards(settings, plan)]
    by_split = _shards_by_split(plan, shard_infos)
    written = _new_manifest(settings, plan, by_split, num_inputs=num_inputs, num_rejected=len(rejected),
                            num_dropped=num_dropped)
    commit = settings.provenance.commit
    manifest = written if commit is None else commit.merge(written)  # a version's: with the shards it keeps
    try:
        listed = {shard.filename for shard in manifest.shards if shard.stored_in is None}  # not a merge's empty ones
        _replace_files(settings, old, [s for s in shard_infos if s.filename in listed],
                       rejected)  # from its first step on, no manifest is in place
        # croissant.json (a self-contained version only: interop.croissant's rule), schema.pbtxt: before the manifest
        write_interop_files(settings.output_dir, manifest)
        if written.statistics is not None:  # of the written records: the version's, or what it appends
            statistics = gather_statistics(storage.join(settings.temp_dir, "shards"), settings.description.schema,
                                           [split.name for split in written.splits])
            storage.write_bytes_atomic(storage.join(settings.output_dir, manifest.statistics or
                                                    APPENDED_STATISTICS_FILE),
                                       statistics.SerializeToString(deterministic=True))
        if commit is not None:
            _write_locations(settings.output_dir, commit, written, rejected)
        storage.write_bytes_atomic(manifest_path, manifest.dumps().encode("utf-8"))  # the dataset is published
        if manifest.self_contained:
            write_tfds_files(settings.output_dir, manifest)
    except DiskFullError:
        # Unpublished again (manifest first), and the shards moved in would only keep the space a re-run needs.
        storage.delete_if_exists([manifest_path, *(storage.join(settings.output_dir, name) for name in
                                                   [*tfds_files(manifest), *INTEROP_FILENAMES, STATISTICS_FILE,
                                                    APPENDED_STATISTICS_FILE, RECORD_LOCATIONS_FILENAME,
                                                    DEAD_LETTER_FILENAME,
                                                    *_shard_files(shard_infos),
                                                    *(key_file_name(s.filename) for s in shard_infos)])])
        storage.delete_tree(settings.temp_dir)
        raise
    for split in manifest.splits:
        note = empty_shards_note(split)
        if note is not None:
            _LOG.warning("%s: split %s: %s", settings.output_dir, split.name, note)
    storage.delete_tree(settings.temp_dir)
    return manifest


def _write_locations(output_dir: str, commit: VersionCommit, written: Manifest,
                     rejected: Sequence[DeadLetter]) -> None:
    """The version's ``record_locations.json``; none (the next refresh rewrites every split) when the written
    records cannot be placed by key (equal key hashes, dropped duplicates)."""
    locations = commit.locations(written, [d.key for d in rejected])
    if locations is None:
        _LOG.warning("%s: its records cannot all be placed by key; the next refresh rewrites it", output_dir)
        storage.delete_if_exists([storage.join(output_dir, RECORD_LOCATIONS_FILENAME)])
    else:
        write_record_locations(output_dir, locations)
        write_key_files(output_dir, commit.version_id, locations)  # each written shard's keys: an add's join


def _dead_letter_lines(rejected: Sequence[DeadLetter]) -> bytes:
    """The dead-letter file: one JSON object per rejected sample, in the order given."""
    return "".join(json.dumps(d.to_json(), sort_keys=True) + "\n" for d in rejected).encode("utf-8")


def _refuse_other_inputs(settings: PublishSettings, num_inputs: int) -> None:
    """Raises InputsMismatchError when the workers read another number of inputs than the caller
    planned. The temporary files go; the old dataset, if any, stays."""
    planned = settings.provenance.expected_inputs
    if planned is not None and planned != num_inputs:
        storage.delete_tree(settings.temp_dir)
        missing = planned - num_inputs
        detail = f" ({missing} missing)" if missing > 0 else f" ({-missing} more than planned)"
        raise InputsMismatchError(settings.output_dir, planned, num_inputs, detail)


def _refuse_too_many_rejected(settings: PublishSettings, rejected: Sequence[DeadLetter], num_inputs: int) -> None:
    """Raises RejectedSamplesError (with every reason in a run's dead-letter file) over the threshold,
    or when every input was rejected: a dataset of 0 records is never published from inputs, whatever
    ``max_rejected_fraction`` allows (a folder emptied under a running job is not a dataset).

    Nothing is published then: the old dataset, if any, stays as it was; the temporary files go.
    """
    if rejected and (len(rejected) > settings.checks.max_rejected_fraction * num_inputs or len(rejected) == num_inputs):
        path = storage.join(settings.output_dir, f"dead_letters-{settings.run_id}.jsonl")
        storage.write_bytes_atomic(path, _dead_letter_lines(rejected))
        storage.delete_tree(settings.temp_dir)
        raise RejectedSamplesError(len(rejected), num_inputs, settings.checks.max_rejected_fraction, path,
                                   [f"{d.key} [{d.stage.value}] {d.message}" for d in rejected[:5]],
                                   option=settings.checks.max_rejected_option)


def _write_empty_shards(settings: PublishSettings, plan: DatasetPlan) -> list[ShardInfo]:
    """Writes the shards planned empty (``DatasetPlan.empty_shards``) among the run's shards; no
    pipeline stage writes them, as no record goes to them (and empty input gives no plan at all)."""
    if not plan.empty_shards:
        return []
    writer = ShardFileWriter(settings.description.schema, settings.description.compression, {}, direct_io=False,
                             file_format=settings.description.file_format, dali_index=settings.description.dali_index)
    shards_dir = storage.join(settings.temp_dir, "shards")
    storage.make_dirs(shards_dir)
    description = settings.description
    return [writer.write(ShardTarget.of(spec, dataset_name=description.name, compression=description.compression,
                                        file_format=description.file_format, shards_dir=shards_dir), ())[0]
            for spec in plan.empty_shards]


def _shards_by_split(plan: DatasetPlan, shard_infos: Sequence[ShardInfo]) -> dict[str, list[ShardInfo]]:
    """Each split's written shards in index order, once checked to be exactly the planned ones."""
    planned = {(s.split, s.index) for s in (*plan.shards, *plan.empty_shards)}
    if planned != {(s.split, s.index) for s in shard_infos}:
        raise PipelineInvariantError("publish", f"shards written {sorted((s.split, s.index) for s in shard_infos)} "
                                                f"differ from the plan {sorted(planned)}")
    by_split: dict[str, list[ShardInfo]] = {}
    for info in sorted(shard_infos, key=lambda s: (s.split, s.index)):
        by_split.setdefault(info.split, []).append(info)
    return by_split


def _replace_files(settings: PublishSettings, old: Manifest | None, shard_infos: Sequence[ShardInfo],
                   rejected: Sequence[DeadLetter]) -> None:
    """Unpublishes the old dataset, moves the new shards in, deletes the old one's stale files and
    writes the dead-letter file: everything but the manifest and TFDS's metadata."""
    out = settings.output_dir
    # Unpublish first: from here on nothing looks finished, to this project's readers, to TFDS or to others.
    storage.delete_if_exists([storage.join(out, name)
                              for name in (MANIFEST_FILENAME, DATASET_INFO_FILENAME, *INTEROP_FILENAMES,
                                           STATISTICS_FILE, APPENDED_STATISTICS_FILE)])
    _move_shards(settings, shard_infos)
    if old is not None:
        stale = set(_shard_files(old.shards)) - set(_shard_files(shard_infos))
        if old.dead_letters and not rejected:
            stale.add(old.dead_letters)
        stale |= set(tfds_files(old))
        storage.delete_if_exists([storage.join(out, n) for n in sorted(stale)])
    if rejected:
        storage.write_bytes_atomic(storage.join(out, DEAD_LETTER_FILENAME), _dead_letter_lines(rejected))


def _shard_files(shard_infos: Sequence[ShardInfo]) -> list[str]:
    """The file names of shards and of their DALI indexes."""
    return [name for s in shard_infos for name in (s.filename, s.dali_index) if name is not None]


def _new_manifest(settings: PublishSettings, plan: DatasetPlan, by_split: Mapping[str, Sequence[ShardInfo]], *,
                  num_inputs: int, num_rejected: int, num_dropped: int = 0) -> Manifest:
    """The manifest of the shards written (every planned split, empty ones too), dated now."""
    sharding = settings.description.sharding
    return Manifest(
        dataset_name=settings.description.name,
        schema=settings.description.schema,
        splits=tuple(SplitInfo(name=split.name, shards=tuple(by_split.get(split.name, [])),
                               balance_spread=round(balance_spread(
                                   [s.num_record_bytes for s in by_split.get(split.name, []) if s.num_records]), 6))
                     for split in plan.splits),
        compression=settings.description.compression,
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        tool_version=__version__,
        command=tuple(settings.provenance.command),
        num_inputs=num_inputs,
        num_rejected=num_rejected,
        dead_letters=DEAD_LETTER_FILENAME if num_rejected else None,
        salt=settings.description.salt,
        sharding={"target_shard_bytes": sharding.target_shard_bytes, "max_shard_bytes": sharding.cap,
                  "num_shards": sharding.num_shards},
        metadata=settings.provenance.metadata,
        run_id=settings.run_id,
        file_format=settings.description.file_format,
        num_dropped=num_dropped,
        statistics=STATISTICS_FILE if settings.description.statistics else None,
    )
