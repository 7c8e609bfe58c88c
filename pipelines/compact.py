"""Compaction of a versioned root: ``beam-tfrecord compact --dataset_root ROOT`` (``python -m pipelines.compact``).

Reads the live records of LATEST (its own shards and those it shares with earlier versions, deleted records
skipped) with their keys, writes them as a full build would, and publishes the result as a new version: its
shards are byte-identical to a full build of the same inputs, it lists no other version's shard and no deletion,
so every outside reader (TFDS, DALI, Ray, Croissant, a glob) can read it. Retention then frees what only older
versions referenced. See docs/operations.md, "Scheduled refresh: versioned dataset roots".
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.beam.write import WriteTFRecordDataset
from beam_tfrecord.beam.write_options import WriterProvenance
from beam_tfrecord.dataset import load_manifest, read_latest, version_dir
from beam_tfrecord.errors import RefreshError
from beam_tfrecord.job import lease
from beam_tfrecord.job.process_exit import run_and_exit
from beam_tfrecord.sources.kept_records import ReadKeptRecords
from beam_tfrecord.versions.add_features import indexes_version
from beam_tfrecord.versions.append import CompactionPolicy, append_plan_from_root
from beam_tfrecord.versions.commit import COMMIT_KEY, description_of
from beam_tfrecord.versions.incremental import REFRESH_KEY
from beam_tfrecord.versions.input_index import read_input_index, write_input_index
from beam_tfrecord.versions.refresh import (
    list_versions,
    new_version_id,
    publish_version,
)
from pipelines.common import job_pipeline, parse_job, quiet_logging, run_as_command
from pipelines.job_options import JobCommand
from pipelines.refresh_driver import RefreshOptions, min_version_age

PROG = "python -m pipelines.compact"


# The root and retention options are refresh's (Beam registers an option once, for every job); compact takes
# those, and refuses what only a refresh does.
COMMAND = JobCommand(PROG, "Rewrite LATEST of a versioned root into balanced shards of its own: byte-identical to a "
                           "full build, readable by every outside reader.", (("compact", RefreshOptions),),
                     refused=(("append", "compact rewrites every split"), ("incremental", "compact reads no input"),
                              ("max_small_shards", "compact rewrites every split"),
                              ("max_deleted_fraction", "compact rewrites every split")))


def run(argv: Sequence[str] | None = None, *, prog: str | None = None) -> str | None:
    """Compacts LATEST of ``--dataset_root``; returns the new version's id (None: nothing to do)."""
    options, _ = parse_job(COMMAND, argv, prog=prog)
    compact = options.view_as(RefreshOptions)
    if not compact.dataset_root:
        raise SystemExit("--dataset_root is required: the versioned dataset root to compact")
    age = min_version_age(compact)
    with lease.held(compact.dataset_root, run_id=uuid.uuid4().hex[:12]):
        return _compact(options, compact, age)


def _compact(options: PipelineOptions, compact: RefreshOptions, age: datetime.timedelta) -> str | None:
    root = compact.dataset_root
    latest = read_latest(root)
    if latest is None:
        raise RefreshError(f"{root!r} has no LATEST version to compact")
    base_dir = version_dir(root, latest)
    manifest = load_manifest(base_dir)
    if manifest.self_contained and not compact.force:
        print(f"compact {root}: version {latest} lists no shared shard and no deletion; nothing to do (--force "
              "rewrites it anyway)")
        return None
    index = read_input_index(version_dir(root, indexes_version(root, latest, manifest)))  # an add's: its base's
    plan = append_plan_from_root(root, latest, index, CompactionPolicy(compact_all=True))
    listing = list_versions(root)
    version_id = new_version_id(after=[*listing.complete, *listing.incomplete, latest])
    description = description_of(manifest)
    metadata = {key: value for key, value in manifest.metadata.items() if key not in (REFRESH_KEY, COMMIT_KEY)}
    target = version_dir(root, version_id)
    print(f"compact {root}: rewriting version {latest} ({manifest.num_written} live records in "
          f"{len(manifest.shards)} shards, {manifest.num_deleted} deleted) into version {version_id}")
    quiet_logging()
    write_input_index(target, index)  # before the writer: the version is complete only once its manifest is
    writer = WriteTFRecordDataset(target, description=description, provenance=WriterProvenance(
        expected_inputs=plan.rewritten_records, command=("beam-tfrecord compact",),
        metadata={**metadata, "compacted_from": latest}, commit=plan.commit(version_id)))
    with job_pipeline(options) as pipeline:
        _ = (pipeline
             | "ReadLiveRecords" >> ReadKeptRecords(plan.rewritten)  # [PrebuiltRecord, ...] per chunk
             | "WriteVersion" >> writer
             | "PublishVersion" >> _publish(root, version_id, compact, age))
    published = load_manifest(target)
    print(f"compact {root}: published version {version_id}: {published.num_written} records in "
          f"{len(published.shards)} shards, {sum(s.num_bytes for s in published.shards)} bytes (LATEST updated)")
    return version_id


def _publish(root: str, version_id: str, compact: RefreshOptions, age: datetime.timedelta) -> beam.PTransform:
    """The pipeline's last step: LATEST moves to the compacted version, then retention."""
    return beam.Map(publish_version, root=root, version_id=version_id, keep_versions=compact.keep_versions,
                    min_version_age=age)




if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=PROG))  # ended without the interpreter's teardown
