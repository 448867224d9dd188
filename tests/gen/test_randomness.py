"""Randomness modes of the DP workload runner, and the seed-holder's attack on the DP-MEPF release.

The adversary holds the run's seed, its config and the published release (and the transcript, which
states the noise std).  In ``reproducible`` mode it regenerates the server's Gaussian noise exactly
as the runner does and subtracts it, recovering the non-private sums: the attack succeeds, which
shows this test can fail.  In ``secure`` mode the regenerated "noise" is independent of the real
noise, so the residual is at least as far from the truth as a fresh noise draw.
"""

import json
import math

import numpy as np
import pytest

from sstq_fl import rng
from sstq_fl.data.workload import WorkloadData
from sstq_fl.gen.releases import AGGREGATOR_RELEASE
from sstq_fl.gen.runner import ClientContext, DPRunner, InProcessPool, register_client_task
from sstq_fl.privacy.events import RandomizedResponseEvent

from .test_runner import _true_class_sums

DATA = WorkloadData(dataset="synthetic", clients=3, records=300, seed=0)


def _adversary_noise(seed: int, stage: str, shape: tuple[int, ...], std: float) -> np.ndarray:
    """The server noise as the seed-holder regenerates it (the runner's reproducible derivation)."""
    g = np.random.default_rng(rng.derive_seed(seed, rng.stream_id("server-noise:" + stage), 0))
    return g.normal(0.0, std, size=shape)


def _attack(release: dict[str, np.ndarray], truth: dict[str, np.ndarray], seed: int, stage: str, std: float
            ) -> tuple[float, int]:
    """‖release − regenerated noise − truth‖ over every released array, and the released dimension D."""
    resid = [release[k] - _adversary_noise(seed, f"{stage}:{k}", release[k].shape, std) - truth[k] for k in sorted(truth)]
    flat = np.concatenate([r.ravel() for r in resid])
    return float(np.linalg.norm(flat)), flat.size


def _pixel_truth(data: WorkloadData, bound: float) -> dict[str, np.ndarray]:
    counts, sums = _true_class_sums(data, bound)
    return {"counts": counts, "sums": sums}


@pytest.mark.parametrize("mode", ["reproducible", "secure"])
def test_seed_holder_attack_on_the_class_sums_release(mode):
    seed, sigma, bound = 11, 4.0, 2.0
    run = DPRunner(InProcessPool(DATA), "t", "replace_one", seed=seed, randomness=mode)
    rel = run.additive_release("release", "stats.class_sums", {}, {}, bound, sigma)
    std = run.ledger.entries[0].meta["std"]  # published in the transcript
    err, d = _attack(rel, _pixel_truth(DATA, bound), seed, "release", std)
    if mode == "reproducible":
        assert err < 1e-9  # the exact non-private sums and counts: no privacy against the seed-holder
    else:
        assert err >= 0.9 * std * math.sqrt(d)  # no better than an independent draw ...
        assert err == pytest.approx(math.sqrt(2) * std * math.sqrt(d), rel=0.02)  # ... it is two independent draws


@pytest.mark.parametrize("mode", ["reproducible", "secure"])
def test_seed_holder_attack_on_the_real_dp_mepf_release(mode, tmp_path):
    """The real path: ``release`` runs ``mepf.class_sums`` (a tiny, untrained Φ) on the clients."""
    from sstq_fl.config.mepf import MepfConfig
    from sstq_fl.gen.mepf.features import build_feature_extractor, embedded_class_sums
    from sstq_fl.gen.mepf.pipeline import PIPELINE, RELATION, noise_std, release
    from sstq_fl.gen.runner import run_workload

    data = WorkloadData(dataset="synthetic", clients=2, records=120, seed=1)
    cfg = MepfConfig(epsilon=1.0, clients=2, seed=7, randomness=mode, cache_dir=str(tmp_path))
    fx = build_feature_extractor("cpu", seed=0)
    run = None

    def on_pool(pool):
        nonlocal run
        run = DPRunner(pool, PIPELINE, RELATION, seed=cfg.seed, randomness=cfg.randomness)
        return {"release": release(run, cfg, fx, sigma=3.0)}

    rel = run_workload(on_pool, data)["release"]
    [entry] = [e for e in run.ledger.entries if e.subset == "private"]
    truth = {"counts": np.zeros(10), "sums": np.zeros((10, fx.dim))}
    for c in range(data.clients):
        counts, sums = embedded_class_sums(fx, *data.client_records(c), (1,))
        truth = {"counts": truth["counts"] + counts.numpy(), "sums": truth["sums"] + sums.numpy()}
    err, d = _attack(rel, truth, cfg.seed, "labelled-release", entry.meta["std"])
    assert entry.meta["std"] == pytest.approx(3.0) == noise_std(cfg, 3.0)  # σ·Δ/2 with Δ = 2 for one moment
    if mode == "reproducible":
        assert err < 1e-9
    else:
        assert err >= 0.9 * entry.meta["std"] * math.sqrt(d)


