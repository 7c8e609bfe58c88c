"""Every reader reads every format: the same examples from TFRecord and ArrayRecord shards.

``read_dataset`` (tf.data), ``read_numpy``, ``TFRecordIterableDataset`` (per example and in ready
batches) and ``verify_dataset`` over the two interop datasets (the same samples, written once per
session in each format), compared with the samples that were written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pytest
import torch.utils.data

from beam_tfrecord import read_numpy, verify_dataset
from beam_tfrecord.errors import ReaderError
from beam_tfrecord.reader.order.read_plan import plan_read
from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset
from tests.interop.conftest import make_samples

SPLITS = "train+test"
FORMATS = ["tfrecord_dataset", "array_record_dataset"]


def _canonical(values: dict[str, Any]) -> tuple:
    """One example as comparable values, whichever reader (or the writer's sample) it comes from."""
    def text(value: Any) -> bytes:
        return value.encode() if isinstance(value, str) else bytes(value)

    return (text(values["caption"]), int(values["count"]), float(np.float32(values["score"])), text(values["blob"]),
            tuple(np.asarray(values["box"], dtype=np.float32).tolist()), tuple(text(t) for t in values["tags"]),
            tuple(int(i) for i in values["ids"]), np.asarray(values["pixels"], dtype=np.uint8).tobytes(),
            np.asarray(values["depth"], dtype=np.float64).tobytes(), np.asarray(values["flags"], dtype=bool).tobytes(),
            int(values["label"]), text(values["photo"]), text(values["mask"]))


def _written() -> list[tuple]:
    return sorted(_canonical(sample.values) for sample in make_samples())


def _rows(batch: dict[str, Any]) -> Iterator[dict[str, Any]]:
    count = len(batch["count"])
    for index in range(count):
        yield {name: column[index] for name, column in batch.items()}


def _tf_rows(path: str) -> Iterable[dict[str, Any]]:
    from beam_tfrecord import read_dataset

    for batch in read_dataset(path, split=SPLITS, batch_size=16):
        yield from _rows({name: value.to_list() if hasattr(value, "to_list") else value.numpy()
                          for name, value in batch.items()})


def _torch_examples(path: str) -> Iterable[dict[str, Any]]:
    return torch.utils.data.DataLoader(TFRecordIterableDataset(path, split=SPLITS), batch_size=None)


def _torch_batches(path: str) -> Iterable[dict[str, Any]]:
    loader = torch.utils.data.DataLoader(TFRecordIterableDataset(path, split=SPLITS, batch_size=16), batch_size=None)
    return (row for batch in loader for row in _rows(batch))


READERS: dict[str, Callable[[str], Iterable[dict[str, Any]]]] = {
    "read_dataset": _tf_rows,
    "read_numpy": lambda path: read_numpy(path, split=SPLITS),
    "TFRecordIterableDataset": _torch_examples,
    "TFRecordIterableDataset_batches": _torch_batches,
}


@pytest.mark.parametrize("dataset", FORMATS)
@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_reads_the_written_examples(request, dataset, reader):
    path = request.getfixturevalue(dataset)
    assert sorted(_canonical(example) for example in READERS[reader](path)) == _written()


@pytest.mark.parametrize("dataset", FORMATS)
def test_verify_reads_every_format(request, dataset):
    assert verify_dataset(request.getfixturevalue(dataset)).num_records == len(make_samples())


def test_tf_data_over_array_record_is_a_seeded_global_shuffle_per_epoch(array_record_dataset):
    from beam_tfrecord import read_dataset

    def epochs(dataset: Any, count: int) -> list[list[int]]:
        iterator_epochs = []
        for _ in range(count):
            iterator_epochs.append([int(c) for batch in dataset for c in batch["count"].numpy()])
        return iterator_epochs

    ordered = [int(e["count"]) for e in read_numpy(array_record_dataset)]
    first, second = epochs(read_dataset(array_record_dataset, shuffle=True, seed=4, batch_size=8), 2)
    assert sorted(first) == sorted(second) == sorted(ordered)
    assert first != ordered and first != second  # shuffled, and differently each epoch
    assert epochs(read_dataset(array_record_dataset, shuffle=True, seed=4, batch_size=8), 1)[0] == first
    # The same shuffle as read_numpy's, worker by worker (equal shares of one permutation).
    shares = [[int(c) for batch in read_dataset(array_record_dataset, shuffle=True, seed=4, batch_size=8,
                                                num_workers=2, worker_index=w) for c in batch["count"].numpy()]
              for w in range(2)]
    assert shares == [[int(e["count"]) for e in read_numpy(array_record_dataset, shuffle=True, seed=4,
                                                            num_workers=2, worker_index=w)] for w in range(2)]


def test_a_reader_that_cannot_read_a_format_is_a_reader_error_naming_the_readers_that_can(array_record_dataset):
    with pytest.raises(ReaderError, match="grain_loader cannot read array_record shards .* read them with "
                                          "read_dataset or read_numpy or TFRecordIterableDataset"):
        plan_read(array_record_dataset).require_reader("grain_loader")
