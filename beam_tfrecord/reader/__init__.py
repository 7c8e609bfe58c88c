"""Readers: turn a published dataset back into batches (tf.data first)."""