def test_secure_normal_has_the_declared_std_and_never_repeats():
    std, n = 2.5, 200_000
    a, b = rng.secure_normal(n, std), rng.secure_normal(n, std)
    se = std / math.sqrt(2 * (n - 1))  # standard error of the sample std of a Gaussian
    assert abs(a.std(ddof=1) - std) < 5 * se and abs(a.mean()) < 5 * std / math.sqrt(n)
    assert not np.array_equal(a, b) and abs(np.corrcoef(a, b)[0, 1]) < 5 / math.sqrt(n)


def test_two_secure_runs_with_the_same_seed_add_different_noise():
    rels = [DPRunner(InProcessPool(DATA), "t", "replace_one", seed=0, randomness="secure")
            .additive_release("s", "stats.class_sums", {}, {}, 2.0, 1.0) for _ in range(2)]
    assert not np.array_equal(rels[0]["counts"], rels[1]["counts"])
    same = [DPRunner(InProcessPool(DATA), "t", "replace_one", seed=0, randomness="reproducible")
            .additive_release("s", "stats.class_sums", {}, {}, 2.0, 1.0) for _ in range(2)]
    assert np.array_equal(same[0]["sums"], same[1]["sums"])


def test_secure_shuffle_and_label_rr_are_fresh_and_keep_their_law():
    data = WorkloadData(dataset="synthetic", clients=4, records=20000, seed=3)
    eps, ev = 1.0, RandomizedResponseEvent.flat(1.0, 10)
    outs = [DPRunner(InProcessPool(data), "t", "replace_one", seed=0, randomness="secure")
            .record_local_release("labels", "labels.randomized_response", {}, {"epsilon": eps}, ev)["labels"]
            for _ in range(2)]
    assert not np.array_equal(outs[0], outs[1])
    truth = np.bincount(np.concatenate([data.client_records(c)[1] for c in range(4)]), minlength=10)
    p = math.exp(eps) / (math.exp(eps) + 9)
    expect = truth * p + (len(outs[0]) - truth) * (1 - p) / 9
    assert np.all(np.abs(np.bincount(outs[0], minlength=10) - expect) < 4 * np.sqrt(expect))


@register_client_task("test.coins", AGGREGATOR_RELEASE)
def _coins(ctx: ClientContext, payload, config):
    return {"u": ctx.uniform("s", 1000), "v": ctx.uniform("s", 1000), "k": ctx.randint("s", 1000, 1, 10).astype(float),
            "secure": np.array([float(ctx.secure)])}


def test_the_mode_travels_to_the_clients_and_secure_coins_are_per_client_and_per_draw():
    run = DPRunner(InProcessPool(DATA), "t", "replace_one", seed=0, randomness="secure")
    outs = run._map("test.coins", {}, {}, 0)
    assert all(o["secure"][0] == 1.0 for o in outs.values())
    assert not np.array_equal(outs[0]["u"], outs[1]["u"]) and not np.array_equal(outs[0]["u"], outs[0]["v"])
    u = np.concatenate([o["u"] for o in outs.values()])
    assert abs(u.mean() - 0.5) < 0.03 and set(np.unique(outs[0]["k"])) == set(range(1, 10))
    again = run._map("test.coins", {}, {}, 0)
    assert not np.array_equal(again[0]["u"], outs[0]["u"])  # a fresh key per request, whatever the seed


def test_reproducible_coins_are_the_stage_generator_and_the_key_is_never_shown():
    import torch

    ctx = ClientContext(0, np.zeros((5, 1, 28, 28)), np.zeros(5, np.int64), 3, 1)
    g = ClientContext(0, ctx.x, ctx.y, 3, 1).generator("s")
    assert np.array_equal(ctx.uniform("s", 5), torch.rand(5, generator=g).numpy())
    assert np.array_equal(ctx.randint("s", 5, 1, 10), torch.randint(1, 10, (5,), generator=g).numpy())
    sec = ClientContext(0, ctx.x, ctx.y, 3, 1, randomness="secure")
    sec.uniform("s", 3)
    assert sec._key is not None and "_key" not in repr(sec) and str(int(sec._key[0, 0])) not in repr(sec)
    with pytest.raises(ValueError, match="randomness must be one of"):
        ClientContext(0, ctx.x, ctx.y, 3, 1, randomness="fast")
    with pytest.raises(ValueError, match="randomness must be one of"):
        DPRunner(InProcessPool(DATA), "t", "replace_one", randomness="fast")


@pytest.mark.parametrize("mode", ["reproducible", "secure"])
def test_randomness_is_recorded_in_the_transcript_and_the_result(mode, tmp_path):
    run = DPRunner(InProcessPool(DATA), "t", "replace_one", seed=0, randomness=mode)
    run.additive_release("s", "stats.class_sums", {}, {}, 2.0, 1.0)
    res = run.finish(tmp_path, 1e-5)
    head, event = (json.loads(s) for s in (tmp_path / "transcript.jsonl").read_text().splitlines()[:2])
    assert head["notes"]["randomness"] == mode == res["randomness"] == event["meta"]["randomness"]
    assert ("randomness_warning" in res) == (mode == "reproducible")
    if mode == "reproducible":
        assert res["randomness_warning"] == rng.REPRODUCIBLE_WARNING
    assert len(res["privacy_transcript"]["sha256"]) == 64
