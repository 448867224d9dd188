"""Generative releases under ``--trust secagg``: the record-level secure sum (:mod:`sstq_fl.secagg.records`), its
event on the ledger and the pipelines' option (the Flower client's share task: tests/flower/apps/test_gen_client.py)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sstq_fl.data.workload import WorkloadData
from sstq_fl.gen.runner import DPRunner, InProcessPool
from sstq_fl.privacy.events import DistributedDiscreteGaussianEvent, GaussianEvent
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.secagg import codec as codec_module
from sstq_fl.secagg.codec import SecAggCodec
from sstq_fl.secagg.records import (
    RecordSecAgg,
    SumSpec,
    calibrate_releases,
    plan_epsilon,
    round_conditioned,
    rounding_bias_bound,
    rounding_error_bound,
)
from tests.gen.mepf.test_pipeline import needs_data
from tests.test_cli_refusals import refused

DATA = WorkloadData(dataset="synthetic", clients=4, records=400, seed=3)
SHAPES = {"counts": (10,), "sums": (10, 784)}
BOUND = math.sqrt(2.0)  # stats.class_sums: (e_y, clip_1(x)⊗e_y), norm ≤ √2


def _release(dim: int = 24, scale: float = 0.05, sigma: float = 2.0, clients: int = 3, shift: float = 1.0,
             beta: float = 1e-6, relation: str = "replace_one") -> RecordSecAgg:
    codec = SecAggCodec(dim=dim, clip=1e6, bits=32, scale=scale, local_stddev=sigma, beta=beta)
    return RecordSecAgg(codec, shift, relation, clients)


# ----------------------------------------------------------------------------- the maths
def test_decoded_sum_is_unbiased_with_the_declared_variance():
    """Rotation, scaling, rounding, noise, modular sum and decoding: the error of the decoded sum has mean 0 and the
    variance the release declares (noise, :meth:`central_stddev`) plus the rounding's exact variance."""
    rel, n, reps = _release(), 3, 800
    xs = np.random.default_rng(1).normal(scale=3.0, size=(n, rel.codec.dim))
    rs = 77
    errs = np.empty((reps, rel.codec.dim))
    for t in range(reps):
        shares = np.stack([rel.encode(x, rs, np.random.default_rng([t, i])) for i, x in enumerate(xs)])
        errs[t] = rel.decode(rel.modular_sum(shares), rs) - xs.sum(0)
    # the rounding's variance per output coordinate: Σ_clients Σ_j U_kj² f_j(1 − f_j) γ² (U the orthonormal un-rotation)
    v = rel.codec.rotate(xs, rs) / rel.codec.scale
    f = v - np.floor(v)
    u = rel.codec.unrotate(np.eye(rel.padded), rs)  # row j: the image of basis vector j
    rounding = rel.codec.scale**2 * ((f * (1 - f)).sum(0)[:, None] * u**2).sum(0)
    want = rel.central_stddev() ** 2 + rounding
    assert rel.central_stddev() ** 2 == pytest.approx(n * 0.05**2 * rel.codec.noise_variance())
    se = np.sqrt(want / reps)
    assert np.all(np.abs(errs.mean(0)) < 4.5 * se)  # unbiased, every coordinate
    assert abs(errs.mean(0).sum() / math.sqrt((se**2).sum())) < 4  # and jointly
    ratio = (errs**2).mean() / want.mean()
    assert abs(ratio - 1) < 0.05, ratio  # pooled over 24 x 800 draws: ~1.2 % standard error


def test_neighbouring_messages_differ_by_at_most_the_declared_sensitivity(monkeypatch):
    """Replace one record of a client (unit-norm contributions, shift 2): over many draws the integer messages (noise
    switched off here so the difference is visible) differ by at most Δ₂ in L2 and Δ₁ in L1, and the rounding term
    matters (the shift alone is exceeded)."""
    monkeypatch.setattr(codec_module, "discrete_gaussian", lambda sigma, size, rng: np.zeros(size, np.int64))
    rel = _release(dim=64, scale=2.0 / 3.0, shift=2.0, clients=1)  # shift/γ = 3
    l2, l1 = rel.sensitivity()
    assert l2 == pytest.approx(3 + 2 * rounding_error_bound(64, 1e-6)) and l1 == pytest.approx(min(8 * l2, l2 * l2))
    g = np.random.default_rng(5)
    worst = 0.0
    for t in range(400):
        recs = g.normal(size=(30, 64))
        recs /= np.linalg.norm(recs, axis=1, keepdims=True)
        other = -recs[0] if t % 2 else g.normal(size=64) / 8  # the worst replacement, or an ordinary one
        other /= np.linalg.norm(other)
        x, x2 = recs.sum(0), recs.sum(0) - recs[0] + other
        y = rel.codec.centre(rel.encode(x, t, np.random.default_rng([t, 0])))
        y2 = rel.codec.centre(rel.encode(x2, t, np.random.default_rng([t, 1])))
        d = (y - y2).astype(float)
        assert np.linalg.norm(d) <= l2 and np.abs(d).sum() <= l1
        worst = max(worst, float(np.linalg.norm(d)))
    assert worst > 3.0 + 1e-9  # rounding adds to the shift: a bound without 2E_β would fail


