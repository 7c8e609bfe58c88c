"""Dask tests share one LocalCluster of two worker processes (tests/dask/dask_fixtures.py)."""

from dask_fixtures import dask_address  # noqa: F401  (pytest fixture)
