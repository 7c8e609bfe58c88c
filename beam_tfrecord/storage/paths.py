"""Path arithmetic of every store: the scheme, joining, ``.``/``..`` resolved, and Beam's glob rules (``*``/``?``
within a segment).

Pure string work (no request, no file touched), shared by the backends and the facade.
"""

from __future__ import annotations

import os
import posixpath
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


def _split_scheme(path: str) -> tuple[str, str]:
    """``("gs://", "b/x")`` for ``gs://b/x``; ``("", path)`` for a local path."""
    match = _SCHEME.match(path)
    return (path[:match.end()], path[match.end():]) if match else ("", path)


def normalize_path(path: str) -> str:
    """Collapses ``.`` and ``..`` in a local path or URI (``gs://b/x/../y`` -> ``gs://b/y``)."""
    prefix, rest = _split_scheme(path)
    if not rest:
        return path
    normalized = posixpath.normpath(rest)
    if prefix and normalized.startswith("/"):
        normalized = normalized.lstrip("/")
    if rest.endswith("/") and not normalized.endswith("/"):
        normalized += "/"
    return prefix + normalized


def parent_dir(path: str) -> str:
    """The folder holding a file (local or URI), with no trailing slash."""
    prefix, rest = _split_scheme(path)
    return prefix + posixpath.dirname(rest)


def resolve_path(base_dir: str, path: str) -> str:
    """An absolute path or URI for a manifest cell: relative cells are relative to ``base_dir``."""
    if is_remote(path) or path.startswith("/"):
        return normalize_path(path)
    return normalize_path(base_dir.rstrip("/") + "/" + path)


def is_inside(path: str, root: str) -> bool:
    """True when the normalized ``path`` lies under the folder ``root``."""
    root = normalize_path(root).rstrip("/") + "/"
    return normalize_path(path).startswith(root)


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
