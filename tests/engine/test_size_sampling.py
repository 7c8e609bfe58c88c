"""The writer's encoders' inputs are sized without encoding them (``engine.size_sampling``), their bytes unchanged."""

import threading

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners import pipeline_context

from beam_tfrecord import DType, Sample, Scalar, Schema, Tensor, TensorDType, WriteTFRecordDataset
from beam_tfrecord.engine.size_sampling import CheaplySizedCoder, size_encoder_inputs_cheaply

SCHEMA = Schema({"image": Tensor(TensorDType.UINT8, (4, 4)), "label": Scalar(DType.INT64)})


def _chunk(index: int) -> list[Sample]:
    return [Sample(f"{index}/{i}", {"image": np.full((4, 4), i, np.uint8), "label": i}) for i in range(3)]


@pytest.fixture(scope="module")
def writer_proto(tmp_path_factory):
    """A writer's pipeline proto, before and after ``size_encoder_inputs_cheaply``."""
    pipeline = beam.Pipeline(argv=["--runner=DirectRunner"])
    _ = (pipeline | beam.Create(range(2)) | beam.Map(_chunk)
         | WriteTFRecordDataset(str(tmp_path_factory.mktemp("out")), schema=SCHEMA))
    before = pipeline.to_runner_api()
    after = pipeline.to_runner_api()
    size_encoder_inputs_cheaply(after)
    return before, after


def _encoder_input_coder(proto):
    (transform,) = [t for t in proto.components.transforms.values() if t.unique_name.endswith("/Spill/EncodeToRuns")]
    (pcoll_id,) = transform.inputs.values()
    context = pipeline_context.PipelineContext(proto.components)
    return context.coders.get_by_id(proto.components.pcollections[pcoll_id].coder_id)


def test_the_encoders_input_is_sized_by_its_shape_and_coded_as_before(writer_proto):
    before, after = writer_proto
    original, sized = _encoder_input_coder(before), _encoder_input_coder(after)
    assert isinstance(sized, CheaplySizedCoder) and not isinstance(original, CheaplySizedCoder)
    chunk = _chunk(7)
    assert sized.encode(chunk) == original.encode(chunk)
    assert [(s.key, s.values["label"]) for s in sized.decode(sized.encode(chunk))] == [(f"7/{i}", i) for i in range(3)]
    unpicklable = [Sample("k", {"lock": threading.Lock()})]  # sized without being encoded: no pickle is attempted
    with pytest.raises(TypeError):
        original.estimate_size(unpicklable)
    assert sized.estimate_size(unpicklable) > 0
    assert sized.get_impl().estimate_size(unpicklable) > 0  # what the runner's counters call


def test_only_the_encoders_inputs_change_and_twice_is_once(writer_proto):
    before, after = writer_proto
    changed = [pid for pid, pcoll in after.components.pcollections.items()
               if pcoll.coder_id != before.components.pcollections[pid].coder_id]
    assert len(changed) == 1
    again = type(after)()
    again.CopyFrom(after)
    size_encoder_inputs_cheaply(again)
    assert again == after
