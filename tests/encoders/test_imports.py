"""No import cycle passes through ``sstq_fl.encoders``: every import is followed, function-local ones
included (the registry names the built-in encoder modules as strings, so ``base`` imports none of them)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for p in (ROOT / "sstq_fl").rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def _graph() -> dict[str, set[str]]:
    """Module → the package modules it imports (``from pkg import sub`` names the submodule ``sub``)."""
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, (p, is_pkg) in mods.items():
        package = m.split(".") if is_pkg else m.split(".")[:-1]
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
                found = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            edges[m] |= {t for t in found if t in mods and t != m}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while comp[-1:] != [v]:
                comp.append(stack.pop())
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_function_local_imports():
    edges = _graph()
    assert "sstq_fl.data.idx" in edges["sstq_fl.fl.tasks"]  # imported inside the fmnist factory
    assert "sstq_fl.encoders.base" in edges["sstq_fl.encoders.sstq"]


def test_no_import_cycle_passes_through_the_encoders():
    bad = [c for c in _cycles(_graph()) if any(m.startswith("sstq_fl.encoders") for m in c)]
    assert bad == []
