"""The base class of every error this package raises on purpose."""

from __future__ import annotations


class BeamTFRecordError(Exception):
    """Base class of every error this package raises on purpose."""
