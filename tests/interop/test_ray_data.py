"""Ray Data's ``read_tfrecords`` reads a dataset, with its schema from ``schema.pbtxt``.

Needs the ``[ecosystem]`` extra (``pip install -e ".[test,ecosystem]"``); skipped without Ray.
Ray's documented limits: it reads ``tf.train.Example`` only, and without a schema it turns
one-element lists into scalars (a variable-length list then fails to read: shown below).
"""

from __future__ import annotations

import numpy as np
import pytest

from beam_tfrecord import read_numpy
from beam_tfrecord.interop.ray_data import ray_read_args

ray = pytest.importorskip("ray", reason="Ray is not installed (the [ecosystem] extra: "
                                       "pip install -e '.[test,ecosystem]')")
pytestmark = pytest.mark.ecosystem


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True  # rows in shard order, as read_numpy gives them
    yield
    ray.shutdown()


@pytest.mark.parametrize("split", ["train", "test"])
def test_ray_reads_every_record_equal_to_read_numpy(tfrecord_dataset, ray_cluster, split):
    rows = ray.data.read_tfrecords(**ray_read_args(tfrecord_dataset, split=split)).take_all()
    expected = list(read_numpy(tfrecord_dataset, split=split))
    assert len(rows) == len(expected)
    for row, example in zip(rows, expected, strict=True):
        assert sorted(row) == sorted(example)
        for name, value in example.items():  # every feature is a list (the schema's doing)
            got = list(row[name])
            if isinstance(value, bytes):
                assert got == [value], name
            elif name in ("pixels", "depth", "flags"):  # tensors: their raw little-endian bytes
                assert got == [value.tobytes()], name
            else:
                np.testing.assert_array_equal(np.asarray(got, dtype=value.dtype), value.reshape(-1), err_msg=name)


def test_without_the_schema_a_variable_length_list_fails_as_ray_documents(tfrecord_dataset, ray_cluster):
    paths = ray_read_args(tfrecord_dataset)["paths"]
    with pytest.raises(Exception, match="Types mismatch"):
        ray.data.read_tfrecords(paths).take_all()
