"""What the dataset writer must look like in a job sent to a distributed runner (Dataflow, Flink).

Shared by the Dataflow dry-run tests and the portable (Flink) job tests: the shuffle fan-in, one
GroupByKey for the encoded records, and side inputs whose size does not grow with the records.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from apache_beam.portability.api import beam_runner_api_pb2
from job_graph import Step, downstream, group_by_keys_reading, job_steps, producers

# Steps that read encoded records but emit something much smaller, so what they emit is not payload:
# a record's hash and framed size (planning), the histogram of hashes (a combine, lifted by the
# runner), dead letters (a sample's key and the reason), shard infos (one per written shard).
# Any other step is assumed to pass the payload on.
NOT_PAYLOAD = frozenset({
    "beam_tfrecord.beam.plan_dataset.records_to_refine",
    "beam_tfrecord.beam.plan_dataset.bucket_records",
    "beam_tfrecord.beam.plan_dataset.SummarizeFn",
    "beam_tfrecord.beam.shuffle_path._dead_letters_of",
    "beam_tfrecord.beam.shuffle_path._digest_files_of",  # the digest files' names (exact duplicates), no record
    "beam_tfrecord.beam.shuffle_path._signature_files_of",  # the signature files' names (near duplicates)
    "beam_tfrecord.beam.shuffle_path.WriteShardFromGroupFn",
})
# The planning step whose output (one Cut per split or shard boundary) is read as a list.
CUTS = "beam_tfrecord.beam.plan_dataset.refine"


def qualified_name(fn: Any) -> str | None:
    """``module.qualname`` of a function, or of an object's class; None for None."""
    if fn is None:
        return None
    named = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{named.__module__}.{named.__qualname__}"


def _passes_payload_on(step: Step) -> bool:
    return qualified_name(step.fn) not in NOT_PAYLOAD


@dataclasses.dataclass(frozen=True)
class WriterGraph:
    """The writer's part of a job graph.

    Attributes:
        steps: every step of the job, by name.
        writer: the writer transform's label in the job (``WriteDataset``, ``WriteVersion``).
    """

    steps: dict[str, Step]
    writer: str

    @classmethod
    def of(cls, proto: beam_runner_api_pb2.Pipeline, writer: str) -> "WriterGraph":
        return cls(job_steps(proto), writer)

    @property
    def path(self) -> str:
        """The label of the writer's fan-in path (``beam_tfrecord.beam.shuffle_path.ShufflePath``)."""
        return f"{self.writer}/Shuffle"

    def step(self, name: str) -> Step:
        """A step of the writer's fan-in path."""
        return self.steps[f"{self.path}/{name}"]

    def payload_group_by_keys(self) -> list[str]:
        """GroupByKeys reached by the encoded records (conservatively: see NOT_PAYLOAD)."""
        encode = self.step("Encode")
        return group_by_keys_reading(self.steps, downstream(self.steps, encode,
                                                            stops_at=lambda s: not _passes_payload_on(s)))

    def side_inputs(self) -> dict[str, tuple[Step, Any]]:
        """``consumer step/tag`` -> (the step producing the side input, the side input)."""
        by_output = producers(self.steps)
        return {f"{step.name}/{tag}": (by_output[side.pcollection], side)
                for step in self.steps.values() for tag, side in step.side_inputs.items()}


def assert_shuffle_writer(graph: WriterGraph, *, refines_splits: bool) -> None:
    """The writer as a distributed runner needs it (see the module docstring)."""
    names = set(graph.steps)
    fns = {qualified_name(step.fn) for step in graph.steps.values()}
    # The shuffle fan-in: records encoded into batches, grouped by shard, written from the group.
    assert qualified_name(graph.step("Encode").fn) == "beam_tfrecord.beam.shuffle_path.EncodeToBatchesFn"
    assert qualified_name(graph.step("WriteShards").fn) == "beam_tfrecord.beam.shuffle_path.WriteShardFromGroupFn"
    assert not {"beam_tfrecord.beam.spill_path.EncodeToRunsFn",
                "beam_tfrecord.beam.spill_path.WriteShardFromRunsFn"} & fns, "the spill fan-in is in the job"
    assert not any("EncodeToRuns" in name for name in names)
    # Exactly one GroupByKey carries the encoded records: the one keyed by shard.
    assert graph.payload_group_by_keys() == [f"{graph.path}/ByShard"]
    # Side inputs: the plan and a planning round's requests as singletons, a round's cuts as a list
    # (one per boundary); none is read from the encoded records before they are reduced to those.
    expected = {"KeyByShard", "Plan/RefineShards/RecordsToRefine", "Plan/RefineShards/Cut", "Plan/FinishPlan"}
    if refines_splits:
        expected |= {"Plan/RefineSplits/RecordsToRefine", "Plan/RefineSplits/Cut", "Plan/PlanShards"}
    side_inputs = graph.side_inputs()
    assert {consumer.rsplit("/", 1)[0] for consumer in side_inputs} == {f"{graph.path}/{e}" for e in expected}
    payload = downstream(graph.steps, graph.step("Encode"), stops_at=lambda s: not _passes_payload_on(s))
    for consumer, (producer, side) in side_inputs.items():
        assert producer.name.startswith(f"{graph.path}/Plan/"), (consumer, producer.name)
        assert side.pcollection not in payload, consumer
        if not side.is_singleton():
            assert qualified_name(producer.fn) == CUTS, f"{consumer} reads {producer.name} as a list"
