"""NumPy inputs: .npy (streamed in row chunks), .npz, in-memory arrays and generators round-trip."""

import numpy as np
import pytest
import tensorflow as tf

from beam_tfrecord.core.infer import infer_array_schema
from beam_tfrecord.core.schema import DType, Scalar, Schema, Tensor, TensorDType
from beam_tfrecord.errors import SourceError
from beam_tfrecord.sources.arrays import ReadNumpyFiles, SamplesFromArrays, SamplesFromIterable
from pipelines import build_from_arrays

N = 700  # several chunks of 256
SPEC = {"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.FixedLenFeature([], tf.int64)}


def _arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((N, 3, 4)).astype(np.float32), "y": np.arange(N, dtype=np.int64) * 7}


def _restore(parsed: dict) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) sorted by y: records are in hash order, not input order."""
    x = np.stack([np.frombuffer(b, "<f4").reshape(3, 4) for b in parsed["x"]])
    order = np.argsort(parsed["y"])
    return x[order], parsed["y"][order]


def test_infer_array_schema_keeps_dtype_and_per_sample_shape():
    schema = infer_array_schema({**_arrays(), "name": np.array(["a"] * N), "raw": np.array([b"z"] * N)})
    assert schema == Schema({"x": Tensor(TensorDType.FLOAT32, (3, 4)), "y": Scalar(DType.INT64),
                             "name": Scalar(DType.STRING), "raw": Scalar(DType.BYTES)})


def test_in_memory_arrays_round_trip(tmp_path, write, parse):
    arrays = _arrays()
    manifest = write(SamplesFromArrays(arrays, key_prefix="mem-"), infer_array_schema(arrays), str(tmp_path / "out"))
    assert manifest.num_inputs == N and manifest.num_rejected == 0
    x, y = _restore(parse(str(tmp_path / "out"), SPEC))
    np.testing.assert_array_equal(y, arrays["y"])
    np.testing.assert_array_equal(x, arrays["x"])


def _rows():
    arrays = _arrays(1)
    for i in range(N):
        yield {"x": arrays["x"][i], "y": int(arrays["y"][i])}


@pytest.mark.parametrize("source", [pytest.param(_rows, id="generator-function"),
                                    pytest.param(_rows(), id="generator-object")])
def test_generator_round_trip(tmp_path, write, parse, source):
    arrays = _arrays(1)
    write(SamplesFromIterable(source, chunk_size=100), infer_array_schema(arrays), str(tmp_path / "out"))
    x, y = _restore(parse(str(tmp_path / "out"), SPEC))
    np.testing.assert_array_equal(x, arrays["x"])
    np.testing.assert_array_equal(y, arrays["y"])


def test_npy_and_npz_files_round_trip_through_the_job(tmp_path, parse):
    arrays = _arrays(2)
    folder = tmp_path / "arrays"
    folder.mkdir()
    np.savez(folder / "part-a.npz", x=arrays["x"][:400], y=arrays["y"][:400])
    np.savez(folder / "part-b.npz", x=arrays["x"][400:], y=arrays["y"][400:])
    manifest = build_from_arrays.run(["--arrays", str(folder / "*.npz"), "--output", str(tmp_path / "out")])
    assert manifest.num_inputs == N
    x, y = _restore(parse(str(tmp_path / "out"), SPEC))
    np.testing.assert_array_equal(x, arrays["x"])
    np.testing.assert_array_equal(y, arrays["y"])


@pytest.mark.parametrize("order", ["C", "F"])
def test_npy_file_is_streamed_in_chunks(tmp_path, write, parse, order):
    x = np.asarray(_arrays(3)["x"], order=order)
    x[:, 0, 0] = np.arange(N)  # a per-sample id to sort by
    np.save(tmp_path / "x.npy", x)
    schema = Schema({"x": Tensor(TensorDType.FLOAT32, (3, 4))})
    manifest = write(ReadNumpyFiles(str(tmp_path / "x.npy"), npy_feature="x", chunk_size=64), schema,
                     str(tmp_path / "out"))
    assert manifest.num_inputs == N
    parsed = parse(str(tmp_path / "out"), {"x": tf.io.FixedLenFeature([], tf.string)})
    back = np.stack([np.frombuffer(b, "<f4").reshape(3, 4) for b in parsed["x"]])
    np.testing.assert_array_equal(back[np.argsort(back[:, 0, 0])], x)


def test_arrays_of_different_lengths_are_refused():
    with pytest.raises(SourceError, match=r"every array needs the same first \(sample\) axis, got shapes "
                                          r"\{'x': \(3, 2\), 'y': \(2,\)\}"):
        SamplesFromArrays({"x": np.zeros((3, 2)), "y": np.zeros(2)})


def test_object_npy_is_refused_with_a_reason(tmp_path):
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    from beam_tfrecord.sources.arrays import read_numpy_file

    with pytest.raises(SourceError, match="objects.npy: object arrays are not supported"):
        list(read_numpy_file("objects.npy", str(tmp_path / "objects.npy"), npy_feature="x", chunk_size=8))
