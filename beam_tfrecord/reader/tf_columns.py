"""tf.data over a version with column files: the base shards and each column file read as aligned streams.

Each stream is the plain reader of its files (``tf_records``: the same passes, skips and deletions), batched on its
own and zipped a batch at a time (a zip per record cost half the read rate); each part is parsed with its own
features and the dicts merged. Used in stored order (no shuffle, cache or mixture); other reads join records in
``formats.joined``. See docs/columns.md, "Reading".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from beam_tfrecord.core.schema import Schema
from beam_tfrecord.reader.order.read_plan import ReadPlan
from beam_tfrecord.reader.tf_spec import ParsedBatch, tf

Batch = tf.Tensor | tuple[tf.Tensor, ...]  # a batch of records, or one batch per aligned stream


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
    batched ahead on its own thread)."""
    if len(streams) == 1:
        return streams[0].batch(size, drop_remainder=drop_remainder)
    return tf.data.Dataset.zip(tuple(stream.batch(size, drop_remainder=drop_remainder).prefetch(1)
                                     for stream in streams))
