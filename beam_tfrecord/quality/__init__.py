"""What the data holds besides its schema: exact duplicates and leakage between splits (issue 48).

Beam-free: content hashes of records, duplicate groups and their accounting by split, the summary line and
the manifest's ``duplicates`` entry. The Beam stages that move the hashes live in ``beam/duplicates.py``.
"""
