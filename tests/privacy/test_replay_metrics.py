"""``replay --metrics`` checks every privacy-bearing field of a training run's ``metrics.json`` (issue 44).

Before: editing ``final.epsilon_amplified``, ``final.epsilon_central``, a round's ``epsilon_central``, the
randomness mode, the sampling rate, the encoder or the threat model passed unnoticed; the central transcript
could not be replayed against the metrics at all; and an unchained (version 2) transcript skipped the
per-round checks.  Now each is bound to the transcripts and refused in one line naming the field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sstq_fl.cli import main
from sstq_fl.fl.engine import RunConfig, run
from sstq_fl.privacy.errors import TranscriptError
from sstq_fl.privacy.replay import check_metrics

BASE: dict[str, Any] = dict(task="lsq", dim=8, n=200, clients=20, batch=10, clip=1.0, lr=0.5, rounds=3, epsilon=2.0)
RUNS: dict[str, dict[str, Any]] = {
    "server": dict(encoder="sqkr"),
    "sampled": dict(encoder="sqkr", sampling_rate=0.5, randomness="secure"),
    "shuffler": dict(encoder="sqkr", trust="shuffler", sampling_rate=0.5, randomness="secure"),
    "curator": dict(encoder="clean", trust="curator", central_epsilon=2.0),
    "secagg": dict(encoder="clean", trust="secagg", central_epsilon=2.0),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name, cfg in RUNS.items():
        out[name] = tmp_path_factory.mktemp(name)
        run(RunConfig(**BASE, **cfg), out[name], progress=False)  # type: ignore[arg-type]
    return out


def metrics_of(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "metrics.json").read_text())


def cli(transcript: Path, metrics: Path) -> int:
    return main(["privacy", "replay", str(transcript), "--metrics", str(metrics)])


@pytest.mark.parametrize("name", RUNS)
@pytest.mark.parametrize("which", ["transcript.jsonl", "transcript_central.jsonl"])
def test_an_untouched_run_passes_for_each_transcript(runs, name, which, capsys):
    if which != "transcript.jsonl" and name in ("server", "sampled"):
        pytest.skip("no trust model, no central transcript")
    check_metrics(metrics_of(runs[name]), runs[name] / which)
    assert cli(runs[name] / which, runs[name] / "metrics.json") == 0, capsys.readouterr().err


EDITS = {
    "final.epsilon_amplified.epsilon": ("sampled", lambda m: m["final"]["epsilon_amplified"].update(
        epsilon=m["final"]["epsilon_amplified"]["epsilon"] / 10)),
    "final.epsilon_amplified": ("server", lambda m: m["final"].update(epsilon_amplified={"epsilon": 0.1})),
    "final.epsilon_central.epsilon": ("shuffler", lambda m: m["final"]["epsilon_central"].update(
        epsilon=m["final"]["epsilon_central"]["epsilon"] / 10)),
    "final.epsilon_central.epsilon ": ("curator", lambda m: m["final"]["epsilon_central"].update(
        epsilon=m["final"]["epsilon_central"]["epsilon"] / 10)),
    "rounds[2].epsilon_central": ("curator", lambda m: m["rounds"][2].update(
        epsilon_central=m["rounds"][2]["epsilon_central"] / 10)),
    "final.epsilon_central.epsilon  ": ("secagg", lambda m: m["final"]["epsilon_central"].update(
        epsilon=m["final"]["epsilon_central"]["epsilon"] / 10)),
    "rounds[2].epsilon_central ": ("secagg", lambda m: m["rounds"][2].update(
        epsilon_central=m["rounds"][2]["epsilon_central"] / 10)),
    "rounds[1].epsilon_central": ("shuffler", lambda m: m["rounds"][1].update(
        epsilon_central=m["rounds"][1]["epsilon_central"] / 10)),
    "final.epsilon_central.delta": ("shuffler", lambda m: m["final"]["epsilon_central"].update(delta=1e-3)),
    "randomness.mode": ("server", lambda m: m["randomness"].update(mode="secure")),
    "config.randomness": ("server", lambda m: m["config"].update(randomness="secure")),
    "config.sampling_rate": ("sampled", lambda m: m["config"].update(sampling_rate=0.05)),
    "config.encoder": ("server", lambda m: m["config"].update(encoder="sstq-flat:b=4")),
    "final.encoder_spec": ("server", lambda m: m["final"].update(encoder_spec="clean")),
    "config.trust": ("shuffler", lambda m: m["config"].update(trust="curator")),
    "final.epsilon_threat_model": ("server", lambda m: m["final"].update(epsilon_threat_model="central, trusted")),
    "final.epsilon_central": ("server", lambda m: m["final"].update(epsilon_central={"epsilon": 0.1})),
}


@pytest.mark.parametrize("field", EDITS)
@pytest.mark.parametrize("which", ["transcript.jsonl", "transcript_central.jsonl"])
def test_an_edited_field_is_refused_naming_it(runs, tmp_path, capsys, field, which):
    name, edit = EDITS[field]
    if which != "transcript.jsonl" and name in ("server", "sampled"):
        pytest.skip("no trust model, no central transcript")
    m = metrics_of(runs[name])
    edit(m)
    path = runs[name] / "edited.json"
    path.write_text(json.dumps(m))
    with pytest.raises(TranscriptError, match=re.escape(f"the metrics' {field.strip()} is")):
        check_metrics(m, runs[name] / which)
    assert cli(runs[name] / which, path) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the metrics' {field.strip()} is" in err, err


def test_the_central_transcript_of_a_run_without_trust_is_refused(runs, tmp_path, capsys):
    other = runs["shuffler"] / "transcript_central.jsonl"
    assert cli(other, runs["server"] / "metrics.json") == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_version_2_transcript_is_refused_for_metrics(runs, tmp_path, capsys):
    """Unchained, one charge dropped, the summary and two metrics fields fixed: refused for its version."""
    import hashlib

    from sstq_fl.privacy.replay import replay

    src = runs["server"]
    lines = [json.loads(s) for s in (src / "transcript.jsonl").read_text().splitlines()]
    lines[0]["version"] = 2
    for ln in lines:
        ln.pop("prev", None)
    lines.pop(3)
    lines[-1]["events"] -= 1
    path = tmp_path / "transcript.jsonl"
    path.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    lines[-1]["epsilon"] = replay(path)["epsilon"]
    path.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    m = metrics_of(src)
    m["privacy_transcript"].update(sha256=hashlib.sha256(path.read_bytes()).hexdigest(), epsilon=lines[-1]["epsilon"])
    m["final"]["epsilon_total"] = lines[-1]["epsilon"]
    m["rounds"][-1]["epsilon_spent"] = lines[-1]["epsilon"]
    (tmp_path / "m.json").write_text(json.dumps(m))
    assert replay(path)["matches_recorded"]
    assert cli(path, tmp_path / "m.json") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "version-2 transcript" in err, err


def test_the_cells_of_a_comparison_pass(tmp_path):
    """Each cell of ``sstq-fl compare`` is a training run whose metrics replay against its transcripts."""
    from sstq_fl.experiments.compare import compare

    base = RunConfig(**BASE, encoder="sqkr", trust="shuffler", sampling_rate=0.5)  # type: ignore[arg-type]
    compare(base, ["sqkr", "sstq-flat:b=4"], tmp_path / "cmp")
    cells = sorted(p.parent for p in (tmp_path / "cmp").glob("*/metrics.json"))
    assert len(cells) == 2
    for cell in cells:
        for which in ("transcript.jsonl", "transcript_central.jsonl"):
            check_metrics(metrics_of(cell), cell / which)


@pytest.mark.parametrize("mode", ["reproducible", "secure"])
def test_a_pipelines_result_passes_and_its_randomness_is_bound(mode, tmp_path, capsys):
    from sstq_fl.gen.runner import DPRunner, InProcessPool
    from tests.gen.test_randomness import DATA

    dp = DPRunner(InProcessPool(DATA), "t", "replace_one", seed=0, randomness=mode)
    dp.additive_release("s", "stats.class_sums", {}, {}, 2.0, 1.0)
    res = dp.finish(tmp_path, 1e-5)
    check_metrics(res, tmp_path / "transcript.jsonl")
    other = "secure" if mode == "reproducible" else "reproducible"
    (tmp_path / "m.json").write_text(json.dumps({**res, "randomness": other}))
    assert cli(tmp_path / "transcript.jsonl", tmp_path / "m.json") == 2
    assert "the metrics' randomness is" in capsys.readouterr().err
