"""The package's layers, read from the source with ``ast`` (nothing is imported, < 1 s).

Rules kept true here: every room (a subpackage or top-level module of ``beam_tfrecord``, and
``pipelines``) has a layer; a room imports only rooms in lower layers; the module import graph
has no cycles (imports inside functions count); the Beam-free rooms never import Apache Beam;
no module outside ``formats/`` names a ``FileFormat`` member (branches on the format), none outside ``engine/``
names a runner; no constant name and no public class name is defined in two modules; every room of 3 or more
modules has its ``tests/<room>/``; and docs/development.md lists the layers as ``LAYERS`` has them. A new room
gets a line in ``LAYERS``.
"""

from __future__ import annotations

import ast
import collections
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("beam_tfrecord", "pipelines")

# Lowest first. A room may import rooms of earlier layers only ("__init__" is the package's facade).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "_version"),
    ("core",),  # pure: schema, encoding, framing, naming, planning, the manifest
    ("storage",),  # one backend per scheme; the disk's own tools (direct I/O, buffers, disk space)
    ("statistics", "quality"),  # what the data holds: feature statistics and drift; duplicates and leakage
    ("dataset", "encoding", "job", "remote_reads", "spill"),
    ("formats",),
    ("interop",),  # views for other tools (TFDS, Croissant, TFMD, DALI, Ray), written and read beside the manifest
    ("versions",),  # below the readers: a follower tells a commit's new records by its record locations
    ("describe", "reader", "verify"),
    ("engine",),  # the runners: each one's traits, the local engine, Dask, where workers run
    ("beam",),
    ("sources", "report"),
    ("pipelines",),
    ("cli", "__init__"),
)
# Rooms that run without Apache Beam installed (readers, the pure core, the formats...).
BEAM_FREE = ("errors", "core", "encoding", "formats", "spill", "reader", "dataset", "verify", "describe",
             "remote_reads", "interop", "job", "versions", "storage", "statistics", "quality")
# The one module of a Beam-free room that imports Beam: storage's fallback for schemes without a backend.
BEAM_FREE_EXCEPT = ("beam_tfrecord.storage.beam_filesystems",)

Graph = dict[str, set[str]]


def _modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The names an import statement imports (``a.b.c`` for ``from a.b import c``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".")[:len(module.split(".")) + is_package - node.level]
        base = ".".join(parts + ([node.module] if node.module else []))
    return [f"{base}.{alias.name}" for alias in node.names]


def import_graph(root: pathlib.Path) -> tuple[Graph, dict[str, set[str]]]:
    """(module -> our modules it imports, module -> third-party top-level packages it imports)."""
    modules = _modules(root)
    graph: Graph = {name: set() for name in modules}
    external: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for imported in _imported(node, name, path.name == "__init__.py"):
                target = imported
                while target and target not in modules:  # ``from a import name`` imports module a
                    target = target.rpartition(".")[0]
                if not target:
                    external[name].add(imported.split(".")[0])
                elif target != name:
                    graph[name].add(target)
    return graph, external


def room(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "pipelines":
        return "pipelines"
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(name: str) -> int:
    return next(i for i, rooms in enumerate(LAYERS) if name in rooms)


def upward_imports(graph: Graph) -> list[str]:
    """Each import of a room in the same or a higher layer (by another room), as 'a -> b'."""
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if room(a) != room(b) and layer_of(room(b)) >= layer_of(room(a)))


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _is_constant(value: ast.expr) -> bool:
    """A literal, or arithmetic of literals and names (``64 * MiB``): what a tunable constant is."""
    return all(isinstance(node, ast.Constant | ast.BinOp | ast.UnaryOp | ast.Name | ast.Tuple | ast.operator
                          | ast.unaryop | ast.expr_context) for node in ast.walk(value))


