"""A manifest read from storage is untrusted input: every field is checked before anything is opened.

A violation is a ``ManifestError`` naming the field (as a JSON path) and the value. See docs/manifest.md.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from beam_tfrecord.core.dali_index import dali_index_name
from beam_tfrecord.core.dali_index import unsupported_reason as dali_unsupported_reason
from beam_tfrecord.core.deletions import DeletionVector
from beam_tfrecord.core.file_format import DEFAULT_FILE_FORMAT, Compression, FileFormat
from beam_tfrecord.core.framing import FRAMING_BYTES
from beam_tfrecord.core.naming import VERSION_ID_PATTERN, PrefixShardNames, ShardName
from beam_tfrecord.errors import ManifestError, ShardNameError

MAX_NAME_CHARS = 255  # a file name on every common filesystem and a GCS object name's last part
MAX_TEXT_CHARS = 10_000
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_CRC32C = re.compile(r"[0-9a-f]{8}")
_SHARD_FIELDS = {"filename", "split", "index", "num_records", "num_bytes", "num_record_bytes", "crc32c"}
_OPTIONAL_SHARD_FIELDS = {"dali_index", "stored_in", "deletions", "columns"}  # columns: core.columns checks it
_SHARED_SHARD_FIELDS = {"stored_in", "deletions"}  # manifest format 2 on
_ALL_SHARD_FIELDS = _SHARD_FIELDS | _OPTIONAL_SHARD_FIELDS
_TOP_FIELDS = {"version", "dataset_name", "created_at", "tool_version", "command", "compression", "num_inputs",
               "num_written", "num_rejected", "dead_letters", "salt", "sharding", "schema", "splits", "metadata",
               "run_id", "file_format", "shard_naming", "num_dropped", "statistics", "physical_names",
               "dropped_features"}  # the last two: core.columns checks them
_NAMING_FIELDS = {"prefix": str, "template": str, "suffix": str, "split_in_name": bool}


_fail = ManifestError.field


def _count(data: Mapping[str, Any], key: str, path: str) -> int:
    value = data.get(key)
    if type(value) is not int or value < 0:  # bool is not a count
        raise _fail(f"{path}{key}", "an integer >= 0", value)
    return value


def _text(data: Mapping[str, Any], key: str, path: str, *, optional: bool = False) -> str | None:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > MAX_TEXT_CHARS:
        raise _fail(f"{path}{key}", f"a string of at most {MAX_TEXT_CHARS} characters", value)
    return value


def parse_file_format(data: Mapping[str, Any]) -> FileFormat:
    """The manifest's ``file_format``; manifests written before it existed hold ``DEFAULT_FILE_FORMAT`` shards."""
    value = data.get("file_format", DEFAULT_FILE_FORMAT.value)
    try:
        return FileFormat(value)
    except ValueError:
        raise _fail("file_format", f"one of {[f.value for f in FileFormat]}", value) from None


def parse_shard_naming(data: Mapping[str, Any]) -> PrefixShardNames | None:
    """The manifest's ``shard_naming`` (a dataset under a Beam prefix), or None for a dataset directory."""
    value = data.get("shard_naming")
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != set(_NAMING_FIELDS) \
            or any(type(value[k]) is not t for k, t in _NAMING_FIELDS.items()):
        raise _fail("shard_naming", f"an object of {sorted(_NAMING_FIELDS)} (strings, split_in_name a bool)", value)
    try:
        return PrefixShardNames(**value)
    except ShardNameError as err:
        raise _fail("shard_naming", f"a Beam file name prefix, template and suffix ({err})", value) from err


def plain_file_name(value: Any, path: str) -> str:
    """``value`` if it names a file directly inside the dataset directory; ManifestError otherwise."""
    if (not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_CHARS or not _PLAIN_NAME.fullmatch(value)
            or value in (".", "..") or ".." in value):
        raise _fail(path, "a plain file name in the dataset directory (letters, digits, '_', '-', '.'; no '/', "
                          "'\\', '..', absolute path or URL)", value)
    return value


