"""What a dataset's records hold: feature statistics (``statistics.pb``) and drift between two versions."""