def test_the_conditioning_is_what_bounds_the_difference():
    """Exhaustively in p = 4 with β = 1/2: every pair of *accepted* roundings of two neighbours lies within Δ₂, while
    unconditioned rounding can exceed it."""
    beta, e = 0.5, rounding_error_bound(4, 0.5)
    v, v2 = np.full(4, 10.999), np.full(4, 11.001)  # ‖v − v'‖ = 0.004, but 10 and 12 are both reachable
    bound = 0.004 + 2 * e

    def outcomes(w: np.ndarray) -> list[np.ndarray]:
        return [np.floor(w) + np.array(bits) for bits in itertools.product((0, 1), repeat=4)]

    def ok(r: np.ndarray, w: np.ndarray) -> bool:
        return float(np.linalg.norm(r - w)) <= e

    pairs = [(r, r2) for r in outcomes(v) for r2 in outcomes(v2)]
    assert max(np.linalg.norm(r - r2) for r, r2 in pairs if ok(r, v) and ok(r2, v2)) <= bound
    assert max(np.linalg.norm(r - r2) for r, r2 in pairs) > bound
    draws = [round_conditioned(v, e, np.random.default_rng(s)) for s in range(300)]
    assert all(ok(r.astype(float), v) for r in draws)
    assert beta == 0.5  # the exhaustive case uses β = 1/2 so that the conditioning binds


def test_the_conditioning_bias_is_within_its_bound():
    """The acceptance event biases the rounding by at most √β'/(2(1 − β')), β' the rejection rate (≤ β by Hoeffding);
    with the default β the bias is invisible."""
    # d = 1, fractional part 0.05, β = 0.9: rounding up (error 0.95 > E = 0.917) is always rejected
    e = rounding_error_bound(1, 0.9)
    v = np.array([3.05])
    draws = np.array([round_conditioned(v, e, np.random.default_rng(s))[0] for s in range(2000)])
    bias = draws.mean() - v[0]
    assert bias == pytest.approx(-0.05, abs=1e-9)  # always rounds down: the bias is real here
    assert abs(bias) <= rounding_bias_bound(0.05)  # rejection rate β' = 0.05 ≤ β
    # d = 16 mixed fractional parts, β = 0.3: measured rejection rate ≤ β, bias within its bound
    g = np.random.default_rng(2)
    v = g.uniform(-5, 5, size=16)
    e = rounding_error_bound(16, 0.3)
    frac = v - np.floor(v)
    up = g.random((200_000, 16)) < frac
    err = up - frac
    accepted = (err**2).sum(1) <= e * e
    assert 1 - accepted.mean() <= 0.3
    mean_err = err[accepted].mean(0)
    assert np.linalg.norm(mean_err) <= rounding_bias_bound(1 - accepted.mean()) + 4 * math.sqrt(16 * 0.25 / 200_000)
    # the default β: unbiased to within sampling error
    rel = _release(dim=256, scale=1.0, sigma=1.0, clients=1)
    v = g.uniform(-5, 5, size=256)
    r = np.array([round_conditioned(v, rel.error_bound(), np.random.default_rng([9, s])) for s in range(4000)])
    assert np.abs(r.mean(0) - v).max() < 5 * 0.5 / math.sqrt(4000)
    assert rel.bias_bound() < 1e-3


def test_the_event_takes_half_the_replace_one_difference():
    """``DistributedDiscreteGaussianEvent`` doubles its bounds under replace-one itself: the release passes Δ₂/2, so
    the event's curve is that of the full difference Δ₂ (and Δ₂ itself under add/remove)."""
    rel = _release(sigma=50.0, clients=5)
    l2, l1 = rel.sensitivity()
    ev = rel.event()
    assert isinstance(ev, DistributedDiscreteGaussianEvent)
    assert (ev.l2_bound, ev.l1_bound, ev.dim, ev.clients) == pytest.approx((l2 / 2, l1 / 2, 32, 5))
    a = np.array([2.0, 8.0, 32.0])
    s2 = l2 / (math.sqrt(5) * 50.0)
    assert ev.rdp_curve("replace_one", a) == pytest.approx(a * s2**2 / 2, rel=1e-9)  # τ ≈ 0 at σ = 50
    add = _release(sigma=50.0, clients=5, relation="add_or_remove_one")
    assert add.event().l2_bound == pytest.approx(add.sensitivity()[0])


