"""A block of serialized Examples -> column arrays, without TensorFlow: vectorized for fixed layouts.

The fast path takes a block only when its layout accounts for every byte; anything else goes through the
protobuf library (``numpy_decode``), the reference and the source of every decoding error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from beam_tfrecord.core.blocks import RecordBlock
from beam_tfrecord.core.record_schema import RAW_FEATURE
from beam_tfrecord.core.schema import ClassLabel, DType, Feature, FixedList, Image, Scalar, Schema, Tensor
from beam_tfrecord.core.wire import read_varint
from beam_tfrecord.reader.decode.batch_rows import BatchRows, adjacent
from beam_tfrecord.reader.decode.numpy_decode import Example, RecordDecoder, decode_image
from beam_tfrecord.reader.decode.ragged import Allocate, RaggedArray, allocate
from beam_tfrecord.reader.options import ImageDecoding

# One block's columns: an array whose first dimension is the records (numbers, tensors, fixed lists of bytes as
# object arrays, decoded images), a RaggedArray (bytes scalars and encoded images of a fixed layout), or a list
# (the same from the protobuf library, variable-length and sequence features).
Columns = dict[str, Any]
_VARINT_BYTES = np.arange(10)
_SHIFTS = (7 * np.arange(10)).astype(np.uint64)
_MAX_LENGTH = 1 << 31  # protobuf's limit on a length-delimited field
_KIND_TAG = {DType.BYTES: 0x0A, DType.STRING: 0x0A, DType.FLOAT32: 0x12, DType.INT64: 0x1A}


class _Mismatch(Exception):
    """A record of the block does not have the fixed layout (the block goes to the protobuf library)."""


class _Cursor:
    """One position per record of a block, moved through the wire format together."""

    def __init__(self, block: RecordBlock, allocate_values: Allocate, *, views: bool = False) -> None:
        self.allocate = allocate_values
        self.views = views  # evenly spaced values as views into the block's buffer, not copies
        self.data = block.buffer
        self.last = len(self.data) - 1
        self.pos = block.starts.copy()

    def own(self, array: np.ndarray) -> np.ndarray:
        """``array`` copied into the cursor's ``Allocate`` when that is not the default (shared memory)."""
        if self.allocate is allocate:
            return array
        out = self.allocate(array.size, array.dtype).reshape(array.shape)
        out[...] = array
        return out

    def require(self, condition: Any) -> None:
        """Raises _Mismatch unless ``condition`` (a bool or an array of them) holds everywhere."""
        if not (condition.all() if isinstance(condition, np.ndarray) else condition):
            raise _Mismatch

    def tag(self, expected: int) -> None:
        self.require(self.data[np.minimum(self.pos, self.last)] == expected)
        self.pos += 1

    def varint(self) -> np.ndarray:
        """The varint at each position (uint64), moving past it."""
        first = self.data[np.minimum(self.pos, self.last)]
        if (first < 0x80).all():  # the common case: one byte
            self.pos += 1
            return first.astype(np.uint64)
        second = self.data[np.minimum(self.pos + 1, self.last)]
        one = first < 0x80
        if (one | (second < 0x80)).all():  # at most two bytes (lengths under 16 KiB): no (records, 10) gather
            self.pos += np.where(one, 1, 2)
            return np.where(one, first, (first & 0x7F) | (second.astype(np.uint64) << 7)).astype(np.uint64)
        raw = self.data[np.minimum(self.pos[:, None] + _VARINT_BYTES, self.last)]
        ends = raw < 0x80
        self.require(ends.any(axis=1))
        width = ends.argmax(axis=1) + 1
        self.require((width < 10) | (raw[:, 9] <= 1))  # longer than 64 bits: left to the protobuf library
        parts = (raw & 0x7F).astype(np.uint64) << _SHIFTS
        parts[width[:, None] <= _VARINT_BYTES] = 0
        self.pos += width
        return np.bitwise_or.reduce(parts, axis=1)

    def length(self, limit: np.ndarray) -> np.ndarray:
        """A length varint that must fit before ``limit`` (int64)."""
        value = self.varint()
        self.require(value < _MAX_LENGTH)
        length = value.astype(np.int64)
        self.require(self.pos + length <= limit)
        return length

    def gather(self, size: int, *, allocated: bool = False) -> np.ndarray:
        """(records, size) bytes at the positions, moving past them: one strided copy per run of evenly spaced
        positions (a block of fixed-size records is one run; each record a reader dropped from it splits one);
        ``allocated``: into an array from the cursor's ``Allocate`` (a column handed out)."""
        pos = self.pos
        runs = _even_runs(pos) if size else None
        if runs is None:
            out = self.data[pos[:, None] + np.arange(size)] if size else np.zeros((len(pos), 0), np.uint8)
        elif self.views and len(runs[0]) == 1:
            out = np.lib.stride_tricks.as_strided(self.data[pos[0]:], shape=(len(pos), size), strides=(runs[1], 1))
        else:
            out = self.allocate(len(pos) * size, np.dtype(np.uint8)).reshape(len(pos), size) if allocated else \
                np.empty((len(pos), size), np.uint8)
            starts, stride = runs
            offsets = pos[starts].tolist()
            for begin, end, offset in zip(starts.tolist(), [*starts[1:].tolist(), len(pos)], offsets):
                # np.ndarray over the buffer: a strided view at a fifth of as_strided's cost per run
                np.copyto(out[begin:end], np.ndarray((end - begin, size), np.uint8, buffer=self.data, offset=offset,
                                                     strides=(stride, 1)))
        self.pos = pos + size
        return out


