"""A version's input index: every input it was built from, with a content token, and how it was encoded.

An incremental refresh (``versions.incremental``) keeps the record of an input whose key and token are
unchanged. Tokens come from the store's listing, never from reading files (a same-size rewrite within the
mtime resolution looks unchanged: use ``--force``). The index is read back as untrusted input:
``InputIndexError`` for anything malformed. See docs/operations.md#storage.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.core.samples import FileRef
from beam_tfrecord.errors import InputIndexError

INPUT_INDEX_FILENAME = "input_index.json"
INPUT_INDEX_FORMAT = "beam-tfrecord-input-index"
INPUT_INDEX_VERSION = 1


@dataclasses.dataclass(frozen=True)
class IndexedInput:
    """One input of a version.

    Attributes:
        key: the sample key (the writer hashes it into the record's split and place).
        path: the input's full path when the version was built.
        token: its content token (see the module docstring).
    """

    key: str
    path: str
    token: str


@dataclasses.dataclass(frozen=True)
class InputIndex:
    """The inputs of one version and a digest of everything else that decides their records' bytes.

    Attributes:
        encoding: hex digest of the schema, the feature transforms and the salt (``encoding_digest``).
        inputs: every input, sorted by key.
    """

    encoding: str
    inputs: tuple[IndexedInput, ...]

    def to_bytes(self) -> bytes:
        return json.dumps({"format": INPUT_INDEX_FORMAT, "version": INPUT_INDEX_VERSION, "encoding": self.encoding,
                           "inputs": [[i.key, i.path, i.token] for i in self.inputs]},
                          separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, *, path: str) -> "InputIndex":
        """Parses an index read from storage; raises ``InputIndexError`` on anything unexpected."""
        parsed = parse_versioned_json(data, path=path, file_format=INPUT_INDEX_FORMAT, version=INPUT_INDEX_VERSION)
        encoding, rows = parsed.get("encoding"), parsed.get("inputs")
        if not isinstance(encoding, str) or not isinstance(rows, list):
            raise InputIndexError(path, "expected 'encoding' (a string) and 'inputs' (a list)")
        inputs = []
        for number, row in enumerate(rows):
            if not (isinstance(row, list) and len(row) == 3 and all(isinstance(v, str) for v in row)):
                raise InputIndexError(path, f"input {number}: expected [key, path, token] strings, got {row!r:.200}")
            inputs.append(IndexedInput(*row))
        keys = [i.key for i in inputs]
        if len(set(keys)) != len(keys):
            raise InputIndexError(path, "an input key is listed twice")
        return cls(encoding, tuple(sorted(inputs, key=lambda i: i.key)))


def parse_versioned_json(data: bytes, *, path: str, file_format: str, version: int) -> dict[str, Any]:
    """A JSON object of a version's index files read from storage (``{"format": ..., "version": ..., ...}``);
    ``InputIndexError`` naming ``path`` when it is not JSON, not an object of ``file_format`` or of another version."""
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, ValueError) as err:
        raise InputIndexError(path, f"not JSON: {err}") from err
    if not isinstance(parsed, dict) or parsed.get("format") != file_format:
        raise InputIndexError(path, f"expected an object with format {file_format!r}")
    if parsed.get("version") != version:
        raise InputIndexError(path, f"version {parsed.get('version')!r}; this reader knows {version}")
    return parsed


def encoding_digest(*, schema_json: Mapping[str, Any], transforms: Mapping[str, object], salt: str,
                    source: Mapping[str, Any] | None = None) -> str:
    """A digest of what, besides an input's content, decides its record's bytes.

    Transforms are described by their ``repr`` (``ResizeImage`` is a frozen dataclass: its repr
    lists every option); ``source``: the source's options that shape its samples (a manifest's key
    column, missing values...). A version whose digest differs cannot lend its records.
    """
    described: dict[str, Any] = {"schema": schema_json, "salt": salt,
                                 "transforms": {name: repr(t) for name, t in sorted(transforms.items())}}
    if source:  # absent for an image folder: the digests of versions built before stay valid
        described["source"] = dict(source)
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode("utf-8")).hexdigest()


def content_tokens(root: str) -> dict[str, str]:
    """{full path: content token} of every file under ``root``, from one listing (``storage.list_details``)."""
    base = root.rstrip("/") + "/"
    if not storage.backend_for(base).lists_tokens:
        raise InputIndexError(base, "incremental refresh needs a store that lists content tokens (local, gs://, "
                                    "s3://, Azure)")
    listed = storage.list_details(storage.glob_escape(base) + "**")  # escaped: a folder named "a[1]" is itself
    return {found.path: found.token for found in listed if found.token is not None}


def listed_tokens(pattern: str) -> dict[str, str]:
    """{full path: content token} of the files matching a glob (empty where the store lists none)."""
    if not storage.backend_for(pattern).lists_tokens:
        return {}
    return {found.path: found.token for found in storage.list_details(pattern) if found.token is not None}


def file_tokens(paths: Iterable[str]) -> dict[str, str]:
    """{path: content token} of files, from one listing of each folder holding one (a manifest's file columns)."""
    tokens: dict[str, str] = {}
    for folder in sorted({path.rsplit("/", 1)[0] for path in paths}):
        tokens.update(listed_tokens(storage.glob_escape(folder + "/") + "*"))
    return tokens


def _described(value: Any) -> Any:
    if isinstance(value, FileRef):
        return ["file", value.path]
    if isinstance(value, (bytes, bytearray)):
        return ["bytes", bytes(value).hex()]
    if isinstance(value, np.ndarray | np.generic):
        return ["array", str(value.dtype), np.asarray(value).tolist()]
    return ["repr", repr(value)]


def sample_token(values: Mapping[str, Any], tokens: Mapping[str, str]) -> str:
    """The content token of a sample read from a row (a manifest's): a digest of its values and, for a
    file it names (``FileRef``), that file's listing token from ``tokens``; "" (never matches) when one
    has none."""
    digest = hashlib.sha256(json.dumps(values, sort_keys=True, default=_described).encode("utf-8"))
    for value in values.values():
        if isinstance(value, FileRef):
            if not tokens.get(value.path):
                return ""
            digest.update(f"\n{value.path}\t{tokens[value.path]}".encode())
    return digest.hexdigest()


def index_inputs(inputs: Sequence[tuple[str, str]], tokens: Mapping[str, str], encoding: str) -> InputIndex:
    """The index of ``(key, path)`` inputs; a path without a token gets an empty one (never matches)."""
    return InputIndex(encoding, tuple(sorted((IndexedInput(key, path, tokens.get(path, ""))
                                              for key, path in inputs), key=lambda i: i.key)))


def write_input_index(directory: str, index: InputIndex) -> None:
    storage.write_bytes_atomic(storage.join(directory, INPUT_INDEX_FILENAME), index.to_bytes())


def read_input_index(directory: str) -> InputIndex:
    """The index of the version at ``directory``; ``InputIndexError`` when it is missing or malformed."""
    path = storage.join(directory, INPUT_INDEX_FILENAME)
    if not storage.exists(path):
        raise InputIndexError(path, "missing (the version was built without one)")
    return InputIndex.from_bytes(storage.read_bytes(path), path=path)
