"""tf.data over a version with column files: the base shards and each column file read as aligned streams.

Each stream is the plain reader of its files (``tf_records``: the same passes, skips and deletions), batched on its
own and zipped a batch at a time (a zip per record cost half the read rate); each part is parsed with its own
features (a column file of fixed-size numbers comes decoded: ``column_rows``) and the dicts merged. Used in stored
order (no shuffle, cache or mixture); other reads join records in ``formats.joined``. See docs/columns.md, "Reading".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import google_crc32c
import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.core.framing import record_spans
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.errors import CorruptShardError
from beam_tfrecord.formats import TFDataFiles
from beam_tfrecord.formats.mapping import map_whole
from beam_tfrecord.reader.decode.dense_rows import DenseSpecs, aliased_rows, dense_rows, dense_specs
from beam_tfrecord.reader.order.read_plan import ReadPlan
from beam_tfrecord.reader.tf_spec import ParsedBatch, make_batch_parser, tf
from beam_tfrecord.remote_reads.options import fetched_remotely

# A part's batch: serialized records, or features already decoded (``column_rows``' dense path)
Part: TypeAlias = "tf.Tensor | dict[str, tf.Tensor]"
Batch: TypeAlias = "Part | tuple[Part, ...]"  # a batch of records, or one batch per aligned stream
_FRAMED = TFDataFiles("TFRecordDataset", "")  # files of uncompressed TFRecord framing, the ones read whole
_NO_SPANS = np.zeros(0, np.int64)


def part_schemas(plan: ReadPlan) -> list[Schema]:
    """Each part's features (``ReadPlan.part_plans``): the base shards' (the schema's but the column files'), then
    each column file's, by the layout of the plan's first shard (every shard has it)."""
    schema = plan.manifest.schema
    held = [set(column.features) for column in plan.segments[0].shard.columns] if plan.segments else []
    base = {name: f for name, f in schema.features.items() if not any(name in h for h in held)}
    return [Schema(features=base, sequence_features=dict(schema.sequence_features)),
            *(Schema(features={name: f for name, f in schema.features.items() if name in h}) for h in held)]


def part_rows(part: Part) -> tf.Tensor:
    """The number of records in a part's batch."""
    return tf.shape(part if isinstance(part, tf.Tensor) else next(iter(part.values())), out_type=tf.int64)[0]


def on_part(function: Callable[[tf.Tensor], tf.Tensor], part: Part) -> Part:
    """``function`` applied to a part's batch: to its records, or to each decoded feature."""
    return function(part) if isinstance(part, tf.Tensor) else {name: function(value) for name, value in part.items()}


def joined_parser(parsers: Sequence[Callable[[tf.Tensor], ParsedBatch]],
                  where: str) -> Callable[..., ParsedBatch]:
    """The parse of one batch per part (``parsers[i]`` parses part ``i``; a part already decoded is taken as it
    is), merged into one dict; the batches of one step must be of one size (a column file with more or fewer rows
    than its base shard fails here)."""

    def parse(*batches: Part) -> ParsedBatch:
        size = part_rows(batches[0])
        checks = [tf.debugging.assert_equal(part_rows(batch), size, message=f"{where}: a column file and its base "
                                            "shard hold different numbers of records") for batch in batches[1:]]
        out: ParsedBatch = {}
        with tf.control_dependencies(checks):
            for part_parse, batch in zip(parsers, batches):
                out.update(part_parse(batch) if isinstance(batch, tf.Tensor) else
                           {name: tf.identity(value) for name, value in batch.items()})
        return out

    return parse


def batched(streams: Sequence[tf.data.Dataset], size: int, *, drop_remainder: bool = False) -> tf.data.Dataset:
    """Batches of ``size`` records of aligned streams: one stream's own batches, or a zip of each one's (each
    batched ahead on its own thread). A stream of vectors of records or of dicts of decoded features
    (``column_rows``) is rebatched to ``size``."""

    def batches(stream: tf.data.Dataset) -> tf.data.Dataset:
        if isinstance(stream.element_spec, dict) or stream.element_spec.shape.rank == 1:
            return stream.rebatch(size, drop_remainder=drop_remainder)
        return stream.batch(size, drop_remainder=drop_remainder)

    if len(streams) == 1:
        return batches(streams[0])
    return tf.data.Dataset.zip(tuple(batches(stream).prefetch(1) for stream in streams))


