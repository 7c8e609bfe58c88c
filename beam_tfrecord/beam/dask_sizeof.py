"""The ``dask.sizeof`` entry point under its first path, for installs made before it moved to ``engine/``.

An editable install keeps the entry point it was installed with, and Dask imports it when ``dask.sizeof`` is
first imported (a missing module fails every Dask import); ``setup.py`` names ``engine.dask_sizeof`` now.
"""

from beam_tfrecord.engine.dask_sizeof import register

__all__ = ["register"]
