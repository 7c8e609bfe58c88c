"""A resumed build's sources leave out the samples it reuses: a chunk of .npy rows all reused is never read,
an image folder leaves them out before spreading the rest over the workers, and an arrays build killed and
resumed from the command line writes the clean bytes."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
from kills import files_exist, kill_when

from beam_tfrecord import load_manifest
from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.core.runs import INDEX_SUFFIX
from beam_tfrecord.sources.arrays import _npy_row_chunks, read_numpy_file
from beam_tfrecord.spill.resume import TEMP_PREFIX, ReusedKeys, finished_runs

SALT = "beam-tfrecord"


def _reused(tmp_path: Path, keys: list[str]) -> ReusedKeys:
    path = tmp_path / "reused.u64"
    path.write_bytes(np.array(sorted(key_hash(k, SALT) for k in keys), dtype="<u8").tobytes())
    return ReusedKeys(str(path), SALT)


class _CountingFile(io.BytesIO):
    """A file in memory that counts the bytes read from it."""

    bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.bytes_read += len(data)
        return data


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_the_source_leaves_out_the_reused_samples(tmp_path: Path, suffix: str) -> None:
    rows = np.arange(12 * 3, dtype=np.int64).reshape(12, 3)
    path = tmp_path / f"a{suffix}"
    if suffix == ".npy":
        np.save(path, rows)
    else:
        np.savez(path, x=rows)
    reused = _reused(tmp_path, [f"a{suffix}:{i:09d}" for i in [0, 1, 2, 3, 5, 9]])
    chunks = list(read_numpy_file(f"a{suffix}", str(path), chunk_size=4, skip=reused))
    assert [[s.key for s in chunk] for chunk in chunks] == [
        [f"a{suffix}:{i:09d}" for i in [4, 6, 7]], [f"a{suffix}:{i:09d}" for i in [8, 10, 11]]]
    assert all(np.array_equal(s.values["x"], rows[int(s.key[-9:])]) for chunk in chunks for s in chunk)


def test_a_chunk_whose_rows_are_all_reused_is_not_read(tmp_path: Path) -> None:
    saved = io.BytesIO()
    np.save(saved, np.zeros((8, 1000), np.uint8))
    handle = _CountingFile(saved.getvalue())
    chunks = list(_npy_row_chunks(handle, 4, "a.npy", lambda start, rows: np.full(rows, start >= 4)))
    assert [(start, len(rows)) for start, rows in chunks] == [(4, 4)]
    assert handle.bytes_read == len(saved.getvalue()) - 4 * 1000  # the header and the second chunk only


def test_an_arrays_build_killed_and_resumed_writes_the_clean_bytes(tmp_path: Path) -> None:
    """The killed build is the command; the clean and the resumed builds call its ``run`` in this process."""
    from pipelines import build_from_arrays

    arrays, out, ref = tmp_path / "rows.npy", tmp_path / "ds", tmp_path / "ref"
    np.save(arrays, np.random.default_rng(5).integers(0, 256, size=(3000, 10_000), dtype=np.uint8))
    args = ["--arrays", str(arrays), "--spill_run_mib=1", "--progress=none", "--direct_num_workers=1",
            "--chunk_size=50"]
    build_from_arrays.run([*args, "--output", str(ref)])
    kill_when([sys.executable, "-m", "pipelines.build_from_arrays", *args, "--output", str(out)],
              files_exist(f"{out}/{TEMP_PREFIX}*/runs/*{INDEX_SUFFIX}"))
    finished = sum(len(index.hashes) for index in finished_runs(str(out)))
    build_from_arrays.run([*args, "--output", str(out), "--resume"])
    assert load_manifest(str(out)).metadata["resumed"]["reused_records"] == finished > 0
    shards = {s.filename: Path(out, s.filename).read_bytes() for s in load_manifest(str(out)).shards}
    assert shards == {s.filename: Path(ref, s.filename).read_bytes() for s in load_manifest(str(ref)).shards}


def test_the_image_folder_leaves_out_the_reused_samples_before_spreading_them(tmp_path: Path) -> None:
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from beam_tfrecord.sources.image_folder import ReadImageFolder
    from pipelines.make_sample_images import write_sample_images

    write_sample_images(str(tmp_path / "images"), per_class=3, size=16)
    keys = sorted(str(p.relative_to(tmp_path / "images")) for p in (tmp_path / "images").glob("*/*.jpg"))
    reused = _reused(tmp_path, keys[::2])
    with beam.Pipeline() as pipeline:
        read = ReadImageFolder(str(tmp_path / "images")).skipping(reused)
        assert_that(pipeline | read | beam.Map(lambda sample: sample.key), equal_to(keys[1::2]))
