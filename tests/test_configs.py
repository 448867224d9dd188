"""The Flower app's run config and the options reference are generated from the declarations: no drift."""

import tomllib
from pathlib import Path

from sstq_fl.fl.config import RunConfig
from sstq_fl.options import run_config_defaults

ROOT = Path(__file__).resolve().parents[1]


def _app_config():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]


def test_pyproject_train_keys_match_the_run_config_declaration():
    from sstq_fl.configs import APP_KEYS, TRAIN_APP_DEFAULTS

    want = {**APP_KEYS, **run_config_defaults(RunConfig), **TRAIN_APP_DEFAULTS}
    have = {k: v for k, v in _app_config().items() if k in want or "-" not in k or k.split("-")[0] not in ("mepf", "vqg", "sdp")}
    assert have == want, "pyproject [tool.flwr.app.config] drifted from sstq_fl.fl.config.RunConfig: " + \
        ", ".join(f"{k} = {want.get(k)!r} (pyproject: {have.get(k)!r})" for k in sorted(set(want) | set(have))
                  if want.get(k) != have.get(k))