def constants_defined_twice(root: pathlib.Path) -> dict[str, list[str]]:
    """UPPER_CASE module-level constants (literal values) whose name is assigned in two modules."""
    where = collections.defaultdict(list)
    for name, path in _modules(root).items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None and _is_constant(node.value):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name) and target.id.lstrip("_").isupper():
                        where[target.id.lstrip("_")].append(name)
    return {constant: modules for constant, modules in where.items() if len(modules) > 1}


@pytest.fixture(scope="module")
def graph() -> tuple[Graph, dict[str, set[str]]]:
    return import_graph(REPO)


def test_every_room_has_a_layer(graph):
    rooms = {room(module) for module in graph[0]}
    placed = {name for layer in LAYERS for name in layer}
    assert rooms - placed == set(), "add the new room to LAYERS"
    assert placed - rooms == set(), "LAYERS names a room that no longer exists"


def test_rooms_import_only_lower_layers(graph):
    assert upward_imports(graph[0]) == []


def test_no_import_cycles(graph):
    assert cycles(graph[0]) == []


@pytest.mark.parametrize("name", BEAM_FREE)
def test_beam_free_rooms_never_import_beam(graph, name):
    importers = sorted(module for module, packages in graph[1].items()
                       if room(module) == name and "apache_beam" in packages and module not in BEAM_FREE_EXCEPT)
    assert importers == []


def test_core_imports_only_errors(graph):
    assert {room(b) for a, targets in graph[0].items() if room(a) == "core" for b in targets} <= {"core", "errors"}


def format_members_named(root: pathlib.Path) -> list[str]:
    """Each ``FileFormat.MEMBER`` outside ``formats/`` and ``core/file_format.py`` (which declares them), as
    'module: FileFormat.MEMBER': code that branches on the format instead of asking ``formats``."""
    return sorted(f"{name}: FileFormat.{node.attr}" for name, path in _modules(root).items()
                  if room(name) != "formats" and name != "beam_tfrecord.core.file_format"
                  for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id == "FileFormat" and node.attr.isupper())


def test_only_formats_name_a_file_format():
    assert format_members_named(REPO) == []


CLOUD_CLIENTS = ("google.cloud", "google.api_core", "boto3", "botocore", "azure", "obstore",
                 "beam_tfrecord.storage.gcs", "beam_tfrecord.storage.s3", "beam_tfrecord.storage.azure_blob",
                 "beam_tfrecord.storage.scheme", "beam_tfrecord.storage.paths.scheme")
_NAMED_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")  # "://" alone names no store (a remote-path test)
SCHEME_NAMES = frozenset({"gs", "gcs", "s3", "s3a", "s3n", "az", "abfs", "abfss", "azfs", "azure", "hdfs", "file",
                          "http", "https"})