_MIN_RUN_POSITIONS = 16  # positions per run on average, else one gather (a Python step per run costs more)


def _even_runs(pos: np.ndarray) -> tuple[np.ndarray, int] | None:
    """Where each run of positions ``stride`` apart starts (indexes into ``pos``), and the stride (the least
    step); None when the positions are not mostly evenly spaced, ascending."""
    if len(pos) < 2:
        return (np.zeros(1, dtype=np.int64), 1) if len(pos) else None
    steps = np.diff(pos)
    stride = int(steps.min())
    if stride <= 0:
        return None
    starts = np.flatnonzero(steps != stride) + 1
    if (len(starts) + 1) * _MIN_RUN_POSITIONS > len(pos):
        return None
    return np.concatenate([[0], starts]), stride


def _fixed_bytes(cursor: _Cursor, limit: np.ndarray, size: int) -> np.ndarray:
    """One BytesList value of ``size`` bytes per record, as (records, size)."""
    cursor.tag(0x0A)
    cursor.require(cursor.length(limit) == size)
    return cursor.gather(size, allocated=True)


def _one_bytes(cursor: _Cursor, limit: np.ndarray) -> RaggedArray:
    """One BytesList value per record: views into the block's buffer (packed once per batch where needed)."""
    cursor.tag(0x0A)
    lengths = cursor.length(limit)
    ragged = RaggedArray.mapped(cursor.data, cursor.pos, lengths)
    cursor.pos = cursor.pos + lengths
    return ragged


def _bytes_lists(cursor: _Cursor, count: int, limit: np.ndarray) -> list[list[bytes]]:
    """``count`` BytesList values per record, as lists."""
    values: list[list[bytes]] = [[] for _ in range(len(cursor.pos))]
    for _ in range(count):
        cursor.tag(0x0A)
        lengths = cursor.length(limit)
        for row, (start, length) in enumerate(zip(cursor.pos.tolist(), lengths.tolist())):
            values[row].append(cursor.data[start:start + length].tobytes())
        cursor.pos = cursor.pos + lengths
    return values


def _numbers(cursor: _Cursor, dtype: DType, count: int, limit: np.ndarray) -> np.ndarray:
    """``count`` packed FloatList / Int64List values per record, as (records, count)."""
    cursor.tag(0x0A)
    packed = cursor.length(limit)
    if dtype is DType.FLOAT32:
        cursor.require(packed == 4 * count)
        return cursor.gather(4 * count).view("<f4").astype(np.float32)
    end = cursor.pos + packed
    values = np.stack([cursor.varint() for _ in range(count)], axis=1).view(np.int64)
    cursor.require(cursor.pos == end)
    return values


