"""The federated DP workload runner: releases, their accounting, and both client pools."""

import json
import math

import numpy as np
import pytest
import torch

from sstq_fl.cli import main as cli
from sstq_fl.data.workload import WorkloadData
from sstq_fl.gen.dpsgd import build_model, per_example_clipped_sum
from sstq_fl.gen.runner import DPRunner, InProcessPool, run_workload
from sstq_fl.privacy.events import GaussianEvent, PoissonSampledEvent, RandomizedResponseEvent
from sstq_fl.privacy.ledger import PrivacyLedger

DATA = WorkloadData(dataset="synthetic", clients=3, records=300, seed=0)


def _true_class_sums(data: WorkloadData, bound: float) -> tuple[np.ndarray, np.ndarray]:
    counts, sums = np.zeros(10), np.zeros((10, 784))
    r = math.sqrt(bound**2 - 1)
    for c in range(data.clients):
        x, y = data.client_records(c)
        x = x.reshape(len(x), -1).astype(np.float64)
        x *= np.minimum(1, r / np.linalg.norm(x, axis=1, keepdims=True))
        np.add.at(sums, y, x)
        counts += np.bincount(y, minlength=10)
    return counts, sums


def test_partition_covers_every_record_once_and_n_decl_is_public_size():
    seen = np.concatenate([DATA.client_records(c)[1] for c in range(3)])
    assert len(seen) == DATA.n_decl == 300
    with pytest.raises(ValueError, match="client 3 out of range"):
        DATA.client_records(3)


def test_additive_release_adds_noise_once_and_charges_one_gaussian(tmp_path):
    run = DPRunner(InProcessPool(DATA), "test", "replace_one", seed=1)
    rel = run.additive_release("counts", "stats.class_sums", {}, {}, bound=2.0, noise_multiplier=3.0)
    counts, sums = _true_class_sums(DATA, 2.0)
    resid = np.concatenate([rel["counts"] - counts, (rel["sums"] - sums).ravel()])
    assert resid.std() == pytest.approx(6.0, rel=0.05) and abs(resid.mean()) < 0.3  # std = σ·b, once
    [entry] = run.ledger.entries
    assert entry.event == GaussianEvent(3.0) and entry.meta["contribution_bound"] == 2.0 and entry.meta["std"] == 6.0
    assert entry.meta["client_ids"] == [0, 1, 2] and entry.meta["stage"] == "counts"
    res = run.finish(tmp_path, 1e-5)
    direct = PrivacyLedger("replace_one")
    direct.record(GaussianEvent(3.0))
    assert res["epsilon"] == direct.epsilon(1e-5)
    assert cli(["privacy", "replay", str(tmp_path / "transcript.jsonl")]) == 0  # replays exactly


def test_normalised_release_divides_by_the_declared_size():
    def run() -> DPRunner:
        return DPRunner(InProcessPool(DATA), "t", "replace_one", seed=1, randomness="reproducible")

    a = run().additive_release("s", "stats.class_sums", {}, {}, 2.0, 1.0)
    b = run().additive_release("s", "stats.class_sums", {}, {}, 2.0, 1.0, normalize=True)
    assert np.allclose(b["counts"], a["counts"] / 300)


def _params(seed: int = 0) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    return {k: v.detach().numpy().astype(np.float32) for k, v in build_model({"model": "mlp-classifier"}).named_parameters()}


def test_dpsgd_round_is_clipped_sum_plus_noise_over_expected_batch():
    cfg = {"model": "mlp-classifier"}
    run = DPRunner(InProcessPool(DATA), "t", "add_or_remove_one", seed=0)
    g = run.dpsgd_round("sgd", "dpsgd.clipped_sum", _params(), cfg, q=1.0, clip=0.05, noise_multiplier=2.0)
    model = build_model(cfg)
    params = {k: torch.as_tensor(v) for k, v in _params().items()}
    ref = {k: torch.zeros_like(v) for k, v in params.items()}
    for c in range(3):
        x, y = DATA.client_records(c)
        s = per_example_clipped_sum(model, params, torch.as_tensor(x), torch.as_tensor(y), 0.05)
        ref = {k: ref[k] + s[k] for k in ref}
    ref_norm = math.sqrt(sum(float(v.double().pow(2).sum()) for v in ref.values()))
    assert 0 < ref_norm <= 300 * 0.05 + 1e-6  # every per-example gradient clipped to C
    resid = np.concatenate([(g[k] * 300 - ref[k].double().numpy()).ravel() for k in ref])  # q·N_decl = 300
    assert resid.std() == pytest.approx(2.0 * 0.05, rel=0.03) and abs(resid.mean()) < 0.003  # N(0, σ²C²) once
    assert run.ledger.entries[0].event == PoissonSampledEvent(1.0, GaussianEvent(2.0))


