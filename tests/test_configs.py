"""The Flower app's run config and the options reference are generated from the declarations: no drift."""

import tomllib
from pathlib import Path

from sstq_fl.cli import main
from sstq_fl.configs import app_run_config_defaults, options_reference

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_run_config_is_the_declarations_defaults():
    have = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    want = app_run_config_defaults()
    drift = [f"{k} = {want.get(k, '<absent>')!r} (pyproject: {have.get(k, '<absent>')!r})"
             for k in sorted(set(want) | set(have)) if want.get(k, "<absent>") != have.get(k, "<absent>")
             or type(want.get(k)) is not type(have.get(k))]
    assert drift == [], "pyproject [tool.flwr.app.config] drifted from the option declarations: " + "; ".join(drift)


def test_options_reference_page_is_generated(capsys):
    page = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    assert page == options_reference(), "docs/options.md is stale: regenerate it with `sstq-fl options > docs/options.md`"
    assert main(["options"]) == 0 and capsys.readouterr().out == page
    for flag in ("--clients-per-node", "--lsq-theta-scale", "--prior-lr", "--beta", "--moments"):
        assert f"`{flag}`" in page
