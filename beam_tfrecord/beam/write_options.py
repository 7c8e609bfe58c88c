"""The writer's option groups besides ``WriterTuning``: ``WriterChecks`` (what it checks), ``WriterProvenance``
(what it records) and ``VersionRetention`` (which versions a streaming write keeps), each frozen and checked once,
Beam-free.

Invariant: a field is checked where it is made; what needs two groups is checked by ``WriteTFRecordDataset``.
docs/inputs.md shows them in use.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from beam_tfrecord.errors import MAX_REJECTED_ARGUMENT, WriterOptionError
from beam_tfrecord.quality.content import DuplicatesCheck, DuplicatesMode
from beam_tfrecord.quality.near_duplicates import NearDuplicateSettings
from beam_tfrecord.quality.split_groups import SplitKeyFn
from beam_tfrecord.versions.commit import VersionCommit
from beam_tfrecord.versions.retention import DEFAULT_KEEP_VERSIONS, DEFAULT_MIN_VERSION_AGE


@dataclasses.dataclass(frozen=True)
class WriterChecks:
    """What the writer checks in the records before it publishes them.

    Attributes:
        max_rejected_fraction: fail, publishing nothing, when more than this fraction of inputs is
            rejected; 0.0 fails on any bad sample.
        max_rejected_option: how ``RejectedSamplesError`` names that fraction (this argument or a flag).
        duplicates: exact duplicates (records equal but for their key and the excluded features):
            ``"report"`` counts them (manifest ``duplicates``), ``"fail"`` publishes nothing
            (``DuplicatesFoundError``), ``"drop"`` keeps the record of smallest key hash of each group (the
            others are counted, ``Manifest.num_dropped``); a ``DuplicatesCheck`` also names features to
            exclude (kept as one). None: no check.
        near_duplicates: search the images of ``NearDuplicateSettings.feature`` for near duplicates and
            report them in the manifest's metadata ("near_duplicates"); None: no search.
        split_key_fn: a sample -> its group's value (a user or patient id; ``ColumnSplitKey("user")``): the
            splits hash it instead of the key, so every record of a group lands in one split (ratio splits).

    Raises:
        WriterOptionError: at construction, naming the field and the bad value.
    """

    max_rejected_fraction: float = 0.0
    max_rejected_option: str = MAX_REJECTED_ARGUMENT
    duplicates: DuplicatesCheck | DuplicatesMode | str | None = None
    near_duplicates: NearDuplicateSettings | None = None
    split_key_fn: SplitKeyFn | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_rejected_fraction, bool) or not isinstance(self.max_rejected_fraction, (int, float)) \
                or not 0.0 <= self.max_rejected_fraction <= 1.0:
            raise WriterOptionError(f"max_rejected_fraction must be in [0, 1], got {self.max_rejected_fraction}")
        if self.duplicates is not None and not isinstance(self.duplicates, DuplicatesCheck):
            object.__setattr__(self, "duplicates", DuplicatesCheck(DuplicatesMode.parse(self.duplicates)))
        if not isinstance(self.near_duplicates, (NearDuplicateSettings, type(None))):
            raise WriterOptionError(f"near_duplicates must be a NearDuplicateSettings or None, "
                                    f"got {self.near_duplicates!r}")
        if self.split_key_fn is not None and not callable(self.split_key_fn):
            raise WriterOptionError(f"split_key_fn must be callable (a sample -> its group), got {self.split_key_fn!r}")
        if self.near_duplicates is not None and self.split_key_fn is not None:
            raise WriterOptionError("near_duplicates places each image in its split by its key: it does not "
                                    "follow split_key_fn yet (drop one of the two)")

    @property
    def duplicates_check(self) -> DuplicatesCheck | None:
        """``duplicates`` as the check it was made into (None: no check)."""
        return self.duplicates if isinstance(self.duplicates, DuplicatesCheck) else None

    @property
    def drops_duplicates(self) -> bool:
        """``duplicates="drop"``: each group's record of smallest key hash is kept, the others are counted."""
        return self.duplicates_check is not None and self.duplicates_check.mode is DuplicatesMode.DROP


