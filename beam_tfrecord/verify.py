"""Verification: read every record of every shard and check it against the manifest."""

from __future__ import annotations

import dataclasses

from beam_tfrecord import storage
from beam_tfrecord.core.framing import FRAMING_BYTES
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.dataset import open_dataset
from beam_tfrecord.errors import CorruptShardError, MissingShardError
from beam_tfrecord.formats import ShardCount, ShardReader, shard_format
from beam_tfrecord.interop.dali import DaliIndexBuilder
from beam_tfrecord.statistics import check_statistics


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    num_shards: int
    num_records: int
    num_bytes: int


def verify_dataset(dataset_dir: str) -> VerifyReport:
    """Checks every shard's size, every record's CRCs (reporting the offset of the first bad one),
    the record count and bytes, and the whole file's CRC32C against the manifest, and each listed
    DALI index against the records it indexes (in the same pass); then the statistics file, if listed.
    Shards are read through their format's reader (``beam_tfrecord.formats``; ArrayRecord checks its chunk hashes).

    Raises:
        MissingShardError: naming the first listed shard (or DALI index) that is not on storage.
        CorruptShardError: naming the first shard (and offset, for framing errors) that fails.
        StatisticsFileError: when ``statistics.pb`` is missing, does not parse or counts other records.
    """
    dataset = open_dataset(dataset_dir)  # a refresh root means its latest complete version; a Beam prefix, its shards
    dataset_dir, manifest = dataset.directory, dataset.manifest
    file_format = shard_format(manifest.file_format)
    records = 0
    for shard in manifest.shards:
        path = storage.join(dataset_dir, shard.filename)
        if not storage.exists(path):
            raise MissingShardError(path)
        crc32c, size = storage.crc32c_and_size(path)
        if size != shard.num_bytes:
            raise CorruptShardError(path, f"size {size} bytes, manifest says {shard.num_bytes}")
        with file_format.open_reader(path, shard, compression=manifest.compression) as reader:
            found = reader.count() if shard.dali_index is None else _count_checking_dali_index(
                reader, shard, storage.join(dataset_dir, shard.dali_index))
        if found.num_records != shard.num_records:
            raise CorruptShardError(path, f"{found.num_records} records, manifest says {shard.num_records}")
        if found.num_record_bytes != shard.num_record_bytes:
            raise CorruptShardError(path, f"{found.num_record_bytes} record bytes, manifest says "
                                          f"{shard.num_record_bytes}")
        if crc32c != shard.crc32c:
            raise CorruptShardError(path, f"file CRC32C {crc32c} differs from the manifest's {shard.crc32c}")
        records += found.num_records
    check_statistics(dataset.metadata_dir or dataset_dir, manifest)  # beside the manifest
    return VerifyReport(num_shards=len(manifest.shards), num_records=records,
                        num_bytes=sum(s.num_bytes for s in manifest.shards))


def _count_checking_dali_index(reader: ShardReader, shard: ShardInfo, index_path: str) -> ShardCount:
    """Counts a shard as ``reader.count()`` does, and checks its DALI index against the records read."""
    if not storage.exists(index_path):
        raise MissingShardError(index_path)
    index = DaliIndexBuilder()
    for record, _ in reader.iter_records(0, shard.num_records):
        index.add(len(record) + FRAMING_BYTES)
    if storage.read_bytes(index_path) != index.text():
        raise CorruptShardError(index_path, f"the DALI index differs from the {index.num_records} records of "
                                            f"{shard.filename} (offset and size per record)")
    return ShardCount(index.num_records, index.total_bytes)
