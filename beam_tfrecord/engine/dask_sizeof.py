"""Dask's ``sizeof`` for what Beam's DaskRunner and this writer keep in worker memory, so Dask can spill it.

Loaded through the ``dask.sizeof`` entry point (``setup.py``); each registers when its library is first imported.
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
