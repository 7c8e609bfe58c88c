"""Versions of a dataset root: the refresh plan, the input index, and what an incremental refresh keeps.

Beam-free; the Beam source of the kept records is ``sources/kept_records.py``. See docs/operations.md.
"""
