"""Flower stays at the edges: no core module imports Flower, ``strategies/`` or ``clients/``; the core
reaches the Flower engine only through :mod:`sstq_fl.backends` (entry points)."""

import ast
from pathlib import Path

import pytest

from sstq_fl.backends import backend

CORE = Path(__file__).resolve().parents[1] / "sstq_fl"
EDGE = ("flwr", "strategies", "clients")


def _imports(path: Path) -> list[str]:
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
    return out


def test_no_core_module_imports_flower_or_the_app_folders():
    bad = [(str(p.relative_to(CORE)), m) for p in CORE.rglob("*.py") for m in _imports(p)
           if m.split(".")[0] in EDGE]
    assert bad == []


def test_the_flower_backends_are_installed_and_an_unknown_one_is_a_one_line_error():
    import strategies.gen_server
    import strategies.sstq_server

    assert backend("flower-train") is strategies.sstq_server.run_flower
    assert backend("flower-train-many") is strategies.sstq_server.run_flower_many
    assert backend("flower-workload") is strategies.gen_server.run_on_flower
    with pytest.raises(ValueError, match="no execution backend 'nope' is installed") as exc:
        backend("nope")
    assert "\n" not in str(exc.value)
