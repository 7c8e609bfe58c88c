"""Runnable Beam jobs: thin ``run(argv=None)`` entry points over library transforms."""
