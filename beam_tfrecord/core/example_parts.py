"""A record joined from its parts: a base shard's ``tf.train.Example`` and the rows of its column files.

Two serialized Examples concatenated are one valid Example holding the features of both (protobuf merges a message
field that appears twice), so readers join a record and its column rows by concatenating their bytes. ``fold``
instead gives the bytes a build with every feature from the start writes (map entries sorted by name, renamed to
their logical names, dropped features left out): what compaction writes. Pure wire work, no protobuf library.
See docs/columns.md, "Reading".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from beam_tfrecord.core.wire import TAG_1, TAG_2, delimited_header, read_varint
from beam_tfrecord.errors import CorruptShardError

_FIELD_1 = 0x0A  # Example.features / Features.feature (a map entry) / the entry's key: field 1, length-delimited
_FIELD_2 = 0x12  # the entry's value (a Feature)


def _fields(data: bytes, start: int, stop: int, *, where: str) -> Iterator[tuple[int, int, int]]:
    """(tag, start, stop) of each length-delimited field of ``data[start:stop]``."""
    position = start
    while position < stop:
        tag = data[position]
        if tag & 0x07 != 2:
            raise CorruptShardError(where, f"expected a length-delimited field, found tag {tag:#x}", position)
        length, begin = read_varint(data, position + 1)
        position = begin + length
        if position > stop:
            raise CorruptShardError(where, "a field runs past the end of its message", begin)
        yield tag, begin, position


def map_entries(record: bytes, *, where: str = "record") -> Iterator[tuple[str, bytes]]:
    """(feature name, Feature bytes) of each map entry of a serialized Example, in stored order, however many
    ``features`` fields it has (a joined record has one per part).

    Raises:
        CorruptShardError: the record is not an Example's wire format (``where`` names it).
    """
    for name, start, stop in entry_spans(record, where=where):
        yield name, record[start:stop]


def entry_spans(record: bytes, *, where: str = "record") -> Iterator[tuple[str, int, int]]:
    """(feature name, start, stop) of each map entry's Feature bytes in a serialized Example (``map_entries``)."""
    for tag, start, stop in _fields(record, 0, len(record), where=where):
        if tag != _FIELD_1:
            continue  # an unknown field of Example: protobuf skips it too
        for entry_tag, entry_start, entry_stop in _fields(record, start, stop, where=where):
            if entry_tag != _FIELD_1:
                continue
            name, value = "", (entry_stop, entry_stop)
            for field_tag, field_start, field_stop in _fields(record, entry_start, entry_stop, where=where):
                if field_tag == _FIELD_1:
                    name = record[field_start:field_stop].decode("utf-8")
                elif field_tag == _FIELD_2:
                    value = (field_start, field_stop)
            yield name, *value


def fold(parts: Sequence[bytes], *, logical_names: Mapping[str, str], dropped: frozenset[str],
         where: str = "record") -> bytes:
    """The Example a build writes for the features of ``parts`` (a base record, then its column rows): entries
    under their logical names (``logical_names``: stored name -> logical, for renamed ones), ``dropped`` stored
    names left out, sorted by name as deterministic serialization sorts a map, in one ``features`` field.

    Raises:
        CorruptShardError: a part is not an Example, or two parts hold one feature (``where`` names the record).
    """
    entries: dict[str, bytes] = {}
    for part in parts:
        for stored, value in map_entries(part, where=where):
            if stored in dropped:
                continue
            name = logical_names.get(stored, stored)
            if name in entries:
                raise CorruptShardError(where, f"feature {name!r} is held by two of the record's parts", 0)
            encoded = name.encode("utf-8")
            entries[name] = b"".join((delimited_header(TAG_1, len(encoded)), encoded,
                                      delimited_header(TAG_2, len(value)), value))
    body = b"".join(delimited_header(TAG_1, len(entry)) + entry for _, entry in sorted(entries.items()))
    return delimited_header(TAG_1, len(body)) + body
