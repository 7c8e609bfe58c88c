"""Dask's ``sizeof`` for what Beam's DaskRunner and this writer keep in worker memory.

Dask decides what to spill to disk, and when a worker is full, from the measured size of the task
results it holds. For a type it does not know, ``sizeof`` falls back to ``sys.getsizeof``, which
counts an object's own header but nothing it refers to: every element the DaskRunner stores is a
Beam ``WindowedValue``, measured at ~80 bytes whatever it wraps, so partitions of hundreds of
megabytes looked like a few kilobytes and stayed in memory as "unmanaged memory" that Dask never
spills. These registrations measure what is wrapped.

Loaded through the ``dask.sizeof`` entry point (``setup.py``), so every process that imports Dask
with this package installed has them, workers included; each registers lazily, when its
library is first imported.
"""

from __future__ import annotations

import sys
from typing import Any


def register(sizeof: Any) -> None:
    """The ``dask.sizeof`` entry point: registers the measures below with Dask's dispatcher."""

    @sizeof.register_lazy("apache_beam")
    def _register_beam() -> None:
        from apache_beam.pvalue import TaggedOutput
        from apache_beam.utils.windowed_value import WindowedValue

        @sizeof.register(WindowedValue)
        def _windowed(value: WindowedValue) -> int:
            return sys.getsizeof(value) + sizeof(value.value)

        @sizeof.register(TaggedOutput)
        def _tagged(value: TaggedOutput) -> int:
            return sys.getsizeof(value) + sizeof(value.value)

    @sizeof.register_lazy("beam_tfrecord")
    def _register_ours() -> None:
        from beam_tfrecord.encoding.entries import EncodedBatch

        @sizeof.register(EncodedBatch)
        def _batch(batch: EncodedBatch) -> int:
            return sys.getsizeof(batch) + sizeof(batch.entries) + sizeof(batch.dead_letters)
