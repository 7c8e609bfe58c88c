"""Beam glue: PTransforms and DoFns around the pure core."""

# Namespace of every Beam counter the project reports (``beam_tfrecord:samples_encoded``...).
METRICS_NAMESPACE = "beam_tfrecord"
