"""Every dataset-building job and small gs:// inputs for it on the GCS emulator (jobs built, not run)."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from types import ModuleType

import numpy as np
from fixtures_gcs import FakeGcs

from beam_tfrecord import storage
from pipelines import build_from_arrays, build_from_manifest, build_image_dataset, refresh_image_dataset


@dataclasses.dataclass(frozen=True)
class JobCase:
    """One job and the arguments that point it at the inputs in ``bucket``.

    Attributes:
        job: the job's module (``run(argv)``).
        writer: the writer's label in the job's graph.
        args: bucket (``gs://name``) -> the job's own arguments.
        refines_splits: the splits are counts, so planning has a split-refining round.
    """

    job: ModuleType
    writer: str
    args: Callable[[str], list[str]]
    refines_splits: bool


JOBS = {
    "build_image_dataset": JobCase(build_image_dataset, "WriteDataset", lambda b: [
        f"--input={b}/raw/images", f"--output={b}/datasets/images"], refines_splits=False),
    "build_from_manifest": JobCase(build_from_manifest, "WriteDataset", lambda b: [
        f"--manifest={b}/raw/rows.csv", f"--output={b}/datasets/rows", "--splits=train=20,test=*"],
        refines_splits=True),
    "build_from_arrays": JobCase(build_from_arrays, "WriteDataset", lambda b: [
        f"--arrays={b}/raw/arrays.npz", f"--output={b}/datasets/arrays", "--splits=train=0.9,test=0.1"],
        refines_splits=False),
    "refresh_image_dataset": JobCase(refresh_image_dataset, "WriteVersion", lambda b: [
        f"--input={b}/raw/images", f"--dataset_root={b}/datasets/versioned", "--splits=train=0.9,validation=0.1",
        "--compression=gzip"], refines_splits=False),
}


def upload_job_inputs(fake_gcs: FakeGcs, bucket_name: str, images_dir: str) -> str:
    """Creates ``bucket_name`` with an image folder, a CSV manifest and a .npz file; returns ``gs://bucket``."""
    bucket = fake_gcs.create_bucket(bucket_name)
    fake_gcs.upload_tree(images_dir, f"{bucket}/raw/images")
    rows = "x,label\n" + "".join(f"{i * 0.5},{i % 3}\n" for i in range(30))
    with storage.open_write(f"{bucket}/raw/rows.csv") as out:
        out.write(rows.encode())
    arrays = io.BytesIO()
    np.savez(arrays, x=np.arange(30 * 4, dtype=np.float32).reshape(30, 4), y=np.arange(30, dtype=np.int64) % 3)
    with storage.open_write(f"{bucket}/raw/arrays.npz") as out:
        out.write(arrays.getvalue())
    return bucket
