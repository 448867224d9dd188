"""The example Flower apps: ``examples/quickstart-pytorch`` (Flower's PyTorch quickstart on
Fashion-MNIST) and ``examples/quickstart-ldp`` (the same app with the LDP encoder adopted).

Adopting the encoder is the client mod and the strategy wrapper (plus the encoder's run-config
keys): at most ``MAX_CHANGED`` lines differ between the two folders, counting every removed and
every added line of a unified diff (a changed line counts twice; the pyproject ``name`` line
included).  Each app runs through ``flwr run <folder> --stream`` on Flower's local simulation
SuperLink (private ``FLWR_HOME``, stopped afterwards), as in tests/flower/test_flwr_run.py.
"""

import difflib
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.flower.test_flwr_run import _flwr_env, _kill_superlink, _run_status

ROOT = Path(__file__).resolve().parents[2]
PLAIN, LDP = ROOT / "examples" / "quickstart-pytorch", ROOT / "examples" / "quickstart-ldp"
MAX_CHANGED = 15
ALLOWED_SSTQ_IMPORTS = {"sstq_fl.flower", "sstq_fl.data.idx"}


def app_files(folder: Path) -> dict[str, list[str]]:
    """An app's source files (``pyproject.toml`` and every ``.py`` file, caches left out) by relative path."""
    paths = [folder / "pyproject.toml", *sorted(folder.glob("**/*.py"))]
    return {str(p.relative_to(folder)): p.read_text().splitlines() for p in paths if "__pycache__" not in p.parts}


def changed_lines(a: Path, b: Path) -> dict[str, list[str]]:
    """Per file, the removed (``-``) and added (``+``) lines of a unified diff from app ``a`` to app ``b``
    (a file only one app has counts in full)."""
    fa, fb = app_files(a), app_files(b)
    out = {}
    for name in sorted(fa.keys() | fb.keys()):
        diff = difflib.unified_diff(fa.get(name, []), fb.get(name, []), lineterm="", n=0)
        lines = [d for d in diff if d[:1] in "+-" and not d.startswith(("+++", "---"))]
        if lines:
            out[name] = lines
    return out


def test_adopting_the_encoder_changes_at_most_15_lines():
    changed = changed_lines(PLAIN, LDP)
    count = sum(len(v) for v in changed.values())
    assert 0 < count <= MAX_CHANGED, "\n".join(line for v in changed.values() for line in v)
    assert set(changed) == {"pyproject.toml", "quickstart/client_app.py", "quickstart/server_app.py"}
    added = "\n".join(line for v in changed.values() for line in v if line.startswith("+"))
    assert "LdpEncodeMod" in added and "LdpDecoding(FedAvg(" in added
    assert all(line.startswith("+") for line in changed["quickstart/client_app.py"] if "import" in line)


def test_the_apps_import_only_the_flower_edge_and_the_data_loader_from_sstq_fl():
    for folder in (PLAIN, LDP):
        for name, lines in app_files(folder).items():
            mods = {m for line in lines for m in re.findall(r"^\s*(?:from|import)\s+(sstq_fl[\w.]*)", line)}
            assert mods <= ALLOWED_SSTQ_IMPORTS, (folder.name, name, mods)
    assert not any("sstq_fl.flower" in "\n".join(lines) for lines in app_files(PLAIN).values())


def _has_fashion_mnist() -> bool:
    """Whether the Fashion-MNIST IDX files are on this machine (no download in tests)."""
    from sstq_fl.data.idx import find_fashion_mnist

    try:
        find_fashion_mnist(download=False)
        return True
    except FileNotFoundError:
        return False


def flwr_run(app: Path, tmp_path: Path, config: str = "num-server-rounds=2 fraction-evaluate=0.5",
             home: Path | None = None) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """``flwr run <app> --stream``: 4 SuperNodes, every one trained each round, 100 examples per client,
    ``config`` overriding the rest; the completed process, the run's status row and the ServerApp's
    out-dir.  ``home``: a FLWR_HOME whose local SuperLink the caller stops (default: one of its own)."""
    own, out = home is None, tmp_path / "out"
    home = home or tmp_path / "flwr-home"
    env, flwr = _flwr_env(home), str(Path(sys.executable).with_name("flwr"))
    cmd = [flwr, "run", str(app), "--stream", "--federation-config", "num-supernodes=4 client-resources-num-cpus=1",
           "-c", f"fraction-train=1.0 max-examples=100 {config} out-dir={json.dumps(str(out))}"]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        status = _run_status(env, p.stdout, tmp_path)
    finally:
        if own:
            _kill_superlink(home)
    return p, status, out


def central_evaluation(p: subprocess.CompletedProcess, status: dict, out: Path, rounds: int = 2) -> list[dict]:
    """The finished run's central evaluations (rounds ``0..rounds``), checked complete and finite."""
    assert p.returncode == 0 and status["status"] == "finished:completed", p.stdout[-3000:] + p.stderr[-3000:]
    ev = json.loads((out / "result.json").read_text())["central_evaluation"]
    assert [e["round"] for e in ev] == list(range(rounds + 1)) and (out / "final_model.pt").is_file()
    assert all(math.isfinite(e["accuracy"]) and math.isfinite(e["loss"]) for e in ev), ev
    return ev


needs_data = pytest.mark.skipif(not _has_fashion_mnist(), reason="dataset-fashion-mnist not installed")