def test_calibration_meets_the_target_on_the_ledger():
    specs = [SumSpec(170, math.sqrt(5) / 2, 2000 * math.sqrt(5) / 2), SumSpec(256, 9.0, 2000 * 9.0)]
    rels = calibrate_releases(3.0, 1e-5, "add_or_remove_one", specs, 4)
    eps = plan_epsilon(rels, 1e-5, "add_or_remove_one")
    assert 3.0 * (1 - 1e-3) <= eps <= 3.0
    assert rels[0].noise_multiplier() == pytest.approx(rels[1].noise_multiplier())
    with pytest.raises(ValueError, match="finite epsilon"):
        calibrate_releases(math.inf, 1e-5, "replace_one", specs, 4)


def test_a_malformed_release_is_refused():
    good = _release().to_json()
    assert RecordSecAgg.from_json(good) == _release()
    for bad in ({**good, "codec": {**good["codec"], "extra": 1}}, {k: v for k, v in good.items() if k != "shift"},
                {**good, "shift": -1.0}, {**good, "relation": "neither"}, {**good, "clients": 0},
                {**good, "codec": {**good["codec"], "local_stddev": 0.1}}, {**good, "codec": {**good["codec"], "beta": 0.0}}):
        with pytest.raises(ValueError):
            RecordSecAgg.from_json(bad)


# ----------------------------------------------------------------------------- DP-MEPF's release: the same ε
def test_dp_mepf_secagg_release_meets_the_trusted_aggregators_epsilon():
    from sstq_fl.config.mepf import MepfConfig
    from sstq_fl.gen.mepf.pipeline import calibrate_secure, calibrate_sigma, release_plan

    for eps in (0.2, 1.0, 10.0):
        cfg = MepfConfig(epsilon=eps, trust="secagg")
        fx = SimpleNamespace(num_classes=10, dim=20384)
        data = SimpleNamespace(n_decl=7996, clients=4)
        rel = calibrate_secure(cfg, fx, data)  # type: ignore[arg-type]
        secure = PrivacyLedger("replace_one")
        for ev, n in release_plan(cfg, None, rel):
            secure.record(ev, n)
        trusted = PrivacyLedger("replace_one")
        trusted.record(GaussianEvent(calibrate_sigma(MepfConfig(epsilon=eps))))
        assert secure.accountant() == "rdp"
        assert eps * (1 - 1e-3) <= secure.epsilon(1e-5) <= eps
        assert eps * (1 - 1e-3) <= trusted.epsilon(1e-5) <= eps
        assert rel.clients == 4 and rel.shift == pytest.approx(2.0) and rel.codec.bits == 32


# ----------------------------------------------------------------------------- the runner and the client
def _secure(relation: str = "replace_one") -> RecordSecAgg:
    spec = SumSpec(10 + 10 * 784, 2 * BOUND, DATA.n_decl * BOUND)
    return calibrate_releases(1.0, 1e-5, relation, [spec], DATA.clients)[0]


def _run(randomness: str, seed: int = 0) -> tuple[dict[str, np.ndarray], DPRunner]:
    run = DPRunner(InProcessPool(DATA), "test", "replace_one", seed=seed, randomness=randomness)
    out = run.secure_release("sums", "stats.class_sums", {}, {}, BOUND, _secure(), SHAPES)
    return out, run


def test_the_secure_release_decodes_the_sums_plus_the_declared_noise():
    got, run = _run("reproducible")
    exact = DPRunner(InProcessPool(DATA), "test", "replace_one", randomness="reproducible").non_private_sum(
        "sums", "stats.class_sums", {}, {}, BOUND)
    z = np.concatenate([(got[k] - exact[k]).ravel() for k in sorted(SHAPES)]) / _secure().central_stddev()
    assert abs(z.mean()) < 4 / math.sqrt(z.size) and abs(z.std() - 1) < 0.05
    (entry,) = run.ledger.entries
    assert entry.event == _secure().event() and entry.meta["trust"] == "secagg"
    assert entry.meta["secagg"]["clients"] == 4 and 0.999 <= run.ledger.epsilon(1e-5) <= 1.0