@dataclasses.dataclass(frozen=True)
class _SplitChecks:
    """What every shard of one split is checked against, worked out once per split (a manifest may list 100,000)."""

    dataset: str
    split: str
    count: int
    compression: Compression
    file_format: FileFormat
    naming: PrefixShardNames | None
    version: Any
    shared: bool
    framed_files: bool  # an uncompressed file is exactly its framed records: num_bytes == num_record_bytes
    pattern: re.Pattern[str]  # _name_pattern's


def _check_shard_name(filename: str, path: str, index: int, checks: _SplitChecks) -> tuple[int, int] | None:
    """The name the writer gives shard ``index`` of ``count`` in ``split``, or ManifestError naming ``path``'s
    filename.

    In a version that shares shards (``shared``), each shard keeps the name its writer gave it: its own index
    and count among the shards that writer wrote, so only the dataset, split, format and compression are
    checked here (``_check_shared_names`` checks each writer's shards together). Returns the name's (index, count).
    """
    naming, shared = checks.naming, checks.shared
    if naming is not None and naming.windowed:  # a streaming write's: each pane's shards are numbered apart
        try:
            split, _, number, count = naming.parse_windowed(filename)
        except ShardNameError as err:
            raise _fail(f"{path}.filename", f"a shard name of shard_naming ({err})", filename) from err
        if naming.split_in_name and split != checks.split:
            raise _fail(f"{path}.filename", f"a shard name of split {checks.split!r}", filename)
        return number, count or 0  # 0: a template without N (the pane's shards then share no count to check)
    if naming is not None:
        try:
            expected = naming.format(checks.split, index, checks.count)
        except ShardNameError as err:
            raise _fail(f"{path}.filename", f"a shard name of shard_naming ({err})", filename) from err
        if filename != expected:
            raise _fail(f"{path}.filename", f"{expected!r} (shard_naming's name of this split, index and count)",
                        filename)
        return None
    fast = checks.pattern.fullmatch(filename)  # 100,000 shards: < 0.1 s
    if fast is not None:
        found = int(fast[1]), int(fast[2])
        if (found[0] < found[1]) if shared else found == (index, checks.count):
            return found
    try:
        name = ShardName.parse(filename)
    except ShardNameError as err:
        raise _fail(f"{path}.filename", "a shard name DATASET-SPLIT.FORMAT-SSSSS-of-NNNNN[.gz|.zz]", filename) from err
    expected_name = ShardName(checks.dataset, checks.split, name.index if shared else index,
                              name.count if shared else checks.count, checks.compression, checks.file_format)
    if name != expected_name:
        what = "its dataset, split, format and compression" if shared else \
            "its dataset, split, index, count, format and compression"
        raise _fail(f"{path}.filename", f"{str(expected_name)!r} ({what})", filename)
    return name.index, name.count


@functools.lru_cache(maxsize=64)
def _name_pattern(dataset: str, split: str, file_format: FileFormat, compression: Compression) -> re.Pattern[str]:
    """The names ``ShardName`` gives the shards of one split: (index, count) in groups 1 and 2; a pattern that
    matches nothing when ``ShardName`` refuses the parts (the slow path says why)."""
    try:
        ShardName(dataset, split, 0, 1, compression, file_format)
    except ShardNameError:
        return re.compile(r"(?!)")
    return re.compile(re.escape(f"{dataset}-{split}.{file_format.value}-") + r"(\d{5})-of-(\d{5})"
                      + re.escape(compression.suffix))


