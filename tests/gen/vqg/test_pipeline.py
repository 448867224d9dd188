"""DP-VQG end to end: the Stage II client task, the ledger (HW × EM(ε₀) with its count), the references, the
labels' status, both engines, the replay, the command."""

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from sstq_fl.cli import main as cli
from sstq_fl.data.workload import WorkloadData
from sstq_fl.gen.runner import DPRunner, InProcessPool
from sstq_fl.gen.vqg.mechanism import PUBLIC_LABELS_NOTE
from sstq_fl.gen.vqg.pipeline import VqgConfig, run_dp_vqg
from sstq_fl.privacy.events import ExponentialMechanismEvent, PublicDataEvent, PureDpEvent

from ..mepf.test_pipeline import needs_data


def _tiny(tmp_path: Path, **kw) -> VqgConfig:
    base = dict(epsilon=1.0, clients=2, records=400, steps=3, prior_epochs=1, eval_samples=100, probe_epochs=1,
                evaluator_epochs=1, public_records=3000, diagnostic_records=200, cache_dir=str(tmp_path / "cache"),
                dataset_ledger=str(tmp_path / "dataset_ledger.jsonl"), randomness="reproducible")
    return VqgConfig(**{**base, **kw})


def _lines(run: Path) -> list[dict]:
    return [json.loads(s) for s in (run / "transcript.jsonl").read_text().splitlines()]


# ----------------------------------------------------------------------------- the client task (synthetic data)
def _stage2(randomness: str, eps0: float, eps_y: float, labels: str = "private") -> tuple[DPRunner, dict, object]:
    from sstq_fl.gen.vqg.client_tasks import tokenizer_payload
    from sstq_fl.gen.vqg.tokenizer import HW, build_tokenizer

    data = WorkloadData(dataset="synthetic", clients=3, records=90, seed=0)
    run = DPRunner(InProcessPool(data), "dp-vqg", "replace_one", seed=4, randomness=randomness)
    model = build_tokenizer(seed=0).eval()
    conf = {"profile": "cpu", "eps0": eps0, "eps_y": eps_y, "labels": labels, "chunk": 7}
    label_event = PureDpEvent(eps_y) if labels == "private" else PublicDataEvent(PUBLIC_LABELS_NOTE)
    rows = run.record_local_release("stage2-tokens", "vqg.tokens", tokenizer_payload(model), conf,
                                    ExponentialMechanismEvent(eps0), eps0=eps0, count=HW, also=[(label_event, 1)])
    return run, rows, model


@pytest.mark.parametrize("randomness", ["reproducible", "secure"])
def test_stage2_task_releases_only_token_rows_and_charges_hw_em_draws_with_their_count(randomness):
    from sstq_fl.gen.vqg.tokenizer import HW

    run, rows, _ = _stage2(randomness, eps0=0.5, eps_y=1.0)
    assert set(rows) == {"tokens", "labels"} and rows["tokens"].shape == (90, HW) and rows["labels"].shape == (90,)
    assert rows["tokens"].dtype == np.int64 and 0 <= rows["tokens"].min() and rows["tokens"].max() < 64
    em, rr = run.ledger.entries
    assert em.event == ExponentialMechanismEvent(0.5) and em.count == HW and em.meta["count"] == HW
    assert em.meta["eps0"] == 0.5 and em.meta["records"] == 90 and em.meta["client_ids"] == [0, 1, 2]
    assert rr.event == PureDpEvent(1.0) and rr.count == 1
    assert run.ledger.basic_epsilon() == pytest.approx(HW * 0.5 + 1.0)  # composed with its count, not once


