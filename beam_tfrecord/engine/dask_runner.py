"""Beam's DaskRunner, fixed to end a job or fail it with a reason (``--runner`` of a user's pipeline and the jobs).

Five changes to Beam 2.77's: every branch runs (Beam's computed only the last transform's: of two writers,
one published nothing, silently; ``_leaf_bags``); a ParDo's outputs live as long as its task's result (Beam's
kept them in the task's arguments, memory Dask can neither measure nor spill); partitions fit the workers'
memory limit (``dask_partitions``); each worker gives its freed ``malloc`` memory back near its limit
(``GiveMemoryBack``); and the result waits with the stall watchdog (``dask_watch.wait_for_dask``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from apache_beam.runners.common import DoFnInvoker
from apache_beam.runners.dask import dask_runner as beam_dask_runner
from apache_beam.runners.dask import transform_evaluator
from apache_beam.runners.runner import PipelineState
from distributed import WorkerPlugin, get_client
from distributed.core import Status

from beam_tfrecord import storage
from beam_tfrecord.engine.dask_partitions import fitted_bag_kwargs
from beam_tfrecord.engine.dask_watch import DEFAULT_STALL_TIMEOUT_SECONDS, DaskRunReport, wait_for_dask
from beam_tfrecord.engine.worker_memory import give_back_freed_memory
from beam_tfrecord.errors import ClusterStalledError

_TRANSLATING = threading.Lock()  # the translation swaps a module attribute of Beam's: one job at a time


def apply_dofn_to_bundle(items: Iterable[Any], do_fn_invoker_args: list[Any], do_fn_invoker_kwargs: dict[str, Any],
                         tagged_receivers: Any) -> list[Any]:
    """Runs a DoFn over one Dask partition (a bundle); returns its outputs, ``finish_bundle``'s included.

    The receivers are emptied before returning, so the outputs live as long as the result Dask
    holds and measures (and can spill), not as long as the task's arguments. Beam's keeps them
    there, and Dask keeps a task's arguments as long as its result, which lives (a fused chain of
    ParDos is one task) until the next shuffle has read it: a 0.6 GiB build held ~350 MB per worker
    of two, a 1.9 GB one needed 9.4 GB; with this, a 0.4 GiB build holds ~270 MB per worker, flat.
    Beam's also drops what ``finish_bundle`` emits (``tests/dask/test_dask_defects.py`` shows both).
    """
    _give_worker_its_client()
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


def _give_worker_its_client() -> None:
    """Makes this Dask worker's client (once per worker process; nothing outside a worker).

    Beam's side inputs compute a Dask bag inside the task, which needs a client on the worker: on a worker
    where no task had made one yet, ``AsList`` failed with "Requested dask.distributed scheduler but no
    Client active", at random (tests/beam/test_read_dataset.py, on the suite's shared cluster).
    """
    global _client_made_in
    if _client_made_in != os.getpid():  # get_client() also logs an event on the scheduler: once, not per bundle
        with contextlib.suppress(ValueError):
            get_client()
        _client_made_in = os.getpid()


_client_made_in: int | None = None  # the process that made its worker client


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


class GiveMemoryBack(WorkerPlugin):
    """On each worker: gives freed ``malloc`` memory back while the worker is paused or above ``TRIM_FRACTION``
    of its memory limit, checked every ``CHECK_MS``, at most once per ``MIN_SECONDS_BETWEEN``.

    Dask pauses a worker at 80% of its limit and resumes it below; what the worker's tasks freed stays in
    its RSS as "unmanaged memory" (glibc's arenas), so a paused worker with nothing left to run never
    resumed. Below ``TRIM_FRACTION`` nothing is given back: reusing freed pages beats faulting them in.
    """

    name = "beam-tfrecord-give-memory-back"
    CHECK_MS = 200  # Dask's own memory monitor looks every 100 ms
    TRIM_FRACTION = 0.7  # Dask's "spill" threshold: from here on it acts on the worker's memory too
    MIN_SECONDS_BETWEEN = 1.0  # giving back 480 MB took 78 ms here (the event loop waits); nothing to give, 3 ms

    def setup(self, worker: Any) -> None:
        from tornado.ioloop import PeriodicCallback

        self._worker = worker
        self._last_trim = 0.0
        self._callback = PeriodicCallback(self._check, self.CHECK_MS)
        self._callback.start()

    def teardown(self, worker: Any) -> None:
        self._callback.stop()

    def _check(self) -> None:
        limit = self._worker.memory_manager.memory_limit
        now = time.monotonic()
        if not limit or now - self._last_trim < self.MIN_SECONDS_BETWEEN:
            return
        worker = self._worker
        if worker.status == Status.paused or worker.monitor.get_process_memory() > self.TRIM_FRACTION * limit:
            self._last_trim = now
            give_back_freed_memory()


def _register_give_memory_back(client: Any) -> None:
    """Registers ``GiveMemoryBack`` on the cluster (idempotent by name; restarted workers get it too)."""
    try:
        client.register_plugin(GiveMemoryBack())
    except OSError as err:  # a worker lost meanwhile (CommClosedError): the scheduler keeps the plugin for the rest
        logging.getLogger(__name__).warning("could not register %s on every worker: %s", GiveMemoryBack.name, err)


def _writer_temp_dir(transform: Any) -> str | None:
    """The temporary folder of one of this package's writers (its public ``temp_dir``), None for other transforms."""
    temp_dir = getattr(transform, "temp_dir", None) if type(transform).__module__.startswith("beam_tfrecord.") else None
    return temp_dir if isinstance(temp_dir, str) else None


def _nothing(partition: Iterable[Any]) -> list[Any]:
    """A leaf's partition, run for its effects: nothing of it is kept as the task's result."""
    for _ in partition:
        pass
    return []


def _leaf_bags(bags: dict[Any, Any]) -> list[Any]:
    """The Dask bags of the transforms (``AppliedPTransform``) whose outputs no other transform reads."""
    read = {value.producer for node in bags for value in node.inputs if hasattr(value, "producer")}
    read |= {side.pvalue.producer for node in bags for side in node.side_inputs}
    found: dict[int, Any] = {}
    for node, bag in bags.items():
        if node not in read:
            for each in bag if isinstance(bag, list) else [bag]:
                if hasattr(each, "map_partitions"):
                    found[id(each)] = each
    return list(found.values())


def _pipeline_of(pvalueish: Any) -> Any:
    if isinstance(pvalueish, dict):
        pvalueish = list(pvalueish.values())
    if isinstance(pvalueish, (list, tuple)):
        return next((p for p in map(_pipeline_of, pvalueish) if p is not None), None)
    return getattr(pvalueish, "pipeline", None)


@dataclasses.dataclass
class DaskJobResult(beam_dask_runner.DaskRunnerResult):
    """Beam's result, waiting with the stall watchdog: ``wait_until_finish`` ends, or raises.

    A stall (``ClusterStalledError``) cancels the job and deletes the writers' temporary folders:
    nothing was published (the manifest is written last), and a re-run starts clean. The client is
    closed once the job has ended (Beam's stays open and retries a stopped cluster).

    Attributes:
        stall_timeout_seconds: ``--dask_stall_timeout_seconds``.
        temp_dirs: the writers' temporary folders.
        report: what the scheduler showed, once the job is done.
    """

    stall_timeout_seconds: float = DEFAULT_STALL_TIMEOUT_SECONDS
    temp_dirs: tuple[str, ...] = ()
    report: DaskRunReport | None = None

    def wait_until_finish(self, duration: float | None = None) -> str:
        if PipelineState.is_terminal(self._state):
            return self._state
        if duration is not None:  # a bounded wait (milliseconds) is Beam's, which may return RUNNING
            return super().wait_until_finish(duration)
        try:
            self.report = wait_for_dask(self, stall_timeout_seconds=self.stall_timeout_seconds)
        except ClusterStalledError:
            self._state = PipelineState.FAILED
            for temp_dir in self.temp_dirs:
                _delete_quietly(temp_dir)
            self.client.close()
            raise
        except BaseException:
            self._state = PipelineState.FAILED
            self.client.close()
            raise
        self._state = PipelineState.DONE
        self.client.close()
        return self._state


def _delete_quietly(temp_dir: str) -> None:
    """Deletes a stalled job's temporary folder; a failure is logged, never raised over the stall's error."""
    try:
        storage.delete_tree(temp_dir)
    except Exception as err:  # the stall is the error to report; the folder is named for the user
        logging.getLogger(__name__).warning("could not delete the stalled job's temporary folder %s: %s",
                                            temp_dir, err)


class DaskRunner(beam_dask_runner.DaskRunner):
    """Beam's DaskRunner: a ParDo's outputs released with its result, ``finish_bundle``'s kept, workers
    giving freed memory back (``GiveMemoryBack``) and a result that cannot wait forever (``DaskJobResult``)."""

    def __init__(self) -> None:
        super().__init__()
        self._temp_dirs: dict[str, None] = {}  # the writers' temporary folders, in the order they were applied

    def apply(self, transform: Any, pvalueish: Any, options: Any) -> Any:
        """Notes the temporary folder of a writer being expanded (deleted if the cluster stalls), then applies.

        Beam's ``Pipeline.run`` turns the pipeline into protos and back before ``run_pipeline``, which
        loses composite transforms; so they are seen here, as the pipeline is built: the writer itself
        when this runner was chosen, or (the writers put it in place of Beam's while expanding) its parts.
        """
        pipeline = _pipeline_of(pvalueish)
        for applied in [*(pipeline.transforms_stack if pipeline is not None else ()), transform]:
            temp_dir = _writer_temp_dir(getattr(applied, "transform", applied))
            if temp_dir is not None:
                self._temp_dirs[temp_dir] = None
        return super().apply(transform, pvalueish, options)

    def run_pipeline(self, pipeline: Any, options: Any) -> Any:
        temp_dirs = tuple(self._temp_dirs)
        dask_options = options.view_as(beam_dask_runner.DaskOptions)
        if dask_options.address or dask_options.scheduler_file:  # before any task runs: none is lost meanwhile
            from distributed import Client

            with Client(address=dask_options.address, scheduler_file=dask_options.scheduler_file) as client:
                _register_give_memory_back(client)
        with _fixed_translation():
            client, futures = self._compute_every_leaf(pipeline, options)
        if not (dask_options.address or dask_options.scheduler_file):  # the cluster Beam's runner just started
            _register_give_memory_back(client)
        stall = options.get_all_options().get("dask_stall_timeout_seconds") or DEFAULT_STALL_TIMEOUT_SECONDS
        return DaskJobResult(client, futures, stall_timeout_seconds=stall, temp_dirs=temp_dirs)

    def _compute_every_leaf(self, pipeline: Any, options: Any) -> tuple[Any, list[Any]]:
        """Beam's ``run_pipeline``, but computing every leaf's bag, not just the last transform's, with partitions
        that fit the workers' memory when the options do not size them (``dask_partitions``).

        Beam's computes ``list(bags.values())[-1]``: a transform no later one reads from (a second
        writer's publish step, any side branch) never ran. Each leaf's partitions are emptied
        (``_nothing``): a job's outputs are its writes, not elements gathered to the client.
        """
        import dask
        from distributed import Client

        dask_options = options.view_as(beam_dask_runner.DaskOptions).get_all_options(drop_default=True,
                                                                                   current_only=True)
        bag_kwargs = beam_dask_runner.DaskOptions._extract_bag_kwargs(dask_options)
        client = Client(**dask_options)
        bag_kwargs = fitted_bag_kwargs(bag_kwargs, pipeline=pipeline, client=client)  # the workers' memory
        pipeline.replace_all(beam_dask_runner.dask_overrides())
        visitor = self.to_dask_bag_visitor(bag_kwargs)
        pipeline.visit(visitor)
        leaves = [bag.map_partitions(_nothing) for bag in _leaf_bags(visitor.bags)]  # type: ignore[attr-defined]
        return client, list(client.compute(list(dask.optimize(*leaves))))
