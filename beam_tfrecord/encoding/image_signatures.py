"""ImageSigner: each encoded sample's near-duplicate signature, from the image its encoder already decodes.

Under a ``ResizeImage`` transform the signature is taken from the resized image before it is re-encoded (no
second decode); otherwise from the image's bytes as published, decoded once at a reduced scale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from beam_tfrecord.core.image_ops import ResizeImage
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.encoding.records import FeatureTransform, load_file_refs
from beam_tfrecord.errors import ImageDecodeError, SampleReadError
from beam_tfrecord.quality.near_duplicates import ImageSignature, image_signature, signature_of_image

_REASON_CHARS = 300


class ImageSigner:
    """Signs the images of one feature. Wrap the encoder's transforms (``wrapped``), then ``take`` each
    sample's signature right after encoding it, in order (the transform leaves it here meanwhile)."""

    def __init__(self, feature: str) -> None:
        self._feature = feature
        self._seen: ImageSignature | bytes | str | None = None

    def wrapped(self, transforms: Mapping[str, FeatureTransform]) -> dict[str, FeatureTransform]:
        """``transforms``, that of the signed feature leaving what it makes here."""
        transform = transforms.get(self._feature)
        if transform is None:
            return dict(transforms)
        return {**transforms, self._feature: self._signing(transform)}

    def _signing(self, transform: FeatureTransform) -> FeatureTransform:
        if isinstance(transform, ResizeImage):
            def resize(value: Any) -> bytes:
                return transform.apply(value, observe=self._observe)
            return resize

        def other(value: Any) -> Any:
            self._seen = transformed = transform(value)
            return transformed
        return other

    def _observe(self, image: Any) -> None:
        try:
            self._seen = signature_of_image(image)
        except (OSError, ValueError) as err:
            self._seen = f"near duplicates: cannot hash the image ({err})"[:_REASON_CHARS]

    def clear(self) -> None:
        """Forgets what the transform left (a sample that was not encoded)."""
        self._seen = None

    def take(self, sample: Sample) -> ImageSignature | str | None:
        """The signature of the sample just encoded, the reason it has none, or None: no image to sign."""
        seen, self._seen = self._seen, None
        if isinstance(seen, (ImageSignature, str)):
            return seen
        data = seen
        try:
            if data is None:
                if sample.values.get(self._feature) is None:
                    return None  # an optional image left out: nothing to compare
                data = load_file_refs(Sample(sample.key, {self._feature: sample.values[self._feature]})
                                      ).values[self._feature]
            if not isinstance(data, bytes):
                raise ImageDecodeError(f"sample {sample.key!r}: near duplicates: feature {self._feature!r} holds "
                                       f"{type(data).__name__}, expected encoded image bytes")
            return image_signature(data, key=sample.key)
        except (SampleReadError, ImageDecodeError) as err:
            return str(err)[:_REASON_CHARS]
