"""Salted 64-bit hashes of sample keys: they decide both a sample's split and its place in the shards.

Using the key (not the arrival order) makes output independent of how a runner bundles the
input, and keeps a sample in the same split when new samples are added on a refresh.
"""

from __future__ import annotations

import hashlib


def key_hash(key: str, salt: str) -> int:
    """A uniform 64-bit unsigned hash of ``key``, salted so different datasets shuffle differently."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8,
                             key=salt.encode("utf-8")[:64]).digest()
    return int.from_bytes(digest, "big")
