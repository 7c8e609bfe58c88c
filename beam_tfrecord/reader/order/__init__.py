"""Which records each worker reads, and in which order: shared by every reader's front end.

``read_plan`` (a worker's exact share of a split expression, from the manifest's counts),
``slicing`` (split expressions), ``orders`` (stored, permuted and windowed orders over the plan's
shards, fetched ahead from ``gs://``), ``random_access`` (records by index), ``mixing`` (weighted
mixtures of datasets, one epoch's order) and ``resume`` (what a saved position has consumed).
Nothing here imports TensorFlow or PyTorch, nor the front ends (``tests/test_layers.py``).
"""
