"""generated: a Python iterator per pass as a tf.data.Dataset, closed at its end, bounded when passes are dropped."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tensorflow as tf

from beam_tfrecord.reader import tf_generated
from beam_tfrecord.reader.tf_generated import MAX_LIVE_ITERATIONS, generated

SIGNATURE = (tf.TensorSpec([], tf.string), tf.TensorSpec([None], tf.int64))


class Passes:
    """Counts the passes begun and the passes whose iterator was closed (its ``finally`` ran)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.begun = 0
        self.closed = 0

    def __call__(self) -> Iterator[tuple[str, list[int]]]:
        self.begun += 1
        try:
            for i in range(self.count):
                yield f"item-{i}", list(range(i))
        finally:
            self.closed += 1


def _values(dataset: tf.data.Dataset) -> list[tuple[bytes, list[int]]]:
    return [(name.numpy(), numbers.numpy().tolist()) for name, numbers in dataset]


def test_each_pass_gives_the_iterators_elements_and_closes_it_at_the_end() -> None:
    passes = Passes(4)
    dataset = generated(passes, SIGNATURE)
    expected = [(f"item-{i}".encode(), list(range(i))) for i in range(4)]
    assert _values(dataset) == expected
    assert _values(dataset.repeat(2)) == expected * 2
    assert (passes.begun, passes.closed) == (3, 3)
    assert dataset.element_spec == SIGNATURE


def test_an_empty_iterator_gives_an_empty_pass() -> None:
    assert _values(generated(Passes(0), SIGNATURE)) == []


def test_passes_dropped_part_way_are_closed_beyond_the_limit_and_say_so_when_read_on() -> None:
    passes = Passes(10)
    options = tf.data.Options()
    options.autotune.enabled = False  # as read_dataset: no prefetch injected, each element read when asked for
    dataset = generated(passes, SIGNATURE).with_options(options)
    iterators = [iter(dataset) for _ in range(MAX_LIVE_ITERATIONS + 1)]
    for iterator in iterators:
        assert next(iterator)[0].numpy() == b"item-0"
    assert (passes.begun, passes.closed) == (MAX_LIVE_ITERATIONS + 1, 1)  # the least recently read one
    with pytest.raises(tf.errors.OpError, match="this pass over the dataset was closed: 2 newer passes over the same "
                                                r"dataset began while it was not being read \(iterate it again\)"):
        next(iterators[0])
    assert [name.numpy() for name, _ in iterators[1]] == [f"item-{i}".encode() for i in range(1, 10)]
    assert passes.closed == 2


def test_an_error_of_the_iterator_reaches_the_reader_with_its_message() -> None:
    def failing() -> Iterator[tuple[str, np.ndarray]]:
        yield "first", np.zeros(0, np.int64)
        raise ValueError("shard gs://bucket/x-00001-of-00002 is damaged")

    with pytest.raises(tf.errors.OpError, match="shard gs://bucket/x-00001-of-00002 is damaged"):
        _values(generated(failing, SIGNATURE))


def test_no_generator_dataset_op_is_built() -> None:
    """TensorFlow's GeneratorDatasetOp pins glibc's mmap threshold for the whole process (see the module)."""
    graph = generated(Passes(1), SIGNATURE)._as_serialized_graph().numpy()
    assert b"GeneratorDataset" not in graph and b"PyFunc" in graph
    assert tf_generated.__doc__ is not None and "mallopt(M_MMAP_THRESHOLD, 128 KiB)" in tf_generated.__doc__


def test_one_spec_gives_single_tensors_and_closes_each_pass() -> None:
    passes = Passes(3)

    def names() -> Iterator[str]:
        for name, _ in passes():
            yield name

    dataset = generated(names, tf.TensorSpec([], tf.string))
    assert dataset.element_spec == tf.TensorSpec([], tf.string)
    assert [name.numpy() for name in dataset.repeat(2)] == [b"item-0", b"item-1", b"item-2"] * 2
    assert (passes.begun, passes.closed) == (2, 2)