def _scheme_literal(node: ast.expr) -> bool:
    """A string naming a scheme (``"gs"``, ``"s3://"``, ``"gs://bucket"``), or a tuple/list/set of them."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_scheme_literal(item) for item in node.elts)
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and (node.value.lower() in SCHEME_NAMES or _NAMED_SCHEME.match(node.value) is not None))


def _scheme_branches(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            found += [f"imports {name}" for name in _imported(node, module, is_package)
                      if name.startswith(CLOUD_CLIENTS)]
        elif isinstance(node, ast.Compare) and any(_scheme_literal(side) for side in [node.left, *node.comparators]):
            found.append(f"compares with a scheme (line {node.lineno})")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "scheme" and isinstance(node.func.value, ast.Name) and node.func.value.id == "storage":
                found.append(f"calls storage.scheme (line {node.lineno})")
            elif node.func.attr in ("startswith", "removeprefix") and any(_scheme_literal(arg) for arg in node.args):
                found.append(f"tests a scheme prefix (line {node.lineno})")
    return found


def scheme_branches_outside_storage(root: pathlib.Path) -> list[str]:
    """Each cloud-client import, ``storage.scheme`` call or scheme literal test outside ``storage/``, as
    'module: what': code that branches on the store instead of asking ``storage.backend_for``."""
    return sorted(f"{name}: {what}" for name, path in _modules(root).items() if room(name) != "storage"
                  for what in _scheme_branches(ast.parse(path.read_text()), name, path.name == "__init__.py"))


def test_only_storage_knows_the_stores():
    assert scheme_branches_outside_storage(REPO) == []


def test_the_store_check_finds_client_imports_scheme_calls_and_scheme_literals(tmp_path):
    _write(tmp_path, {
        "beam_tfrecord/storage/__init__.py": "from google.cloud import storage\nok = scheme(p) == 'gs'\n",
        "beam_tfrecord/job/__init__.py": "",
        "beam_tfrecord/job/lease.py": ("from google.api_core.exceptions import NotFound\n"
                                       "from beam_tfrecord.storage import gcs\n"
                                       "def f(p):\n    return storage.scheme(p) == 'gs'\n"),
        "beam_tfrecord/job/other.py": ("a = p.startswith('s3://')\nb = kind in ('gs', 'az')\n"
                                       "c = name == 'train'\nd = p.startswith('/tmp')\ne = '://' in p\n"),
    })
    assert scheme_branches_outside_storage(tmp_path) == [
        "beam_tfrecord.job.lease: calls storage.scheme (line 4)",
        "beam_tfrecord.job.lease: compares with a scheme (line 4)",
        "beam_tfrecord.job.lease: imports beam_tfrecord.storage.gcs",
        "beam_tfrecord.job.lease: imports google.api_core.exceptions.NotFound",
        "beam_tfrecord.job.other: compares with a scheme (line 2)",
        "beam_tfrecord.job.other: tests a scheme prefix (line 1)",
    ]


# A runner named: a class name or dotted path ending in "Runner" (Beam's and ours), or one of Beam's runner packages.
_RUNNER_CLASS = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*Runner")
RUNNER_PACKAGES = tuple(f"apache_beam.runners.{name}" for name in (
    "dask", "dataflow", "direct", "portability", "interactive", "prism"))
# The re-export of engine's DaskRunner under its first path (``--runner=beam_tfrecord.beam.dask_runner.DaskRunner``).
RUNNER_NAMED_EXCEPT = ("beam_tfrecord.beam.dask_runner",)


def _runner_names(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            found += [f"imports {name}" for name in _imported(node, module, is_package)
                      if name.startswith(RUNNER_PACKAGES) or _RUNNER_CLASS.fullmatch(name.rpartition(".")[2])]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _RUNNER_CLASS.fullmatch(node.value):
            found.append(f"names {node.value!r} (line {node.lineno})")
        elif isinstance(node, ast.Name | ast.Attribute) and _RUNNER_CLASS.fullmatch(
                node.id if isinstance(node, ast.Name) else node.attr):
            found.append(f"names {node.id if isinstance(node, ast.Name) else node.attr} (line {node.lineno})")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type"
              and any(isinstance(arg, ast.Attribute) and arg.attr == "runner" for arg in node.args)):
            found.append(f"reads a runner's class (line {node.lineno})")
    return found


def runners_named_outside_engine(root: pathlib.Path) -> list[str]:
    """Each runner named outside ``engine/`` (a runner's class or dotted path as a string or a name, an import of
    one, ``type(pipeline.runner)``), as 'module: what': code that branches on a runner instead of on its traits."""
    return sorted(f"{name}: {what}" for name, path in _modules(root).items()
                  if room(name) != "engine" and name not in RUNNER_NAMED_EXCEPT
                  for what in _runner_names(ast.parse(path.read_text()), name, path.name == "__init__.py"))


def test_only_the_engine_names_a_runner():
    assert runners_named_outside_engine(REPO) == []


def test_the_runner_check_finds_names_imports_and_class_reads(tmp_path):
    _write(tmp_path, {
        "beam_tfrecord/engine/__init__.py": "RUNNERS = ('DirectRunner', 'DaskRunner')\n",
        "beam_tfrecord/beam/__init__.py": "",
        "beam_tfrecord/beam/read.py": ("from beam_tfrecord.engine.dask_runner import DaskRunner\n"
                                       "def f(pipeline):\n"
                                       "    if type(pipeline.runner).__name__ == 'DaskRunner':\n"
                                       "        return DaskRunner()\n"
                                       "    return 'the DirectRunner runs here'\n"),
        "pipelines/job.py": ("import apache_beam.runners.dask.dask_runner\n"
                             "R = 'apache_beam.runners.dataflow.DataflowRunner'\n"
                             "logger = 'apache_beam.runners.common'\n"),
    })
    assert runners_named_outside_engine(tmp_path) == [
        "beam_tfrecord.beam.read: imports beam_tfrecord.engine.dask_runner.DaskRunner",
        "beam_tfrecord.beam.read: names 'DaskRunner' (line 3)",
        "beam_tfrecord.beam.read: names DaskRunner (line 4)",
        "beam_tfrecord.beam.read: reads a runner's class (line 3)",
        "pipelines.job: imports apache_beam.runners.dask.dask_runner",
        "pipelines.job: names 'apache_beam.runners.dataflow.DataflowRunner' (line 2)",
    ]


def test_each_constant_is_defined_once():
    assert constants_defined_twice(REPO) == {}


def classes_defined_twice(root: pathlib.Path) -> dict[str, list[str]]:
    """Public module-level class names defined in two modules (two classes of one name read as one thing)."""
    where = collections.defaultdict(list)
    for name, path in _modules(root).items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append(name)
    return {cls: modules for cls, modules in where.items() if len(modules) > 1}


def test_each_public_class_name_is_defined_once():
    assert classes_defined_twice(REPO) == {}


MIN_MODULES_FOR_TESTS_FOLDER = 3
UNMIRRORED: tuple[str, ...] = ()  # rooms whose tests are still to move into tests/<room>/


def rooms_without_tests_folder(root: pathlib.Path) -> list[str]:
    """Each room (a package of ``beam_tfrecord``, or ``pipelines``) of ``MIN_MODULES_FOR_TESTS_FOLDER`` or more
    modules, its subpackages' included, with no test file in ``tests/<room>/``: where a reader looks for its tests."""
    sizes = collections.Counter(room(name) for name in _modules(root) if name not in (f"beam_tfrecord.{room(name)}",
                                                                                        "pipelines"))
    return sorted(name for name, size in sizes.items() if size >= MIN_MODULES_FOR_TESTS_FOLDER
                  and name != "__init__" and not any((root / "tests" / name).glob("test_*.py")))


