"""Salted 64-bit hashes of sample keys: they decide both a sample's split and its place in the shards.

Using the key (not the arrival order) makes output independent of how a runner bundles the
input, and keeps a sample in the same split when new samples are added on a refresh.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

HASH_SPACE = 2**64  # key hashes are 64-bit: every hash is in [0, HASH_SPACE)


@functools.lru_cache(maxsize=16)
def _keyed(salt: str) -> "hashlib.blake2b":
    return hashlib.blake2b(digest_size=8, key=salt.encode("utf-8")[:64])


def key_hash(key: str, salt: str) -> int:
    """A uniform 64-bit unsigned hash of ``key``, salted so different datasets shuffle differently.

    BLAKE2b keyed with the salt; the keyed state is built once per salt and copied per key.
    """
    hasher = _keyed(salt).copy()
    hasher.update(key.encode("utf-8", "surrogatepass"))
    return int.from_bytes(hasher.digest(), "big")


def content_hash(data: bytes, salt: str) -> int:
    """``key_hash`` of raw bytes: records without a key are placed by their content (equal records
    land together, in any order of arrival)."""
    hasher = _keyed(salt).copy()
    hasher.update(data)
    return int.from_bytes(hasher.digest(), "big")


def key_digests(keys: Sequence[str], salt: str) -> list[bytes]:
    """``key_hash`` of each key as its 8 big-endian bytes (how a run entry starts), for a chunk of keys.

    The same hash as ``key_hash`` (``int.from_bytes(digest, "big")``), without a Python call per key.
    """
    keyed = _keyed(salt)
    out = []
    for key in keys:
        hasher = keyed.copy()
        hasher.update(key.encode("utf-8", "surrogatepass"))
        out.append(hasher.digest())
    return out