class FixedLayout:
    """The vectorized Example decoder of a schema with a fixed number of values per feature.

    Use ``FixedLayout.of(schema)`` (None for schemas it does not cover). Entries are found by name (every record's
    key checked), so joined records (a ``features`` field per part) and ``RecordBlock.parts`` take this path too.
    """

    def __init__(self, schema: Schema, allocate_values: Allocate = allocate) -> None:
        self._allocate = allocate_values
        self._features = dict(schema.features)
        self._keys = {name: np.frombuffer(name.encode("utf-8"), dtype=np.uint8) for name in schema.features}
        self._longest_key = max(map(len, self._keys.values()), default=0)

    @staticmethod
    def of(schema: Schema, allocate_values: Allocate = allocate) -> "FixedLayout | None":
        fixed = (Scalar, FixedList, ClassLabel, Tensor, Image)
        if schema.sequence_features or not schema.features or \
                not all(isinstance(f, fixed) for f in schema.features.values()):
            return None
        return FixedLayout(schema, allocate_values)

    def parse(self, block: RecordBlock, *, views: bool = False) -> Columns | None:
        """The block's columns (images still encoded), or None when a record does not have the layout."""
        out: Columns = {}
        pieces = (block.own(), *block.parts)
        found = all(len(p) and len(p.buffer) and self._parse_piece(p, out, views=views) for p in pieces)
        return out if found and len(out) == len(self._features) else None

    def _parse_piece(self, block: RecordBlock, out: Columns, *, views: bool) -> bool:
        """Adds the features of a block's records to ``out``; False when a record does not have the layout."""
        cursor = _Cursor(block, self._allocate, views=views)
        ends = block.starts + block.lengths
        try:
            while not (done := cursor.pos == ends).all():
                cursor.require(~done)
                cursor.tag(0x0A)  # Example.features (a joined record has one per part)
                features_end = cursor.pos + cursor.length(ends)
                while not (done := cursor.pos == features_end).all():
                    cursor.require(~done)
                    if (name := self._next_name(cursor)) is None or name in out:
                        raise _Mismatch
                    out[name] = self._entry(cursor, name, self._features[name], features_end)
        except _Mismatch:
            return False
        return True

    def _next_name(self, cursor: _Cursor) -> str | None:
        """The feature name of the map entry at the first record's position (None: not one of the schema's)."""
        at = int(cursor.pos[0])
        head = cursor.data[at:at + 12 + self._longest_key].tobytes()  # entry tag, length, key tag, length, key
        try:
            key_at = read_varint(head, 1)[1]
            size, at = read_varint(head, key_at + 1)
            name = head[at:at + size].decode("utf-8") if head[0] == head[key_at] == 0x0A else None
        except (IndexError, UnicodeDecodeError):
            return None
        return name if name in self._features else None

    def _entry(self, cursor: _Cursor, name: str, feature: Feature, ends: np.ndarray) -> Any:
        """One map entry (key, Feature) of every record."""
        cursor.tag(0x0A)
        entry_end = cursor.pos + cursor.length(ends)
        key = self._keys[name]
        cursor.tag(0x0A)
        cursor.require(cursor.length(entry_end) == len(key))
        cursor.require(cursor.gather(len(key)) == key)
        cursor.tag(0x12)
        cursor.require(cursor.length(entry_end) + cursor.pos == entry_end)
        dtype = DType.INT64 if isinstance(feature, ClassLabel) else \
            DType.BYTES if isinstance(feature, (Tensor, Image)) else feature.dtype
        cursor.tag(_KIND_TAG[dtype])
        cursor.require(cursor.length(entry_end) + cursor.pos == entry_end)
        count = feature.length if isinstance(feature, FixedList) else 1
        if isinstance(feature, Tensor):
            item = np.dtype(feature.dtype.value).newbyteorder("<")
            raw = _fixed_bytes(cursor, entry_end, feature.num_elements * item.itemsize)
            value: Any = raw.view(item).astype(item.newbyteorder("="), copy=False).reshape(-1, *feature.shape)
        elif dtype in (DType.BYTES, DType.STRING):
            if isinstance(feature, FixedList):
                lists = _bytes_lists(cursor, count, entry_end)
                value = np.empty((len(lists), count), dtype=object)
                value[:] = lists
            else:
                value = _one_bytes(cursor, entry_end)
        else:
            numbers = _numbers(cursor, dtype, count, entry_end)
            value = cursor.own(numbers if isinstance(feature, FixedList) else numbers[:, 0])
        cursor.require(cursor.pos == entry_end)
        return value


def _stackable(feature: Feature, decoding: ImageDecoding | None) -> bool:
    """Whether a feature's column is an array (else a list): fixed-size values, or decoded images."""
    if isinstance(feature, Image):
        return decoding is not None
    if isinstance(feature, (Scalar, ClassLabel)):
        return feature.dtype not in (DType.BYTES, DType.STRING) if isinstance(feature, Scalar) else True
    return isinstance(feature, (FixedList, Tensor))


