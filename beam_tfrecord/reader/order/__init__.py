"""Which records each worker reads, and in which order: shared by every reader's front end.

Imports neither TensorFlow, PyTorch nor the front ends (``tests/test_layers.py``).
"""
