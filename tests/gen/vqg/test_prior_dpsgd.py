"""DP-VQG's dpsgd-prior variant: the registered prior model (per-example gradients, frozen tokenizer, clipping),
its ledger (calibrated jointly, replayed) and a tiny end-to-end run."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.func import grad, vmap

from sstq_fl.cli import main as cli
from sstq_fl.data.workload import WorkloadData, synthetic_records
from sstq_fl.gen.dpsgd import build_model, example_loss, per_example_clipped_sum
from sstq_fl.gen.runner import DPRunner, InProcessPool
from sstq_fl.gen.vqg.maskgit import PriorConfig, mask_count
from sstq_fl.gen.vqg.pipeline import VqgConfig, plan_run, run_dp_vqg
from sstq_fl.gen.vqg.prior_dpsgd import (
    MODEL,
    PriorOnRecords,
    calibrate_prior,
    frozen_payload,
    masked_loss_from_noise,
    prior_plan,
)
from sstq_fl.gen.vqg.tokenizer import HW, TokenizerConfig, build_tokenizer
from sstq_fl.privacy.calibration import plan_epsilon
from sstq_fl.privacy.errors import Budget, BudgetExceededError
from sstq_fl.privacy.events import GaussianEvent, PoissonSampledEvent, PublicDataEvent
from sstq_fl.privacy.ledger import PrivacyLedger

from ..mepf.test_pipeline import needs_data

DELTA = 1e-5


def _model_and_state(seed: int = 0) -> tuple[PriorOnRecords, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    torch.manual_seed(seed)  # the prior's initial weights come from torch's global generator
    model = build_model({"model": MODEL, "profile": "cpu"})
    assert isinstance(model, PriorOnRecords)
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    frozen = {k: torch.as_tensor(v) for k, v in frozen_payload(build_tokenizer(seed=seed).eval()).items()}
    return model, params, frozen


def _batch(n: int, model: PriorOnRecords, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x, y = synthetic_records(n, seed)
    return torch.as_tensor(x), torch.as_tensor(y).long(), model.draw_noise(n, torch.Generator().manual_seed(seed))


def _norm(g: dict[str, torch.Tensor]) -> float:
    return float(torch.sqrt(sum(v.pow(2).sum() for v in g.values())))


# ----------------------------------------------------------------------------- the model
def test_prior_parameters_are_differentiated_and_the_tokenizer_travels_as_buffers():
    model, params, frozen = _model_and_state()
    assert set(frozen) == {n for n, _ in model.named_buffers()} and "frozen.codes" in frozen
    assert all(k.startswith("prior.") for k in params)
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    x, y, noise = _batch(5, model)
    g = vmap(grad(example_loss(model, frozen)), in_dims=(None, 0, 0, 0))(params, x, y, noise)
    assert set(g) == set(params) and _norm(g) > 0
    for i in range(5):  # vmap(grad) gives each record's own gradient
        gi = grad(example_loss(model, frozen))(params, x[i], y[i], noise[i])
        assert all(torch.allclose(g[k][i], gi[k], atol=1e-6) for k in params)


def test_masks_and_label_dropout_come_from_each_records_noise():
    cfg = PriorConfig.cpu(vocab_size=8, d_model=16, layers=1, heads=2)
    prior = PriorOnRecords(cfg, TokenizerConfig.cpu(codebook_size=8)).prior
    tokens = torch.randint(0, 8, (4, HW))
    labels = torch.arange(4)
    noise = torch.rand(4, HW + 2, generator=torch.Generator().manual_seed(1))
    loss = masked_loss_from_noise(prior, tokens, labels, noise)
    assert loss.shape == (4,) and torch.isfinite(loss).all()
    one = masked_loss_from_noise(prior, tokens[2:3], labels[2:3], noise[2:3])
    assert torch.allclose(loss[2:3], one, atol=1e-6)  # independent of the other records
    r = noise[:, 0]
    assert mask_count(r, HW).min() >= 1  # every record masks at least one position


def test_one_adversarial_records_gradient_is_clipped_to_c():
    """A record whose raw gradient is far above C (a huge-loss record: blown-up prior head) contributes exactly C
    after clipping, and a batch's clipped sum is within n·C; with nothing sampled, the sum is zero."""
    model, params, frozen = _model_and_state()
    params["prior.head.weight"] = params["prior.head.weight"] * 1e3  # adversarial: loss and gradient explode
    x, y, noise = _batch(6, model, seed=3)
    raw = grad(example_loss(model, frozen))(params, x[0], y[0], noise[0])
    assert _norm(raw) > 100.0
    clip = 0.5
    one = per_example_clipped_sum(model, params, x[:1], y[:1], clip, noise[:1], frozen)
    assert _norm(one) == pytest.approx(clip, rel=1e-4)
    # float32 sums in another order (vmap against one grad): entries agree to 1e-6 of the clip scale
    assert all(torch.allclose(one[k], raw[k] * clip / _norm(raw), rtol=1e-3, atol=1e-6 * clip) for k in raw)
    assert _norm(per_example_clipped_sum(model, params, x, y, clip, noise, frozen)) <= 6 * clip * (1 + 1e-5)
    empty = per_example_clipped_sum(model, params, x[:0], y[:0], clip, noise[:0], frozen)
    assert _norm(empty) == 0.0