def test_stage2_tokens_follow_the_em_law_and_large_eps0_approaches_argmin():
    """The rows are drawn over all K codes (near-uniform at small ε₀) and concentrate on the argmin at large ε₀."""
    from sstq_fl.gen.vqg.client_tasks import chunk_records

    _, small, _ = _stage2("reproducible", eps0=0.05, eps_y=1.0)
    assert len(np.unique(small["tokens"])) > 50  # near-uniform over K = 64 codes
    _, big, model = _stage2("reproducible", eps0=1e5, eps_y=1.0)
    data = WorkloadData(dataset="synthetic", clients=3, records=90, seed=0)
    x = np.concatenate([data.client_records(c)[0] for c in range(3)])
    with torch.no_grad():
        nearest = model.encode_indices(torch.as_tensor(x)).numpy()
    hist = np.bincount(big["tokens"].ravel(), minlength=64), np.bincount(nearest.ravel(), minlength=64)
    assert np.abs(hist[0] - hist[1]).sum() <= 0.02 * nearest.size  # the argmin's codes, but for near-ties
    assert chunk_records(64) == 1337 and chunk_records(1024) == 83


def test_stage2_reproducible_coins_repeat_and_public_labels_are_the_true_ones():
    a = _stage2("reproducible", eps0=0.3, eps_y=0.5)[1]
    b = _stage2("reproducible", eps0=0.3, eps_y=0.5)[1]
    assert np.array_equal(a["tokens"], b["tokens"]) and np.array_equal(a["labels"], b["labels"])
    pub = _stage2("reproducible", eps0=0.3, eps_y=0.0, labels="public")[1]
    data = WorkloadData(dataset="synthetic", clients=3, records=90, seed=0)
    true = np.concatenate([data.client_records(c)[1] for c in range(3)])
    assert np.array_equal(np.sort(pub["labels"]), np.sort(true))


# ----------------------------------------------------------------------------- configuration and command
def test_impossible_settings_are_refused():
    for bad, match in [(dict(epsilon=0.0), "epsilon must be a positive number"), (dict(epsilon=1e6), "above the largest"),
                       (dict(variant="xp"), "variant"), (dict(mode="C"), "mode"), (dict(labels="open"), "labels"),
                       (dict(reference="best"), "reference"), (dict(steps=0), "steps"), (dict(device="tpu"), "device"),
                       (dict(randomness="fast"), "randomness"), (dict(clients=0), "clients")]:
        with pytest.raises(ValueError, match=match):
            VqgConfig(**bad)


@pytest.mark.parametrize("bad", [["--records", "-5"], ["--eval-samples", "3"], ["--steps", "0"], ["--alpha", "0"],
                                 ["--device", "tpu"], ["--epsilon", "1e6"], ["--epsilon", "0"], ["--clients", "0"]])
