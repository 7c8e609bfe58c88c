"""pipelines/train_example: end to end, image folder -> dataset -> Keras training through read_dataset."""

import math
import os

import pytest

from pipelines import build_image_dataset, train_example


@pytest.fixture(scope="module")
def image_dataset(sample_images, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("train_example") / "ds")
    build_image_dataset.run(["--input", sample_images, "--output", out, "--splits", "train=0.8,test=0.2"])
    return out


def test_trains_and_evaluates_from_the_manifest(image_dataset, tmp_path):
    saved = str(tmp_path / "model.keras")
    history = train_example.run(["--dataset", image_dataset, "--eval_split", "test", "--epochs", "2",
                                 "--batch_size", "16", "--image_size", "24x24", "--strategy", "mirrored",
                                 "--save", saved])
    assert len(history["loss"]) == 2 and len(history["val_accuracy"]) == 2
    assert all(math.isfinite(v) for v in history["loss"]) and os.path.getsize(saved) > 0


def test_rejects_a_bad_image_size(image_dataset):
    with pytest.raises(SystemExit, match="--image_size must be HEIGHTxWIDTH, e.g. 32x32; got '32'"):
        train_example.run(["--dataset", image_dataset, "--image_size", "32"])
