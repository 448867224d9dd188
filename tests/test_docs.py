"""The documentation's claims that code can check: the pages' Python snippets run as written, the
plug-in recipe says what a plug-in needs, the Flower recipe's mod order is Flower's, the README is
short and its links resolve, and the pages stand alone."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# pages whose ```python blocks run, in order, in one namespace per group (the ledger snippet uses
# the encoder snippet's ``enc``)
SNIPPETS = {
    "encoders-and-ledger": ["concepts/encoders.md", "concepts/privacy.md"],
    "wire-format": ["concepts/wire-format.md"],
    "flower-recipe": ["tutorials/flower-app.md"],
    "encoder-plugin": ["tutorials/encoder-plugin.md"],
    "own-task": ["tutorials/own-task.md"],
}


def python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.S)


@pytest.mark.parametrize("group", sorted(SNIPPETS))
def test_the_pages_python_snippets_run_in_sequence(group, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    scope: dict = {}
    blocks = [(page, code) for page in SNIPPETS[group] for code in python_blocks(page)]
    assert blocks, group
    for page, code in blocks:
        exec(compile(code, str(DOCS / page), "exec"), scope)  # noqa: S102  (our own documentation)
    if group == "encoders-and-ledger":
        assert (tmp_path / "run" / "transcript.jsonl").exists()


def test_the_plugin_recipe_says_what_encode_returns_the_attributes_and_summary():
    recipe = (DOCS / "tutorials" / "encoder-plugin.md").read_text()
    for needed in ("Messages(", "summary", "unbiased", "self.dim", "self.epsilon", "self.radius", "self.device",
                   "self.cfg", "seeds", "layout()", "sstq_fl.encoders", "sstq-fl encoders check"):
        assert needed in recipe, needed


def test_flowers_first_mod_is_the_outermost_as_the_recipe_says():
    """The Flower recipe puts LdpEncodeMod last because Flower wraps the first mod outermost."""
    from flwr.client.mod.utils import make_ffn

    seen: list[str] = []

    def mod(name):
        def m(msg, ctx, call_next):
            seen.append(f"{name} in")
            out = call_next(msg, ctx)
            seen.append(f"{name} out")
            return out
        return m

    make_ffn(lambda msg, ctx: seen.append("handler"), [mod("first"), mod("last")])(None, None)
    assert seen == ["first in", "last in", "handler", "last out", "first out"]
    recipe = (DOCS / "tutorials" / "flower-app.md").read_text()
    assert "ClientApp(mods=[arrays_size_mod, LdpEncodeMod(" in recipe and "fraction-evaluate = 0" in recipe


def test_the_readme_is_short_starts_with_the_two_commands_and_its_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    first = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert first[0].startswith("bash scripts/setup.sh && .venv/bin/sstq-fl demo") and first[1].startswith("bash scripts/test.sh")
    assert "python -m build" in text and "pip install dist/sstq_fl-*.whl" in text
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links
    for link in links:
        if not link.startswith("http"):
            assert (ROOT / link).exists(), link


def test_the_pages_stand_alone_and_their_figures_are_committed():
    for page in DOCS.rglob("*.md"):
        text = page.read_text()
        assert "../shared" not in text and not re.search(r"\bthe spec\b(?! string)", text, flags=re.I), page
        for fig in re.findall(r"benchmarks/results/[A-Za-z0-9_./=+-]+?\.png", text):
            assert (ROOT / fig).is_file(), (page, fig)


def documented_docstrings() -> dict[str, str]:
    """The docstrings the API reference renders: each ``::: name`` of docs/reference, its module's (or
    class's) members defined there, and their methods and properties, by qualified name."""
    import importlib
    import inspect

    found: dict[str, str] = {}

    def add(name: str, obj: object, depth: int) -> None:
        if not (inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isfunction(obj)):
            return
        if inspect.getdoc(obj) and name not in found:
            found[name] = obj.__doc__ or ""
        if depth == 0 or not (inspect.ismodule(obj) or inspect.isclass(obj)):
            return
        home = obj.__name__ if inspect.ismodule(obj) else obj.__module__
        for key, member in vars(obj).items():
            member = member.fget if isinstance(member, property) else member
            if not key.startswith("_") and getattr(member, "__module__", None) == home:
                add(f"{name}.{key}", member, depth - 1)

    for page in sorted((DOCS / "reference").glob("*.md")):
        for name in re.findall(r"^::: ([\w.]+)", page.read_text(), flags=re.M):
            module, _, attr = name.rpartition(".")
            try:
                obj = importlib.import_module(name)
            except ModuleNotFoundError:
                obj = getattr(importlib.import_module(module), attr)
            add(name, obj, 2)
    return found


def test_the_reference_docstrings_are_markdown_and_name_no_test_file():
    """mkdocstrings renders docstrings as Markdown: a reST literal marker (a line ending in ``::``) shows as a stray
    ``::``, and a reader of the API has no use for the project's test files."""
    docs = documented_docstrings()
    assert len(docs) > 100, len(docs)
    rst = [name for name, doc in docs.items() if re.search(r"::[ \t]*$", doc, flags=re.M)]
    tests = [name for name, doc in docs.items() if re.search(r"\btests/", doc)]
    assert not rst and not tests, f"reST '::' in {rst}; tests/ named in {tests}"
