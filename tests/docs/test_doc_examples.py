"""The examples of README.md and docs/*.md, run as written.

Python blocks run in page order, each in a fresh namespace of one process per page (a block that needs
another's variables fails); bash blocks run in bash when ``<!-- run -->`` precedes them. A block that cannot
run here is preceded by ``<!-- not run: REASON -->``, and the reason is checked to be there. ``python`` and
``beam-tfrecord`` run in forks of a server that imported Beam, TensorFlow and PyTorch once (command_zygote.py),
in a folder holding what ``scripts/demo.sh`` makes, with ``/tmp/bt-readme`` and ``/tmp/demo`` mapped to fresh folders.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs import command_zygote

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_BLOCK = re.compile(r"(?:<!--\s*(?P<marker>run|not run:(?P<reason>(?:(?!-->).)*?))\s*-->\s*\n)?"
                    r"(?P<indent>[ \t]*)```(?P<lang>\w+)\n(?P<code>.*?)```", re.S)


@dataclasses.dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str
    run: bool
    reason: str | None


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    out = []
    for match in _BLOCK.finditer(text):
        marker, lang = match["marker"], match["lang"]
        not_run = marker is not None and marker.startswith("not run")
        run = not not_run and (lang == "python" or (lang == "bash" and marker == "run"))
        code = textwrap.dedent(match["indent"] + match["code"])  # a block in a list item is indented
        out.append(Block(page.name, text[:match.start()].count("\n") + 1, lang, code, run,
                         " ".join(match["reason"].split()) if not_run else None))
    return out


@pytest.fixture(scope="module")
def environment() -> Iterator[dict[str, str]]:
    """The pages' environment: ``python`` and ``beam-tfrecord`` first on PATH run in forks of one server."""
    folder = Path(tempfile.mkdtemp(prefix="bt-docs-"))  # short: a socket path has at most 107 characters
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([str(folder), bin_dir, os.environ.get("PATH", "")]),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           # A page's own Dask LocalCluster forks its worker processes from the command (which imported Beam
           # once) instead of spawning fresh interpreters: 12 s of CPU down to 3 here. Spawned workers:
           # tests/conftest.py's session cluster and tests/dask/test_dask_library_path.py.
           "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD": "fork"}
    command_zygote.write_shims(folder, str(folder / "socket"), sys.executable)
    with open(folder / "server.log", "wb") as log:
        server = subprocess.Popen([sys.executable, command_zygote.__file__, str(folder / "socket")], env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        assert server.stdout is not None and server.stdout.readline() == b"ready\n", (folder / "server.log").read_text()
        yield env
    finally:
        os.killpg(server.pid, signal.SIGKILL)  # the server and any command still running
        server.wait()
        shutil.rmtree(folder)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory, environment: dict[str, str]) -> Path:
    """A folder with .demo/images and .demo/dataset as scripts/demo.sh makes them."""
    root = tmp_path_factory.mktemp("docs")
    subprocess.run(["bash", "-euo", "pipefail", "-c", """
        python -m pipelines.make_sample_images --output .demo/images
        beam-tfrecord build --input .demo/images --output .demo/dataset --splits train=0.8,validation=0.1,test=0.1 \\
            --target_shard_bytes 200000 --progress none"""], cwd=root, env=environment, check=True, capture_output=True)
    return root


def test_every_command_block_runs_or_says_why_not():
    found = [b for page in PAGES for b in blocks(page)]
    assert sum(b.run for b in found) >= 20
    for block in found:
        if block.lang in ("bash", "sh", "python") and not block.run:
            assert block.reason is not None, (f"{block.page}:{block.line}: a {block.lang} block neither runs "
                                              "(<!-- run -->) nor says why not (<!-- not run: REASON -->)")
        if block.reason is not None:
            assert len(block.reason) >= 20, f"{block.page}:{block.line}: say why the block cannot run"


# Runs each block (a JSON list of [line, code] on stdin) as `python -c` would, in a fresh namespace and the
# page's folder; stops at the first that raises, naming its line.
_RUN_BLOCKS = """
import json, os, sys, traceback
here = os.getcwd()
for line, code in json.load(sys.stdin):
    os.chdir(here)
    try:
        exec(compile(code, f"<block at line {line}>", "exec"), {"__name__": "__main__"})
    except BaseException as error:
        if isinstance(error, SystemExit) and error.code in (None, 0):
            continue
        traceback.print_exc()
        print(f"BLOCK FAILED: line {line}", file=sys.stderr)
        sys.exit(1)
"""


@pytest.mark.parametrize("page", [p for p in PAGES if any(b.run for b in blocks(p))], ids=lambda p: p.name)
def test_page_examples_run(page: Path, scratch: Path, environment: dict[str, str], tmp_path: Path):
    outputs, demo = tmp_path / "out", tmp_path / "demo"
    demo.mkdir()
    python: list[tuple[int, str]] = []

    def run_python() -> None:
        if python:
            done = subprocess.run(["python", "-c", _RUN_BLOCKS], input=json.dumps(python), cwd=scratch,
                                  env=environment, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"{page.name} (python) failed:\n{done.stderr[-3000:]}"
            python.clear()

    for block in blocks(page):
        if not block.run:
            continue
        code = block.code.replace("/tmp/bt-readme", str(outputs)).replace("/tmp/demo", str(demo))
        if block.lang == "python":
            python.append((block.line, code))
            continue
        run_python()  # the python blocks before this bash block, in page order
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=scratch, env=environment,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{block.page}:{block.line} ({block.lang}) failed:\n{done.stderr[-3000:]}"
    run_python()
