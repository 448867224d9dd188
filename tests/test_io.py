"""Result files: strict JSON, and no credential from the command line in ``run_meta``."""

import json
import math
import sys

import pytest

from sstq_fl import io


def _strict_load(path):
    """``json.loads`` that refuses ``Infinity``/``-Infinity``/``NaN`` (not standard JSON)."""
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(path.read_text(), parse_constant=refuse)


def test_atomic_write_json_writes_strict_json_with_null_for_non_finite(tmp_path):
    obj = {"epsilon": math.inf, "rounds": [{"loss": math.nan, "eps": 1.5}, {"eps": -math.inf}],
           "nested": {"t": (1.0, math.inf)}, "ok": 2, "name": "clean"}
    io.atomic_write_json(tmp_path / "m.json", obj)
    got = _strict_load(tmp_path / "m.json")
    assert got == {"epsilon": None, "rounds": [{"loss": None, "eps": 1.5}, {"eps": None}],
                   "nested": {"t": [1.0, None]}, "ok": 2, "name": "clean"}
    assert obj["epsilon"] == math.inf and math.isnan(obj["rounds"][0]["loss"])  # the caller's object is untouched


def test_atomic_write_json_handles_numpy_floats(tmp_path):
    np = pytest.importorskip("numpy")
    io.atomic_write_json(tmp_path / "n.json", {"a": np.float64("inf"), "b": np.float64(0.25)})
    assert _strict_load(tmp_path / "n.json") == {"a": None, "b": 0.25}


@pytest.mark.parametrize("argv, want", [
    (["flwr-simulation", "--app", "/x", "--token", "9f86d081884c7d65", "--run-once"],
     "flwr-simulation --app /x --token <redacted> --run-once"),
    (["flwr-simulation", "--token=9f86d081884c7d65", "--num-supernodes", "3"],
     "flwr-simulation --token=<redacted> --num-supernodes 3"),
    (["prog", "--auth-header", "Bearer abc", "--api-key=k1", "--ssh-keyfile", "/k", "--password", "pw", "--secret",
      "s3", "--client-secret=s4"],
     "prog --auth-header <redacted> --api-key=<redacted> --ssh-keyfile <redacted> --password <redacted> "
     "--secret <redacted> --client-secret=<redacted>"),
    (["prog", "--insecure-skip-key-check", "--rounds", "3"], "prog --insecure-skip-key-check --rounds 3"),
    (["prog", "--token"], "prog --token"),
])
def test_run_meta_redacts_credentials_from_the_command_line(monkeypatch, argv, want):
    monkeypatch.setattr(sys, "argv", argv)
    meta = io.run_meta()
    assert meta["command"] == want
    assert "9f86d081884c7d65" not in json.dumps(meta)


def test_run_meta_keeps_an_ordinary_sstq_fl_command(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/sstq-fl", "run", "--encoder", "sstq-flat:b=4", "--out", "r"])
    assert io.run_meta()["command"] == "sstq-fl run --encoder sstq-flat:b=4 --out r"


def _strict(text: str):
    def refuse(name: str):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_transcripts_and_cli_json_are_standard_json_with_null_for_infinity(tmp_path, capsys):
    """A non-private run's transcript (ε = ∞) and `--json` outputs parse with a strict JSON parser; the
    transcript still replays (null reads back as ∞)."""
    from sstq_fl.cli import main
    from sstq_fl.fl.engine import RunConfig, run

    run(RunConfig(task="lsq", dim=8, n=80, clients=4, batch=10, rounds=2, clip=1.0, encoder="clean"), tmp_path / "r",
        progress=False)
    lines = [_strict(s) for s in (tmp_path / "r" / "transcript.jsonl").read_text().splitlines()]
    assert lines[-1]["epsilon"] is None
    capsys.readouterr()
    assert main(["privacy", "replay", str(tmp_path / "r" / "transcript.jsonl"), "--json"]) == 0
    assert _strict(capsys.readouterr().out)["epsilon"] is None
    assert main(["privacy", "plan", "--ldp-epsilon", "1000", "--rounds", "10", "--json"]) == 0
    assert _strict(capsys.readouterr().out)["advanced"] is None
