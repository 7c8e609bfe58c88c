"""Durations written as text in options: ``24h``, ``30m``, ``90s``, ``7d``, ``1h30m``, ``0``.

One parser, so every option that takes a duration accepts the same forms and rejects the same
mistakes (a bare number other than ``0`` is refused: seconds or hours is a guess).
"""

from __future__ import annotations

import datetime
import re

from beam_tfrecord.errors import DurationError

_UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_WHOLE = re.compile(rf"(?:{_PART.pattern})+")


def parse_duration(text: str) -> datetime.timedelta:
    """``"24h"`` -> 24 hours. Parts of ``d``, ``h``, ``m``, ``s`` add up (``"1h30m"``); ``"0"`` is zero.

    Raises:
        DurationError: for anything else (no unit, a negative or unknown unit, empty text).
    """
    value = text.strip().lower()
    if value == "0":
        return datetime.timedelta(0)
    if not _WHOLE.fullmatch(value):
        raise DurationError(text)
    seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _PART.findall(value))
    return datetime.timedelta(seconds=seconds)


def format_duration(duration: datetime.timedelta) -> str:
    """Text ``parse_duration`` reads back as ``duration`` (whole seconds, hours at most): ``"24h"``, ``"1h30m"``."""
    seconds = round(duration.total_seconds())
    if seconds <= 0:
        return "0"
    parts = []
    for unit, size in _UNIT_SECONDS.items():
        if unit == "d":
            continue  # "24h" reads better than "1d", "36h" than "1d12h"
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