@pytest.mark.slow  # CI runs this app through flwr run from the installed wheel instead (scripts/wheel_smoke.sh)
@needs_data
def test_plain_app_runs_with_flwr_run(tmp_path):
    p, status, out = flwr_run(PLAIN, tmp_path)
    ev = central_evaluation(p, status, out)
    assert "Starting FedAvg strategy" in p.stdout
    assert ev[-1]["loss"] < ev[0]["loss"]  # two plain FedAvg rounds learn something


@needs_data
def test_ldp_app_runs_with_flwr_run_and_its_loss_stays_put(tmp_path):
    """The recipe as committed (its radius, no client evaluation), 3 rounds: the central loss does not
    diverge (``radius = 1.0`` took it from 2.31 to 47,105 in 3 rounds).  With 4 clients at ε = 3 the
    decoded mean's noise is about 90 × the radius, so whether it falls in 3 rounds is chance (it fell
    from 2.305 to 2.303 in most runs, rose by 0.0003 in one); learning needs many clients a round."""
    p, status, out = flwr_run(LDP, tmp_path, "num-server-rounds=3")
    ev = central_evaluation(p, status, out, rounds=3)
    log = p.stdout + p.stderr
    assert "Starting LdpDecoding strategy" in p.stdout
    assert "LdpDecoding: encoder privunit" in log  # the sstq_fl loggers reach the log
    assert "weighted uniformly (one LDP message, one vote" in log  # the wrapper's summary; Flower's lines are Flower's
    assert log.count("aggregate_train: uniform mean of 4 LDP messages (0 left out)") == 3
    assert "configure_evaluate: Sampled" not in log  # fraction-evaluate = 0: nothing but the LDP messages leaves
    # the rounds' decoded messages charged the ledger: one epsilon=3 message per client and round
    spent = [float(x) for x in re.findall(r"'epsilon-spent': ([0-9.e+-]+)", p.stdout)]
    assert spent == pytest.approx([3.0, 6.0, 9.0], rel=1e-3)
    assert max(e["loss"] for e in ev) < ev[0]["loss"] + 0.01, ev


def misconfigured(tmp_path: Path, file: str, old: str, new: str) -> Path:
    """A copy of the LDP app with ``old`` replaced by ``new`` in ``file`` (which must hold it)."""
    app = tmp_path / "app"
    shutil.copytree(LDP, app, ignore=shutil.ignore_patterns("__pycache__"))
    path = app / file
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    return app


MOD = "LdpEncodeMod(settings=lambda msg, ctx: LdpSettings(**{k: ctx.run_config[k] for k in LDP}))"
MISCONFIGURED = {  # the edit, and the cause the run must fail with (one line, in the stream and the run's status)
    "encoder mismatch": ("quickstart/client_app.py", "for k in LDP})", 'for k in LDP} | {"encoder": "sqkr"})',
                         "encoder mismatch in round 1: the server decodes privunit:cap=exact (dim 44426, epsilon 3, "
                         "radius 0.01, frame seed 0, fingerprint 0x5291f823) but this client encodes sqkr:b0=4,"
                         "coin=private,delta=0.9,eta=0.55,frame=hadamard,iters=300,k=0,kashin=linf,level=1.9,passes=40,"
                         "rho=2.5 (dim 44426, epsilon 3, radius 0.01, frame seed 0, fingerprint 0xb77d5322) "
                         "(4 of 4 clients refused)"),
    "mod missing": ("quickstart/client_app.py", f"ClientApp(mods=[{MOD}])", "ClientApp()",
                    "no LDP message in any reply of round 1: is LdpEncodeMod in the ClientApp's mods?"),
    "wrapper missing": ("quickstart/server_app.py", "LdpDecoding(FedAvg(fraction_train=fraction_train, "
                        "fraction_evaluate=fraction_evaluate), **ldp)", "FedAvg(fraction_train=fraction_train)",
                        "Unsupported serialization type for numpy conversion: 'sstq-fl.wire/1: an LDP message; "
                        "wrap the server's strategy in sstq_fl.flower.LdpDecoding'"),
}


@pytest.fixture(scope="module")
def shared_home(tmp_path_factory):
    """One FLWR_HOME (one local SuperLink) for the misconfigured runs, stopped after them."""
    home = tmp_path_factory.mktemp("flwr-home")
    yield home
    _kill_superlink(home)


@needs_data
# one case through flwr run in the default run; each cause is also unit-tested in-process (tests/flower/test_ldp.py)
@pytest.mark.parametrize("case", [pytest.param(c, marks=[] if c == "wrapper missing" else pytest.mark.slow)
                                  for c in sorted(MISCONFIGURED)])
def test_a_misconfigured_ldp_app_fails_with_its_cause(tmp_path, shared_home, case):
    """Each misconfiguration stops the run in round 1: Flower's simulation runtime exits 700 with the cause
    in the stream and in the run's status (``flwr run`` itself exits 0 once the stream ends: Flower 1.42)."""
    file, old, new, cause = MISCONFIGURED[case]
    p, status, out = flwr_run(misconfigured(tmp_path, file, old, new), tmp_path, "num-server-rounds=1", home=shared_home)
    log = p.stdout + p.stderr
    assert status["status"] == "finished:failed" and cause in status["status-details"], (status, log[-3000:])
    assert cause in log and "Exit Code: 700" in log and p.returncode == 0
    assert not (out / "final_model.pt").exists()
