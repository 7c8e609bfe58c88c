#!/usr/bin/env bash
# Lint (ruff), type check (mypy) and the whole test suite, in the project's virtual environment
# (created on first run). Arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
echo "ruff check ." >&2 && ruff check . -q
echo "mypy (beam_tfrecord; configured in pyproject.toml)" >&2 && mypy --no-error-summary
python -m pytest -q "$@"
