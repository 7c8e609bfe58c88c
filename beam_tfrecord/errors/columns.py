"""Errors of adding, dropping and renaming features of a version (``versions.add_features``): each refuses the
change before LATEST moves, so the root stays as it was."""

from __future__ import annotations

from collections.abc import Sequence

from beam_tfrecord.errors.base import BeamTFRecordError

MAX_NAMED_KEYS = 10  # keys an error names; the count says how many there are


def _named(keys: Sequence[str]) -> str:
    shown = ", ".join(repr(key) for key in list(keys)[:MAX_NAMED_KEYS])
    return shown + (", ..." if len(keys) > MAX_NAMED_KEYS else "")


class ColumnsError(BeamTFRecordError, ValueError):
    """A feature add, drop or rename was refused; no version was published (LATEST is unchanged)."""


class FeatureNameError(ColumnsError):
    """A feature name an add, drop or rename cannot take: one the version has (without ``--replace``), or one it
    does not have."""


class DuplicateFeatureKeyError(ColumnsError):
    """A key was given values twice (or names two records of the dataset): which value is meant is unknown.

    Attributes:
        keys: the keys given twice (the first ones, sorted).
        count: how many keys were.
    """

    def __init__(self, keys: Sequence[str], count: int, *, where: str) -> None:
        self.keys = tuple(keys)
        self.count = count
        super().__init__(f"{count} key(s) {where}: {_named(keys)}; give each key once; nothing was published")


class MissingFeatureValuesError(ColumnsError):
    """Records of the version were given no value and ``--on_missing fail`` (the default) asks for one each.

    Attributes:
        keys: the first keys without a value, sorted.
        count: how many records have none.
    """

    def __init__(self, keys: Sequence[str], count: int, *, rejected: Sequence[str] = ()) -> None:
        self.keys = tuple(keys)
        self.count = count
        why = f" (values were rejected, e.g. {rejected[0]})" if rejected else ""
        super().__init__(f"{count} record(s) of the dataset were given no value for the added features: "
                         f"{_named(keys) or '(records without a key)'}{why}; give them values, or pass --on_missing "
                         "missing to leave them without (the schema's default, or an empty list); nothing was "
                         "published")


class UnknownKeyError(ColumnsError):
    """A key given values names no record of the version: its values go to the dead letters with this reason."""

    def __init__(self, key: str, version: str) -> None:
        self.key = key
        super().__init__(f"key {key!r} names no record of version {version}")