def test_every_room_of_three_modules_has_its_tests_folder():
    assert rooms_without_tests_folder(REPO) == sorted(UNMIRRORED)


def test_the_tests_folder_check_finds_a_room_without_one(tmp_path):
    _write(tmp_path, {"beam_tfrecord/cli.py": "", "beam_tfrecord/job/__init__.py": "", "beam_tfrecord/job/a.py": "",
                      "beam_tfrecord/job/b.py": "", "beam_tfrecord/job/sub/__init__.py": "",
                      "beam_tfrecord/two/__init__.py": "", "beam_tfrecord/two/a.py": "", "beam_tfrecord/two/b.py": "",
                      "pipelines/a.py": "", "pipelines/b.py": "", "pipelines/c.py": "", "tests/pipelines/test_c.py": "",
                      "tests/job/helper.py": ""})
    assert rooms_without_tests_folder(tmp_path) == ["job"]  # a helper is not a test file; "two" has 2 modules
    _write(tmp_path, {"tests/job/test_a.py": ""})
    assert rooms_without_tests_folder(tmp_path) == []


def layers_text() -> str:
    """``LAYERS`` as docs/development.md lists them: rooms of a layer joined by commas, layers by arrows."""
    return " -> ".join(", ".join(f"`{name}`" for name in rooms) for rooms in LAYERS)


def test_the_development_page_lists_the_layers():
    page = " ".join((REPO / "docs" / "development.md").read_text().split())
    assert layers_text() in page, f"docs/development.md's layer list must read: {layers_text()}"


