"""The project's DaskRunner under its first path, ``--runner=beam_tfrecord.beam.dask_runner.DaskRunner``.

It lives in ``beam_tfrecord.engine.dask_runner``; this re-export keeps users' dotted paths working.
"""

from beam_tfrecord.engine.dask_runner import DaskRunner

__all__ = ["DaskRunner"]