def _check_shared_names(split_path: str, shards: list[Any], names: list[tuple[int, int] | None],
                        writer_of: Callable[[Mapping[str, Any]], Any]) -> None:
    """In a version that shares shards, the shards of one writer (same ``stored_in``; in a streaming write's
    dataset, of one pane: ``writer_of``) in a split have one count and distinct indexes, so no file is listed
    twice and no name is made up."""
    counts: dict[Any, int] = {}
    seen: set[tuple[Any, int]] = set()
    for j, (shard, name) in enumerate(zip(shards, names)):
        if name is None:
            continue
        writer = writer_of(shard)
        index, count = name
        if counts.setdefault(writer, count) != count:
            raise _fail(f"{split_path}.shards[{j}].filename", f"a shard count of {counts[writer]}, as the other "
                        f"shards of {writer or 'this version'} in the split have", shard["filename"])
        if (writer, index) in seen:
            raise _fail(f"{split_path}.shards[{j}].filename", "a file no other shard of the split lists",
                        shard["filename"])
        seen.add((writer, index))


def _stored_in(shard: Mapping[str, Any]) -> Any:
    return shard.get("stored_in")


def _window_of(naming: PrefixShardNames, shard: Mapping[str, Any]) -> str | None:
    return naming.parse_windowed(shard["filename"])[1]  # checked by _check_shard_name


@functools.lru_cache(maxsize=1024)
def is_version_id(text: str) -> bool:
    """Whether ``text`` is a version id (``YYYYMMDDTHHMMSS.mmmZ-xxxxxx``): what a ``stored_in`` may hold."""
    return VERSION_ID_PATTERN.fullmatch(text) is not None


def is_crc32c(value: Any) -> bool:
    """Whether ``value`` is a file's CRC32C as a manifest holds it: 8 lowercase hex digits."""
    return isinstance(value, str) and _CRC32C.fullmatch(value) is not None


def _check_shared_fields(shard: Mapping[str, Any], path: str, *, version: Any, naming: PrefixShardNames | None,
                         records: int) -> DeletionVector | None:
    """``stored_in`` names a version of the same root (an id, nothing that leads elsewhere); ``deletions`` is a
    valid vector of the shard's records; neither in a manifest of format 1 or a dataset under a Beam prefix.
    Returns the vector, parsed (once: ``Manifest.from_json`` keeps it)."""
    if version == 1 or naming is not None:
        present = sorted(_SHARED_SHARD_FIELDS & set(shard))[0]
        why = "no such field in a manifest of format version 1" if version == 1 else \
            "no shared shards in a dataset under a Beam prefix (it has no versions)"
        raise _fail(f"{path}.{present}", why, shard[present])
    stored_in = shard.get("stored_in")
    if "stored_in" in shard and (not isinstance(stored_in, str) or not is_version_id(stored_in)):
        raise _fail(f"{path}.stored_in", "the id of a version of this root (YYYYMMDDTHHMMSS.mmmZ-xxxxxx; the shard "
                                         "is ROOT/versions/<id>/<filename>)", stored_in)
    if "deletions" not in shard:
        return None
    return DeletionVector.from_json(shard["deletions"], path=f"{path}.deletions", num_records=records)


