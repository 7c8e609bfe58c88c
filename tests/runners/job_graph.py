"""What a runner would be given, read from Beam's runner-API pipeline proto (the job's graph).

The Dataflow service and a portable job server (Flink's) receive the same kind of proto: transforms
with URNs, PCollections between them, and for each Python ParDo its pickled DoFn with its side
inputs. This module turns one into steps (leaf transforms; a ``combine_per_key`` composite counts as
one step, since runners lift the combine so that its shuffle carries accumulators) and answers the
questions the dry-run tests ask: which GroupByKeys carry the encoded records, and which side inputs
exist and how large they can grow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from apache_beam.internal import pickler
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.transforms.core import CallableWrapperDoFn

PARDO = common_urns.primitives.PAR_DO.urn
GROUP_BY_KEY = common_urns.primitives.GROUP_BY_KEY.urn
COMBINE_PER_KEY = common_urns.composites.COMBINE_PER_KEY.urn


@dataclasses.dataclass(frozen=True)
class SideInput:
    """A side input of a ParDo: the PCollection it reads and the function that makes its view."""

    pcollection: str
    view_fn: Callable[[Iterable[Any]], Any]

    def is_singleton(self) -> bool:
        """True when the view admits at most one element (``AsSingleton``): tried on two elements."""
        try:
            self.view_fn(iter(["first", "second"]))
        except ValueError:
            return True
        return False


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of the job: a leaf transform, or a whole combine.

    Attributes:
        name: the transform's unique name (``WriteDataset/ByShard``).
        urn: what it is (``beam:transform:group_by_key:v1``...).
        main_inputs: PCollection ids it reads as its main input(s).
        side_inputs: tag -> side input (ParDo only).
        outputs: PCollection ids it writes.
        fn: the user function it runs: a ParDo's DoFn (the wrapped function for ``Map`` / ``FlatMap``),
            a combine's CombineFn; None for runner primitives or when it cannot be unpickled here.
    """

    name: str
    urn: str
    main_inputs: tuple[str, ...]
    side_inputs: dict[str, SideInput]
    outputs: tuple[str, ...]
    fn: Any


def _user_fn(transform: beam_runner_api_pb2.PTransform) -> tuple[Any, dict[str, SideInput]]:
    if transform.spec.urn == COMBINE_PER_KEY:
        payload = beam_runner_api_pb2.CombinePayload.FromString(transform.spec.payload)
        return pickler.loads(payload.combine_fn.payload), {}
    if transform.spec.urn != PARDO:
        return None, {}
    payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
    side_inputs = {tag: SideInput(transform.inputs[tag], pickler.loads(side.view_fn.payload))
                   for tag, side in payload.side_inputs.items()}
    try:
        do_fn = pickler.loads(payload.do_fn.payload)[0]
    except Exception:  # Beam's own DoFns with a non-pickled payload (key_with_none...)
        return None, side_inputs
    return (do_fn._fn if isinstance(do_fn, CallableWrapperDoFn) else do_fn), side_inputs


def job_steps(proto: beam_runner_api_pb2.Pipeline) -> dict[str, Step]:
    """The job's steps by unique name."""
    transforms = proto.components.transforms
    steps: dict[str, Step] = {}
    pending = list(proto.root_transform_ids)
    while pending:
        transform = transforms[pending.pop()]
        if transform.subtransforms and transform.spec.urn != COMBINE_PER_KEY:
            pending.extend(transform.subtransforms)
            continue
        fn, side_inputs = _user_fn(transform)
        steps[transform.unique_name] = Step(
            name=transform.unique_name, urn=transform.spec.urn,
            main_inputs=tuple(pc for tag, pc in transform.inputs.items() if tag not in side_inputs),
            side_inputs=side_inputs, outputs=tuple(transform.outputs.values()), fn=fn)
    return steps


def producers(steps: dict[str, Step]) -> dict[str, Step]:
    """PCollection id -> the step that writes it."""
    return {pcollection: step for step in steps.values() for pcollection in step.outputs}


def downstream(steps: dict[str, Step], start: Step, *, stops_at: Callable[[Step], bool]) -> set[str]:
    """PCollection ids reachable from ``start``'s outputs through main inputs, not through steps that ``stops_at``.

    Conservative: every step is assumed to pass on what it reads unless ``stops_at`` says otherwise.
    """
    reached = set(start.outputs)
    changed = True
    while changed:
        changed = False
        for step in steps.values():
            if step is start or stops_at(step) or not reached.intersection(step.main_inputs):
                continue
            new = set(step.outputs) - reached
            if new:
                reached |= new
                changed = True
    return reached


def group_by_keys_reading(steps: dict[str, Step], pcollections: set[str]) -> list[str]:
    """Names of the GroupByKeys whose input is one of ``pcollections``."""
    return sorted(step.name for step in steps.values()
                  if step.urn == GROUP_BY_KEY and pcollections.intersection(step.main_inputs))


def upstream_group_by_keys(steps: dict[str, Step], end: Step) -> list[str]:
    """Names of the GroupByKeys that ``end``'s main input passes through (its whole ancestry)."""
    by_output = producers(steps)
    seen: set[str] = set()
    pending = list(end.main_inputs)
    found: set[str] = set()
    while pending:
        pcollection = pending.pop()
        if pcollection in seen or pcollection not in by_output:
            continue
        seen.add(pcollection)
        step = by_output[pcollection]
        if step.urn == GROUP_BY_KEY:
            found.add(step.name)
        pending.extend(step.main_inputs)
    return sorted(found)
