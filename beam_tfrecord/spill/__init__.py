"""Spill runs on storage: written by the encode phase, merged into shards, kept to resume a killed build.

``run_files`` writes and reads the runs (their byte layout is ``core/runs.py``); ``resume`` finds what a
killed build finished. How the spill path works: docs/performance.md#how-a-dataset-is-written.
"""
