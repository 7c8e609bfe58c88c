"""Shard file names: one template that both formats and parses them.

``{dataset}-{split}.{format}-{index:05d}-of-{count:05d}{suffix}``, Beam's and TensorFlow
Datasets' convention (TFDS's ``{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}``); the format is a
``FileFormat`` value (``tfrecord``, ``array_record``), the suffix names the compression (``.gz``
for GZIP, ``.zz`` for ZLIB; only for formats with ``stream_compression``).
"""

from __future__ import annotations

import dataclasses
import re

# Also importable from here, their home before core/file_format.py (modules of other branches import them so).
from beam_tfrecord.core.file_format import DEFAULT_FILE_FORMAT, Compression, FileFormat
from beam_tfrecord.errors import ShardNameError

# A version of a dataset root, ``ROOT/versions/<id>``: UTC creation time to the millisecond and a random token.
VERSION_ID_PATTERN = re.compile(r"\d{8}T\d{6}(?:\.\d{3})?Z-[0-9a-f]{6}")

_NAME_PART = r"[A-Za-z0-9_]+"


@dataclasses.dataclass(frozen=True, order=True)
class ShardName:
    """The parts of a shard's file name."""

    dataset: str
    split: str
    index: int
    count: int
    compression: Compression = Compression.NONE
    file_format: FileFormat = DEFAULT_FILE_FORMAT

    def __post_init__(self) -> None:
        for part in ("dataset", "split"):
            if not re.fullmatch(_NAME_PART, getattr(self, part)):
                raise ShardNameError(f"{part} {getattr(self, part)!r} must match {_NAME_PART}")
        if not 0 <= self.index < self.count <= 99999:
            raise ShardNameError(f"need 0 <= index < count <= 99999, got index {self.index}, count {self.count}")
        self.file_format.check_compression(self.compression)

    def __str__(self) -> str:
        return (f"{self.dataset}-{self.split}.{self.file_format.value}-{self.index:05d}-of-{self.count:05d}"
                f"{self.compression.suffix}")

    @classmethod
    def parse(cls, filename: str) -> "ShardName":
        match = _PATTERN.fullmatch(filename)
        if match is None:
            formats = "|".join(f.value for f in FileFormat)
            raise ShardNameError(f"{filename!r} does not match DATASET-SPLIT.{{{formats}}}-SSSSS-of-NNNNN[.gz|.zz]")
        suffix = match["suffix"] or ""
        compression = next(c for c in Compression if c.suffix == suffix)
        return cls(match["dataset"], match["split"], int(match["index"]), int(match["count"]), compression,
                   FileFormat(match["format"]))


_PATTERN = re.compile(
    rf"(?P<dataset>{_NAME_PART})-(?P<split>{_NAME_PART})\.(?P<format>{'|'.join(f.value for f in FileFormat)})"
    rf"-(?P<index>\d{{5}})-of-(?P<count>\d{{5}})"
    rf"(?P<suffix>\.gz|\.zz)?"
)


# Beam's ``FileBasedSink`` default for a bounded write: ``PREFIX-SSSSS-of-NNNNN``.
DEFAULT_SHARD_NAME_TEMPLATE = "-SSSSS-of-NNNNN"
_PLAIN_FILE_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_TEMPLATE_PLACEHOLDERS = re.compile(r"S+|N+")
# Beam's window placeholders (a streaming write): W is ``[start, end)`` in seconds, V in UTC ``%Y-%m-%dT%H-%M-%S``.
_WINDOW_PLACEHOLDER = re.compile(r"W+|V+")
# A window's text in a name (``window_text`` in beam/windowed_names.py makes it); a pane after the window's first
# is its own commit, its index after the window (``-pane1``). Letters for Beam's ``Infinity``.
WINDOW_TEXT = re.compile(r"\[[0-9A-Za-z.:+\-]+, [0-9A-Za-z.:+\-]+\)(?:-pane[1-9][0-9]*)?")


