"""The add's outcomes summed for its commit (``beam/add_features.py``): counts and the first keys by name, not a list
of every outcome, whatever the order and however the runner splits and merges them."""

import random

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that

from beam_tfrecord.beam.add_features import AddOutcomes, _SumOutcomesFn
from beam_tfrecord.errors.columns import MAX_NAMED_KEYS

KEYS = [f"key-{number:05d}" for number in range(2_000)]


def _summed(tagged: list[tuple[str, object]], parts: int) -> AddOutcomes:
    fn = _SumOutcomesFn()
    accumulators = []
    for part in range(parts):  # as a runner's bundles would, then merged
        accumulator = fn.create_accumulator()
        for item in tagged[part::parts]:
            accumulator = fn.add_input(accumulator, item)
        accumulators.append(accumulator)
    return fn.extract_output(fn.merge_accumulators(accumulators))


def test_counts_and_first_keys_whatever_the_order_and_split() -> None:
    tagged = [("missing", key) for key in KEYS] + [("twice", key) for key in KEYS[5:8]]
    tagged += [("written", (number, None, 1)) for number in range(4)]
    random.Random(61).shuffle(tagged)
    for parts in (1, 3, 16):
        summed = _summed(tagged, parts)
        assert summed.counts == {"missing": 2_000, "twice": 3}
        assert summed.first_keys == {"missing": KEYS[:MAX_NAMED_KEYS], "twice": KEYS[5:8]}
        assert sorted(summed.written) == [(number, None, 1) for number in range(4)]
        assert summed.dead == []


def test_summed_in_a_pipeline() -> None:
    tagged = [("ambiguous", key) for key in reversed(KEYS[:50])]

    def check(outputs: list[AddOutcomes]) -> None:
        (summed,) = outputs
        assert summed.counts == {"ambiguous": 50} and summed.first_keys == {"ambiguous": KEYS[:MAX_NAMED_KEYS]}

    with TestPipeline() as pipeline:
        assert_that(pipeline | beam.Create(tagged) | beam.CombineGlobally(_SumOutcomesFn()), check)
