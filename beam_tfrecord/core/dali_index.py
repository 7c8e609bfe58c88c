"""What the manifest says of NVIDIA DALI's index of a shard: its name, and which shards can have one.

Only an uncompressed TFRecord file can be indexed (``unsupported_reason``); the index is written by
``interop.dali``. See docs/manifest.md, "Files for other tools".
"""

from __future__ import annotations

from beam_tfrecord.core.file_format import Compression, FileFormat

DALI_INDEX_SUFFIX = ".idx"  # ``<shard file name>.idx``, beside the shard


def dali_index_name(shard_filename: str) -> str:
    """The index file name of a shard: ``<shard file name>.idx`` (the manifest lists it as this)."""
    return shard_filename + DALI_INDEX_SUFFIX


def unsupported_reason(compression: Compression, file_format: FileFormat) -> str | None:
    """Why shards of this compression and format cannot have a DALI index, or None when they can."""
    if not file_format.stores_framed_records:
        return (f"DALI reads TFRecord files; {file_format.value} shards are not a sequence of framed records "
                "(use --file_format tfrecord)")
    if compression is not Compression.NONE:
        return (f"a DALI index gives offsets in the file as stored, and DALI reads uncompressed TFRecord files "
                f"only; these shards are {compression.name}-compressed (use --compression none)")
    return None
