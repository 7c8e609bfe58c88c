"""Byte units, so sizes read as ``64 * MiB`` rather than ``64 << 20``."""

KiB = 2**10
MiB = 2**20
