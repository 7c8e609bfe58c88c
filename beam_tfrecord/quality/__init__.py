"""What the records hold that a dataset must not: duplicates and leakage between splits (Beam-free)."""
