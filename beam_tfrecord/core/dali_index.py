"""NVIDIA DALI's index of a TFRecord shard, built while the shard is written: one ``"<offset> <size>"`` line per record.

Only an uncompressed TFRecord file can be indexed (``unsupported_reason``). See docs/manifest.md, "Files for
other tools".
"""

from __future__ import annotations

from array import array

from beam_tfrecord.core.naming import Compression, FileFormat

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


class DaliIndexBuilder:
    """Collects the framed size of each record appended to a shard; ``text()`` is the index file.

    Memory: 8 bytes per record (a shard of 1 GiB of 100-byte records: ~9.3 M records, 75 MB).
    """

    def __init__(self) -> None:
        self._sizes = array("q")

    def add(self, framed_bytes: int) -> None:
        """Records the next record's framed size (data + 16 bytes)."""
        self._sizes.append(framed_bytes)

    @property
    def num_records(self) -> int:
        return len(self._sizes)

    @property
    def total_bytes(self) -> int:
        """The framed bytes of every record added (the shard's ``num_record_bytes``)."""
        return sum(self._sizes)

    def text(self) -> bytes:
        """The index: ``"<offset> <size>\\n"`` per record, offsets from 0 in file order."""
        lines = []
        offset = 0
        for size in self._sizes:
            lines.append(f"{offset} {size}\n")
            offset += size
        return "".join(lines).encode("ascii")
