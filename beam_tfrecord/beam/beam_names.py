"""WriteToTFRecord's arguments with their meanings: a prefix's shard names, compression, coder, and where they go.

Shards sit beside the prefix under Beam's names; the manifest and metadata in ``FOLDER/.PREFIX.beam-tfrecord/``,
which no ``PREFIX-*`` glob matches. See docs/inputs.md, "Files named by a Beam prefix".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.manifest import MANIFEST_FILENAME, Manifest
from beam_tfrecord.core.naming import DEFAULT_SHARD_NAME_TEMPLATE, PrefixShardNames
from beam_tfrecord.core.sharding import SplitConfig
from beam_tfrecord.dataset import prefix_metadata_dir, split_path
from beam_tfrecord.errors import BeamTFRecordError, OutputPathError, ShardNameError, WriterOptionError

STAGING_DIRNAME = "staging"  # in the metadata folder: the dataset as written, before its shards take Beam's names
# Beam's CompressionTypes (plain strings) that TFRecord readers open: DEFLATE is zlib's stream, TensorFlow's ZLIB.
_BEAM_COMPRESSION = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "deflate": Compression.ZLIB}
_BEAM_SUFFIXES = {".gz": "gzip", ".deflate": "deflate", ".bz2": "bzip2", ".zst": "zstd", ".zstd": "zstd",
                  ".xz": "lzma", ".lzma": "lzma"}  # CompressionTypes.detect_compression_type's table
_WINDOW_PLACEHOLDERS = "WV"  # Beam's window placeholders in a shard_name_template (streaming writes)
DEFAULT_WINDOW_SHARD_NAME_TEMPLATE = "-W-SSSSS-of-NNNNN"  # Beam's FileBasedSink default for an unbounded write


@dataclasses.dataclass(frozen=True)
class PrefixLayout:
    """Where a dataset written under a Beam ``file_path_prefix`` goes.

    Attributes:
        file_path_prefix: the prefix as given (``gs://bucket/out/result``).
        names: its shards' names (``PrefixShardNames``).
    """

    file_path_prefix: str
    names: PrefixShardNames

    @property
    def folder(self) -> str:
        """The prefix's folder, where the shards go (``""``: the working directory)."""
        return split_path(self.file_path_prefix)[0]

    @property
    def metadata_dir(self) -> str:
        """``FOLDER/.PREFIX.beam-tfrecord``: the manifest, the dead letters, the staged dataset."""
        return prefix_metadata_dir(self.file_path_prefix)

    @property
    def staging_dir(self) -> str:
        return storage.join(self.metadata_dir, STAGING_DIRNAME)

    @property
    def manifest_path(self) -> str:
        return storage.join(self.metadata_dir, MANIFEST_FILENAME)

    def shard_path(self, filename: str) -> str:
        return storage.join(self.folder, filename) if self.folder else filename


def _text(value: Any, argument: str) -> str:
    if not isinstance(value, str):
        raise WriterOptionError(f"{argument} must be a str, got {value!r}")
    return value


def prefix_layout(file_path_prefix: Any, *, file_name_suffix: Any, shard_name_template: Any,
                  splits: SplitConfig, windowed: bool = False) -> PrefixLayout:
    """WriteToTFRecord's naming arguments as a ``PrefixLayout`` (the split is in names only for several); with
    ``windowed``, a streaming write's, whose template names the window (``W`` or ``V``: ``streaming_template``).

    Raises:
        WriterOptionError: naming the argument, for a value Beam refuses or one that names no plain file.
    """
    prefix = _text(file_path_prefix, "file_path_prefix")
    name = split_path(prefix)[1]
    if not name or prefix.endswith("/"):
        raise WriterOptionError(f"file_path_prefix must end in a file name (shards are PREFIX-SSSSS-of-NNNNN), "
                                f"got {prefix!r}")
    template = DEFAULT_SHARD_NAME_TEMPLATE if shard_name_template is None else _text(shard_name_template,
                                                                                      "shard_name_template")
    names = [spec.name for spec in splits.specs]
    if len(names) > 1 and not template:
        raise WriterOptionError(f"shard_name_template '' names one file, but splits has {len(names)} splits "
                                f"({', '.join(names)}): give a template with SSSSS")
    suffix = _text(file_name_suffix, "file_name_suffix")
    for argument, made in (("file_path_prefix", lambda: PrefixShardNames(name)),
                           ("file_name_suffix", lambda: PrefixShardNames("x", suffix=suffix)),
                           ("shard_name_template", lambda: PrefixShardNames(
                               name, template if windowed else _without_window(template), suffix,
                               split_in_name=len(names) > 1))):
        try:
            shard_names = made()
        except ShardNameError as err:
            raise WriterOptionError(f"{argument}: {err}") from err
    return PrefixLayout(prefix, shard_names)


def _without_window(template: str) -> str:
    """The template with Beam's window placeholders dropped (checked later: ``window_template_error``)."""
    if window_template_error(template) is None:
        return template
    return "".join(c for c in template if c not in _WINDOW_PLACEHOLDERS).replace("--", "-")


def streaming_template(shard_name_template: str | None) -> str | None:
    """The template of a streaming write, as ``WriteToTFRecord`` takes it for an unbounded input: Beam's default
    becomes ``DEFAULT_WINDOW_SHARD_NAME_TEMPLATE``; one naming the window stays; None for any other (every window
    would take the same names)."""
    if shard_name_template is None or shard_name_template == DEFAULT_SHARD_NAME_TEMPLATE:
        return DEFAULT_WINDOW_SHARD_NAME_TEMPLATE
    if any(c in shard_name_template for c in _WINDOW_PLACEHOLDERS):
        return shard_name_template
    return None


def window_template_error(shard_name_template: str | None) -> WriterOptionError | None:
    """The error for a template naming windows (``-W-SSSSS-of-NNNNN``), raised for a bounded input once
    an unbounded one has had its ``UnboundedInputError``; None for any other template."""
    if shard_name_template is None or not any(c in shard_name_template for c in _WINDOW_PLACEHOLDERS):
        return None
    return WriterOptionError(f"shard_name_template {shard_name_template!r}: W and V name the windows of a "
                             "streaming write; this writer writes one dataset of a bounded input (every window): "
                             f"use S and N only ({DEFAULT_SHARD_NAME_TEMPLATE!r})")


def compression_of(compression_type: Any, layout: PrefixLayout | None) -> Compression:
    """``Compression``, or Beam's ``CompressionTypes`` name; ``auto`` detects it from the shards' names as
    Beam does (``.gz``: GZIP, ``.deflate``: ZLIB), uncompressed for a dataset directory.

    Raises:
        WriterOptionError: naming compression_type, for a type no TFRecord reader opens (bzip2, zstd, lzma).
    """
    if isinstance(compression_type, Compression):
        return compression_type
    text = compression_type.strip().lower() if isinstance(compression_type, str) else None
    if text == "auto":
        shard = layout.names.format("train", 0, 1) if layout is not None else ""
        text = next((kind for suffix, kind in _BEAM_SUFFIXES.items() if shard.lower().endswith(suffix)),
                    "uncompressed")
    found = _BEAM_COMPRESSION.get(text or "")
    if found is None:
        raise WriterOptionError(f"compression_type must be a Compression or one of {['auto', *_BEAM_COMPRESSION]} "
                                f"(Beam's CompressionTypes that TFRecord readers open), got {compression_type!r}"
                                + (f" (from the file name, 'auto' gives {text!r})" if text != compression_type else ""))
    return found


def encoder_of(coder: Any) -> Callable[[Any], bytes] | None:
    """The function that turns an element into its record (``coder.encode``); None for bytes as they are
    (no coder, or ``BytesCoder``: elements that are protobuf messages are serialized by the writer).

    Raises:
        WriterOptionError: for a coder that is not a ``beam.coders.Coder``.
    """
    if coder is None or type(coder) is beam.coders.BytesCoder:
        return None
    if not isinstance(coder, beam.coders.Coder):
        raise WriterOptionError(f"coder must be a beam.coders.Coder (ProtoCoder(tf.train.Example)...), got {coder!r}")
    return coder.encode


def check_output_free(layout: PrefixLayout) -> None:
    """Refuses a prefix whose folder is a file, or files in the names the shards take that the dataset now
    published there (if any) does not list: another job's. Lists ``FOLDER/PREFIX*`` once.

    Raises:
        OutputPathError: naming the path.
    """
    folder = layout.folder
    # A local folder holds "." (a file does not); an object store's folder is no object, a file is one.
    if folder and storage.exists(folder) and not storage.exists(storage.join(folder, ".")):
        raise OutputPathError(folder, f"file_path_prefix {layout.file_path_prefix!r}: its folder {folder!r} is a "
                                      "file, where shards cannot go; name a prefix in a folder")
    ours = _published_shards(layout)
    foreign = []
    prefix = layout.names.prefix  # its last letter as a class: a glob's literal part that is a file lists only it
    for path, _ in storage.list_files(layout.shard_path(f"{prefix[:-1]}[{prefix[-1]}]*")):
        name = split_path(path)[1]
        if split_path(path)[0] == folder and name not in ours and _is_shard_name(layout.names, name):
            foreign.append(path)
    if foreign:
        raise OutputPathError(foreign[0], f"file_path_prefix {layout.file_path_prefix!r}: {len(foreign)} file(s) "
                                          f"another job wrote take the names of its shards ({', '.join(foreign[:3])}"
                                          f"{', ...' if len(foreign) > 3 else ''}); delete them or write to another "
                                          "prefix")


def _is_shard_name(names: PrefixShardNames, filename: str) -> bool:
    try:
        names.parse(filename)
    except ShardNameError:
        return False
    return True


def _published_shards(layout: PrefixLayout) -> set[str]:
    """File names the manifest published at this prefix lists (none when there is none, or it is unreadable)."""
    if not storage.exists(layout.manifest_path):
        return set()
    try:
        manifest = Manifest.loads(storage.read_bytes(layout.manifest_path))
    except BeamTFRecordError:
        return set()  # not ours to trust: its files count as another job's
    return {shard.filename for shard in manifest.shards}