def _check_shard(shard: Any, path: str, index: int, checks: _SplitChecks,
                 parsed: dict[tuple[int, int], DeletionVector], at: tuple[int, int]) -> tuple[int, int, Any]:
    """The shard's live records, stored bytes and name's (index, count); its deletion vector goes into ``parsed``
    under ``at`` (split, shard). Runs once per shard: 100,000 of them are checked in well under a second."""
    if type(shard) is not dict and not isinstance(shard, Mapping):
        raise _fail(path, "a shard object", type(shard).__name__)
    if not _SHARD_FIELDS <= shard.keys() <= _ALL_SHARD_FIELDS:
        raise _fail(path, f"the fields {sorted(_SHARD_FIELDS)} (and optionally {sorted(_OPTIONAL_SHARD_FIELDS)})",
                    sorted(shard))
    filename = shard["filename"]
    if checks.naming is not None and checks.naming.windowed:  # ``[start, end)`` in it: parse_windowed checks it
        if type(filename) is not str or len(filename) > MAX_NAME_CHARS:
            raise _fail(f"{path}.filename", f"a file name of at most {MAX_NAME_CHARS} characters", filename)
    elif not (type(filename) is str and len(filename) <= MAX_NAME_CHARS and _PLAIN_NAME.fullmatch(filename)
              and ".." not in filename):  # the common case without a call; plain_file_name says what is wrong
        filename = plain_file_name(filename, f"{path}.filename")
    name = _check_shard_name(filename, path, index, checks)
    if shard["split"] != checks.split:
        raise _fail(f"{path}.split", repr(checks.split), shard["split"])
    if type(shard["index"]) is not int or shard["index"] != index:
        raise _fail(f"{path}.index", str(index), shard["index"])
    records, stored, framed = shard["num_records"], shard["num_bytes"], shard["num_record_bytes"]
    if not (type(records) is int and type(stored) is int and type(framed) is int  # bool is not a count
            and records >= 0 and stored >= 0 and framed >= 0):
        for key in ("num_records", "num_bytes", "num_record_bytes"):
            _count(shard, key, f"{path}.")
    if framed < FRAMING_BYTES * records:
        raise _fail(f"{path}.num_record_bytes", f">= {FRAMING_BYTES} x num_records "
                                                f"({FRAMING_BYTES * records})", framed)
    if checks.framed_files and stored != framed:
        raise _fail(f"{path}.num_bytes", f"num_record_bytes ({framed}) for an uncompressed shard", stored)
    if not is_crc32c(shard["crc32c"]):
        raise _fail(f"{path}.crc32c", "8 lowercase hex digits", shard["crc32c"])
    if "dali_index" in shard and shard["dali_index"] != dali_index_name(filename):
        raise _fail(f"{path}.dali_index", f"{dali_index_name(filename)!r} (the shard's name + '.idx')",
                    shard["dali_index"])
    if "stored_in" in shard or "deletions" in shard:
        deletions = _check_shared_fields(shard, path, version=checks.version, naming=checks.naming, records=records)
        if deletions is not None:
            parsed[at] = deletions
            records -= deletions.count
    return records, stored, name


def _check_dali_indexes(splits: list[Any], compression: Compression, file_format: FileFormat) -> None:
    """DALI indexes are listed for every shard or for none, and only where they can exist."""
    listed = [(i, j) for i, split in enumerate(splits) for j, shard in enumerate(split["shards"])
              if "dali_index" in shard]
    if not listed:
        return
    reason = dali_unsupported_reason(compression, file_format)
    if reason is not None:
        i, j = listed[0]
        raise _fail(f"splits[{i}].shards[{j}].dali_index", f"no DALI index ({reason})",
                    splits[i]["shards"][j]["dali_index"])
    missing = [(i, j) for i, split in enumerate(splits) for j, shard in enumerate(split["shards"])
               if "dali_index" not in shard]
    if missing:
        i, j = missing[0]
        raise _fail(f"splits[{i}].shards[{j}].dali_index", "a DALI index, as the other shards list one", None)


