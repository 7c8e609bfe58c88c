"""Dropping and renaming features of LATEST: a new version whose manifest says so, no file written but it.

A drop lists the feature's stored name in ``dropped_features``; a rename maps the new logical name to the stored one
in ``physical_names`` (core.columns). Every shard and column file stays where it is (``stored_in``); ``compact`` writes
logical names and clears both. Run under the root's lease (``pipelines.add_features``). See docs/columns.md.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Mapping, Sequence

from beam_tfrecord import storage
from beam_tfrecord._version import __version__
from beam_tfrecord.core.manifest import MANIFEST_FILENAME, Manifest
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.dataset import load_manifest, read_latest, version_dir
from beam_tfrecord.errors import ColumnsError, FeatureNameError
from beam_tfrecord.versions.add_features import COLUMNS_KEY, indexes_version, with_base_shards
from beam_tfrecord.versions.refresh import list_versions, new_version_id, publish_version

# (base manifest) -> (new logical schema features, new physical names, new dropped names, summary)
SchemaChange = Callable[[Manifest], tuple[Schema, Mapping[str, str], tuple[str, ...], dict[str, object]]]


def _known(base: Manifest, names: Sequence[str], what: str) -> None:
    unknown = [name for name in names if name not in base.schema.features]
    if unknown:
        raise FeatureNameError(f"cannot {what} {unknown}: not features of the dataset {sorted(base.schema.features)}"
                               + (" (sequence features cannot be)" if set(unknown) & set(base.schema.sequence_features)
                                  else ""))


def drop(names: Sequence[str]) -> SchemaChange:
    """The change that drops the features ``names`` (their values stay in their files, unread)."""

    def change(base: Manifest) -> tuple[Schema, Mapping[str, str], tuple[str, ...], dict[str, object]]:
        _known(base, names, "drop")
        kept = {name: f for name, f in base.schema.features.items() if name not in names}
        if not kept and not base.schema.sequence_features:
            raise ColumnsError(f"cannot drop every feature of the dataset ({sorted(names)})")
        dropped = {*base.dropped_features, *(base.physical_name(name) for name in names)}
        renames = {name: stored for name, stored in base.physical_names.items() if name not in names}
        return (Schema(kept, base.schema.sequence_features), renames, tuple(sorted(dropped)),
                {"action": "drop", "features": sorted(names)})

    return change


def rename(renames: Mapping[str, str]) -> SchemaChange:
    """The change that renames features (old logical name -> new); their files keep the stored names."""

    def change(base: Manifest) -> tuple[Schema, Mapping[str, str], tuple[str, ...], dict[str, object]]:
        _known(base, list(renames), "rename")
        kept = [name for name in base.schema.features if name not in renames]
        taken = sorted(set(renames.values()) & (set(kept) | set(base.schema.sequence_features)))
        if taken or len(set(renames.values())) != len(renames):
            raise FeatureNameError(f"cannot rename to {taken or sorted(renames.values())}: each new name must be "
                                   "one no other feature has")
        features = {renames.get(name, name): f for name, f in base.schema.features.items()}
        physical = {renames.get(name, name): base.physical_name(name) for name in base.schema.features}
        return (Schema(features, base.schema.sequence_features),
                {name: stored for name, stored in physical.items() if name != stored}, base.dropped_features,
                {"action": "rename", "features": dict(sorted(renames.items()))})

    return change


def changed_manifest(base: Manifest, base_version: str, version_id: str, change: SchemaChange, *,
                     command: Sequence[str], indexes: str) -> Manifest:
    """The version after ``change``: the base's files listed where they are, the schema and names changed;
    ``indexes``: the version holding the records' locations (``add_features.indexes_version``)."""
    schema, renames, dropped, summary = change(base)
    shards = iter(with_base_shards(base, base_version))
    splits = tuple(dataclasses.replace(s, shards=tuple(next(shards) for _ in s.shards)) for s in base.splits)
    manifest = dataclasses.replace(
        base, schema=schema, splits=splits, physical_names=renames, dropped_features=dropped, statistics=None,
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        tool_version=__version__, command=tuple(command), run_id=version_id, dead_letters=None, num_rejected=0,
        num_inputs=base.num_written + base.num_dropped,
        metadata={**base.metadata, COLUMNS_KEY: {**summary, "base_version": base_version, "indexes_version": indexes}})
    return Manifest.loads(manifest.dumps())  # every check a reader makes, before it is published


def publish_change(root: str, change: SchemaChange, *, command: Sequence[str], keep_versions: int,
                   min_version_age: datetime.timedelta) -> str:
    """Publishes ``change`` of LATEST of ``root`` as a new version (its manifest is its only file); returns its id.

    Raises:
        ColumnsError: ``root`` has no LATEST; FeatureNameError: a name the change cannot take.
    """
    latest = read_latest(root)
    if latest is None:
        raise ColumnsError(f"{root!r} is not a versioned root with a LATEST version")
    base = load_manifest(version_dir(root, latest))
    listing = list_versions(root)
    version_id = new_version_id(after=[*listing.complete, *listing.incomplete, *listing.retired, latest])
    manifest = changed_manifest(base, latest, version_id, change, command=command,
                                indexes=indexes_version(root, latest, base))
    storage.write_bytes_atomic(storage.join(version_dir(root, version_id), MANIFEST_FILENAME),
                               manifest.dumps().encode("utf-8"))
    return publish_version(manifest, root=root, version_id=version_id, keep_versions=keep_versions,
                           min_version_age=min_version_age)
