"""No module of the package or the jobs passes 400 lines (STYLE.md: a longer file is split by what it does)."""

from __future__ import annotations

import pathlib

REPO = pathlib.Path(__file__).resolve().parent.parent
MAX_LINES = 400


def modules_over(limit: int, root: pathlib.Path = REPO) -> dict[str, int]:
    """``path -> lines`` of each module in ``beam_tfrecord/`` or ``pipelines/`` longer than ``limit`` lines."""
    sizes = {str(path.relative_to(root)): len(path.read_text().splitlines())
             for folder in ("beam_tfrecord", "pipelines") for path in sorted((root / folder).rglob("*.py"))}
    return {path: lines for path, lines in sizes.items() if lines > limit}


def test_no_module_is_over_400_lines():
    assert modules_over(MAX_LINES) == {}


def test_the_check_finds_a_long_module(tmp_path):
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "beam_tfrecord" / "core").mkdir(parents=True)
    (tmp_path / "beam_tfrecord" / "core" / "long.py").write_text("x = 1\n" * 401)
    (tmp_path / "pipelines" / "short.py").write_text("x = 1\n" * 400)
    assert modules_over(MAX_LINES, tmp_path) == {"beam_tfrecord/core/long.py": 401}
