"""read_dataset: a published dataset as a tf.data.Dataset of feature dicts."""

from __future__ import annotations

from beam_tfrecord.reader.tf_spec import feature_description, restore_tensors, tf  # imports TF quietly
from beam_tfrecord.dataset import load_manifest, shard_paths

AUTOTUNE = tf.data.AUTOTUNE


def read_dataset(path: str, *, split: str = "train", batch_size: int = 32, shuffle: bool = False,
                 seed: int | None = None, shuffle_buffer: int = 10_000, drop_remainder: bool = False,
                 repeat: bool = False) -> tf.data.Dataset:
    """Reads one split of a published dataset as batches of feature dicts.

    The parse spec comes from the manifest's schema. Records are batched *before* parsing
    (one ``parse_example`` call per batch, ~7x faster than parsing one record at a time).

    Args:
        path: dataset directory (the one holding manifest.json).
        split: split name.
        batch_size: records per batch.
        shuffle: shuffle shard order and records (within ``shuffle_buffer``), reproducibly with ``seed``.
        seed: shuffle seed.
        shuffle_buffer: records held for shuffling.
        drop_remainder: drop the last, smaller batch.
        repeat: repeat forever.
    """
    manifest = load_manifest(path)
    files = shard_paths(path, manifest, split)
    schema = manifest.schema
    spec = feature_description(schema)
    compression = manifest.compression.value
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(files, dtype=tf.string))
    if shuffle:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type=compression),
                                 cycle_length=max(1, min(len(files), 16)), num_parallel_calls=AUTOTUNE,
                                 deterministic=True)
    if shuffle:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    dataset = dataset.map(lambda records: restore_tensors(schema, tf.io.parse_example(records, spec)),
                          num_parallel_calls=AUTOTUNE, deterministic=True)
    return dataset.prefetch(AUTOTUNE)