def _write(root: pathlib.Path, files: dict[str, str]) -> None:
    for name in ("beam_tfrecord/__init__.py", "pipelines/__init__.py", *files):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(files.get(name, ""))


def test_the_checks_find_an_upward_import_a_cycle_a_format_branch_a_repeated_constant_and_class(tmp_path):
    _write(tmp_path, {
        "beam_tfrecord/core/__init__.py": "",
        "beam_tfrecord/core/a.py": "from beam_tfrecord.core import b\nSIZE_BYTES = 4 << 10\n",
        "beam_tfrecord/core/b.py": "def f():\n    from beam_tfrecord.beam.write import g\n    from . import a\n",
        "beam_tfrecord/reader/__init__.py": "ok = fmt is not FileFormat.TFRECORD\n",
        "beam_tfrecord/beam/__init__.py": "",
        "beam_tfrecord/beam/write.py": "import apache_beam\n_SIZE_BYTES = 4096\nclass Plan:\n    pass\n",
        "beam_tfrecord/beam/plan.py": "class Plan:\n    pass\nclass _Private:\n    pass\n",
        "beam_tfrecord/beam/other.py": "class _Private:\n    pass\n",
    })
    graph, external = import_graph(tmp_path)
    assert upward_imports(graph) == ["beam_tfrecord.core.b -> beam_tfrecord.beam.write"]
    assert cycles(graph) == [["beam_tfrecord.core.a", "beam_tfrecord.core.b"]]
    assert external["beam_tfrecord.beam.write"] == {"apache_beam"}
    assert format_members_named(tmp_path) == ["beam_tfrecord.reader: FileFormat.TFRECORD"]
    assert constants_defined_twice(tmp_path) == {"SIZE_BYTES": ["beam_tfrecord.beam.write", "beam_tfrecord.core.a"]}
    assert classes_defined_twice(tmp_path) == {"Plan": ["beam_tfrecord.beam.plan", "beam_tfrecord.beam.write"]}


# Inside ``reader``: the front ends (one per framework) sit on the shared ``order`` and ``decode`` subpackages.
READER_SHARED = ("beam_tfrecord.reader.order", "beam_tfrecord.reader.decode")
READER_FRONT_ENDS = ("tf_data", "tf_records", "tf_generated", "tf_spec", "numpy_reader", "torch_dataset")


def reader_shared_code_leaning_on_front_ends(graph: Graph, external: dict[str, set[str]]) -> list[str]:
    """Each import of a reader front end or of TensorFlow/PyTorch by the shared reader code, as 'a -> b'."""
    shared = [module for module in graph if module.startswith(READER_SHARED)]
    return sorted([f"{a} -> {b}" for a in shared for b in graph[a]
                   if b.rpartition(".")[2] in READER_FRONT_ENDS and b.startswith("beam_tfrecord.reader.")]
                  + [f"{a} -> {b}" for a in shared for b in external[a] & {"tensorflow", "torch"}])


def test_the_readers_shared_code_imports_no_front_end(graph):
    assert reader_shared_code_leaning_on_front_ends(*graph) == []
    assert {module for module in graph[0] if module.startswith(READER_SHARED)} >= {
        "beam_tfrecord.reader.order.read_plan", "beam_tfrecord.reader.decode.block_decode"}


def test_the_reader_check_finds_a_front_end_import(tmp_path):
    mixing = "beam_tfrecord.reader.order.mixing"
    _write(tmp_path, {"beam_tfrecord/reader/__init__.py": "", "beam_tfrecord/reader/tf_data.py": "",
                      "beam_tfrecord/reader/order/__init__.py": "",
                      "beam_tfrecord/reader/order/mixing.py": "from ..tf_data import f\nimport torch\n"})
    assert reader_shared_code_leaning_on_front_ends(*import_graph(tmp_path)) == [
        f"{mixing} -> beam_tfrecord.reader.tf_data", f"{mixing} -> torch"]
