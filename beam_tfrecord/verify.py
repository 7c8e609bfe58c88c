"""Verification: read every record of every shard and check it against the manifest."""

from __future__ import annotations

import dataclasses

from beam_tfrecord import storage
from beam_tfrecord.array_records import ArrayRecordShardReader
from beam_tfrecord.core.framing import FRAMING_BYTES, iter_records
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.core.naming import Compression, FileFormat
from beam_tfrecord.dataset import load_manifest, resolve_dataset_dir
from beam_tfrecord.errors import CorruptShardError


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    num_shards: int
    num_records: int
    num_bytes: int


def _read_tfrecord(path: str, compression: Compression) -> tuple[int, int]:
    """(records, framed bytes) of a TFRecord shard, checking every record's CRCs."""
    count = record_bytes = 0
    with storage.open_read(path, compression) as stream:
        for data in iter_records(stream, name=path):
            count += 1
            record_bytes += len(data) + FRAMING_BYTES
    return count, record_bytes


def _read_array_record(path: str, shard: ShardInfo, block_records: int = 1024) -> tuple[int, int]:
    """(records, TFRecord-framed bytes) of an ArrayRecord shard; reading checks its chunk hashes."""
    reader = ArrayRecordShardReader(path, crc32c=shard.crc32c, num_records=shard.num_records)
    record_bytes = 0
    try:
        for begin in range(0, shard.num_records, block_records):
            records = reader.read_range(begin, min(begin + block_records, shard.num_records))
            record_bytes += sum(len(r) + FRAMING_BYTES for r in records)
    finally:
        reader.close()
    return shard.num_records, record_bytes


def verify_dataset(dataset_dir: str) -> VerifyReport:
    """Checks every shard's size, every record's CRCs (reporting the offset of the first bad one),
    the record count and bytes, and the whole file's CRC32C against the manifest. ArrayRecord
    shards are read record by record too (their chunk hashes checked by the format's reader).

    Raises:
        CorruptShardError: naming the first shard (and offset, for framing errors) that fails.
    """
    dataset_dir = resolve_dataset_dir(dataset_dir)  # a refresh root means its latest complete version
    manifest = load_manifest(dataset_dir)
    records = 0
    for shard in manifest.shards:
        path = storage.join(dataset_dir, shard.filename)
        if not storage.exists(path):
            raise CorruptShardError(path, "listed in the manifest but missing")
        crc32c, size = storage.crc32c_and_size(path)
        if size != shard.num_bytes:
            raise CorruptShardError(path, f"size {size} bytes, manifest says {shard.num_bytes}")
        if manifest.file_format is FileFormat.ARRAY_RECORD:
            count, record_bytes = _read_array_record(path, shard)
        else:
            count, record_bytes = _read_tfrecord(path, manifest.compression)
        if count != shard.num_records:
            raise CorruptShardError(path, f"{count} records, manifest says {shard.num_records}")
        if record_bytes != shard.num_record_bytes:
            raise CorruptShardError(path, f"{record_bytes} record bytes, manifest says {shard.num_record_bytes}")
        if crc32c != shard.crc32c:
            raise CorruptShardError(path, f"file CRC32C {crc32c} differs from the manifest's {shard.crc32c}")
        records += count
    return VerifyReport(num_shards=len(manifest.shards), num_records=records,
                        num_bytes=sum(s.num_bytes for s in manifest.shards))