class BlockDecoder:
    """Decodes blocks of records of one schema into columns. Build once, call ``decode`` per block.

    Args:
        schema: the dataset's schema.
        image_decoding: decode ``Image`` features with Pillow; None keeps the encoded bytes.
        verbatim: the records are raw payloads as written (``holds_verbatim_payloads``): each is returned
            whole as the schema's one bytes feature.
        views: fixed-size columns may be views into the block's buffer (valid while it is): no copies.
        allocate_values: where columns of the fast path go (shared memory in a DataLoader worker).
        absent_lists: a variable-length list absent from a record is None, not empty (for statistics).
    """

    def __init__(self, schema: Schema, *, image_decoding: ImageDecoding | None = None, verbatim: bool = False,
                 views: bool = False, allocate_values: Allocate = allocate, absent_lists: bool = False,
                 batch_rows: int | None = None) -> None:
        self.schema = schema
        self._views = views
        self._verbatim = verbatim
        self._allocate = allocate_values
        self._records = RecordDecoder(schema, image_decoding=image_decoding, absent_lists=absent_lists)
        self._layout = FixedLayout.of(schema, allocate_values)
        self._stack = {name: _stackable(f, image_decoding) for name, f in schema.features.items()}
        self._stack.update({name: False for name in schema.sequence_features})
        self._images: dict[str, Callable[[bytes], np.ndarray]] = {}
        self._rows: dict[str, BatchRows] = {}
        if image_decoding is not None:
            for name, feature in schema.features.items():
                if isinstance(feature, Image):
                    self._images[name] = decode_image(name, feature, image_decoding)
                    if batch_rows is not None:
                        self._rows[name] = BatchRows(batch_rows, allocate_values)

    def decode(self, block: RecordBlock) -> Columns:
        """The block's columns, in the order of its records.

        Raises:
            CorruptShardError: when a record is not a valid proto of the schema, naming its shard and offset.
        """
        if self._verbatim:
            return {RAW_FEATURE: RaggedArray.mapped(block.buffer, block.starts, block.lengths)}
        columns = self._layout.parse(block, views=self._views) if self._layout is not None else None
        if columns is None:
            return self.columns([self._records.decode(block.record(i), shard=block.path_of(i), offset=int(offset))
                                 for i, offset in enumerate(block.offsets.tolist())])
        for name, decode in self._images.items():
            columns[name] = self._decoded_images(block, name, columns[name], decode)
        return columns

    def _decoded_images(self, block: RecordBlock, name: str, encoded: RaggedArray,
                        decode: Callable[[bytes], np.ndarray]) -> np.ndarray:
        """The block's images decoded into one preallocated array (records, height, width, channels)."""
        out: np.ndarray | None = None
        rows = self._rows.get(name)
        for i, offset in enumerate(block.offsets.tolist()):
            pixels = self._records.guard(decode, encoded.view(i), shard=block.path_of(i), offset=int(offset))
            if out is None:
                out = rows.take(len(block), pixels) if rows is not None else self._allocate(
                    len(block) * pixels.size, pixels.dtype).reshape(len(block), *pixels.shape)
            out[i] = pixels
        return out if out is not None else np.empty((0,), np.uint8)

    def columns(self, examples: list[Example]) -> Columns:
        """Examples (as ``RecordDecoder`` gives them) as columns."""
        return {name: np.stack([e[name] for e in examples]) if stack and examples else [e[name] for e in examples]
                for name, stack in self._stack.items()}


def rows(columns: Columns) -> Iterator[Example]:
    """The examples of a block's columns, one dict each (arrays are views into the columns)."""
    for index in range(num_rows(columns)):
        yield {name: column[index, ...] if isinstance(column, np.ndarray) else column[index]
               for name, column in columns.items()}


def num_rows(columns: Columns) -> int:
    """The records in a block's columns."""
    return len(next(iter(columns.values()))) if columns else 0


def concat(parts: list[Columns], allocate_values: Allocate = allocate) -> Columns:
    """Columns of consecutive blocks (or slices of them) joined into one (arrays from ``allocate_values``)."""
    if len(parts) == 1:
        return parts[0]
    return {name: _joined([p[name] for p in parts], allocate_values) for name in parts[0]}


def _joined(parts: list[Any], allocate_values: Allocate) -> Any:
    """One column of consecutive blocks: arrays and ragged arrays joined as such, anything else as a list."""
    first = parts[0]
    if isinstance(first, np.ndarray):
        if first.dtype == object:
            return np.concatenate(parts)
        joined = adjacent(parts)
        if joined is not None:
            return joined
        rows = sum(len(p) for p in parts)
        out = allocate_values(rows * int(np.prod(first.shape[1:])), first.dtype).reshape(rows, *first.shape[1:])
        return np.concatenate(parts, out=out)
    if all(isinstance(p, RaggedArray) for p in parts):
        return RaggedArray.concat(parts, allocate_values=allocate_values)
    return [v for p in parts for v in p]


def take(columns: Columns, start: int, stop: int) -> Columns:
    """Rows ``[start, stop)`` of columns (views for arrays)."""
    return {name: column[start:stop] for name, column in columns.items()}


def rebatch(blocks: Iterable[Columns], batch_size: int, allocate_values: Allocate = allocate) -> Iterator[Columns]:
    """Columns of ``batch_size`` rows cut from a stream of blocks' columns, in order (the last may be smaller)."""
    parts: list[Columns] = []
    held = 0
    for columns in blocks:
        start, count = 0, num_rows(columns)
        while held + count - start >= batch_size:
            stop = start + batch_size - held
            parts.append(take(columns, start, stop))
            yield concat(parts, allocate_values)
            parts, held, start = [], 0, stop
        if start < count:
            parts.append(take(columns, start, count))
            held += count - start
    if parts:
        yield concat(parts, allocate_values)
