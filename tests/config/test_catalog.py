"""The Flower app's run config and the options reference are generated from the declarations: no drift."""

import tomllib
from pathlib import Path

from sstq_fl.cli import main
from sstq_fl.config.catalog import BEGIN, END, app_run_config_defaults, options_reference, pyproject_block

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "regenerate it with `sstq-fl options --pyproject pyproject.toml`"


def test_pyproject_run_config_is_the_declarations_defaults():
    text = (ROOT / "pyproject.toml").read_text()
    have = tomllib.loads(text)["tool"]["flwr"]["app"]["config"]
    want = app_run_config_defaults()
    drift = [f"{k} = {want.get(k, '<absent>')!r} (pyproject: {have.get(k, '<absent>')!r})"
             for k in sorted(set(want) | set(have)) if want.get(k, "<absent>") != have.get(k, "<absent>")
             or type(want.get(k)) is not type(have.get(k))]
    assert drift == [], f"pyproject [tool.flwr.app.config] drifted from the option declarations ({REGENERATE}): " + \
        "; ".join(drift)
    assert pyproject_block() in text, f"pyproject's generated run-config block was edited by hand: {REGENERATE}"


def test_the_options_command_rewrites_the_pyproject_block(tmp_path, capsys):
    text = (ROOT / "pyproject.toml").read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    stale = tmp_path / "pyproject.toml"
    stale.write_text(text[:start] + BEGIN + "\n[tool.flwr.app.config]\nepsilon = 1.0\n" + END + text[end:])
    assert main(["options", "--pyproject", str(stale)]) == 0 and "rewritten" in capsys.readouterr().out
    assert stale.read_text() == text
    assert main(["options", "--pyproject", str(stale)]) == 0 and "already matches" in capsys.readouterr().out
    stale.write_text("[project]\n")
    assert main(["options", "--pyproject", str(stale)]) != 0
    assert "no generated run-config block" in capsys.readouterr().err


def test_options_reference_page_is_generated(capsys):
    page = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    assert page == options_reference(), "docs/options.md is stale: regenerate it with `sstq-fl options > docs/options.md`"
    assert main(["options"]) == 0 and capsys.readouterr().out == page
    for flag in ("--clients-per-node", "--lsq-theta-scale", "--prior-lr", "--beta", "--moments"):
        assert f"`{flag}`" in page


def test_the_page_shows_the_cli_words_and_required_flags():
    """A pipeline's ``--epsilon`` is required on the CLI (the page says so, with the run config's default); a default
    is shown as the CLI writes it (``--reference none``, ``--moments 1``)."""
    page = options_reference()
    assert "| `--epsilon` | `mepf-epsilon` | float | required (run config: `1.0`) |" in page
    assert "| `--reference` | `vqg-reference` | str | `none` | `none` \\| `argmin` \\| `public` |" in page
    assert "| `--moments` | `mepf-moments` | tuple | `1` | `1` \\| `1,2` |" in page


def test_every_run_config_key_has_one_meaning():
    """No key is read by two configurations: each pipeline's keys carry its prefix."""
    from sstq_fl.config.catalog import configurations
    from sstq_fl.config.declare import run_config_keys

    seen: dict[str, str] = {}
    for c in configurations():
        for key in run_config_keys(c.cls, c.prefix):
            assert key not in seen, f"{key} belongs to {seen[key]} and {c.cls.__name__}"
            seen[key] = c.cls.__name__
