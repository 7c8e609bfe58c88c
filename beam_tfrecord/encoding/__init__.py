"""Beam-free encoding of samples into records and entries, shared by the Beam DoFns and shard writers."""
