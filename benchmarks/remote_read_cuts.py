"""The fetcher's two cutting rules side by side: each ``remote`` epoch of ``remote_read.py`` also read with the
ranges cut as a stream's (``whole_shards=False``: equal ranges, the first shard ramped), interleaved.

Prints every round of both (records/s, this process's CPU seconds, ranged GETs), then the best of each.

Run: nice -n 10 python benchmarks/remote_read_cuts.py --workloads array [any remote_read.py option]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import remote_read

from beam_tfrecord.remote_reads import fetcher
from beam_tfrecord.remote_reads.options import COUNTERS

EQUAL = [False]  # set while an "equal" epoch is read: every fetcher made then cuts equal ranges
_INIT = fetcher.ShardFetcher.__init__


def _init(self: fetcher.ShardFetcher, shards: Any, reads: Any, *, side_by_side: Any = (),
          whole_shards: bool = True) -> None:
    _INIT(self, shards, reads, side_by_side=side_by_side, whole_shards=whole_shards and not EQUAL[0])


fetcher.ShardFetcher.__init__ = _init  # type: ignore[method-assign]


class Equal:
    """An epoch read with the equal-range cuts."""

    def __init__(self, epoch: Iterable[Any]) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        EQUAL[0] = True
        try:
            yield from self.epoch
        finally:
            EQUAL[0] = False


def measure(modes: dict[str, remote_read.Mode], expected: dict[str, int], rounds: int,
            store: list[Any]) -> dict[str, tuple[float, float, float]]:
    """``remote_read.measure`` on ``ranges``, ``local`` and ``remote`` modes, each ``remote`` followed by its
    ``equal`` twin; prints every round of both and the median ratios (the others' figures are NaN)."""
    timed: dict[str, remote_read.Mode] = {"ranges": modes["ranges"]}
    for name in [n for n in modes if n.startswith("remote ")]:
        reader, epochs, _ = modes[name]
        twin = "equal " + name.split(" ", 1)[1]
        timed.update({"local " + name.split(" ", 1)[1]: modes["local " + name.split(" ", 1)[1]], name: modes[name],
                      twin: (reader, lambda epochs=epochs: Equal(epochs()), False)})
        expected[twin] = expected[name]
    rounds_of: dict[str, list[tuple[float, float, int]]] = {name: [] for name in timed}
    for round_index in range(rounds + 1):
        for name, (reader, epochs, _) in timed.items():
            epoch = epochs()
            requests, started, own = COUNTERS.snapshot().get("ranges", 0), time.perf_counter(), time.process_time()
            got = remote_read.count(reader, epoch)
            elapsed, cpu = time.perf_counter() - started, time.process_time() - own
            if got != expected[name]:
                raise RuntimeError(f"{name}: {got} instead of {expected[name]}")
            if round_index:
                rounds_of[name].append((got / elapsed, cpu, COUNTERS.snapshot().get("ranges", 0) - requests))
    for name, figures in rounds_of.items():
        if name.split(" ")[0] in ("remote", "equal"):
            print(f"  rounds {name:13s}: " + " | ".join(f"{rate:>8,.0f}/s {cpu:5.2f} CPU-s {gets:4d} GETs"
                                                        for rate, cpu, gets in figures))
    for name in [n for n in timed if n.startswith("remote ")]:
        twin = "equal " + name.split(" ", 1)[1]
        pairs = list(zip(rounds_of[twin], rounds_of[name]))
        print(f"  equal/whole {name[7:]:5s}: records/s median {statistics.median(e[0] / w[0] for e, w in pairs):.2f}, "
              f"CPU-s median {statistics.median(e[1] / w[1] for e, w in pairs):.2f} (per round, paired)")
    nan = float("nan")
    best = {name: (nan, nan, 0.0) for name in modes}
    best.update({name: (expected[name] / max(f[0] for f in figures), min(f[1] for f in figures), 0.0)
                 for name, figures in rounds_of.items()})
    return best


remote_read.measure = measure

if __name__ == "__main__":
    remote_read.main()
