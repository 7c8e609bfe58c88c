"""What the data holds besides its schema: exact and near duplicates, and leakage between splits (issue 48).

Beam-free: content hashes of records, duplicate groups and their accounting by split, the summary line and
the manifest's ``duplicates`` entry; perceptual hashes of images and the ``near_duplicates`` entry. The Beam
stages that move the hashes live in ``beam/duplicates.py`` and ``beam/near_duplicates.py``.
"""