@dataclasses.dataclass(frozen=True)
class PrefixShardNames:
    """Beam's ``file_path_prefix`` naming: ``{prefix}[-{split}]{template}{suffix}``, beside the prefix.

    As ``WriteToTFRecord`` names files: the template's run of ``S`` is the zero-padded shard index
    and its run of ``N`` the shard count (``-SSSSS-of-NNNNN``: ``-00001-of-00004``); an empty
    template names one file, ``{prefix}{suffix}``. The split is in the name only when a dataset has
    several (``split_in_name``). Names are plain file names in the prefix's folder, but for a
    streaming write's: a run of ``W`` or ``V`` in the template (``windowed``) is the text of the
    pane's window (``WINDOW_TEXT``: ``[1614556800.0, 1614556805.0)``), as Beam names them.

    Attributes:
        prefix: the prefix's last part (``result`` for ``gs://bucket/out/result``).
        template: Beam's ``shard_name_template`` (one run of ``S``, at most one of ``N``), or ``''``.
        suffix: Beam's ``file_name_suffix`` (``.tfrecord.gz``).
        split_in_name: whether names carry the split.
    """

    prefix: str
    template: str = DEFAULT_SHARD_NAME_TEMPLATE
    suffix: str = ""
    split_in_name: bool = False

    def __post_init__(self) -> None:
        for part in ("prefix", "suffix"):
            value = getattr(self, part)
            if value and (not _PLAIN_FILE_NAME.fullmatch(value) or ".." in value):
                raise ShardNameError(f"{part} {value!r}: a shard's file name may hold only letters, digits, "
                                     "'_', '-' and '.' (and no '..')")
        if not self.prefix:
            raise ShardNameError("prefix must name a file, got ''")
        if self.template:
            runs = _TEMPLATE_PLACEHOLDERS.findall(self.template)
            literal = _WINDOW_PLACEHOLDER.sub("", _TEMPLATE_PLACEHOLDERS.sub("", self.template))
            if sum(r[0] == "S" for r in runs) != 1 or sum(r[0] == "N" for r in runs) > 1 \
                    or len(_WINDOW_PLACEHOLDER.findall(self.template)) > 1 \
                    or (literal and not _PLAIN_FILE_NAME.fullmatch(literal)) or re.search("[WVU]", literal):
                raise ShardNameError(f"shard_name_template {self.template!r}: expected one run of 'S' (the shard "
                                     "index), at most one of 'N' (the count), at most one of 'W' or 'V' (the "
                                     "window), and otherwise letters other than U, digits, '_', '-', '.'; or '' "
                                     "for one file")

    @property
    def windowed(self) -> bool:
        """Whether names carry a window (a streaming write's template, with ``W`` or ``V``)."""
        return _WINDOW_PLACEHOLDER.search(self.template) is not None

    def format(self, split: str, index: int, count: int, *, window: str | None = None) -> str:
        """The file name of shard ``index`` of ``count`` in ``split`` (of ``window``'s pane, for a ``windowed``
        template: its ``WINDOW_TEXT``)."""
        if not 0 <= index < count or (not self.template and count != 1):
            raise ShardNameError(f"need 0 <= index < count (count 1 for shard_name_template ''), got index {index}, "
                                 f"count {count}")
        if self.split_in_name and not re.fullmatch(_NAME_PART, split):
            raise ShardNameError(f"split {split!r} must match {_NAME_PART}")
        if self.windowed != (window is not None) or (window is not None and not WINDOW_TEXT.fullmatch(window)):
            raise ShardNameError(f"window {window!r}: shard_name_template {self.template!r} needs "
                                 + ("a window's text like '[1614556800.0, 1614556805.0)'" if self.windowed
                                    else "none (it has no W or V)"))
        values = {"S": index, "N": count}
        shard = _TEMPLATE_PLACEHOLDERS.sub(lambda m: f"{values[m[0][0]]:0{len(m[0])}d}", self.template)
        shard = _WINDOW_PLACEHOLDER.sub(lambda _: window or "", shard)
        return f"{self.prefix}{f'-{split}' if self.split_in_name else ''}{shard}{self.suffix}"

    def parse(self, filename: str) -> tuple[str | None, int, int | None]:
        """``(split or None, index, count)`` of a name ``format`` gives (count None for a template without
        ``N``); ShardNameError for any other."""
        split_name, _, index, count = self.parse_windowed(filename)
        return split_name, index, count

    def parse_windowed(self, filename: str) -> tuple[str | None, str | None, int, int | None]:
        """``(split or None, window or None, index, count)`` of a name ``format`` gives (the window's text for a
        ``windowed`` template); ShardNameError for any other."""
        values = {"S": r"(?P<index>\d+)", "N": r"(?P<count>\d+)", "W": rf"(?P<window>{WINDOW_TEXT.pattern})"}
        values["V"] = values["W"]
        pattern = "".join(values[part[0]] if re.fullmatch(r"S+|N+|W+|V+", part) else re.escape(part)
                          for part in re.split(r"(S+|N+|W+|V+)", self.template) if part)
        split = rf"-(?P<split>{_NAME_PART})" if self.split_in_name else ""
        match = re.fullmatch(rf"{re.escape(self.prefix)}{split}{pattern}{re.escape(self.suffix)}", filename)
        parts = match.groupdict() if match is not None else {}
        index = int(parts.get("index") or 0)
        count = int(parts["count"]) if parts.get("count") else (None if self.template else 1)
        split_name, window = parts.get("split"), parts.get("window")
        # Formatting back the numbers read must give the name: no other padding, index < count.
        if match is None or (count is not None and not index < count) \
                or self.format(split_name or "", index, count or index + 1, window=window) != filename:
            example = self.format("SPLIT" if self.split_in_name else "", 0, 1,
                                  window="[0.0, 60.0)" if self.windowed else None)
            raise ShardNameError(f"{filename!r} is not a shard name like {example!r} (prefix {self.prefix!r}, "
                                 f"template {self.template!r}, suffix {self.suffix!r})")
        return split_name, window, index, count

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)
