"""Flower stays at the edges: no core module imports Flower, the apps (:mod:`sstq_fl.flower.apps`) or the
clone's ``strategies/`` and ``clients/``; only :mod:`sstq_fl.flower` (the mod, the wrapper, the shared
plumbing, and in :mod:`sstq_fl.flower.apps` the project's own apps) imports Flower, and nothing in it
outside :mod:`sstq_fl.flower.apps` imports an app; the core
reaches the Flower engines only through :mod:`sstq_fl.backends` (entry points)."""

import ast
from pathlib import Path

import pytest

from sstq_fl.backends import backend

CORE = Path(__file__).resolve().parents[1] / "sstq_fl"
EDGE = ("flwr", "strategies", "clients")


def _imports(path: Path) -> list[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved), lazy ones included."""
    package = ["sstq_fl", *path.relative_to(CORE).parent.parts]
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1]
            out.append(".".join(base + ([node.module] if node.module else [])))
    return out


def _in_flower(p: Path) -> bool:
    return p.relative_to(CORE).parts[0] == "flower"


def _in_apps(p: Path) -> bool:
    return p.relative_to(CORE).parts[:2] == ("flower", "apps")


def test_no_core_module_imports_flower_or_the_app_folders():
    core = [p for p in CORE.rglob("*.py") if not _in_flower(p)]
    bad = [(str(p.relative_to(CORE)), m) for p in core for m in _imports(p)
           if m.split(".")[0] in EDGE or m.startswith("sstq_fl.flower")]
    assert bad == []


def test_only_sstq_fl_flower_imports_flower_and_it_imports_no_app_folder():
    flower = [p for p in CORE.rglob("*.py") if _in_flower(p) and not _in_apps(p)]
    assert any(m.split(".")[0] == "flwr" for p in flower for m in _imports(p))  # the check sees Flower imports
    assert [(p.name, m) for p in flower for m in _imports(p)
            if m.split(".")[0] in ("strategies", "clients") or m.startswith("sstq_fl.flower.apps")] == []


def test_the_flwr_run_components_name_the_installed_apps_and_flower_resolves_them():
    """``strategies/`` and ``clients/`` are the clone's ``flwr run .`` components; each names its installed app."""
    import tomllib

    from flwr.supercore.object_ref import validate

    components = tomllib.loads((CORE.parent / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["components"]
    assert components == {"serverapp": "strategies.sstq_server:app", "clientapp": "clients.sstq_client:app"}
    for ref in components.values():
        assert validate(ref, project_dir=CORE.parent) == (True, None)


def test_the_apps_import_no_clone_folder():
    apps = [p for p in CORE.rglob("*.py") if _in_apps(p)]
    assert len(apps) >= 4
    assert [(p.name, m) for p in apps for m in _imports(p) if m.split(".")[0] in ("strategies", "clients")] == []


def test_the_flower_backends_are_installed_and_an_unknown_one_is_a_one_line_error():
    import sstq_fl.flower.apps.gen_server
    import sstq_fl.flower.apps.sstq_server

    assert backend("flower-train") is sstq_fl.flower.apps.sstq_server.run_flower
    assert backend("flower-train-many") is sstq_fl.flower.apps.sstq_server.run_flower_many
    assert backend("flower-workload") is sstq_fl.flower.apps.gen_server.run_on_flower
    with pytest.raises(ValueError, match="no execution backend 'nope' is installed") as exc:
        backend("nope")
    assert "\n" not in str(exc.value)
