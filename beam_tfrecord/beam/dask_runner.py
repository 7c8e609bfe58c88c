"""Beam's DaskRunner with the defect that made it hold a job's whole input in memory fixed.

Beam 2.77's DaskRunner runs a ParDo over a Dask partition with ``apply_dofn_to_bundle``, whose
receivers append every output to a list that is part of the *task's arguments*. Dask keeps a
task's arguments for as long as it keeps the task's result, and it fuses a chain of ParDos into
one task whose result lives until the next shuffle has read it. So every output of every ParDo
of a partition (the samples a source made, the writer's input) stayed in worker memory until the
shuffle after it had read every partition: measured on the writer, a 0.6 GiB build held ~350 MB
per worker of two, and the issue's 1.9 GB build needed 9.4 GB. Dask cannot spill that memory, as
it is not a task result, and workers paused or were killed.

``DaskRunner`` here is Beam's, with ParDo translated by an ``apply_dofn_to_bundle`` that hands
the outputs over and clears the receivers (a 0.4 GiB build then holds ~270 MB per worker, flat,
instead of ~470 MB and growing), and keeps what ``finish_bundle`` emits, which Beam's drops.
Select it with ``--runner beam_tfrecord.beam.dask_runner.DaskRunner``; the jobs use it whenever
``--runner`` names Beam's DaskRunner, and the writers put it in place of Beam's in a user's own
pipeline (``beam_tfrecord.beam.runners.use_fixed_dask_runner``). ``tests/dask/test_dask_defects.py``
shows both defects on Beam's runner and their absence on this one, so the day Beam fixes them the
tests say so.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from apache_beam.runners.common import DoFnInvoker
from apache_beam.runners.dask import dask_runner as beam_dask_runner
from apache_beam.runners.dask import transform_evaluator

_TRANSLATING = threading.Lock()  # the translation swaps a module attribute of Beam's: one job at a time


def apply_dofn_to_bundle(items: Iterable[Any], do_fn_invoker_args: list[Any], do_fn_invoker_kwargs: dict[str, Any],
                         tagged_receivers: Any) -> list[Any]:
    """Runs a DoFn over one Dask partition (a bundle); returns its outputs, ``finish_bundle``'s included.

    The receivers are emptied before returning, so the outputs live as long as the result Dask
    holds and measures (and can spill), not as long as the task's arguments.
    """
    invoker = DoFnInvoker.create_invoker(*do_fn_invoker_args, **do_fn_invoker_kwargs)
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(item)
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    results = [value.value for value in tagged_receivers.values]
    tagged_receivers.values.clear()
    return results


@contextlib.contextmanager
def _fixed_translation() -> Iterator[None]:
    """Beam's ParDo translation, using ``apply_dofn_to_bundle`` above while a graph is built.

    Beam's ``ParDo.apply`` looks the function up in its module when it builds a partition's task,
    so it is swapped for the translation and put back after; the tasks name this module's
    function, which workers import like any DoFn's code.
    """
    with _TRANSLATING:
        original = transform_evaluator.apply_dofn_to_bundle
        transform_evaluator.apply_dofn_to_bundle = apply_dofn_to_bundle
        try:
            yield
        finally:
            transform_evaluator.apply_dofn_to_bundle = original


class DaskRunner(beam_dask_runner.DaskRunner):
    """Beam's DaskRunner, with a ParDo's outputs released with its result and ``finish_bundle``'s kept."""

    def run_pipeline(self, pipeline: Any, options: Any) -> Any:
        with _fixed_translation():
            return super().run_pipeline(pipeline, options)