def column_rows(plan: ReadPlan, schema: Schema) -> tf.data.Dataset | None:
    """The rows a column part plan (``ReadPlan.part_plans``) of features ``schema`` reads, one element per pass,
    deleted rows included (as ``tf_records.stored_chain`` gives the base's records, to be dropped a batch at a
    time); None when its files are not local uncompressed TFRecord files (then they are read as a base shard is).

    Each file is read whole and checked once against the manifest's size and CRC32C (as strong as every record's
    CRCs, which TensorFlow's reader checked at a cost per record: the rows alone cost ~1.2 us each); no element per
    row. Features that are all fixed counts of numbers (``decode.dense_rows.dense_specs``) in local files come as a
    dict of dense arrays per pass: the file mapped, its rows decoded by ``dense_rows`` without an Example parse when
    every live row has their fixed layout, else by ``tf.io.parse_example`` (``_dense_or_parsed``); other features
    as a vector of the serialized rows (``tf.io.read_file``, one ``tf.strings.substr`` at the offsets of the file's
    framing, ``framing.record_spans``). Limits: a whole file is held in memory (or mapped) while its rows are
    batched; a damaged file fails the read with a CorruptShardError's message naming it.
    """
    passes = plan.passes
    if (plan.format.tf_data_files(plan.manifest.compression) != _FRAMED
            or any(fetched_remotely(plan.path(p)) for p in passes)):
        return None
    expected = [(plan.path(p), p.shard.num_bytes, p.shard.crc32c, p.shard.num_records) for p in passes]

    def spans(number: np.ndarray | int, content: bytes | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        path, num_bytes, crc32c, num_records = expected[int(number)]
        if len(content) != num_bytes:
            raise CorruptShardError(path, f"{len(content)} bytes, the manifest says {num_bytes}")
        if f"{google_crc32c.value(content):08x}" != crc32c:
            raise CorruptShardError(path, f"file CRC32C {google_crc32c.value(content):08x} differs from the "
                                          f"manifest's {crc32c}")
        return record_spans(content, name=path, num_records=num_records)

    numbers = tf.range(len(passes), dtype=tf.int64)
    specs = dense_specs(schema)
    if specs is not None and not any(storage.is_remote(path) for path, *_ in expected):  # mapped: local files
        return tf.data.Dataset.from_tensor_slices(numbers).map(_dense_or_parsed(plan, schema, specs, spans))

    @tf.autograph.experimental.do_not_convert
    def rows(number: tf.Tensor, path: tf.Tensor, start: tf.Tensor, stop: tf.Tensor) -> tf.Tensor:
        content = tf.io.read_file(path)
        starts, lengths = tf.numpy_function(spans, [number, content], [tf.int64, tf.int64], stateful=False)
        starts, lengths = tf.ensure_shape(starts, [None]), tf.ensure_shape(lengths, [None])
        return tf.strings.substr(content, starts[start:stop], lengths[start:stop])

    return tf.data.Dataset.from_tensor_slices((
        numbers, tf.constant([path for path, *_ in expected], tf.string),
        tf.constant([p.start for p in passes], tf.int64), tf.constant([p.stop for p in passes], tf.int64),
    )).map(rows)


# A pass's file (bytes, or a mapping of it) checked: its rows' starts and lengths
Spans = Callable[[int, bytes | np.ndarray], tuple[np.ndarray, np.ndarray]]


def _dense_or_parsed(plan: ReadPlan, schema: Schema, specs: DenseSpecs, spans: Spans
                     ) -> Callable[[tf.Tensor], ParsedBatch]:
    """The map from a pass's number to its rows' features as dense tensors (``column_rows``): one NumPy call maps
    the file (no copy: reading it into new memory cost 2-5x the time), checks it (``spans``) and decodes the rows
    (``dense_rows``); when a live row does not have the layout, the same call hands back the file's bytes and the
    rows' spans (a deleted row read as a live one, ``dense_rows.aliased_rows``), parsed by the part's Example
    parser. Each dense array crosses into TensorFlow once, whole (~0.15 us a row of 64 floats measured)."""
    passes = plan.passes
    parse = make_batch_parser(schema)
    names = list(specs)
    shapes = [shape for _, shape in specs.values()]

    def decode(number: np.ndarray) -> list[Any]:
        index = int(number)
        segment_pass = passes[index]
        content = map_whole(plan.path(segment_pass))
        starts, lengths = spans(index, content)
        start, stop = segment_pass.start, segment_pass.stop
        keep = segment_pass.keep()  # None: every record read is returned
        live = np.ones(stop - start, dtype=bool) if keep is None else keep
        starts, lengths = starts[start:stop], lengths[start:stop]
        dense = dense_rows(content, starts, lengths, live, schema, specs, path=plan.path(segment_pass))
        if dense is not None:
            return [True, b"", _NO_SPANS, _NO_SPANS, *(dense[name] for name in names)]
        return [False, content.tobytes(), *aliased_rows(starts, lengths, live),
                *(np.zeros((0, *shape), dtype) for dtype, shape in specs.values())]

    @tf.autograph.experimental.do_not_convert
    def rows(number: tf.Tensor) -> ParsedBatch:
        found = tf.numpy_function(decode, [number], [tf.bool, tf.string, tf.int64, tf.int64,
                                                     *(tf.as_dtype(dtype) for dtype, _ in specs.values())],
                                  stateful=False)
        dense, content, starts, lengths = found[0], found[1], found[2], found[3]
        arrays = [tf.ensure_shape(array, [None, *shape]) for array, shape in zip(found[4:], shapes)]

        def parsed() -> ParsedBatch:
            return parse(tf.strings.substr(content, tf.ensure_shape(starts, [None]), tf.ensure_shape(lengths, [None])))

        return tf.cond(tf.ensure_shape(dense, []), lambda: dict(zip(names, arrays)), parsed)

    return rows