def test_dpsgd_with_nothing_sampled_returns_pure_noise_not_a_count():
    run = DPRunner(InProcessPool(DATA), "t", "add_or_remove_one", seed=0)
    outs = run.pool.map("dpsgd.clipped_sum", _params(), {"model": "mlp-classifier", "q": 1e-9, "clip": 1.0}, 0, 1)
    assert all(set(o) == set(_params()) and all(not np.any(v) for v in o.values()) for o in outs.values())


def test_dpsgd_rounds_train_a_classifier():
    run = DPRunner(InProcessPool(DATA), "t", "add_or_remove_one", seed=0)
    params = {k: torch.as_tensor(v) for k, v in _params().items()}
    model, x, y = build_model({"model": "mlp-classifier"}), *DATA.client_records(0)

    def loss() -> float:
        return float(torch.nn.functional.cross_entropy(torch.func.functional_call(model, params, (torch.as_tensor(x),)),
                                                       torch.as_tensor(y)))

    before = loss()
    for _ in range(15):
        g = run.dpsgd_round("sgd", "dpsgd.clipped_sum", {k: v.numpy() for k, v in params.items()},
                            {"model": "mlp-classifier"}, q=0.3, clip=1.0, noise_multiplier=0.5)
        params = {k: v - 2.0 * torch.as_tensor(g[k], dtype=v.dtype) for k, v in params.items()}
    assert loss() < 0.7 * before
    assert sum(e.count for e in run.ledger.entries) == 15 and len(run.ledger.entries) == 15  # one line per round


def test_record_local_label_rr_matches_its_exact_probabilities():
    data = WorkloadData(dataset="synthetic", clients=4, records=20000, seed=3)
    run = DPRunner(InProcessPool(data), "t", "replace_one", seed=0)
    eps = 1.0
    ev = RandomizedResponseEvent.flat(eps, 10)
    out = run.record_local_release("labels", "labels.randomized_response", {}, {"epsilon": eps}, ev, eps0=eps)
    truth = np.concatenate([data.client_records(c)[1] for c in range(4)])
    assert len(out["labels"]) == 20000 and not np.array_equal(np.sort(out["labels"]), out["labels"])  # shuffled
    # the shuffle hides the pairing; compare the released histogram with its exact expectation
    p_keep = math.exp(eps) / (math.exp(eps) + 9)
    expect = np.bincount(truth, minlength=10) * p_keep + (len(truth) - np.bincount(truth, minlength=10)) * (1 - p_keep) / 9
    hist = np.bincount(out["labels"], minlength=10)
    assert np.all(np.abs(hist - expect) < 4 * np.sqrt(expect))
    assert p_keep / ((1 - p_keep) / 9) == pytest.approx(math.exp(eps))
    [entry] = run.ledger.entries
    assert entry.event == ev and entry.count == 1 and entry.meta["records"] == 20000


def test_bad_arguments_are_refused():
    run = DPRunner(InProcessPool(DATA), "t", "replace_one")
    with pytest.raises(ValueError, match="positive"):
        run.additive_release("s", "stats.class_sums", {}, {}, bound=0.0, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="0 < q <= 1"):
        run.dpsgd_round("s", "dpsgd.clipped_sum", _params(), {"model": "mlp-classifier"}, q=1.5, clip=1, noise_multiplier=1)
    with pytest.raises(KeyError, match="unknown client task"):
        run.pool.map("nope", {}, {}, 0, 0)
    with pytest.raises(ValueError, match="unknown dataset"):
        WorkloadData(dataset="imagenet")


def _pipeline(pool):
    run = DPRunner(pool, "equiv", "add_or_remove_one", seed=5, randomness="reproducible")
    rel = run.additive_release("s", "stats.class_sums", {}, {}, 2.0, 1.0)
    g = run.dpsgd_round("sgd", "dpsgd.clipped_sum", _params(), {"model": "mlp-classifier"}, q=0.5, clip=1.0,
                        noise_multiplier=1.0)
    return {"counts": rel["counts"].tolist(), "g": {k: v.ravel()[:50].tolist() for k, v in g.items()},
            "ledger": json.dumps([e.to_json() for e in run.ledger.entries], sort_keys=True, default=str)}


