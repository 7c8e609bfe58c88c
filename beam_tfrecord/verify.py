"""Verification: read every record of every shard and check it against the manifest.

A version's shards may be stored in earlier versions of its root (``dataset.shard_file_path`` finds them) and
have deleted records: a file still holds every record it was written with (``ShardInfo.num_records``), so that is
what is checked; the report counts the live ones, what readers return. A shard's column files are checked as
shards are, and against their base shard: one row per record, named for it, empty where it deletes.
"""

from __future__ import annotations

import dataclasses

from beam_tfrecord import storage
from beam_tfrecord.core.columns import COLUMNS_DIRNAME, ColumnFile
from beam_tfrecord.core.example_parts import map_entries
from beam_tfrecord.core.framing import FRAMING_BYTES
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.dataset import LoadedDataset, open_dataset, shard_file_path
from beam_tfrecord.errors import CorruptShardError, MissingShardError
from beam_tfrecord.formats import ShardCount, ShardReader, shard_format
from beam_tfrecord.formats.joined import column_shard
from beam_tfrecord.interop.dali import DaliIndexBuilder
from beam_tfrecord.statistics import check_statistics


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What ``verify_dataset`` checked.

    Attributes:
        num_shards: shards the version lists.
        num_records: their live records (what a reader returns; the deleted ones left out).
        num_bytes: the listed files' stored bytes.
        num_deleted: records of the listed files that the version no longer holds (deletion vectors).
        num_shared_shards: listed shards stored in earlier versions of the root.
    """

    num_shards: int
    num_records: int
    num_bytes: int
    num_deleted: int = 0
    num_shared_shards: int = 0
    num_column_files: int = 0

    def summary(self) -> str:
        """One line for people: ``4 shards (3 stored in earlier versions), 11 records (3 deleted not counted)``."""
        shared = f" ({self.num_shared_shards} stored in earlier versions)" if self.num_shared_shards else ""
        deleted = f" ({self.num_deleted} deleted not counted)" if self.num_deleted else ""
        columns = f", {self.num_column_files} column files" if self.num_column_files else ""
        return f"{self.num_shards} shards{shared}{columns}, {self.num_records} records{deleted}, {self.num_bytes} bytes"


def verify_dataset(dataset_dir: str) -> VerifyReport:
    """Checks every shard's size, every record's CRCs (reporting the offset of the first bad one),
    the record count (of the file: deleted records are still in it) and bytes, and the whole file's CRC32C
    against the manifest, wherever the file is stored (``dataset.shard_file_path``), and each listed
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
    for shard in manifest.shards:
        path = dataset.shard_path(shard)
        crc32c = _check_stored(path, shard.num_bytes)
        with file_format.open_reader(path, shard, compression=manifest.compression) as reader:
            found = reader.count() if shard.dali_index is None else _count_checking_dali_index(
                reader, shard, shard_file_path(dataset_dir, shard, shard.dali_index))
        if found.num_records != shard.num_records:
            raise CorruptShardError(path, f"{found.num_records} records, manifest says {shard.num_records}")
        if found.num_record_bytes != shard.num_record_bytes:
            raise CorruptShardError(path, f"{found.num_record_bytes} record bytes, manifest says "
                                          f"{shard.num_record_bytes}")
        if crc32c != shard.crc32c:
            raise CorruptShardError(path, f"file CRC32C {crc32c} differs from the manifest's {shard.crc32c}")
        for column in shard.columns:
            _check_column(dataset, shard, column)
    check_statistics(dataset.metadata_dir or dataset_dir, manifest)  # beside the manifest
    return VerifyReport(num_shards=len(manifest.shards), num_records=manifest.num_written,
                        num_bytes=sum(s.num_bytes for s in manifest.shards), num_deleted=manifest.num_deleted,
                        num_shared_shards=sum(1 for s in manifest.shards if s.stored_in is not None),
                        num_column_files=sum(len(s.columns) for s in manifest.shards))


def _check_stored(path: str, num_bytes: int) -> str:
    """The CRC32C of a listed file, after checking it is there with the size listed."""
    if not storage.exists(path):
        raise MissingShardError(path)
    crc32c, size = storage.crc32c_and_size(path)
    if size != num_bytes:
        raise CorruptShardError(path, f"size {size} bytes, manifest says {num_bytes}")
    return crc32c


def _check_column(dataset: LoadedDataset, shard: ShardInfo, column: ColumnFile) -> None:
    """A column file is its base shard's: named for it, of the size and CRC32C listed, one row per record of the
    shard (read whole, every record checked as a shard's are), an empty row at each deleted position.

    Raises:
        MissingShardError, CorruptShardError: naming the column file, and the base shard when they do not align.
    """
    path = dataset.shard_path(column_shard(shard, column))
    base = dataset.shard_path(shard)
    if not column.filename.endswith(f"-{shard.filename}"):
        raise CorruptShardError(path, f"listed as a column file of {base!r}, but named for another shard (a column "
                                      f"file of it is named {COLUMNS_DIRNAME}/<version>-{shard.filename})")
    crc32c = _check_stored(path, column.num_bytes)
    deleted = shard.deletions.positions if shard.deletions is not None else ()
    rows = 0
    with shard_format(dataset.manifest.file_format).open_reader(
            path, column_shard(shard, column), compression=dataset.manifest.compression) as reader:
        try:
            for row, offset in reader.iter_records(0, shard.num_records):
                if rows in deleted and any(True for _ in map_entries(row, where=path)):
                    raise CorruptShardError(path, f"row {rows} holds features, but record {rows} of its base shard "
                                                  f"{base!r} is deleted: the file is not aligned with it", offset)
                rows += 1
        except CorruptShardError as err:  # a count or damage: either way, name the base shard too
            raise CorruptShardError(path, f"{err.reason} (a column file of {base!r}, {shard.num_records} records)",
                                    err.offset) from err
    if crc32c != column.crc32c:
        raise CorruptShardError(path, f"file CRC32C {crc32c} differs from the manifest's {column.crc32c} (a column "
                                      f"file of {base!r})")


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
