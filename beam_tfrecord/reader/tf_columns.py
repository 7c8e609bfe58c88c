"""tf.data over a version with column files: the base shards and each column file read as aligned streams.

Each stream is the plain reader of its files (``tf_records``: the same passes, skips and deletions), batched on its
own and zipped a batch at a time (a zip per record cost half the read rate); each part is parsed with its own
features and the dicts merged. Used in stored order (no shuffle, cache or mixture); other reads join records in
``formats.joined``. See docs/columns.md, "Reading".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import google_crc32c
import numpy as np

from beam_tfrecord.core.framing import record_spans
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.errors import CorruptShardError
from beam_tfrecord.formats import TFDataFiles
from beam_tfrecord.reader.order.read_plan import ReadPlan
from beam_tfrecord.reader.tf_spec import ParsedBatch, tf
from beam_tfrecord.remote_reads.options import fetched_remotely

Batch = tf.Tensor | tuple[tf.Tensor, ...]  # a batch of records, or one batch per aligned stream
_FRAMED = TFDataFiles("TFRecordDataset", "")  # files of uncompressed TFRecord framing, the ones read whole


def part_schemas(plan: ReadPlan) -> list[Schema]:
    """Each part's features (``ReadPlan.part_plans``): the base shards' (the schema's but the column files'), then
    each column file's, by the layout of the plan's first shard (every shard has it)."""
    schema = plan.manifest.schema
    held = [set(column.features) for column in plan.segments[0].shard.columns] if plan.segments else []
    base = {name: f for name, f in schema.features.items() if not any(name in h for h in held)}
    return [Schema(features=base, sequence_features=dict(schema.sequence_features)),
            *(Schema(features={name: f for name, f in schema.features.items() if name in h}) for h in held)]


def joined_parser(parsers: Sequence[Callable[[tf.Tensor], ParsedBatch]],
                  where: str) -> Callable[..., ParsedBatch]:
    """The parse of one batch per part (``parsers[i]`` parses part ``i``), merged into one dict; the batches of
    one step must be of one size (a column file with more or fewer rows than its base shard fails here)."""

    def parse(*batches: tf.Tensor) -> ParsedBatch:
        size = tf.shape(batches[0])[0]
        checks = [tf.debugging.assert_equal(tf.shape(batch)[0], size, message=f"{where}: a column file and its base "
                                            "shard hold different numbers of records") for batch in batches[1:]]
        out: ParsedBatch = {}
        with tf.control_dependencies(checks):
            for part_parse, batch in zip(parsers, batches):
                out.update(part_parse(batch))
        return out

    return parse


def batched(streams: Sequence[tf.data.Dataset], size: int, *, drop_remainder: bool = False) -> tf.data.Dataset:
    """Batches of ``size`` records of aligned streams: one stream's own batches, or a zip of each one's (each
    batched ahead on its own thread). A stream of vectors of records (``column_rows``) is rebatched to ``size``."""

    def batches(stream: tf.data.Dataset) -> tf.data.Dataset:
        if stream.element_spec.shape.rank == 1:
            return stream.rebatch(size, drop_remainder=drop_remainder)
        return stream.batch(size, drop_remainder=drop_remainder)

    if len(streams) == 1:
        return batches(streams[0])
    return tf.data.Dataset.zip(tuple(batches(stream).prefetch(1) for stream in streams))


def column_rows(plan: ReadPlan) -> tf.data.Dataset | None:
    """The rows a column part plan (``ReadPlan.part_plans``) reads, one vector of them per pass, deleted rows
    included (as ``tf_records.stored_chain`` gives the base's records, to be dropped a batch at a time); None when
    its files are not local uncompressed TFRecord files (then they are read as a base shard is).

    Each file is read whole (``tf.io.read_file``) and checked once against the manifest's size and CRC32C (as
    strong as every record's CRCs, which TensorFlow's reader checked at a cost per record: the rows alone cost
    ~1.2 us each), its rows cut out by one ``tf.strings.substr`` at the offsets of its framing
    (``framing.record_spans``): no element per row. Limits: a whole file is held in memory while its rows are
    batched; a damaged file fails the read with a CorruptShardError's message naming it.
    """
    passes = plan.passes
    if (plan.format.tf_data_files(plan.manifest.compression) != _FRAMED
            or any(fetched_remotely(plan.path(p)) for p in passes)):
        return None
    expected = [(plan.path(p), p.shard.num_bytes, p.shard.crc32c, p.shard.num_records) for p in passes]

    def spans(number: np.ndarray, content: bytes) -> tuple[np.ndarray, np.ndarray]:
        path, num_bytes, crc32c, num_records = expected[int(number)]
        if len(content) != num_bytes:
            raise CorruptShardError(path, f"{len(content)} bytes, the manifest says {num_bytes}")
        if f"{google_crc32c.value(content):08x}" != crc32c:
            raise CorruptShardError(path, f"file CRC32C {google_crc32c.value(content):08x} differs from the "
                                          f"manifest's {crc32c}")
        return record_spans(content, name=path, num_records=num_records)

    @tf.autograph.experimental.do_not_convert
    def rows(number: tf.Tensor, path: tf.Tensor, start: tf.Tensor, stop: tf.Tensor) -> tf.Tensor:
        content = tf.io.read_file(path)
        starts, lengths = tf.numpy_function(spans, [number, content], [tf.int64, tf.int64], stateful=False)
        starts, lengths = tf.ensure_shape(starts, [None]), tf.ensure_shape(lengths, [None])
        return tf.strings.substr(content, starts[start:stop], lengths[start:stop])

    return tf.data.Dataset.from_tensor_slices((
        tf.range(len(passes), dtype=tf.int64), tf.constant([path for path, *_ in expected], tf.string),
        tf.constant([p.start for p in passes], tf.int64), tf.constant([p.stop for p in passes], tf.int64),
    )).map(rows)
