"""NVIDIA DALI: a shard's index written with the shard, and the reader's arguments from the manifest.

A DALI pipeline then needs neither ``tfrecord2idx`` nor a hand-written spec. See docs/reading.md, "NVIDIA DALI".
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.core.framing import FRAMING_BYTES
from beam_tfrecord.core.schema import ClassLabel, DType, Feature, FixedList, Scalar, VarList
from beam_tfrecord.dataset import open_dataset, shard_file_path
from beam_tfrecord.errors import ReaderError
from beam_tfrecord.formats.base import ShardWriter
from beam_tfrecord.interop.self_contained import require_self_contained


class DaliIndexBuilder:
    """Collects the framed size of each record appended to a shard; ``text()`` is the index file.

    Memory: 8 bytes per record (a shard of 1 GiB of 100-byte records: ~9.3 M records, 75 MB).
    """

    def __init__(self) -> None:
        self._sizes = array("q")

    def add(self, framed_bytes: int) -> None:
        """Records the next record's framed size (data + 16 bytes)."""
        self._sizes.append(framed_bytes)

    def add_many(self, framed_sizes: list[int]) -> None:
        """``add`` of each of ``framed_sizes``, in order."""
        self._sizes.extend(framed_sizes)

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


class DaliIndexingWriter(ShardWriter):
    """A shard writer that also writes the shard's DALI index to ``index_path`` when it closes.

    Only for writers whose file is the records' TFRecord framing, uncompressed
    (``core.dali_index.unsupported_reason`` is None): the offsets are the framed sizes summed.
    """

    def __init__(self, inner: ShardWriter, index_path: str) -> None:
        self._inner = inner
        self._index_path = index_path
        self._index = DaliIndexBuilder()

    def append(self, record: bytes) -> None:
        self._index.add(len(record) + FRAMING_BYTES)
        self._inner.append(record)

    def append_framed(self, framed: bytes | memoryview) -> None:
        self._index.add(len(framed))
        self._inner.append_framed(framed)

    def append_framed_block(self, block: bytes, framed_sizes: list[int]) -> None:
        self._index.add_many(framed_sizes)
        self._inner.append_framed_block(block, framed_sizes)

    def append_parts(self, parts: Sequence[bytes], record_bytes: int) -> None:
        self._index.add(record_bytes + FRAMING_BYTES)
        self._inner.append_parts(parts, record_bytes)

    def close(self) -> tuple[str, int]:
        crc32c, stored_bytes = self._inner.close()
        storage.write_bytes_atomic(self._index_path, self._index.text())
        return crc32c, stored_bytes


def _dali_feature(feature: Feature, tfrec: Any) -> Any:
    """DALI's spec of one feature. Bytes features (images, tensors' raw bytes, strings) come as uint8
    arrays; an absent (empty) ``VarList`` reads as an empty array."""
    dtypes = {DType.INT64: tfrec.int64, DType.FLOAT32: tfrec.float32, DType.BYTES: tfrec.string,
              DType.STRING: tfrec.string}
    if isinstance(feature, ClassLabel):
        return tfrec.FixedLenFeature([], tfrec.int64, -1)
    if isinstance(feature, (Scalar, FixedList, VarList)):
        default = {DType.INT64: 0, DType.FLOAT32: 0.0}.get(feature.dtype, "")
        if isinstance(feature, VarList):
            return tfrec.VarLenFeature(dtypes[feature.dtype], default)
        shape = [feature.length] if isinstance(feature, FixedList) else []
        return tfrec.FixedLenFeature(shape, dtypes[feature.dtype], default)
    return tfrec.FixedLenFeature([], tfrec.string, "")  # Image, Tensor: one bytes value


def dali_unreadable_reason(feature: Feature) -> str | None:
    """Why DALI's tfrecord reader cannot parse ``feature``, or None when it can."""
    if isinstance(feature, VarList) and feature.dtype in (DType.BYTES, DType.STRING):
        return "DALI's tfrecord reader has no variable-length string features ('Tensors of strings are not supported')"
    return None


def dali_reader_args(path: str, *, split: str = "train", features: Sequence[str] | None = None) -> dict[str, Any]:
    """``path``, ``index_path`` and ``features`` for ``nvidia.dali.fn.readers.tfrecord``, for one split.

    Args:
        path: a dataset directory (or versioned root) on a local filesystem, written with ``dali_index``.
        split: the split whose shards to read, in manifest order (DALI's ``shard_id`` / ``num_shards``
            then divide its records between pipelines).
        features: the features to parse; None: every feature DALI can parse (all but variable-length
            lists of strings or bytes, ``dali_unreadable_reason``).

    Raises:
        ReaderError: the dataset has no DALI index (written without ``--dali_index``) or is not local,
            or a feature asked for is not in the schema or not readable by DALI.
        NotSelfContainedError: the version shares shards with earlier ones or deletes records (DALI's index
            lists every record of a file): ``beam-tfrecord compact ROOT`` first.
        ImportError: DALI is not installed (``pip install nvidia-dali-cuda120``).
    """
    dataset = open_dataset(path)
    require_self_contained(dataset, reader="NVIDIA DALI's tfrecord reader")
    if storage.is_remote(dataset.directory):
        raise ReaderError(f"{path!r}: DALI's tfrecord reader opens local files; copy the dataset or mount the bucket")
    shards = dataset.manifest.split(split).shards
    if any(shard.dali_index is None for shard in shards):
        raise ReaderError(f"{path!r}: written without DALI indexes; build it again with --dali_index "
                          "(dali_index=True), or make them with DALI's tfrecord2idx")
    schema = dataset.manifest.schema
    if schema.sequence_features:
        raise ReaderError(f"{path!r}: records are tf.train.SequenceExample; DALI's tfrecord reader parses "
                          "tf.train.Example only")
    names = [n for n, f in schema.features.items() if dali_unreadable_reason(f) is None] if features is None \
        else list(features)
    for name in names:
        if name not in schema.features:
            raise ReaderError(f"feature {name!r}: not in the schema (features: {sorted(schema.features)})")
        reason = dali_unreadable_reason(schema.features[name])
        if reason is not None:
            raise ReaderError(f"feature {name!r}: {reason}")
    import nvidia.dali.tfrecord as tfrec  # the dataset is checked first: its errors do not need DALI installed

    return {"path": [dataset.shard_path(s) for s in shards],
            "index_path": [shard_file_path(dataset.directory, s, str(s.dali_index)) for s in shards],
            "features": {name: _dali_feature(schema.features[name], tfrec) for name in names}}
