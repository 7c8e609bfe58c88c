"""Beam glue: PTransforms and DoFns around the pure core."""
