"""Helpers for source tests: write a dataset with a real Beam pipeline, read it back with TensorFlow."""

from __future__ import annotations

import os
from collections.abc import Callable

import apache_beam as beam
import pytest
from fixtures_gcs import fake_gcs, gcs_bucket  # noqa: F401  (pytest fixtures for gs:// tests)

from beam_tfrecord.beam.write import WriteTFRecordDataset
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.verify import verify_dataset


def write_dataset(source: beam.PTransform, schema: Schema, output: str, **writer_options) -> Manifest:
    """Runs source -> WriteTFRecordDataset on the DirectRunner; checks `verify` accepts the result."""
    with beam.Pipeline() as pipeline:
        _ = pipeline | "Source" >> source | "Write" >> WriteTFRecordDataset(output, schema=schema, **writer_options)
    verify_dataset(output)
    return load_manifest(output)


def parse_records(output: str, spec: dict, *, sequence_spec: dict | None = None) -> dict:
    """Every record of the dataset parsed with tf.io (one batch), as NumPy / nested lists."""
    import tensorflow as tf

    manifest = load_manifest(output)
    files = [os.path.join(output, shard.filename) for shard in manifest.shards]
    records = next(iter(tf.data.TFRecordDataset(files).batch(1_000_000)))
    if sequence_spec is None:
        parsed = tf.io.parse_example(records, spec)
    else:
        context, steps, _ = tf.io.parse_sequence_example(records, context_features=spec,
                                                         sequence_features=sequence_spec)
        parsed = {**context, **steps}
    return {name: value.to_list() if isinstance(value, tf.RaggedTensor) else value.numpy()
            for name, value in parsed.items()}


@pytest.fixture
def write() -> Callable[..., Manifest]:
    return write_dataset


@pytest.fixture
def parse() -> Callable[..., dict]:
    return parse_records
