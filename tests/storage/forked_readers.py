"""A training script's reads from object stores in processes it starts after reading in its main process.

Run as a script (a user's own ``__main__``): ``python forked_readers.py METHOD[,METHOD...] PATH [PATH ...]``. The
main process first reads the datasets mixed in equal parts (``{path: 1, ...}``) with ``read_numpy`` (a validation
pass: obstore's runtime starts here), then reads them again in processes started by each start method in turn:

- torchdata's ``StatefulDataLoader`` with 2 workers (a batch at most ``TIMEOUT_SECONDS`` away) reads the epoch,
  its ``state_dict`` taken after 2 batches; a new one resumed from that state reads the rest;
- under fork, a ``multiprocessing.Pool`` of 2 reads one dataset per task.

A forkserver is given the imports a training script's would (``set_forkserver_preload``). It prints one JSON
object: the keys the main process read, and per start method the keys each way read, in lists, so that a record
given twice shows. A test runs it with ``run_forked_readers`` and checks it with ``assert_every_record_once``.
"""

from __future__ import annotations

import collections
import json
import multiprocessing
import os
import subprocess
import sys

TIMEOUT_SECONDS = 60  # a DataLoader's wait for one batch: a hang fails the test instead of blocking it
SPLIT = "train"
BATCH = 8
SAVED_AFTER_BATCHES = 2


def keys_of(path: str | dict[str, float]) -> list[str]:
    from beam_tfrecord import read_numpy

    return [_text(example["key"]) for example in read_numpy(path, split=SPLIT)]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def loader_keys(mixed: dict[str, float], method: str) -> tuple[list[str], list[str], list[str]]:
    """(the epoch's keys, the keys read before the state was taken, the keys a loader resumed from it read)."""
    from torchdata import stateful_dataloader as stateful

    from beam_tfrecord import TFRecordIterableDataset

    def loader() -> stateful.StatefulDataLoader:
        return stateful.StatefulDataLoader(TFRecordIterableDataset(mixed, split=SPLIT, batch_size=BATCH),
                                           batch_size=None, num_workers=2, multiprocessing_context=method,
                                           timeout=TIMEOUT_SECONDS)

    epoch: list[str] = []
    state = None
    before = 0
    first = loader()
    for batches, batch in enumerate(first, start=1):
        epoch += [_text(key) for key in batch["key"]]
        if batches == SAVED_AFTER_BATCHES:
            state, before = first.state_dict(), len(epoch)
    resumed = loader()
    resumed.load_state_dict(state)
    return epoch, epoch[:before], [_text(key) for batch in resumed for key in batch["key"]]


def run_forked_readers(start_methods: list[str], paths: list[str]) -> dict:
    """This script's result, run in a fresh interpreter with this process's environment."""
    done = subprocess.run([sys.executable, __file__, ",".join(start_methods), *paths], capture_output=True,
                          text=True, env=os.environ.copy(), timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_every_record_once(result: dict, start_method: str) -> None:
    """The workers of ``start_method`` read what the main process read, each record once; and so did a loader
    resumed from a state taken part-way, with what came before it; a forked ``Pool`` read each dataset whole."""
    main = collections.Counter(result["main"])
    read = result[start_method]
    assert collections.Counter(read["epoch"]) == main, start_method
    assert read["before_state"] and read["resumed"], start_method
    assert collections.Counter(read["before_state"] + read["resumed"]) == main, start_method
    if start_method == "fork":
        assert read["pool"] == result["main_each"]


def main() -> None:
    methods, paths = sys.argv[1].split(","), sys.argv[2:]
    multiprocessing.set_forkserver_preload(["torch", "beam_tfrecord"])
    mixed = {path: 1.0 for path in paths}
    result: dict[str, object] = {"main": keys_of(mixed), "main_each": {path: keys_of(path) for path in paths}}
    for method in methods:
        read: dict[str, object] = {}
        read["epoch"], read["before_state"], read["resumed"] = loader_keys(mixed, method)
        if method == "fork":
            with multiprocessing.get_context(method).Pool(2) as pool:
                read["pool"] = dict(zip(paths, pool.map(keys_of, paths), strict=True))
        result[method] = read
    print(json.dumps(result))


if __name__ == "__main__":
    main()
