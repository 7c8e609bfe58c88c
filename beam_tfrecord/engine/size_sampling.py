"""The writer's encoders' inputs sized without encoding them: Beam's element-size sampling, no pickled chunk.

Beam's batch engine samples the size of elements passed between fused steps (the first ten of a bundle, then
~10/n of the n-th) with the edge's coder, which pickles every ``Sample`` of a chunk typed ``Any``: ~11% of a
worker's Python time on 1M small records (docs/performance.md, "Small records: the hand-offs"). The encoders'
input edges get ``CheaplySizedCoder``: the same bytes, a size estimate from the element's shape.
"""

from __future__ import annotations

import sys
from typing import Any

from apache_beam.coders import coders

# The writer's steps that take the user's samples (``SpillPath``, ``ShufflePath``): their input edges are resized.
ENCODER_STEPS = ("/Spill/EncodeToRuns", "/Shuffle/Encode")


class CheaplySizedCoder(coders.Coder):
    """``inner``'s bytes, with a size estimate from the element's shape (a list's length, an object's own size),
    not from encoding it: an estimate for the runner's size metric only.

    Args:
        inner: the coder whose bytes this coder writes and reads.
    """

    def __init__(self, inner: coders.Coder) -> None:
        self._inner = inner

    def encode(self, value: Any) -> bytes:
        return self._inner.encode(value)

    def decode(self, encoded: bytes) -> Any:
        return self._inner.decode(encoded)

    def estimate_size(self, value: Any) -> int:
        if type(value) is list:  # a chunk: its items' count, each sized as the first (no item is encoded)
            return len(value) * sys.getsizeof(value[0]) if value else 1
        return sys.getsizeof(value)

    def is_deterministic(self) -> bool:
        return self._inner.is_deterministic()

    def to_type_hint(self) -> Any:
        return self._inner.to_type_hint()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CheaplySizedCoder) and type(other) is type(self) and other._inner == self._inner

    def __hash__(self) -> int:
        return hash((type(self), self._inner))


def size_encoder_inputs_cheaply(pipeline_proto: Any) -> Any:
    """``pipeline_proto`` (a ``beam_runner_api_pb2.Pipeline``, changed in place and returned) with the input
    PCollections of the writer's encoders (``ENCODER_STEPS``) coded by ``CheaplySizedCoder`` around their coder."""
    from apache_beam.runners import pipeline_context  # Beam's runner internals, loaded with the runner

    components = pipeline_proto.components
    context = pipeline_context.PipelineContext(components)
    inputs = {pcoll for transform in components.transforms.values()
              if transform.unique_name.endswith(ENCODER_STEPS) for pcoll in transform.inputs.values()}
    for pcoll_id in sorted(inputs):
        pcoll = components.pcollections[pcoll_id]
        inner = context.coders.get_by_id(pcoll.coder_id)
        if not isinstance(inner, CheaplySizedCoder):
            pcoll.coder_id = context.coders.get_id(CheaplySizedCoder(inner))
    for coder_id, coder in context.to_runner_api().coders.items():
        if coder_id not in components.coders:
            components.coders[coder_id].CopyFrom(coder)
    return pipeline_proto