@dataclasses.dataclass(frozen=True)
class VersionRetention:
    """Which versions of a root a streaming write keeps: after each pane's version, retention runs as after a
    refresh (``versions.retention.apply_retention``), so a root fed by a stream does not grow without bound.

    Attributes:
        keep_versions: complete versions kept at any age, LATEST among them (a refresh's ``--keep_versions``).
        min_version_age: how long a version is kept after it stopped being LATEST (``--min_version_age``): a
            reader that opened it, or a follower whose state names it, finishes within it. At the default (24 h), a
            stream keeps a day of panes' versions (they share their shards: each adds its manifest and indexes).
    Raises:
        WriterOptionError: at construction, naming the field and the bad value.
    """

    keep_versions: int = DEFAULT_KEEP_VERSIONS
    min_version_age: datetime.timedelta = DEFAULT_MIN_VERSION_AGE

    def __post_init__(self) -> None:
        if type(self.keep_versions) is not int or self.keep_versions < 1:
            raise WriterOptionError(f"retention.keep_versions must be an integer >= 1, got {self.keep_versions!r}")
        if not isinstance(self.min_version_age, datetime.timedelta) or self.min_version_age < datetime.timedelta(0):
            raise WriterOptionError(f"retention.min_version_age must be a timedelta >= 0, got {self.min_version_age!r}")


@dataclasses.dataclass(frozen=True)
class WriterProvenance:
    """What the writer records about the build: its inputs, their identity, the command, extra facts.

    Attributes:
        expected_inputs: the inputs the caller counted: if the workers read another number
            (written plus rejected), the job fails with ``InputsMismatchError`` and publishes nothing.
        inputs_identity: text that identifies the inputs as they are now (sizes, update times); with
            it a killed build can be resumed.
        resume: take over a killed build of the same options and ``inputs_identity`` in ``output_dir``
            and keep its finished work (same bytes as a clean build; none found: a clean build).
            ``Sample`` inputs, the spill fan-in and the default ``temp_dir`` only.
        command: the command line to record in the manifest.
        metadata: extra facts to record in the manifest.
        commit: the version of a root these shards join (``versions.commit.VersionCommit``): the manifest then
            lists the base's shards it keeps too, and ``record_locations.json`` is written; None: a dataset of
            the written shards alone.
        retention: with an unbounded input (each pane an append version of the root), the versions kept
            (``VersionRetention``; None: a refresh's defaults); refused with a bounded input (a refresh keeps them).

    Raises:
        WriterOptionError: at construction, naming the field and the bad value.
    """

    expected_inputs: int | None = None
    inputs_identity: str | None = None
    resume: bool = False
    command: Sequence[str] = ()
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    commit: VersionCommit | None = None
    retention: VersionRetention | None = None

    def __post_init__(self) -> None:
        if self.commit is not None and not isinstance(self.commit, VersionCommit):
            raise WriterOptionError(f"commit must be a VersionCommit or None, got {self.commit!r}")
        if self.retention is not None and not isinstance(self.retention, VersionRetention):
            raise WriterOptionError(f"retention must be a VersionRetention or None, got {self.retention!r}")
        if self.expected_inputs is not None and (isinstance(self.expected_inputs, bool) or not isinstance(
                self.expected_inputs, int) or self.expected_inputs < 0):
            raise WriterOptionError(f"expected_inputs must be >= 0, got {self.expected_inputs}")
        if self.inputs_identity is not None and not isinstance(self.inputs_identity, str):
            raise WriterOptionError(f"inputs_identity must be text or None, got {self.inputs_identity!r}")
        if not isinstance(self.resume, bool):
            raise WriterOptionError(f"resume must be a bool, got {self.resume!r}")
        if isinstance(self.command, str) or not all(isinstance(arg, str) for arg in self.command):
            raise WriterOptionError(f"command must be a sequence of arguments (text), got {self.command!r}")
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "metadata", dict(self.metadata or {}))
