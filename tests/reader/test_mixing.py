"""Weighted mixing: epoch length, proportions, determinism, equal rank shares, schema checks, every reader."""

from __future__ import annotations

import numpy as np
import pytest

from beam_tfrecord.errors import IncompatibleSchemasError, ReaderError
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.reader.order.mixing import interleave, num_examples


def _keys(examples) -> list[str]:
    return [e["key"].decode() for e in examples]


@pytest.mark.parametrize("weights, takes", [
    pytest.param((1, 1), (200, 200), id="equal-weights-b-runs-out"),
    pytest.param((3, 1), (600, 200), id="both-run-out-together"),
    pytest.param((0.9, 0.1), (600, 66), id="a-runs-out"),
])
def test_epoch_ends_when_the_first_dataset_runs_out_at_its_weight(keyed_a, keyed_b, weights, takes):
    mixture = {keyed_a.path: weights[0], keyed_b.path: weights[1]}
    keys = _keys(read_numpy(mixture))
    assert (sum(k[0] == "a" for k in keys), sum(k[0] == "b" for k in keys)) == takes
    assert num_examples(mixture) == sum(takes) and num_examples(mixture, num_workers=3) == sum(takes) // 3
    assert len(set(keys)) == len(keys)


def test_mixture_follows_its_seeded_interleaving(keyed_a, keyed_b):
    mixture = {keyed_a.path: 0.5, keyed_b.path: 0.5}
    keys = _keys(read_numpy(mixture, seed=1))
    assert [k[0] for k in keys] == ["ab"[c] for c in interleave([200, 200], seed=1, epoch=0).tolist()]
    assert keys == _keys(read_numpy(mixture, seed=1)) and keys != _keys(read_numpy(mixture, seed=2))
    # Each dataset keeps its own order; the next epoch reads the larger one's next records.
    stored = _keys(read_numpy(keyed_a.path))
    assert [k for k in keys if k[0] == "a"] == stored[:200]
    next_epoch = _keys(read_numpy(mixture, seed=1, epoch=1))
    assert [k for k in next_epoch if k[0] == "a"] == stored[200:400]
    assert sorted(k for k in next_epoch if k[0] == "b") == sorted(k for k in keys if k[0] == "b")


@pytest.mark.parametrize("weights", [(0.7, 0.2, 0.1), (0.5, 0.5), (0.98, 0.01, 0.01)])
def test_every_100k_examples_hold_each_dataset_within_one_percent(weights):
    takes = [int(w * 1_000_000) for w in weights]
    choices = interleave(takes, seed=7, epoch=3)
    assert np.bincount(choices).tolist() == takes
    for window in range(0, len(choices), 100_000):
        shares = np.bincount(choices[window:window + 100_000], minlength=len(takes)) / 100_000
        assert np.abs(shares - weights).max() < 0.01, (window, shares)


def test_mixture_of_tfrecord_and_array_record_shuffled(keyed_a, keyed_r):
    mixture = {keyed_a.path: 4, keyed_r.path: 1}  # every record of both: 600 + 150
    shuffled = _keys(read_numpy(mixture, shuffle=True, seed=3))
    assert sorted(shuffled) == sorted([*keyed_a.samples, *keyed_r.samples])
    assert shuffled != _keys(read_numpy(mixture)) and shuffled == _keys(read_numpy(mixture, shuffle=True, seed=3))
    assert shuffled != _keys(read_numpy(mixture, shuffle=True, seed=3, epoch=1))


def test_workers_get_equal_disjoint_shares_of_a_mixture(keyed_a, keyed_r):
    mixture = {keyed_a.path: 0.5, keyed_r.path: 0.5}
    shares = [_keys(read_numpy(mixture, shuffle=True, num_workers=3, worker_index=i)) for i in range(3)]
    assert [len(s) for s in shares] == [100] * 3
    everything = _keys(read_numpy(mixture, shuffle=True))
    assert [k for s in shares for k in s] == everything  # contiguous runs of the one epoch order


@pytest.mark.parametrize("shuffle", [False, True])
def test_tf_data_reads_the_mixture_numpy_reads(keyed_a, keyed_b, shuffle):
    from beam_tfrecord import read_dataset

    mixture = {keyed_a.path: 0.5, keyed_b.path: 0.5}
    for index in range(2):
        tf_keys = [k.decode() for batch in read_dataset(mixture, num_workers=2, worker_index=index, batch_size=64,
                                                        shuffle=shuffle, seed=5)
                   for k in batch["key"].numpy().tolist()]
        np_keys = _keys(read_numpy(mixture, num_workers=2, worker_index=index, seed=5))
        assert (tf_keys == np_keys) if not shuffle else (sorted(tf_keys) == sorted(np_keys) and tf_keys != np_keys)


@pytest.mark.parametrize("other, feature, reason", [
    pytest.param("float_i", "i", "differs: dtype 'int64' in the first, 'float32' in the second", id="type"),
    pytest.param("key_only", "i", "is a feature of the first only", id="missing"),
])
def test_incompatible_schemas_name_both_datasets_and_the_feature(request, keyed_a, other, feature, reason):
    second = request.getfixturevalue(other).path
    with pytest.raises(IncompatibleSchemasError) as caught:
        read_numpy({keyed_a.path: 1, second: 1})
    assert (caught.value.first, caught.value.second, caught.value.feature) == (keyed_a.path, second, feature)
    assert str(caught.value) == f"datasets {keyed_a.path!r} and {second!r} cannot be mixed: feature 'i' {reason}"


@pytest.mark.parametrize("weight, message", [
    pytest.param(0, "the weight must be a positive number, got 0", id="zero"),
    pytest.param(-1.5, "the weight must be a positive number, got -1.5", id="negative"),
    pytest.param(float("nan"), "the weight must be a positive number, got nan", id="nan"),
    pytest.param("1", "the weight must be a positive number, got '1'", id="text"),
])
def test_bad_weights_are_rejected(keyed_a, weight, message):
    with pytest.raises(ReaderError, match=message):
        read_numpy({keyed_a.path: weight})


def test_empty_mapping_is_rejected():
    with pytest.raises(ReaderError, match=r"expected a dataset path or a non-empty mapping \{path: weight\}, got \{\}"):
        read_numpy({})


@pytest.mark.parametrize("shuffle", [False, True], ids=["stored", "shuffled"])
def test_block_decoded_mixture_equals_each_record_decoded_alone(keyed_a, keyed_r, shuffle):
    """A mixture's rows, laid out from each dataset's decoded blocks, are its records decoded one by one."""
    from beam_tfrecord.reader.decode.numpy_decode import RecordDecoder
    from beam_tfrecord.reader.order.mixing import EpochOrder, open_sources

    mixture = {keyed_a.path: 3, keyed_r.path: 1}  # 450 + 150: stretches of 1024 positions cut the runs
    sources = open_sources(mixture, split="train")
    order = EpochOrder(sources, seed=5, epoch=1, shuffle=shuffle, shuffle_buffer=50, verify=True)
    decoders = [RecordDecoder(s.plan.manifest.schema) for s in sources]
    expected = [decoders[number].decode(record, shard=path, offset=offset)
                for number, (record, path, offset) in order.iter_range(7, order.total)]
    got = list(read_numpy(mixture, shuffle=shuffle, seed=5, epoch=1, shuffle_buffer=50, start=7))
    assert [e["key"] for e in got] == [e["key"] for e in expected]
    assert all(g["i"] == e["i"] and g["i"].dtype == e["i"].dtype for g, e in zip(got, expected))
