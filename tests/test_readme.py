"""The README's Python snippets run as written, one after the other (the ledger snippet uses the
encoder snippet's ``enc``), in a scratch folder."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_python_snippets_run_in_sequence(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    scope: dict = {}
    for code in blocks:
        exec(compile(code, "README.md", "exec"), scope)  # noqa: S102  (our own documentation)
    assert (tmp_path / "run" / "transcript.jsonl").exists()


def test_the_plugin_recipe_says_what_encode_returns_the_attributes_and_summary():
    text = README.read_text()
    recipe = text[text.index("## Writing an encoder plug-in"):text.index("## Benchmarks")]
    for needed in ("Messages(", "summary", "self.dim", "self.epsilon", "self.radius", "self.device", "self.cfg",
                   "seeds", "layout()"):
        assert needed in recipe, needed
