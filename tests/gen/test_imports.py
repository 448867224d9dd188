"""The gen framework's import rules, checked on the source (module-level and function-local imports alike):
every import resolves, no private (underscore) name is imported from another package, and the modules of
``sstq_fl.gen`` import each other without a cycle."""

import ast
import importlib.util
from pathlib import Path

import sstq_fl.gen

GEN = Path(sstq_fl.gen.__file__).resolve().parent
ROOT = GEN.parents[1]


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for f in GEN.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    return out


def _target(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return str(node.module)
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _found(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    """The import edges among gen's modules and the problems found on the way."""
    mods, edges, problems = _modules(), {}, []
    for mod, (f, is_pkg) in mods.items():
        out = edges.setdefault(mod, set())
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level == 0 and not str(node.module).startswith("sstq_fl"):
                continue
            target = _target(mod, is_pkg, node)
            home = mod if is_pkg else mod.rsplit(".", 1)[0]
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                dst = sub if sub in mods or (not target.startswith("sstq_fl.gen") and _found(sub)) else target
                if not (dst in mods or (not dst.startswith("sstq_fl.gen") and _found(dst))):
                    problems.append(f"{mod}: cannot resolve {dst}")
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and dst == target and target != home:
                    problems.append(f"{mod}: imports the private name {alias.name} from {target}")
                if dst in mods and dst != mod:
                    out.add(dst)
    return edges, problems


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(u: str) -> None:
        state[u] = 1
        stack.append(u)
        for v in sorted(edges.get(u, ())):
            if state.get(v) == 1:
                found.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    return found


def test_every_import_resolves_and_no_private_name_crosses_packages():
    _, problems = _graph()
    assert not problems, "\n".join(problems)


def test_the_gen_modules_import_each_other_without_a_cycle():
    cycles = _cycles(_graph()[0])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)
