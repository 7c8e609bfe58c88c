"""Read options shared by the tf.data, NumPy and PyTorch readers (no TensorFlow here)."""

from __future__ import annotations

import dataclasses
import enum

from beam_tfrecord.core.schema import Image, Schema
from beam_tfrecord.errors import ReaderError


class VarLen(enum.Enum):
    """How tf.data returns variable-length features (VarList, and the steps of sequences)."""

    RAGGED = "ragged"  # tf.RaggedTensor, no padding
    PADDED = "padded"  # dense, padded to the longest in the batch (padded_batch-style)


class PixelType(enum.Enum):
    """Pixel type of decoded images."""

    UINT8 = "uint8"  # 0..255
    FLOAT32 = "float32"  # 0.0..1.0


@dataclasses.dataclass(frozen=True)
class ImageDecoding:
    """Decode ``Image`` features to pixel arrays (height, width, channels).

    Attributes:
        size: (height, width) to resize every image to (bilinear); None keeps the size, which then
            must be fixed by the schema's ``Image.shape`` for batching.
        channels: channels to decode to (1 grey, 3 RGB, 4 RGBA); None: the schema's, else 3.
        pixel_type: uint8 pixels, or float32 scaled to [0, 1].
        fast_jpeg: decode JPEGs with simplejpeg when it is installed (the ``fast_jpeg`` extra; ~3x faster,
            the same pixels: ``reader.decode.jpeg``); False: Pillow only.
    """

    size: tuple[int, int] | None = None
    channels: int | None = None
    pixel_type: PixelType = PixelType.UINT8
    fast_jpeg: bool = True

    def __post_init__(self) -> None:
        if self.size is not None:
            size = tuple(self.size)
            if len(size) != 2 or any(not isinstance(d, int) or d < 1 for d in size):
                raise ReaderError(f"ImageDecoding.size must be (height, width) of positive ints, got {size!r}")
            object.__setattr__(self, "size", size)
        if self.channels is not None and self.channels not in (1, 3, 4):
            raise ReaderError(f"ImageDecoding.channels must be 1, 3 or 4, got {self.channels!r}")

    def output_shape(self, name: str, feature: Image) -> tuple[int, int, int]:
        """The (height, width, channels) an image feature decodes to.

        Raises:
            ReaderError: when neither the schema nor ``size`` fixes the size.
        """
        channels = self.channels or (feature.shape[2] if feature.shape else 3)
        if self.size is not None:
            return (*self.size, channels)
        if feature.shape is None:
            raise ReaderError(f"image feature {name!r} has no fixed shape in the schema: pass "
                              "ImageDecoding(size=(height, width)) to resize, so that images can be batched")
        return (feature.shape[0], feature.shape[1], channels)


def check_label_key(schema: Schema, label_key: str | None) -> None:
    """Checks that ``label_key`` names a feature of the schema."""
    if label_key is None:
        return
    known = sorted({*schema.features, *schema.sequence_features})
    if label_key not in known:
        raise ReaderError(f"label_key {label_key!r} is not a feature of this dataset; it has {known}")


def check_positive(name: str, value: int) -> None:
    """Checks a count option (batch size, buffer size) is a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ReaderError(f"{name} must be a positive int, got {value!r}")