def test_a_dpsgd_round_on_the_clients_charges_one_poisson_sampled_gaussian():
    data = WorkloadData(dataset="synthetic", clients=2, records=40, seed=0)
    run = DPRunner(InProcessPool(data), "dp-vqg", "replace_one", seed=0, randomness="reproducible")
    model, params, frozen = _model_and_state()
    payload = {**{k: v.numpy() for k, v in params.items()}, **{k: v.numpy() for k, v in frozen.items()}}
    g = run.dpsgd_round("stage2-prior", "dpsgd.clipped_sum", payload, {"model": MODEL, "profile": "cpu"}, q=0.25,
                        clip=1.0, noise_multiplier=2.0)
    assert set(g) == set(params) and all(np.all(np.isfinite(v)) for v in g.values())
    [entry] = run.ledger.entries
    assert entry.event == PoissonSampledEvent(0.25, GaussianEvent(2.0)) and entry.meta["q"] == 0.25


# ----------------------------------------------------------------------------- accounting
@pytest.mark.parametrize("variant", ["pp", pytest.param("fp", marks=pytest.mark.slow)])
def test_the_dpsgd_prior_plan_certifies_epsilon_jointly_nearly_fills_it_and_replays(variant, tmp_path):
    cfg = VqgConfig(variant=variant, stage2="dpsgd-prior", epsilon=1.0, prior_steps=20, prior_batch=100)
    s = plan_run(cfg, 2000)
    assert s["q_prior"] == pytest.approx(0.05) and s["stage2"] == prior_plan(0.05, s["sigma_prior"], 20)
    eps = plan_epsilon(s["plan"], DELTA, "replace_one")
    assert 0.99 * 1.0 <= eps <= 1.0
    assert PrivacyLedger("replace_one").start(s["plan"], Budget(1.0, DELTA)) <= 1.0
    if variant == "fp":  # Stage I at its 0.8ε calibration, then the prior gets what the joint ledger leaves
        assert plan_epsilon(s["stage1"], DELTA, "replace_one") <= 0.8
        assert s["sigma_prior"] > calibrate_prior(1.0, DELTA, 0.05, 20, [])
    with pytest.raises(BudgetExceededError):  # 2 % less noise is refused by the budget
        PrivacyLedger("replace_one").start([*s["stage1"], *prior_plan(0.05, s["sigma_prior"] * 0.98, 20)],
                                           Budget(1.0, DELTA))
    ledger = PrivacyLedger("replace_one")  # recorded as the runner records it, then replayed from its transcript
    ledger.start(s["plan"], Budget(1.0, DELTA))
    for ev, n in s["plan"]:
        for _ in range(n):
            ledger.record(ev, 1, subset="public" if isinstance(ev, PublicDataEvent) else "private")
    ledger.mark_complete()
    ledger.write_transcript(tmp_path / "t.jsonl", delta=DELTA)
    assert cli(["privacy", "replay", str(tmp_path / "t.jsonl")]) == 0


def test_stage2_option_and_its_refusals():
    assert VqgConfig().stage2 == "em"
    for bad in (dict(stage2="dpsgd-prior", reference="argmin"), dict(stage2="dpsgd-prior", labels="public"),
                dict(reference="public"), dict(stage2="dpsgd-prior", reference="public", variant="fp"),
                dict(stage2="sgd")):
        with pytest.raises(ValueError):
            VqgConfig(**bad)


# ----------------------------------------------------------------------------- end to end (real data)
def _tiny(tmp_path: Path, **kw) -> VqgConfig:
    base = dict(variant="pp", stage2="dpsgd-prior", epsilon=1.0, clients=2, records=300, steps=3, prior_steps=3,
                prior_batch=30, eval_samples=100, probe_epochs=1, evaluator_epochs=1, public_records=2000,
                cache_dir=str(tmp_path / "cache"), dataset_ledger=str(tmp_path / "ledger.jsonl"),
                randomness="reproducible")
    return VqgConfig(**{**base, **kw})


@needs_data
def test_tiny_dpsgd_prior_run_end_to_end_ledger_and_replay(tmp_path):
    m = run_dp_vqg(_tiny(tmp_path), tmp_path / "run")
    assert m["stage2"] == "dpsgd-prior" and 0.99 <= m["epsilon"] <= 1.0 and m["relation"] == "replace_one"
    assert m["eps0_per_location"] is None and m["sigma_prior"] > 0 and m["q_prior"] == pytest.approx(0.1)
    lines = [json.loads(s) for s in (tmp_path / "run" / "transcript.jsonl").read_text().splitlines()]
    rounds = [x for x in lines if x.get("meta", {}).get("stage") == "stage2-prior"]
    assert len(rounds) == 3 and all(x["event"]["kind"] == "poisson_sampled" for x in rounds)
    assert not any(x.get("event", {}).get("kind") == "exponential_mechanism" for x in lines)
    assert cli(["privacy", "replay", str(tmp_path / "run" / "transcript.jsonl")]) == 0
    assert 0 <= m["downstream_accuracy"] <= 1 and m["domain_fd"] >= 0


@needs_data
def test_public_only_reference_reads_no_private_record(tmp_path):
    m = run_dp_vqg(_tiny(tmp_path, reference="public", epsilon=math.inf), tmp_path / "pub")
    assert m["epsilon"] == 0.0 and "public-only" in m["reference"] and m["sigma_prior"] is None
    lines = [json.loads(s) for s in (tmp_path / "pub" / "transcript.jsonl").read_text().splitlines()]
    assert not any(x.get("subset") == "private" for x in lines if "event" in x)
    assert cli(["privacy", "replay", str(tmp_path / "pub" / "transcript.jsonl")]) == 0
