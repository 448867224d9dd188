"""StraightDP end to end: the moment release on the clients, DP-SGD rounds, one add/remove ledger, both
engines, the replay, the command."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from sstq_fl.cli import main as cli
from sstq_fl.config.straightdp import StraightConfig
from sstq_fl.data.workload import WorkloadData, synthetic_records
from sstq_fl.gen.runner import DPRunner, InProcessPool
from sstq_fl.gen.straightdp import privacy_plan as cal
from sstq_fl.gen.straightdp.flow import to_model_space
from sstq_fl.gen.straightdp.moments import exact_moments, features, norm_quantile, postprocess, public_pca
from sstq_fl.gen.straightdp.pipeline import Setup, release_moments, run_straightdp
from sstq_fl.gen.straightdp.public import PublicCalibration
from sstq_fl.privacy.events import GaussianEvent, NonPrivateEvent, PoissonSampledEvent

from ..mepf.test_pipeline import needs_data


def _tiny(tmp_path: Path, **kw) -> StraightConfig:
    base = dict(epsilon=3.0, clients=2, records=400, public_records=600, pretrain_steps=4, distill_steps=2,
                sgd_steps=3, eval_samples=100, probe_epochs=1, evaluator_epochs=1, cache_dir=str(tmp_path / "cache"),
                dataset_ledger=str(tmp_path / "dataset_ledger.jsonl"), randomness="reproducible")
    return StraightConfig(**{**base, **kw})


def _lines(run: Path) -> list[dict]:
    return [json.loads(s) for s in (run / "transcript.jsonl").read_text().splitlines()]


# ----------------------------------------------------------------------------- Stage 1 on synthetic data
def _public(p: int = 12) -> PublicCalibration:
    x, y = synthetic_records(300, seed=7)
    flat = to_model_space(x.reshape(len(x), -1).astype(np.float64))  # StraightDP's [−1, 1] pixels
    basis, mean = public_pca(flat, p)
    r_f = norm_quantile(flat, basis, mean, 0.99)
    return PublicCalibration(basis, mean, r_f, 0.35, 0.2, {}, None, x, y)


def _release(sigma: float | None, data: WorkloadData, pub: PublicCalibration) -> tuple[DPRunner, object, dict]:
    run = DPRunner(InProcessPool(data), "straightdp", cal.RELATION, seed=3, randomness="reproducible")
    cfg = StraightConfig(method="moments", epsilon=3.0 if sigma else math.inf)
    mix, diag = release_moments(run, cfg, Setup(0.05, sigma, None, None, [], None), pub)
    return run, mix, diag


def test_moment_release_charges_two_gaussian_events_with_the_spec_noise():
    data, pub = WorkloadData(dataset="synthetic", clients=3, records=90, seed=0), _public()
    run, mix, _ = _release(1.7, data, pub)
    counts, second = run.ledger.entries
    assert counts.event == GaussianEvent(1.7) and second.event == GaussianEvent(1.7)  # σ₂ = σ₁
    assert run.ledger.relation == "add_or_remove_one"
    shift = math.sqrt(5) / 2  # the exact add/remove shift of the whitened counts and sums
    assert counts.meta["std"] == pytest.approx(shift * 1.7) and counts.meta["sensitivity"] == pytest.approx(shift)
    assert second.meta["std"] == pytest.approx(1.7 * pub.r_f ** 2)  # (R_f²/N_decl)σ₂ after ÷ N_decl
    assert second.meta["sensitivity"] == pytest.approx(pub.r_f ** 2)
    assert counts.meta["client_ids"] == [0, 1, 2] and mix.mu.shape == (10, 784)
    assert np.all(np.linalg.eigvalsh(mix.covariance()) >= 1e-2 - 1e-9)  # PSD with the floor, after noise


def test_noiseless_release_is_the_exact_moments_over_n_decl():
    data, pub = WorkloadData(dataset="synthetic", clients=3, records=90, seed=0), _public()
    run, mix, _ = _release(None, data, pub)
    assert all(isinstance(e.event, NonPrivateEvent) for e in run.ledger.entries)
    xs, ys = zip(*(data.client_records(c) for c in range(3)), strict=True)
    f = features(to_model_space(np.concatenate(xs).reshape(90, -1).astype(np.float64)), pub.basis, pub.mean, pub.r_f)
    ref, _ = postprocess(exact_moments(f, np.concatenate(ys), data.n_decl, pub.r_f), pub.basis, pub.mean, 8, 1e-2)
    assert np.allclose(mix.mu, ref.mu) and np.allclose(mix.covariance(), ref.covariance())


def test_a_missing_record_never_changes_the_normaliser(monkeypatch):
    """Add/remove: a removed record is a zero "null record"; the second moment stays an average over N_decl."""
    data, pub = WorkloadData(dataset="synthetic", clients=2, records=60, seed=0), _public()
    payload, conf = {"P": pub.basis, "m_pub": pub.mean}, {"r_f": pub.r_f, "bound": 2 * pub.r_f ** 2}

    def total(drop: bool) -> np.ndarray:
        full = data.client_records

        def records(cid: int):
            x, y = full(cid)
            return (x[1:], y[1:]) if drop and cid == 0 else (x, y)

        monkeypatch.setattr(data.__class__, "client_records", lambda self, cid: records(cid))
        run = DPRunner(InProcessPool(data), "straightdp", cal.RELATION, seed=3, randomness="reproducible")
        out = run.non_private_sum("m2", "straightdp.second_moment", payload, conf, conf["bound"])["m2"] / run.n_decl
        monkeypatch.setattr(data.__class__, "client_records", full)
        return out

    x0 = to_model_space(data.client_records(0)[0][:1].reshape(1, -1).astype(np.float64))
    f0 = features(x0, pub.basis, pub.mean, pub.r_f)
    assert np.allclose(total(False) - total(True), np.outer(f0[0], f0[0]) / data.n_decl)


def test_whitened_contribution_is_clipped_to_the_declared_bound():
    from sstq_fl.gen.runner import ClientContext
    from sstq_fl.gen.straightdp.client_tasks import class_moments

    pub = _public()
    x = np.ones((2, 1, 28, 28), dtype=np.float32)
    ctx = ClientContext(0, x, np.array([3, 3]), 0, 0)
    out = class_moments(ctx, {"P": pub.basis, "m_pub": pub.mean}, {"r_f": pub.r_f, "bound": 0.5})
    joint = np.concatenate([out["counts"], out["sums_w"].ravel()])
    assert np.linalg.norm(joint) <= 2 * 0.5 + 1e-9  # two records, each clipped to 0.5
    assert out["counts"][3] < 2  # the clip acts on the joint vector, counts included


def test_guidance_after_dp_sgd_hands_over_where_the_private_gradients_begin():
    """The model integrates only times it was trained on privately (t ≥ τ); the public prior keeps the plateau edge;
    a given --t0 is kept."""
    from sstq_fl.gen.straightdp.pipeline import guidance_time

    pub = _public()  # tau 0.35, t0 0.2
    assert guidance_time(StraightConfig(method="moments+sgd", port="guidance"), pub) == 0.35
    assert guidance_time(StraightConfig(method="moments", port="guidance"), pub) == 0.2
    given = PublicCalibration(pub.basis, pub.mean, pub.r_f, 0.35, 0.1, {}, None, pub.replay_x, pub.replay_y)
    assert guidance_time(StraightConfig(method="moments+sgd", port="guidance", t0=0.1), given) == 0.1


# ----------------------------------------------------------------------------- DP-SGD: multiplicity and t range
def test_multiplicity_is_averaged_before_the_single_clip():
    from sstq_fl.gen.dpsgd import build_model, per_example_clipped_sum

    model = build_model({"model": "straightdp-flow", "profile": "cpu", "multiplicity": 3}).train()
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}
    x, y = torch.rand(1, 1, 28, 28), torch.tensor([4])
    noise = model.draw_noise(1, torch.Generator().manual_seed(0))
    g = torch.autograd.grad(model(x, y, noise).sum(), list(model.parameters()))
    norm = torch.sqrt(sum(v.pow(2).sum() for v in g))
    clip = float(norm) / 10
    s = per_example_clipped_sum(model, params, x, y, clip, noise, buffers)
    for (k, _), gk in zip(model.named_parameters(), g, strict=True):
        assert torch.allclose(s[k], gk * clip / norm, atol=1e-6, rtol=1e-4)  # one clip of the averaged loss
    per_draw = [torch.autograd.grad(model(x, y, noise[:, i:i + 1]).sum(), list(model.parameters())) for i in range(3)]
    clipped_mean = [sum(d[j] * min(1.0, clip / float(torch.sqrt(sum(v.pow(2).sum() for v in d)))) for d in per_draw) / 3
                    for j in range(len(g))]
    assert not all(torch.allclose(a, b, atol=1e-7) for a, b in zip(clipped_mean, (s[k] for k, _ in
                                                                                   model.named_parameters()),
                                                                    strict=True))


def test_no_private_gradient_below_tau_when_moments_are_used():
    from sstq_fl.gen.dpsgd import build_model

    model = build_model({"model": "straightdp-flow", "profile": "cpu", "multiplicity": 2, "t_min": 0.35,
                         "t_max": 1.0})
    t = model.draw_noise(500, torch.Generator().manual_seed(1))[..., 0]
    assert float(t.min()) >= 0.35 and float(t.max()) <= 1.0
    assert not any(n.startswith("captions") for n, _ in model.named_parameters())  # frozen encoder: a buffer


# ----------------------------------------------------------------------------- end to end (data)
@needs_data
def test_smoke_run_one_poisson_event_per_round_and_t_at_least_tau(tmp_path, monkeypatch):
    seen = []
    orig = InProcessPool.map

    def spy(self, task, payload, config, seed, round):
        seen.append((task, dict(config)))
        return orig(self, task, payload, config, seed, round)

    monkeypatch.setattr(InProcessPool, "map", spy)
    from ..test_template import published_in_order, record_writes

    writes = record_writes(monkeypatch, tmp_path / "run")
    m = run_straightdp(_tiny(tmp_path), tmp_path / "run")
    assert published_in_order(writes) and len(writes) == 4
    assert m["method"] == "moments+sgd" and m["port"] == "guidance" and m["relation"] == "add_or_remove_one"
    assert m["epsilon"] <= 3.0 and m["epsilon_moments"] == pytest.approx(cal.MOMENT_SHARE * 3.0)
    assert m["epsilon_moments_certified"] <= m["epsilon_moments"]
    rounds = [c for t, c in seen if t == "dpsgd.clipped_sum"]
    assert len(rounds) == 3 and all(c["t_min"] == m["tau"] and c["t_max"] == 1.0 for c in rounds)
    sgd = [x for x in _lines(tmp_path / "run") if x.get("meta", {}).get("stage") == "stage2-dpsgd"]
    assert len(sgd) == 3 and all(x["count"] == 1 for x in sgd)
    assert all(PoissonSampledEvent.from_json(x["event"]) == PoissonSampledEvent(m["q"], GaussianEvent(m["sigma_sgd"]))
               for x in sgd)
    assert cli(["privacy", "replay", str(tmp_path / "run" / "transcript.jsonl")]) == 0
    assert (tmp_path / "run" / "samples.png").is_file()


@needs_data
@pytest.mark.parametrize("method,port", [pytest.param("sgd", "", marks=pytest.mark.slow), ("moments", "guidance"),
                                         pytest.param("moments", "", marks=pytest.mark.slow),
                                         pytest.param("moments+sgd", "guidance", marks=pytest.mark.slow)])
def test_every_row_runs_and_replays(tmp_path, method, port):
    m = run_straightdp(_tiny(tmp_path, method=method, port=port), tmp_path / "run")
    assert m["epsilon"] <= 3.0 and m["method"] == method
    if method == "sgd":
        assert m["sigma_moments"] is None and m["epsilon_moments"] is None
    if method == "moments":
        assert m["sigma_sgd"] is None and m["epsilon_moments"] == 3.0
    assert cli(["privacy", "replay", str(tmp_path / "run" / "transcript.jsonl")]) == 0


@pytest.mark.slow  # 62 s on 2 cores; the Flower pool's equality with in-process is in CI via tests/gen/test_runner.py
@needs_data
def test_flower_engine_gives_the_inprocess_numbers(tmp_path):
    a = run_straightdp(_tiny(tmp_path), tmp_path / "a")
    b = run_straightdp(_tiny(tmp_path, engine="flower", dataset_ledger=str(tmp_path / "l2.jsonl")), tmp_path / "b")
    assert a["epsilon"] == b["epsilon"] and a["sigma_sgd"] == b["sigma_sgd"] and not b["dropped"]
    assert a["downstream_accuracy"] == pytest.approx(b["downstream_accuracy"], abs=1e-9)
    assert a["domain_fd"] == pytest.approx(b["domain_fd"], rel=1e-6)
    assert cli(["privacy", "replay", str(tmp_path / "b" / "transcript.jsonl")]) == 0


@needs_data
@pytest.mark.parametrize("epsilon", [pytest.param(3.0, marks=pytest.mark.slow), math.inf])
def test_tha_rounds_use_the_bucket_clips_and_one_noise_std(tmp_path, monkeypatch, epsilon):
    seen = []
    orig = DPRunner._record

    def spy(self, event, stage, meta, outs, count=1):
        if stage == "stage2-dpsgd":
            seen.append(meta)
        return orig(self, event, stage, meta, outs, count)

    monkeypatch.setattr(DPRunner, "_record", spy)
    m = run_straightdp(_tiny(tmp_path, epsilon=epsilon, tha=True, beta=0.5, sgd_steps=4), tmp_path / "run")
    tha = m["tha"]
    assert tha is not None and tha["beta"] == 0.5 and tha["steps"] == [1, 1, 1, 1] and tha["edges"][0] == m["tau"]
    assert [s["contribution_bound"] for s in seen] == pytest.approx(tha["clips"])
    if math.isfinite(epsilon):  # σ_k C_k = s in every bucket, and the whole plan meets ε
        assert [s["std"] for s in seen] == pytest.approx([tha["noise_std"]] * 4) and m["epsilon"] <= epsilon
    else:
        assert all(s["std"] == 0.0 for s in seen) and m["epsilon"] is None
    assert cli(["privacy", "replay", str(tmp_path / "run" / "transcript.jsonl")]) == 0


@needs_data
def test_the_non_private_reference_says_so(tmp_path):
    m = run_straightdp(_tiny(tmp_path, epsilon=math.inf), tmp_path / "inf")
    assert m["epsilon"] is None and "non-private" in m["reference"] and m["sigma_sgd"] is None
    assert cli(["privacy", "replay", str(tmp_path / "inf" / "transcript.jsonl")]) == 0


@pytest.mark.slow
@needs_data
def test_cpu_profile_end_to_end(tmp_path):
    """Spec §3.7 CPU profile (ε = 3, moments + DP-SGD with distillation): ≤ 5 minutes, the ledger and the replay
    pass; and the moments-only row's probe beats chance clearly."""
    rc = cli(["gen", "straightdp", "--epsilon", "3", "--profile", "cpu", "--out", str(tmp_path / "a"),
              "--dataset-ledger", str(tmp_path / "ledger.jsonl")])
    m = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert rc == 0 and m["wall_s"] < 300 and m["epsilon"] <= 3 and m["records"] == 2000
    assert cli(["privacy", "replay", str(tmp_path / "a" / "transcript.jsonl")]) == 0
    rc = cli(["gen", "straightdp", "--epsilon", "3", "--method", "moments", "--out", str(tmp_path / "b"),
              "--dataset-ledger", str(tmp_path / "ledger.jsonl")])
    m = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert rc == 0 and m["downstream_accuracy"] > 0.2  # twice chance; measured 0.34 at ε = 3 (0.36 at ε = ∞)