def test_the_command_refuses_bad_input_in_one_line_before_the_out_folder_is_made(tmp_path, capsys, bad):
    args = ["gen", "dp-vqg", "--variant", "fp", "--epsilon", "1", "--out", str(tmp_path / "run"),
            "--dataset-ledger", str(tmp_path / "l")]
    assert cli([*args, *bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sstq-fl: error:") and not (tmp_path / "run").exists()


def test_the_command_has_every_option_with_help():
    from sstq_fl.cli import build_parser

    p = build_parser()
    ns = p.parse_args(["gen", "dp-vqg", "--epsilon", "inf", "--out", "x"])
    assert (ns.variant, ns.mode, ns.labels, ns.reference, ns.randomness, ns.engine) == \
        ("fp", "A", "private", "none", "secure", "inprocess") and math.isinf(ns.epsilon)
    def child(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
        return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]

    sub = child(child(p, "gen"), "dp-vqg")
    assert len(sub._actions) > 25 and all(a.help for a in sub._actions)
    with pytest.raises(SystemExit):
        p.parse_args(["gen", "dp-vqg", "--epsilon", "1", "--out", "x", "--variant", "zz"])


# ----------------------------------------------------------------------------- end to end (real data)
@needs_data
def test_smoke_end_to_end_ledger_replay_and_metrics(tmp_path, monkeypatch):
    from sstq_fl.gen.vqg.tokenizer import HW

    from ..test_template import published_in_order, record_writes

    writes = record_writes(monkeypatch, tmp_path / "run")
    m = run_dp_vqg(_tiny(tmp_path), tmp_path / "run")
    assert published_in_order(writes) and len(writes) == 4
    assert {"epsilon", "delta", "relation", "downstream_accuracy", "domain_fd", "records", "clients", "wall_s", "variant",
            "epsilon_stage1", "epsilon_stage2", "eps0_per_location", "em_nearest_code_prob", "token_entropy_bits",
            "labels"} <= set(m)
    assert 0.99 <= m["epsilon"] <= 1.0 and m["relation"] == "replace_one" and m["records"] == 400 and m["clients"] == 2
    assert m["epsilon_stage1"] == pytest.approx(0.8) and m["epsilon_stage1_certified"] <= 0.8
    s = m["mode_a_fill_scale"]  # mode A: the declared split scaled until the joint ledger certifies epsilon
    assert s > 1 and m["epsilon_stage2"] == pytest.approx(0.2) and m["eps_y"] == pytest.approx(0.05 * s)
    assert m["eps0_per_location"] == pytest.approx(s * (0.2 - 0.05) / HW) and m["labels"] == "private"
    assert 1 / 64 - 1e-3 < m["em_nearest_code_prob"] < 0.02 and m["token_entropy_bits"] > 5.99  # near-uniform
    assert "public Fashion-MNIST" in m["em_diagnostics"]["source"]
    assert m["record_level_epsilon"]["basic_pure"] == pytest.approx(0.2 * s)
    assert (tmp_path / "run" / "samples.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = _lines(tmp_path / "run")
    assert lines[0]["plan"] and lines[0]["budget"] == {"epsilon": 1.0, "delta": 1e-5}
    sgd = [x for x in lines if x.get("meta", {}).get("stage") == "stage1-tokenizer"]
    assert len(sgd) == 3 and sgd[0]["event"]["kind"] == "poisson_sampled" and sgd[0]["meta"]["q"] == pytest.approx(0.16)
    [em] = [x for x in lines if x.get("event", {}).get("kind") == "exponential_mechanism"]
    assert em["count"] == HW and em["event"]["epsilon"] == pytest.approx(m["eps0_per_location"])
    assert m["dataset_epsilon_cumulative"] == pytest.approx(m["epsilon"]) and m["dataset_ledger"]["runs"] == 1
    assert cli(["privacy", "replay", str(tmp_path / "run" / "transcript.jsonl")]) == 0
    assert 0 <= m["downstream_accuracy"] <= 1 and m["domain_fd"] >= 0


@needs_data
def test_public_labels_pp_variant_is_said_in_metrics_and_transcript(tmp_path):
    m = run_dp_vqg(_tiny(tmp_path, variant="pp", labels="public", mode="B"), tmp_path / "run")
    assert m["labels"] == "public" and "not covered by epsilon" in m["labels_note"] and m["eps_y"] == 0.0
    assert m["epsilon_stage1"] == 0.0 and m["epsilon"] <= 1.0 + 1e-9
    lines = _lines(tmp_path / "run")
    assert "not covered by epsilon" in lines[0]["notes"]["labels"]
    assert any("not covered by epsilon" in x.get("event", {}).get("description", "") for x in lines)
    assert not any(x.get("meta", {}).get("stage") == "stage1-tokenizer" and x.get("subset") == "private" for x in lines)
    assert cli(["privacy", "replay", str(tmp_path / "run" / "transcript.jsonl")]) == 0


@needs_data
@pytest.mark.slow  # 51 s on 2 cores; the shared labelling is in CI via tests/gen/mepf/test_pipeline.py's references
def test_references_are_labelled_not_dp(tmp_path):
    inf = run_dp_vqg(_tiny(tmp_path, epsilon=math.inf), tmp_path / "inf")
    assert inf["epsilon"] is None and inf["eps0_per_location"] is None and "non-private" in inf["reference"]
    assert inf["em_nearest_code_prob"] == 1.0 and inf["dataset_epsilon_cumulative"] is None
    arg = run_dp_vqg(_tiny(tmp_path, epsilon=2.0, reference="argmin"), tmp_path / "arg")
    assert arg["epsilon"] is None and "not DP" in arg["reference"] and arg["epsilon_stage1_certified"] <= 1.6
    assert arg["stage2_budget"]["note"].startswith("not DP")
    for run in ("inf", "arg"):
        assert cli(["privacy", "replay", str(tmp_path / run / "transcript.jsonl")]) == 0


@needs_data
@pytest.mark.slow  # 108 s on 2 cores; the Flower pool's equality with in-process is in CI via tests/gen/test_runner.py
def test_flower_engine_gives_the_inprocess_numbers(tmp_path):
    a = run_dp_vqg(_tiny(tmp_path), tmp_path / "a")
    b = run_dp_vqg(_tiny(tmp_path, engine="flower", dataset_ledger=str(tmp_path / "l2.jsonl")), tmp_path / "b")
    assert a["epsilon"] == b["epsilon"] and a["eps0_per_location"] == b["eps0_per_location"]
    assert a["prior_loss_first_last"] == pytest.approx(b["prior_loss_first_last"], abs=1e-9)
    assert a["downstream_accuracy"] == pytest.approx(b["downstream_accuracy"], abs=1e-9)
    assert a["domain_fd"] == pytest.approx(b["domain_fd"], rel=1e-6)
    assert a["em_nearest_code_prob"] == pytest.approx(b["em_nearest_code_prob"], rel=1e-9) and not b["dropped"]


@pytest.mark.slow
@needs_data
def test_cpu_profile_end_to_end(tmp_path):
    """Spec §2.6 CPU profile (FP-VQG, 2,000 records, K = 64, 300 DP-SGD rounds, prior 64/2/2 for 3 epochs, 1,000
    samples, ε = 10): the ledger, the replay, the diagnostics and completion, not sample quality; ≤ 5 minutes."""
    rc = cli(["gen", "dp-vqg", "--variant", "fp", "--epsilon", "10", "--profile", "cpu", "--clients", "4", "--out",
              str(tmp_path), "--dataset-ledger", str(tmp_path / "ledger.jsonl")])
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert rc == 0 and m["wall_s"] < 300 and m["epsilon"] <= 10 and m["records"] == 2000
    assert 0 < m["em_nearest_code_prob"] < 1 and 0 < m["token_entropy_bits"] <= 6
    assert cli(["privacy", "replay", str(tmp_path / "transcript.jsonl")]) == 0


def test_the_command_passes_its_options_and_prints_a_reference_run(tmp_path, monkeypatch, capsys):
    from sstq_fl.gen.pipelines import PIPELINES

    seen = {}

    def fake(cfg, out, force=False):
        seen.update(cfg=cfg, force=force)
        return {"epsilon": None, "delta": 1e-5, "relation": "replace_one", "variant": cfg.variant, "mode": cfg.mode,
                "reference": cfg.reference_label(), "labels": cfg.labels, "randomness": cfg.randomness,
                "eps0_per_location": None, "em_nearest_code_prob": 1.0, "token_entropy_bits": 0.0,
                "downstream_accuracy": 0.5, "domain_fd": 3.0, "records": 400, "clients": 2, "wall_s": 1.0}

    monkeypatch.setattr(PIPELINES["dp-vqg"], "run", fake)
    args = ["gen", "dp-vqg", "--variant", "pp", "--epsilon", "inf", "--labels", "public", "--mode", "B", "--reference",
            "argmin", "--records", "400", "--steps", "3", "--batch", "32", "--prior-epochs", "1", "--force", "--out",
            str(tmp_path)]
    assert cli(args) == 0
    cfg = seen["cfg"]
    assert (cfg.variant, cfg.labels, cfg.mode, cfg.reference, cfg.records, cfg.steps, cfg.batch, cfg.prior_epochs) == \
        ("pp", "public", "B", "argmin", 400, 3, 32, 1) and math.isinf(cfg.epsilon) and seen["force"]
    out = capsys.readouterr().out
    assert "epsilon inf" in out and "eps0 inf per location" in out and "not DP" in out


def test_prior_learning_rate_is_the_profiles_unless_given():
    from sstq_fl.gen.vqg.pipeline import prior_config

    assert prior_config(VqgConfig(profile="cpu"), 64).lr == 1e-3
    assert prior_config(VqgConfig(profile="full"), 1024).lr == 1e-4
    assert prior_config(VqgConfig(profile="cpu", prior_lr=3e-4), 64).lr == 3e-4
    for bad in (0.0, 1e-7, math.inf, math.nan):
        with pytest.raises(ValueError, match="prior-lr"):
            VqgConfig(prior_lr=bad)
