"""How many elements a Dask partition holds when the job does not say (``--dask_partition_size``): what fits a worker.

Invariant: a partition's elements, at ``ELEMENT_BYTES`` each (or a ``Create``'s measured size, when larger),
take at most ``PARTITION_SHARE`` of the smallest worker's memory limit, and never more elements than Beam's
default (``BEAM_PARTITION_SIZE``). ``docs/operations.md`` ("Dask").
"""

from __future__ import annotations

import logging
from typing import Any

import apache_beam as beam
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor

from beam_tfrecord.core.units import MiB

# Beam 2.77's DaskRunner cuts a Create into partitions of max(128, sqrt(n) / 10) elements (``transform_evaluator``).
BEAM_PARTITION_SIZE = 128
# A task holds every output of the steps fused over its partition (a source's samples, then their encoding):
# 128 elements of ~3.1 MB of samples each outgrew 768 MiB workers (killed at 95%, ClusterStalledError); 32
# finished at a 0.52 GiB peak (docs/operations.md, "Dask"). An eighth of the limit leaves the worker's own
# ~250-300 MiB (Beam, the writer) and a spill run beside it.
PARTITION_SHARE = 1 / 8
# What one element of a Create stands for once a later step expands it, when nothing larger is measured: a
# source's chunk (1,000 rows of ~3 KB: 3.1 MB; the Dask tests' 8 records of 256 KiB: 2 MiB). An element that
# expands to more needs ``--dask_partition_size``.
ELEMENT_BYTES = 4 * MiB


def partition_size_for(*, memory_limit_bytes: int | None, element_bytes: int) -> int | None:
    """Elements per partition for workers of ``memory_limit_bytes`` each and elements of ``element_bytes``.

    None (Beam's default) when the workers have no limit, or when Beam's partitions already fit.
    """
    if not memory_limit_bytes:
        return None
    fits = max(1, int(memory_limit_bytes * PARTITION_SHARE) // max(element_bytes, 1))
    return fits if fits < BEAM_PARTITION_SIZE else None


def smallest_memory_limit(client: Any) -> int | None:
    """The smallest memory limit among the workers the scheduler of ``client`` knows (None: no worker, or none
    has a limit)."""
    workers = client.scheduler_info(n_workers=-1).get("workers", {}).values()
    limits = [limit for limit in (info.get("memory_limit") for info in workers) if limit]
    return min(limits) if limits else None


class _CreatedElements(PipelineVisitor):
    """Finds the largest mean size of a ``Create``'s elements, as Dask measures them (``dask.sizeof``)."""

    def __init__(self) -> None:
        self.largest_bytes = 0

    def _measure(self, node: AppliedPTransform) -> None:
        from dask.sizeof import sizeof

        values = getattr(node.transform, "values", None)
        if isinstance(node.transform, beam.Create) and values:
            self.largest_bytes = max(self.largest_bytes, sizeof(list(values)) // len(values))

    def enter_composite_transform(self, transform_node: AppliedPTransform) -> None:
        self._measure(transform_node)

    def visit_transform(self, transform_node: AppliedPTransform) -> None:
        self._measure(transform_node)


def element_bytes_of(pipeline: beam.Pipeline) -> int:
    """What one element of ``pipeline``'s Creates is taken to become: ``ELEMENT_BYTES``, or the largest measured."""
    visitor = _CreatedElements()
    pipeline.visit(visitor)
    return max(ELEMENT_BYTES, visitor.largest_bytes)


def fitted_bag_kwargs(bag_kwargs: dict[str, Any], *, pipeline: beam.Pipeline, client: Any) -> dict[str, Any]:
    """Beam's ``bag_kwargs`` (``--dask_partition_size``, ``--dask_npartitions``) as given, or, when neither is,
    with a partition size that fits the cluster's workers (``partition_size_for``)."""
    if bag_kwargs.get("npartitions") or bag_kwargs.get("partition_size"):
        return bag_kwargs
    limit, element_bytes = smallest_memory_limit(client), element_bytes_of(pipeline)
    size = partition_size_for(memory_limit_bytes=limit, element_bytes=element_bytes)
    if size is None:
        return bag_kwargs
    logging.getLogger(__name__).info("Dask partitions of %d elements (workers' memory limit %d MiB, %d MiB each)",
                                     size, (limit or 0) // MiB, element_bytes // MiB)
    return {**bag_kwargs, "partition_size": size}
