"""Train a small Keras image classifier on a dataset built by this project.

Everything the model needs comes from the manifest. The "Train on it" step of docs/reading.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import cast

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from beam_tfrecord.core.schema import ClassLabel, Image, Schema
from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.reader.options import ImageDecoding, PixelType
from beam_tfrecord.reader.order.mixing import num_examples
from beam_tfrecord.reader.tf_data import read_dataset


def _parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="dataset directory or versioned root (local or gs://)")
    parser.add_argument("--train_split", default="train", help="split expression to train on, e.g. train[:90%%]")
    parser.add_argument("--eval_split", default=None, help="split expression to evaluate on (default: none)")
    parser.add_argument("--image_size", default="32x32", metavar="HEIGHTxWIDTH", help="resize images to this")
    parser.add_argument("--batch_size", type=int, default=32, help="global batch size")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="shuffle and weight initialisation seed")
    parser.add_argument("--strategy", default="default", choices=["default", "mirrored"],
                        help="tf.distribute strategy: the default (one device) or MirroredStrategy")
    parser.add_argument("--save", default=None, help="write the trained model here (.keras)")
    return parser.parse_args(argv)


def image_and_label(schema: Schema) -> tuple[str, str, int]:
    """(image feature, label feature, number of classes): the first Image and ClassLabel of the schema."""
    images = [name for name, feature in schema.features.items() if isinstance(feature, Image)]
    labels = [(name, feature) for name, feature in schema.features.items() if isinstance(feature, ClassLabel)]
    if not images or not labels:
        raise SystemExit(f"train_example needs an Image and a ClassLabel feature; this dataset has "
                         f"{sorted(schema.features)}")
    return images[0], labels[0][0], labels[0][1].num_classes


def build_model(height: int, width: int, channels: int, num_classes: int) -> tf.keras.Model:
    """A small convolutional classifier; pixels arrive as float32 in [0, 1]."""
    return tf.keras.Sequential([
        tf.keras.Input((height, width, channels)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(num_classes),
    ])


def run(argv: Sequence[str] | None = None) -> dict[str, list[float]]:
    """Trains, prints the metrics of each epoch and returns the Keras history."""
    args = _parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        height, width = (int(part) for part in args.image_size.lower().split("x"))
    except ValueError as err:
        raise SystemExit(f"--image_size must be HEIGHTxWIDTH, e.g. 32x32; got {args.image_size!r}") from err
    tf.keras.utils.set_random_seed(args.seed)
    schema = load_manifest(args.dataset).schema
    image, label, num_classes = image_and_label(schema)
    decoding = ImageDecoding(size=(height, width), pixel_type=PixelType.FLOAT32)
    strategy = tf.distribute.MirroredStrategy() if args.strategy == "mirrored" else tf.distribute.get_strategy()

    def pipeline(split: str, training: bool):
        def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
            dataset = read_dataset(args.dataset, split=split, input_context=context, shuffle=training,
                                   repeat=training, drop_remainder=training, seed=args.seed,
                                   batch_size=context.get_per_replica_batch_size(args.batch_size),
                                   label_key=label, image_decoding=decoding)
            return dataset.map(lambda features, labels: (features[image], labels))

        return strategy.distribute_datasets_from_function(make)

    with strategy.scope():
        channels = decoding.output_shape(image, cast(Image, schema.features[image]))[2]  # image_and_label: an Image
        model = build_model(height, width, channels, num_classes)
        model.compile(optimizer="adam", metrics=["accuracy"],
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # Every input pipeline reads the same number of examples, so this is exact for all of them.
    steps = num_examples(args.dataset, split=args.train_split) // args.batch_size
    if steps < 1:
        raise SystemExit(f"split {args.train_split!r} has fewer examples than one batch of {args.batch_size}")
    history = model.fit(pipeline(args.train_split, True), epochs=args.epochs, steps_per_epoch=steps,
                        validation_data=pipeline(args.eval_split, False) if args.eval_split else None,
                        shuffle=False, verbose=2)  # read_dataset shuffles
    if args.save:
        model.save(args.save)
    return {name: [float(v) for v in values] for name, values in history.history.items()}


if __name__ == "__main__":
    run()
