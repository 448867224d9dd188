"""The package's import structure: no import cycles, no two units importing each other, no private names
imported across packages and every internal import resolves (that Flower stays at the edges is
``tests/test_backends.py``'s check).

The import graph is built with :mod:`ast` over every module of ``sstq_fl`` (imports inside
functions included, ``if TYPE_CHECKING:`` blocks excluded).  Importing ``a.b.c`` also runs the
``__init__`` of every package on the way (``a.b``), so those are edges too, except the
importer's own enclosing packages (already being imported when it runs).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import sstq_fl

ROOT = Path(sstq_fl.__file__).parent
PACKAGE = "sstq_fl"

def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, in functions too, but not under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _base(importer: str, node: ast.ImportFrom, modules: dict[str, Path]) -> str:
    """The absolute module a ``from`` import names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = importer if _is_package(importer, modules) else importer.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _with_packages(importer: str, target: str) -> set[str]:
    """``target`` and the packages its import runs, less the importer's own enclosing packages."""
    parts = target.split(".")
    chain = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    own = {importer[:i] for i in range(len(importer)) if importer[i] == "."} | {importer}
    return {m for m in chain if m not in own or m == target}


def import_graph() -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """The module import graph of sstq_fl, and every ``(importer, module, name)`` of a ``from`` import."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    names: list[tuple[str, str, str]] = []
    for importer, path in modules.items():
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = {alias.name for alias in node.names}
            else:
                base = _base(importer, node, modules)
                targets = set()
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in modules else base)
                    names.append((importer, base, alias.name))
            for target in targets:
                graph[importer] |= {m for m in _with_packages(importer, target) if m in modules and m != importer}
    return graph, names


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        component.append(m)
                        if m == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def _package_of(module: str, modules: dict[str, Path]) -> str:
    return module if _is_package(module, modules) else module.rpartition(".")[0]


def test_the_package_has_no_import_cycles() -> None:
    graph, _ = import_graph()
    assert _cycles(graph) == []


def _unit(module: str) -> str:
    """The unit a module belongs to: its subpackage of ``sstq_fl`` (``sstq_fl.fl``), or itself for a top-level module."""
    return ".".join(module.split(".")[:2])


def _mutual_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each pair of units (subpackages and top-level modules of ``sstq_fl``) importing each other, with one edge each
    way (the package's own ``__init__`` is no unit: it only names the public API)."""
    edges: dict[tuple[str, str], tuple[str, str]] = {}
    for importer, targets in sorted(graph.items()):
        for target in sorted(targets):
            pair = (_unit(importer), _unit(target))
            if pair[0] != pair[1] and PACKAGE not in pair:
                edges.setdefault(pair, (importer, target))
    return [f"{a} <-> {b}: {' -> '.join(edges[a, b])} and {' -> '.join(edges[b, a])}"
            for a, b in sorted(edges) if a < b and (b, a) in edges]


def test_no_two_units_import_each_other() -> None:
    """Each subpackage and top-level module imports the others in one direction only (imports in functions count)."""
    graph, _ = import_graph()
    assert _mutual_imports(graph) == []


def test_a_mutual_import_is_named_with_an_edge_each_way() -> None:
    graph = {"sstq_fl.fl.clients": {"sstq_fl.data.workload"}, "sstq_fl.data.workload": {"sstq_fl.fl.config"},
             "sstq_fl.fl.config": set(), "sstq_fl.rng": {"sstq_fl"}, "sstq_fl": {"sstq_fl.rng"}}
    assert _mutual_imports(graph) == ["sstq_fl.data <-> sstq_fl.fl: sstq_fl.data.workload -> sstq_fl.fl.config and "
                                      "sstq_fl.fl.clients -> sstq_fl.data.workload"]


def test_no_private_name_is_imported_from_another_package() -> None:
    modules = _modules()
    _, names = import_graph()
    bad = []
    for importer, base, name in names:
        if not name.startswith("_") or name.startswith("__") or not base.startswith(PACKAGE):
            continue
        source = base if base in modules else base.rpartition(".")[0]
        if source in modules and _package_of(source, modules) != _package_of(importer, modules):
            bad.append(f"{importer}: from {base} import {name}")
    assert bad == []


def test_the_graph_sees_function_local_imports() -> None:
    """cli imports its commands' modules inside the command functions only: the graph has those edges."""
    graph, _ = import_graph()
    assert "sstq_fl.experiments.compare" in graph["sstq_fl.cli"] and "sstq_fl.bench.mse" in graph["sstq_fl.cli"]


def test_every_internal_import_resolves() -> None:
    modules = _modules()
    _, names = import_graph()
    missing = sorted({f"{importer}: {base}" for importer, base, _ in names
                      if base.startswith(PACKAGE) and base not in modules})
    assert missing == []



PRIVATE_ENTRIES = {("sstq_fl.data.mnist", "load_private_split"), ("sstq_fl.data.mnist", "load_mnist_subset"),
                   ("sstq_fl.gen.runner", "run_workload"), ("sstq_fl.gen.runner", "InProcessPool"),
                   ("sstq_fl.gen.template", "workload_data"), ("sstq_fl.gen.template", "dataset_ledger")}
"""The ways to the private records (and to the clients that hold them) that only the run template takes."""


def test_the_generative_pipelines_reach_private_data_only_through_the_template() -> None:
    """A pipeline's subpackage (``sstq_fl.gen.<pipeline>``) imports no private data loader and no client pool: its
    steps get the records from :mod:`sstq_fl.gen.template` after the plan is charged (``if TYPE_CHECKING:``
    imports, for annotations, excepted)."""
    graph, names = import_graph()
    pipelines = [m for m in graph if m.startswith("sstq_fl.gen.") and m.count(".") >= 3]
    assert "sstq_fl.gen.mepf.pipeline" in pipelines
    bad = [f"{m}: imports sstq_fl.data.workload" for m in pipelines if "sstq_fl.data.workload" in graph[m]]
    bad += [f"{m}: from {base} import {name}" for m, base, name in names if m in pipelines and (base, name) in PRIVATE_ENTRIES]
    assert bad == []


ROOM = f"{PACKAGE}.config"
ROOM_MAY_IMPORT = (ROOM, f"{PACKAGE}.checks", f"{PACKAGE}.errors", "numpy")
"""What the configuration room (:mod:`sstq_fl.config`) may import besides the standard library."""


def _room_imports() -> Iterator[tuple[str, str]]:
    """``(module of the room, what it imports)`` for every import of :mod:`sstq_fl.config`, in functions too."""
    import sys

    modules = _modules()
    for name, path in modules.items():
        if name != ROOM and not name.startswith(ROOM + "."):
            continue
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else [_base(name, node, modules)]
            yield from ((name, t) for t in targets if t.split(".")[0] not in sys.stdlib_module_names)


def test_the_configuration_room_is_a_leaf() -> None:
    """Configs import nothing of what they configure (no registry, no Flower, no engine), so every part of the
    package can read them; a registry checks its names against the room's vocabulary instead."""
    bad = [f"{m}: {t}" for m, t in _room_imports() if not any(t == ok or t.startswith(ok + ".") for ok in ROOM_MAY_IMPORT)]
    assert bad == []
    assert any(t == "numpy" for _, t in _room_imports())  # the walk sees the room's imports