def test_flower_pool_gives_the_inprocess_numbers():
    local = run_workload(_pipeline, DATA, "inprocess")
    flw = run_workload(_pipeline, DATA, "flower")
    assert np.allclose(flw["counts"], local["counts"], atol=1e-9)
    for k in local["g"]:
        assert np.allclose(flw["g"][k], local["g"][k], atol=1e-9)


class _NoisyRegression(torch.nn.Module):
    """A loss averaged over each example's own M noise draws (the multiplicity trick) before clipping."""

    returns_loss = True

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(784))

    def draw_noise(self, n: int, g: torch.Generator) -> torch.Tensor:
        return torch.randn(n, 4, generator=g)

    def forward(self, x: torch.Tensor, y: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        pred = x.flatten(1) @ self.w
        return ((pred[:, None] + noise - y[:, None].float()) ** 2).mean()


def test_per_example_noise_draws_come_from_the_clients_rng_and_are_averaged_before_clipping():
    from sstq_fl.gen.dpsgd import register_model

    register_model("noisy-regression")(lambda cfg: _NoisyRegression())
    pool = InProcessPool(DATA)
    params = {"w": np.zeros(784, np.float32)}
    cfg = {"model": "noisy-regression", "q": 0.5, "clip": 1e6}
    a, b = pool.map("dpsgd.clipped_sum", params, cfg, 0, 1), pool.map("dpsgd.clipped_sum", params, cfg, 0, 1)
    assert all(np.array_equal(a[c]["w"], b[c]["w"]) for c in a)  # reproducible from (seed, round, client)
    c = pool.map("dpsgd.clipped_sum", params, cfg, 0, 2)
    assert not np.array_equal(a[0]["w"], c[0]["w"])  # fresh sampling and draws each round
    # with one example, the clipped gradient has norm exactly C when the raw one exceeds it
    model = _NoisyRegression()
    x, y = (torch.as_tensor(v[:1]) for v in DATA.client_records(0))
    s = per_example_clipped_sum(model, {"w": torch.zeros(784)}, x, y, 0.01, torch.randn(1, 4))
    assert float(torch.linalg.vector_norm(s["w"])) == pytest.approx(0.01, rel=1e-5)


def test_a_replace_one_run_then_an_add_remove_run_on_one_data_set_both_finish_and_report_its_total(tmp_path):
    """DP-MEPF's path (replace-one) then StraightDP's (add/remove) on one data set's ledger: both are admitted, and
    the second reports the data set's ε under replace-one with its own run restated exactly; the budget is then
    checked against that total."""
    from sstq_fl.config.mepf import MepfConfig
    from sstq_fl.config.straightdp import StraightConfig
    from sstq_fl.gen.template import dataset_ledger
    from sstq_fl.privacy.errors import BudgetExceededError

    where = dict(dataset_ledger=str(tmp_path / "ledger.jsonl"), dataset_budget_epsilon=100.0)
    out = []
    for cfg, relation, plan in [(MepfConfig(**where), "replace_one", [(GaussianEvent(7.46), 1)]),
                                (StraightConfig(**where), "add_or_remove_one", [(GaussianEvent(5.28), 2)])]:
        book = dataset_ledger(cfg, DATA, plan, relation)
        run = DPRunner(InProcessPool(DATA), cfg.CACHE_NAME, relation, seed=1)
        run.ledger.record(*plan[0])
        (tmp_path / relation).mkdir()
        out.append(run.finish(tmp_path / relation, cfg.delta, book))
    both = PrivacyLedger("replace_one")
    both.record(GaussianEvent(7.46))
    both.record(GaussianEvent(5.28), 2)
    assert out[1]["epsilon"] == pytest.approx(1.0, abs=1e-3) and out[1]["relation"] == "add_or_remove_one"
    assert out[1]["dataset_epsilon_cumulative"] == pytest.approx(both.epsilon(1e-5), rel=1e-9)
    book = out[1]["dataset_ledger"]
    assert book["relation"] == "replace_one" and [e["method"] for e in book["entries"]] == ["recorded", "exact"]
    with pytest.raises(BudgetExceededError, match=r"\(replace_one\)"):  # 2.44 > 2.1, though 1 + 1 < 2.1
        dataset_ledger(StraightConfig(**{**where, "dataset_budget_epsilon": 2.1}), DATA, [(GaussianEvent(50.0), 1)],
                       "add_or_remove_one")