def test_reproducible_runs_give_identical_releases_and_secure_ones_do_not():
    a, _ = _run("reproducible")
    b, _ = _run("reproducible")
    assert all(np.array_equal(a[k], b[k]) for k in SHAPES)
    c, _ = _run("reproducible", seed=1)
    assert not np.array_equal(a["sums"], c["sums"])
    s1, _ = _run("secure")
    s2, _ = _run("secure")
    assert not np.array_equal(s1["sums"], s2["sums"])


def test_a_missing_share_releases_nothing():
    class Dropping(InProcessPool):
        def map(self, task, payload, config, seed, round):  # type: ignore[no-untyped-def]
            out = super().map(task, payload, config, seed, round)
            out.pop(0)
            return out

    run = DPRunner(Dropping(DATA), "test", "replace_one", randomness="reproducible")
    with pytest.raises(RuntimeError, match="3 of the 4 shares"):
        run.secure_release("sums", "stats.class_sums", {}, {}, BOUND, _secure(), SHAPES)
    assert run.ledger.entries == []
    with pytest.raises(ValueError, match="add_or_remove_one"):
        DPRunner(InProcessPool(DATA), "t", "replace_one").secure_release(
            "s", "stats.class_sums", {}, {}, BOUND, _secure("add_or_remove_one"), SHAPES)


# ----------------------------------------------------------------------------- the option
@pytest.mark.parametrize("argv, words", [
    (["gen", "dp-vqg", "--epsilon", "1", "--trust", "secagg"], ("--trust secagg", "DP-SGD")),
    (["gen", "straightdp", "--epsilon", "3", "--trust", "secagg"], ("--trust secagg", "Poisson", "--method moments")),
    (["gen", "dp-mepf", "--epsilon", "inf", "--trust", "secagg"], ("--trust secagg", "without noise")),
    (["gen", "dp-mepf", "--epsilon", "1", "--trust", "server"], ("--trust", "invalid choice")),
    (["gen", "dp-mepf", "--epsilon", "1", "--trust", "secagg", "--engine", "flower"], ("in-process only", "SecAgg+")),
])
def test_bad_options_are_refused_in_one_line(tmp_path: Path, capsys, argv, words):
    out = tmp_path / "r"
    refused(capsys, [*argv, "--out", str(out)], *words)
    assert not out.exists()


def test_the_option_defaults_to_the_trusted_aggregator():
    from sstq_fl.config.mepf import MepfConfig
    from sstq_fl.config.straightdp import StraightConfig

    assert MepfConfig().trust == "aggregator" and StraightConfig(method="moments", trust="secagg").trust == "secagg"


# ----------------------------------------------------------------------------- end to end (the data sets)
@needs_data
def test_dp_mepf_end_to_end_under_secagg(tmp_path):
    from sstq_fl.config.mepf import MepfConfig
    from sstq_fl.gen.mepf.pipeline import run_dp_mepf
    from sstq_fl.privacy.replay import check_metrics

    base = dict(epsilon=1.0, clients=3, records=300, generator_steps=10, eval_samples=100, probe_epochs=1,
                evaluator_epochs=1, public_records=2000, cache_dir=str(tmp_path / "cache"),
                dataset_ledger=str(tmp_path / "ledger.jsonl"), randomness="reproducible")
    m = run_dp_mepf(MepfConfig(**base, trust="secagg"), tmp_path / "secagg")
    t = run_dp_mepf(MepfConfig(**base), tmp_path / "trusted")
    assert m["trust"] == "secagg" and m["accountant"] == "rdp" and t["accountant"] == "pld"
    assert 0.999 <= m["epsilon"] <= 1.0 and 0.999 <= t["epsilon"] <= 1.0
    assert m["secagg"]["clients"] == 3 and m["noise_std"] == pytest.approx(m["secagg"]["central_stddev"])
    check_metrics(m, tmp_path / "secagg" / "transcript.jsonl")
    assert t["dataset_epsilon_cumulative"] > 1.0  # the second run, on the same data set's one ledger, composes both


@needs_data
def test_straightdp_moments_end_to_end_under_secagg(tmp_path):
    from sstq_fl.config.straightdp import StraightConfig
    from sstq_fl.gen.straightdp.pipeline import run_straightdp

    cfg = StraightConfig(method="moments", epsilon=3.0, trust="secagg", clients=2, records=300, eval_samples=100,
                         probe_epochs=1, evaluator_epochs=1, public_records=1000, randomness="reproducible",
                         cache_dir=str(tmp_path / "cache"), dataset_ledger=str(tmp_path / "ledger.jsonl"))
    m = run_straightdp(cfg, tmp_path / "run")
    assert m["accountant"] == "rdp" and 2.997 <= m["epsilon"] <= 3.0 and len(m["secagg"]) == 2
    assert m["epsilon_moments_certified"] == pytest.approx(m["epsilon"])
