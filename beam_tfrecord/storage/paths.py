"""Path arithmetic of every store: the scheme, joining, and Beam's glob rules (``*``/``?`` within a segment).

Pure string work (no request, no file touched), shared by the backends and the facade.
"""

from __future__ import annotations

import os
import re

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")
_GLOB_CHARS = re.compile(r"[*?\[]")


def scheme(path: str) -> str | None:
    """``"gs"`` for ``gs://bucket/x``; None for a local path."""
    match = _SCHEME.match(path)
    return match.group(1).lower() if match else None


def is_remote(path: str) -> bool:
    return scheme(path) is not None


def join(base: str, *parts: str) -> str:
    if not is_remote(base):
        return os.path.join(base, *parts)
    out = base
    for part in parts:
        out = f"{out.rstrip('/')}/{part.lstrip('/')}"
    return out


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Beam's glob rules as a regular expression: ``*``/``?`` within a segment, ``**`` across."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        i += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 1)
            body = pattern[i:end]
            body = ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\").replace("[", "\\[")
            out.append("[" + body + "]")
            i = end + 1
        else:
            out.append(re.escape(char))
    return re.compile("".join(out))


def glob_escape(path: str) -> str:
    """``path`` as a glob that matches only itself (each wildcard character in a one-character class)."""
    return re.sub(r"[*?\[]", lambda found: f"[{found.group(0)}]", path)


def literal_prefix(pattern: str) -> str:
    """The part of a glob before its first wildcard (all of it when it has none)."""
    match = _GLOB_CHARS.search(pattern)
    return pattern[:match.start()] if match else pattern
