"""End to end: the image-folder job on the DirectRunner, then verify, corrupt, and read back."""

import os
import shutil
import subprocess
import sys

import pytest

from beam_tfrecord import cli, verify_dataset
from beam_tfrecord.errors import CorruptShardError
from beam_tfrecord.interop import INTEROP_FILENAMES
from beam_tfrecord.interop.tfds import tfds_files
from pipelines import build_image_dataset


@pytest.fixture(scope="module")
def built(sample_images, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("built") / "dataset")
    manifest = build_image_dataset.run(["--input", sample_images, "--output", out, "--target_shard_bytes", "150000",
                                        "--splits", "train=0.8,test=0.2", "--runner", "DirectRunner"])
    return out, manifest


def _input_files(root: str) -> dict[str, tuple[bytes, str]]:
    return {open(os.path.join(root, c, f), "rb").read(): c for c in sorted(os.listdir(root))
            for f in sorted(os.listdir(os.path.join(root, c)))}


def test_build_writes_every_image_and_verifies(built, sample_images):
    out, manifest = built
    assert manifest.num_inputs == manifest.num_written == 300
    assert manifest.schema.features["label"].names == ("circle", "square", "stripes")
    assert verify_dataset(out).num_records == 300


def test_shards_are_balanced_within_10_percent(built):
    _, manifest = built
    train = manifest.split("train")
    assert len(train.shards) >= 4
    sizes = sorted(s.num_record_bytes for s in train.shards)[1:]  # all but at most one
    assert (sizes[-1] - sizes[0]) / sizes[-1] < 0.10


def test_plain_tf_data_reads_back_exactly_the_input(built, sample_images):
    import tensorflow as tf

    out, manifest = built
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    names = manifest.schema.features["label"].names
    read = {}
    for split in manifest.splits:
        files = [os.path.join(out, s.filename) for s in split.shards]
        for batch in tf.data.TFRecordDataset(files).batch(64).map(lambda r: tf.io.parse_example(r, spec)):
            for image, label in zip(batch["image"].numpy(), batch["label"].numpy()):
                read[image] = names[label]
    assert read == _input_files(sample_images)


def test_read_dataset_yields_the_same(built, sample_images):
    from beam_tfrecord import read_dataset

    out, manifest = built
    names = manifest.schema.features["label"].names
    read = {}
    for split in ("train", "test"):
        for batch in read_dataset(out, split=split, batch_size=50):
            for image, label in zip(batch["image"].numpy(), batch["label"].numpy()):
                read[image] = names[label]
    assert read == _input_files(sample_images)


def test_flipped_byte_fails_verify_naming_the_shard(built, tmp_path, capsys):
    out, manifest = built
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in os.listdir(out):
        shutil.copyfile(os.path.join(out, name), copy / name)
    victim = manifest.split("train").shards[1].filename
    data = bytearray((copy / victim).read_bytes())
    data[len(data) // 2] ^= 0x40
    (copy / victim).write_bytes(bytes(data))
    with pytest.raises(CorruptShardError) as info:
        verify_dataset(str(copy))
    assert victim in info.value.shard
    assert cli.main(["verify", str(copy)]) == 1
    assert victim in capsys.readouterr().err
    assert cli.main(["verify", out]) == 0


def test_rebuild_into_the_same_directory_is_safe_and_identical(built, sample_images):
    out, manifest = built
    again = build_image_dataset.run(["--input", sample_images, "--output", out, "--target_shard_bytes", "150000",
                                     "--splits", "train=0.8,test=0.2"])
    assert [s.crc32c for s in again.shards] == [s.crc32c for s in manifest.shards]
    assert sorted(os.listdir(out)) == sorted([s.filename for s in again.shards] + ["manifest.json", *tfds_files(again),
                                                                               *INTEROP_FILENAMES,
*filter(None, [again.statistics])])


def test_cli_build_and_inspect_as_a_user_runs_them(sample_images, tmp_path):
    out = str(tmp_path / "ds")
    build = subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", "build", "--input", sample_images,
                            "--output", out], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    assert "300 records written, 0 rejected, of 300 inputs" in build.stdout
    inspect = subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", "inspect", out], capture_output=True,
                             text=True, timeout=60)
    assert inspect.returncode == 0 and "split train: 300 records in 1 shards" in inspect.stdout
    assert "Traceback" not in build.stderr and "ERROR" not in build.stderr


def test_missing_dataset_is_reported_clearly(tmp_path, capsys):
    assert cli.main(["inspect", str(tmp_path)]) == 1
    assert "no published dataset" in capsys.readouterr().err


def test_cli_reports_rejected_samples_without_a_traceback(tmp_path):
    from pipelines.make_sample_images import write_sample_images

    images = tmp_path / "images"
    write_sample_images(str(images), per_class=2, size=16)
    (images / "circle" / "notes.jpg").write_text("not an image")
    out = tmp_path / "ds"
    build = subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", "build", "--input", str(images),
                            "--output", str(out)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 1
    err = build.stderr
    assert err.startswith("beam-tfrecord build: RejectedSamplesError: 1 of 7 input samples were rejected")
    assert ("circle/notes.jpg [validate] feature 'image': expected jpeg image bytes, got 12 bytes starting "
            "b'not an i', not a jpeg signature in sample 'circle/notes.jpg'") in err
    assert "Traceback" not in err
    assert not (out / "manifest.json").exists()