def check_manifest_json(data: Mapping[str, Any]) -> dict[tuple[int, int], DeletionVector]:
    """Checks a manifest's JSON (version already checked) before any of it is used; returns the deletion vectors
    it parsed, by (split, shard) position.

    Raises:
        ManifestError: naming the first field that is missing, of the wrong type or out of range.
    """
    unknown = set(data) - _TOP_FIELDS
    if unknown:
        raise _fail("(top level)", f"only the fields {sorted(_TOP_FIELDS)}", sorted(unknown))
    dataset = _text(data, "dataset_name", "")
    try:
        ShardName(dataset, "train", 0, 1)  # type: ignore[arg-type]
    except ShardNameError as err:
        raise _fail("dataset_name", "a dataset name of letters, digits, '_' and '-'", dataset) from err
    for key in ("created_at", "tool_version", "salt"):
        _text(data, key, "")
    _text(data, "run_id", "", optional=True)
    command = data.get("command")
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command) or len(command) > 1_000:
        raise _fail("command", "a list of strings", command)
    try:
        compression = Compression.parse(data["compression"]) if isinstance(data.get("compression"), str) else None
    except ValueError:
        compression = None
    if compression is None:
        raise _fail("compression", "one of 'NONE', 'GZIP', 'ZLIB'", data.get("compression"))
    file_format = parse_file_format(data)
    try:
        file_format.check_compression(compression)
    except ShardNameError:
        raise _fail("compression", f"'NONE' for {file_format.value} shards (they compress inside the format)",
                    data["compression"]) from None
    naming = parse_shard_naming(data)
    inputs, rejected = _count(data, "num_inputs", ""), _count(data, "num_rejected", "")
    if data.get("dead_letters") is not None:
        plain_file_name(data["dead_letters"], "dead_letters")
    elif rejected:
        raise _fail("dead_letters", f"the dead-letter file name ({rejected} samples were rejected)", None)
    if not isinstance(data.get("sharding"), Mapping):
        raise _fail("sharding", "an object", data.get("sharding"))
    for key, value in data["sharding"].items():
        if value is not None and (type(value) is not int or value < 0):
            raise _fail(f"sharding.{key}", "an integer >= 0 or null", value)
    if not isinstance(data.get("metadata", {}), Mapping):
        raise _fail("metadata", "an object", data.get("metadata"))
    splits = data.get("splits")
    if not isinstance(splits, list) or not splits:
        raise _fail("splits", "a non-empty list of splits", splits)
    if naming is not None and not naming.split_in_name and len(splits) != 1:
        raise _fail("shard_naming.split_in_name", f"true: shard names without the split name one split, not "
                                                  f"{len(splits)}", False)
    written = 0
    names: set[str] = set()
    framed_files = file_format.stores_framed_records and compression is Compression.NONE
    parsed: dict[tuple[int, int], DeletionVector] = {}
    # A version that lists a shard of an earlier version keeps every shard's own name (see _check_shard_name).
    shared = any(isinstance(split, Mapping) and isinstance(split.get("shards"), list) and
                 any(isinstance(shard, Mapping) and "stored_in" in shard for shard in split["shards"])
                 for split in splits)
    for i, split in enumerate(splits):
        path = f"splits[{i}]"
        if not isinstance(split, Mapping) or not isinstance(split.get("shards"), list):
            raise _fail(path, "a split object with a list of shards", split)
        name = _text(split, "name", f"{path}.")
        if name in names:
            raise _fail(f"{path}.name", "a name no other split has", name)
        names.add(name)  # type: ignore[arg-type]
        spread = split.get("balance_spread", 0.0)
        if type(spread) not in (int, float) or not (math.isfinite(spread) and 0.0 <= spread <= 1.0):
            raise _fail(f"{path}.balance_spread", "a number in [0, 1]", spread)
        shards = split["shards"]
        records = stored = 0
        shard_names = []
        checks = _SplitChecks(dataset, name, len(shards), compression, file_format,  # type: ignore[arg-type]
                              naming, data.get("version"), shared, framed_files,
                              _name_pattern(dataset, name, file_format, compression))
        for j, shard in enumerate(shards):
            r, b, shard_name = _check_shard(shard, f"{path}.shards[{j}]", j, checks, parsed, (i, j))
            records, stored = records + r, stored + b
            shard_names.append(shard_name)
        if shared:
            _check_shared_names(path, shards, shard_names, _stored_in)
        elif naming is not None and naming.windowed:
            _check_shared_names(path, shards, shard_names, functools.partial(_window_of, naming))
        for key, total in (("num_records", records), ("num_bytes", stored)):
            if key in split and split[key] != total:
                raise _fail(f"{path}.{key}", f"the sum over its shards ({total})", split[key])
        written += records
    _check_dali_indexes(splits, compression, file_format)
    if "num_written" in data and data["num_written"] != written:
        raise _fail("num_written", f"the sum over the splits ({written})", data["num_written"])
    dropped = _count(data, "num_dropped", "") if "num_dropped" in data else 0  # duplicates=drop
    if inputs != written + rejected + dropped:
        raise _fail("num_inputs", f"num_written + num_rejected + num_dropped ({written} + {rejected} + {dropped})",
                    inputs)
    return parsed
