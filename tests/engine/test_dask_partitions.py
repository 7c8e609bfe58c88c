"""Dask partitions sized to the workers' memory limit when the job does not size them (``engine/dask_partitions.py``).

The build that needs it (a capped cluster, 1.3x its memory, no ``--dask_partition_size``) is
``tests/dask/test_dask_memory.py``'s; these check the arithmetic and what a pipeline's elements are taken to be.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest

from beam_tfrecord.core.units import MiB
from beam_tfrecord.engine.dask_partitions import (
    BEAM_PARTITION_SIZE,
    ELEMENT_BYTES,
    element_bytes_of,
    partition_size_for,
)


@pytest.mark.parametrize(("limit", "element_bytes", "expected"), [
    pytest.param(768 * MiB, ELEMENT_BYTES, 24, id="2x768MiB-issue-59: 24 elements of 4 MiB, 96 MiB a partition"),
    pytest.param(512 * MiB, ELEMENT_BYTES, 16, id="the-suite-s-capped-workers"),
    pytest.param(512 * MiB, 200 * MiB, 1, id="elements-larger-than-an-eighth: one a partition"),
    pytest.param(8 * 1024 * MiB, ELEMENT_BYTES, None, id="Beam-s-128-fit: left to Beam"),
    pytest.param(None, ELEMENT_BYTES, None, id="no-limit: left to Beam"),
    pytest.param(0, ELEMENT_BYTES, None, id="limit-0-means-none"),
])
def test_a_partition_takes_an_eighth_of_a_worker_s_limit_at_most(limit, element_bytes, expected) -> None:
    size = partition_size_for(memory_limit_bytes=limit, element_bytes=element_bytes)
    assert size == expected
    if size is not None:
        assert size < BEAM_PARTITION_SIZE and (size == 1 or size * element_bytes <= limit / 8)


def test_elements_are_taken_as_a_source_s_chunk_unless_measured_larger() -> None:
    small = beam.Pipeline()
    _ = small | beam.Create(list(range(1000))) | beam.Map(str)
    assert element_bytes_of(small) == ELEMENT_BYTES  # ints a later step expands: what they become is not known

    large = beam.Pipeline()
    _ = large | "Ints" >> beam.Create([1, 2])
    _ = large | "Arrays" >> beam.Create([np.zeros(8 * MiB, np.uint8) for _ in range(3)])
    assert 8 * MiB <= element_bytes_of(large) < 9 * MiB  # the largest Create's elements, as Dask measures them