# ----------------------------------------------------------------------------- the command
@pytest.mark.parametrize("args,needle", [
    (["--method", "sgd", "--port", "distill"], "does not apply"),
    (["--method", "moments", "--tha"], "needs a method with DP-SGD"),
    (["--tau", "1.5"], "tau must lie"),
    (["--q", "0"], "q must lie"),
])
def test_bad_options_give_one_line_errors(tmp_path, capsys, args, needle):
    rc = cli(["gen", "straightdp", "--epsilon", "3", *args, "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and needle in err[0] and not (tmp_path / "x").exists()


@pytest.mark.slow  # two tiny runs, 47 s on 2 cores
@needs_data
def test_after_a_dp_mepf_run_the_data_sets_ledger_states_both_runs_under_replace_one(tmp_path, capsys):
    """The command path: DP-MEPF (replace-one) then StraightDP (add/remove) on one data set's ledger both complete,
    and the second's metrics state the data set's ε under replace-one, its own run restated exactly."""
    from sstq_fl.privacy.ledger import PrivacyLedger

    ledger = str(tmp_path / "ledger.jsonl")
    assert cli(["gen", "dp-mepf", "--epsilon", "1", "--records", "400", "--clients", "2", "--generator-steps", "40",
                "--eval-samples", "200", "--probe-epochs", "1", "--public-records", "3000", "--dataset-ledger", ledger,
                "--out", str(tmp_path / "a")]) == 0
    assert cli(["gen", "straightdp", "--epsilon", "1", "--method", "moments", "--records", "400", "--clients", "2",
                "--public-records", "600", "--eval-samples", "100", "--probe-epochs", "1", "--dataset-ledger", ledger,
                "--dataset-budget-epsilon", "3", "--out", str(tmp_path / "b")]) == 0
    both = PrivacyLedger("replace_one")  # every private event of both transcripts, accounted under replace-one
    for run in "ab":
        for e in PrivacyLedger.from_transcript(tmp_path / run / "transcript.jsonl")[0].entries:
            if e.subset != "public":
                both.record(e.event, e.count)
    m = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert m["relation"] == "add_or_remove_one" and m["epsilon"] <= 1.0
    assert m["dataset_epsilon_cumulative"] == pytest.approx(both.epsilon(1e-5), rel=1e-9)
    book = m["dataset_ledger"]
    assert book["relation"] == "replace_one" and book["runs"] == 2 and "not available" in book["add_or_remove_one"]
    assert [(e["pipeline"], e["method"]) for e in book["entries"]] == [("dp-mepf", "recorded"), ("straightdp", "exact")]
    assert "(replace_one, add/remove runs restated under replace-one (0 by group privacy)) over 2 run(s)" in \
        capsys.readouterr().out


# ----------------------------------------------------------------------------- latent space
@needs_data
@pytest.mark.slow  # 66 s on 2 cores; the latent space's client-side encoding is in CI via the moments-only latent run
@pytest.mark.parametrize("epsilon", [3.0, math.inf])
def test_latent_run_encodes_on_the_clients_certifies_and_replays(tmp_path, monkeypatch, epsilon):
    seen = []
    orig = InProcessPool.map

    def spy(self, task, payload, config, seed, round):
        seen.append((task, sorted(payload), dict(config)))
        return orig(self, task, payload, config, seed, round)

    monkeypatch.setattr(InProcessPool, "map", spy)
    m = run_straightdp(_tiny(tmp_path, space="latent", ae_steps=5, epsilon=epsilon), tmp_path / "run")
    assert m["space"] == "latent" and m["pca_dim"] == 32 and len(m["autoencoder_sha256"]) == 64
    assert m["epsilon"] is None if epsilon == math.inf else m["epsilon"] <= 3.0
    moments = [keys for t, keys, _ in seen if t.startswith("straightdp.") and "moment" in t]
    assert len(moments) == 2 and all(any(k.startswith("ae/") for k in keys) and "P" in keys for keys in moments)
    task = "straightdp.latent_clipped_sum" if math.isfinite(epsilon) else "straightdp.latent_sampled_clipped_sum"
    rounds = [c for t, _, c in seen if t == task]
    assert len(rounds) == 3 and all(c["space"] == "latent" and c["t_min"] == m["tau"] for c in rounds)
    assert not any(t.startswith("dpsgd.") for t, _, _ in seen)  # clients never train on pixels here
    assert cli(["privacy", "replay", str(tmp_path / "run" / "transcript.jsonl")]) == 0
    assert (tmp_path / "run" / "samples.png").is_file()


@needs_data
def test_latent_moments_only_samples_are_decoded_images(tmp_path):
    m = run_straightdp(_tiny(tmp_path, space="latent", ae_steps=5, method="moments"), tmp_path / "run")
    assert m["space"] == "latent" and m["sigma_sgd"] is None and m["epsilon"] <= 3.0 and m["r_f"] < 32 ** 0.5
    assert cli(["privacy", "replay", str(tmp_path / "run" / "transcript.jsonl")]) == 0
