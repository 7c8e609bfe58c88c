"""Our TF-free Example classes produce exactly TensorFlow's bytes."""

from beam_tfrecord.core import proto


def test_same_bytes_as_tensorflow_example():
    from tensorflow.core.example import example_pb2

    ours = proto.Example()
    ours.features.feature["b"].bytes_list.value.extend([b"x", b""])
    ours.features.feature["f"].float_list.value.extend([1.5, -2.0])
    ours.features.feature["i"].int64_list.value.extend([1, -(2**63), 2**63 - 1])
    data = ours.SerializeToString(deterministic=True)
    theirs = example_pb2.Example.FromString(data)
    assert theirs.SerializeToString(deterministic=True) == data
    assert list(theirs.features.feature["i"].int64_list.value) == [1, -(2**63), 2**63 - 1]


def test_same_bytes_as_tensorflow_sequence_example():
    from tensorflow.core.example import example_pb2

    ours = proto.SequenceExample()
    ours.context.feature["id"].int64_list.value.append(7)
    steps = ours.feature_lists.feature_list["boxes"].feature
    steps.add().float_list.value.extend([0, 0, 1, 1])
    steps.add().float_list.value.extend([0.5, 0.5, 1, 1])
    data = ours.SerializeToString(deterministic=True)
    assert example_pb2.SequenceExample.FromString(data).SerializeToString(deterministic=True) == data
