import math

import numpy as np
import pytest
import torch

from sstq_fl.bench.kashin import certified_level, flat_vector, natural_inputs, sphere_search, walsh_flats
from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.maths.frames import make_frame
from sstq_fl.encoders.maths.kashin import LINF_LEVEL, KashinConfig, kashin
from sstq_fl.encoders.maths.kashin_levels import achieved_level, adversarial_inputs
from sstq_fl.encoders.maths.linf_min import dual_bound, linf_min
from sstq_fl.encoders.recommend import e1_vector

from ...conftest import unit_rows


@pytest.mark.parametrize("kind,d", [("hadamard", 10), ("hadamard", 300), ("hadamard", 3000), ("haar", 200)])
def test_reconstruction_and_public_bound_on_adversarial_inputs(kind, d):
    fr = make_frame(kind, d, seed=1)
    cfg = KashinConfig(method="lv")
    for name, x in adversarial_inputs(fr, 6).items():
        res = kashin(fr, x, cfg)
        rec = fr.synth_(res.coeffs.clone())
        assert torch.allclose(rec, x, atol=1e-10), name
        lvl = achieved_level(fr, x, cfg)
        assert (lvl <= cfg.level + 1e-9).all(), (name, lvl.max(), cfg.level)
        assert res.converged.all() and (res.contraction_failures == 0).all(), name


def test_level_bound_formula():
    cfg = KashinConfig(method="lv", eta=0.5, delta=0.7, fold_tol=0.01)
    assert cfg.level == pytest.approx(1 / (0.5 * 0.7**0.5) + 0.01)


def test_gathered_coefficients_equal_full_and_batch_independent():
    fr = make_frame("hadamard", 500, seed=2)
    x = unit_rows(7, 500, seed=3).float()
    idx = torch.randint(0, fr.N, (7, 3))
    for cfg in (KashinConfig(method="lv"), KashinConfig()):
        full = kashin(fr, x, cfg).coeffs
        part = kashin(fr, x, cfg, idx).coeffs
        assert torch.equal(full.gather(1, idx), part)
        for i in range(7):
            alone = kashin(fr, x[i : i + 1], cfg, idx[i : i + 1]).coeffs
            assert torch.equal(alone[0], part[i])


def test_zero_vector_and_scaling():
    fr = make_frame("hadamard", 40, seed=0)
    x = torch.zeros(2, 40, dtype=torch.float64)
    x[1] = unit_rows(1, 40)[0] * 3.0
    for cfg in (KashinConfig(method="lv"), KashinConfig()):
        res = kashin(fr, x, cfg)
        assert torch.equal(res.coeffs[0], torch.zeros(fr.N, dtype=torch.float64))
        unit = kashin(fr, x[1:] / 3.0, cfg).coeffs
        assert torch.allclose(res.coeffs[1:], 3.0 * unit, atol=1e-12)


def test_alternating_projections_reach_a_lower_level():
    fr = make_frame("hadamard", 300, seed=1)
    x = adversarial_inputs(fr, 4)["frame_row"]
    lv = achieved_level(fr, x, KashinConfig(method="lv"))
    ap_cfg = KashinConfig(method="ap", ap_level=1.8, ap_iters=400)
    res = kashin(fr, x, ap_cfg)
    assert torch.allclose(fr.synth_(res.coeffs.clone()), x, atol=1e-9)
    ap = achieved_level(fr, x, ap_cfg)
    assert (ap <= ap_cfg.level + 1e-9).all() and ap.max() < lv.min() - 0.3


def test_contraction_failure_is_detected():
    fr = make_frame("hadamard", 300, seed=1)
    x = adversarial_inputs(fr, 2)["frame_row"]
    res = kashin(fr, x, KashinConfig(method="lv", eta=0.3, delta=1.0, max_passes=8))
    assert (res.contraction_failures > 0).all() and not res.converged.any()
    assert torch.allclose(fr.synth_(res.coeffs.clone()), x, atol=1e-9)  # still exact


def test_invalid_config_and_shapes():
    with pytest.raises(ValueError, match="eta"):
        KashinConfig(eta=1.2)
    with pytest.raises(ValueError, match="method"):
        KashinConfig(method="xyz")
    with pytest.raises(ValueError, match="clients"):
        kashin(make_frame("hadamard", 10), torch.zeros(2, 11), KashinConfig())


def test_pure_torch_kernel_path_matches(monkeypatch):
    """The device-agnostic kernel (what CUDA tensors use without fast-hadamard-transform)."""
    import sstq_fl.encoders.maths.fwht as fw

    fr = make_frame("hadamard", 3000, seed=4)
    x = unit_rows(5, 3000, seed=1).float()
    cfgs = (KashinConfig(method="lv"), KashinConfig())
    refs = [kashin(fr, x, cfg).coeffs for cfg in cfgs]
    monkeypatch.setattr(fw, "default_kernel", lambda device: "torch")
    for cfg, ref in zip(cfgs, refs, strict=True):
        assert torch.allclose(kashin(fr, x, cfg).coeffs, ref, atol=1e-4)


# ------------------------------------------------------------------ linf (default) and linf_min


@pytest.mark.parametrize("d", [100, 3000])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_linf_exact_and_within_public_level(d, dtype):
    """Gaussian inputs, the E1 vector and frame rows: exact, within K = 1.9, no clipping needed."""
    fr = make_frame("hadamard", d, seed=0)
    cfg = KashinConfig()
    assert cfg.method == "linf" and cfg.level == LINF_LEVEL == 1.9
    for name, x in natural_inputs(fr, 4).items():
        x = x.to(dtype)
        res = kashin(fr, x, cfg)
        tol = 1e-10 if dtype == torch.float64 else 2e-5
        assert torch.allclose(fr.synth_(res.coeffs.clone()), x, atol=tol * float(x.abs().max())), name
        lvl = res.coeffs.double().abs().amax(1) / torch.linalg.vector_norm(x.double(), dim=1)
        assert (lvl <= cfg.level).all() and res.converged.all(), (name, lvl)


def test_linf_batch_independence_with_hard_rows():
    """A row's coefficients and iteration count do not depend on the rest of the batch."""
    fr = make_frame("hadamard", 100, seed=0)
    x = torch.cat([fr.rows(torch.tensor([3, 77])), unit_rows(4, 100, seed=9), e1_vector(100, 0.2)[None]]).float()
    res = kashin(fr, x, KashinConfig())
    assert res.passes.max() > res.passes.min()  # rows leave the batch at different iterations
    for i in range(x.shape[0]):
        alone = kashin(fr, x[i : i + 1], KashinConfig())
        assert torch.equal(alone.coeffs[0], res.coeffs[i]) and alone.passes[0] == res.passes[i]


def test_linf_min_brackets_the_lp_value():
    """Dual certificate ≤ LP optimum ≤ primal level; the fast method's level is above both."""
    from scipy.optimize import linprog

    fr = make_frame("hadamard", 40, seed=3)
    x = torch.cat([fr.rows(torch.tensor([5])), unit_rows(2, 40, seed=4)])
    r = linf_min(fr, x, iters=2000, gap=1e-4)
    q = fr.rows(torch.arange(fr.N)).numpy()
    n = fr.N
    for i in range(x.shape[0]):
        u = (x[i] / x[i].norm()).numpy()
        a_ub = np.block([[np.eye(n), -np.ones((n, 1))], [-np.eye(n), -np.ones((n, 1))]])
        lp = linprog(np.r_[np.zeros(n), 1.0], A_ub=a_ub, b_ub=np.zeros(2 * n), A_eq=np.c_[q.T, np.zeros(40)],
                     b_eq=np.sqrt(n) * u, bounds=[(None, None)] * (n + 1), method="highs")
        assert r.lower[i] <= lp.fun + 1e-9 <= r.level[i] + 2e-9 and r.level[i] - r.lower[i] < 1e-3 * lp.fun
        assert float(dual_bound(fr, x[i : i + 1], torch.randn(1, 40, dtype=torch.float64))[0]) <= lp.fun + 1e-9
    assert torch.allclose(fr.synth_(r.coeffs.clone()), x / x.norm(dim=1, keepdim=True), atol=1e-10)
    fast = achieved_level(fr, x, KashinConfig())
    assert (fast >= r.lower - 1e-9).all()


def test_walsh_flat_certifies_a_worst_level_that_every_method_clips():
    """A 3-flat of Walsh indices in S gives an input needing level √8 exactly (> 1.9 and > 2.352)."""
    fr = make_frame("hadamard", 100, seed=0)
    flats = walsh_flats(fr, restarts=20)
    assert flats[0].size >= 8
    y = flat_vector(fr, flats[0])
    cert = float(certified_level(fr, y)[0])
    assert cert == pytest.approx(math.sqrt(flats[0].size), rel=1e-9)
    for cfg in (KashinConfig(), KashinConfig(method="lv")):
        res = kashin(fr, y, cfg)
        assert float(res.coeffs.abs().max()) >= cert - 1e-9 > cfg.level  # weak duality: no method does better
        assert not res.converged.all()
    best, _ = sphere_search(fr, torch.randn(4, 100, dtype=torch.float64, generator=torch.Generator().manual_seed(0)), 100)
    assert (best > 2.0).all()  # random starts find inputs needing more than the default level too


@pytest.mark.parametrize("spec,covers", [("sstq-flat:b=3", True), ("sstq-flat:b=3,kashin=lv", True),
                                         ("sstq-flat:b=3,kashin=ap,level=1.75", False),
                                         ("sstq-flat:b=3,kashin=ap,level=1.9", True),
                                         ("sstq-flat:b=3,kashin=linf,level=1.8", False), ("sqkr", True),
                                         ("sqkr:kashin=ap,level=1.7", False)])
def test_kashin_encoders_declare_unbiased_unless_clipped(spec, covers):
    """No Kashin configuration is unbiased on every input (Walsh flats), so none declares ``unbiased``;
    whether its level covers the natural input classes (frame rows) is per configuration."""
    enc = make_encoder(spec, 50, 2.0)
    assert enc.unbiased is False and enc.unbiased_unless_clipped is True
    assert enc.kashin_cfg.covers_natural_inputs is covers


def test_walsh_flat_input_is_clipped_and_mse_declares_the_bias():
    """Attack-style check of the declaration: on a Walsh-flat input every Kashin method clips, the
    decoded mean misses x (biased), and ``mse`` (bias included) matches the measured error; on a
    Gaussian input nothing is clipped."""
    enc = make_encoder("sstq-flat:b=3", 100, 2.0, radius=1.0)
    y = flat_vector(enc.frame, walsh_flats(enc.frame, restarts=20)[0])
    n = 4000  # the Kashin step runs to its iteration cap on a flat input: 20,000 copies cost 18 s
    msgs = enc.encode(y.repeat(n, 1), np.arange(n))
    assert msgs.stats["clipped"] > 0
    est = enc.decode(msgs)
    err = ((est - y) ** 2).sum(1)
    assert abs(float(err.mean()) - float(enc.mse(y)[0])) <= 4 * float(err.std()) / math.sqrt(n)
    exact_mean = enc.frame.synth_(enc._full_coefficients(y).clone())
    assert float(torch.linalg.vector_norm(exact_mean - y)) > 0.05  # the clipping bias is real
    g = torch.from_numpy(np.random.default_rng(1).standard_normal((8, 100)))
    assert enc.encode(g / g.norm(dim=1, keepdim=True), np.arange(8)).stats["clipped"] == 0


def test_kashin_search_report_small(tmp_path):
    from sstq_fl.bench.kashin import kashin_search_report

    out = tmp_path / "ks.json"
    res = kashin_search_report([40], str(out), starts=8, sphere_iters=50, dr_iters=200, flat_restarts=20)
    r = res["by_dim"][0]
    assert out.exists() and (tmp_path / "ks.png").exists()
    for v in r["natural_inputs"].values():
        assert all(lo <= up + 1e-9 for lo, up in zip(v["min_level_lower"], v["min_level_upper"], strict=True))
    w = r["worst"]
    assert w["certified_lower_bound"] <= w["input_bracket"]["min_level_upper"][0] + 1e-9
    assert w["certified_lower_bound"] >= r["flats"]["certified_level"] - 1e-9


def test_linf_below_reachable_level_falls_back_exactly_and_no_worse_than_lv():
    fr = make_frame("hadamard", 100, seed=0)
    x = fr.rows(torch.tensor([1, 2]))  # needs 1.745 at d = 100
    cfg = KashinConfig(linf_level=1.6, linf_iters=40)
    res = kashin(fr, x, cfg)
    assert not res.converged.any() and not cfg.covers_natural_inputs
    assert torch.allclose(fr.synth_(res.coeffs.clone()), x, atol=1e-10)
    assert (achieved_level(fr, x, cfg) <= achieved_level(fr, x, KashinConfig(method="lv")) + 1e-9).all()


def test_the_warm_up_schedule_settles_gaussian_inputs_in_about_two_transform_pairs():
    """At d = 25,450 (E3's MLP) Gaussian inputs reach K = 1.9 after the schedule's second step for almost every
    row (the constant schedule ``(1.6, 1.8)`` needed three steps for every row)."""
    fr = make_frame("hadamard", 25_450, seed=0)
    res = kashin(fr, unit_rows(24, 25_450, seed=3), KashinConfig())
    assert res.converged.all() and float(res.passes.double().mean()) <= 2.1


def test_the_constant_warm_up_is_the_previous_schedule_and_both_are_exact_within_the_level():
    """``linf_warmup="constant"`` runs ``(1.6, 1.8)`` three times (the schedule of results committed before
    the default); both schedules give exact representations within K, through different iterates."""
    fr = make_frame("hadamard", 2000, seed=0)
    x = unit_rows(12, 2000, seed=4)
    new, old = kashin(fr, x, KashinConfig()), kashin(fr, x, KashinConfig(linf_warmup="constant"))
    for res in (new, old):
        assert torch.allclose(fr.synth_(res.coeffs.clone()), x, atol=1e-10) and res.converged.all()
        assert float(res.coeffs.abs().max()) <= LINF_LEVEL
    assert float(new.passes.double().mean()) < float(old.passes.double().mean()) == 3.0
    with pytest.raises(ValueError, match="linf_warmup"):
        KashinConfig(linf_warmup="fast")


@pytest.mark.parametrize("kind", ["hadamard2", "hd3"])
def test_the_walsh_flat_attack_finds_no_bias_on_a_stacked_frame(kind):
    """The attack above, against a stacked frame: the one-stage frame's Walsh-flat inputs need only the
    level of a typical input there (≤ 1.6 at d = 100), nothing is clipped, and the exact mean of the
    decoded messages (``Qᵀ s / √N`` of the unclipped coefficients) is the input itself."""
    old = make_frame("hadamard", 100, seed=0)
    ys = torch.cat([flat_vector(old, f) for f in walsh_flats(old, restarts=20)[:4]])
    assert (certified_level(old, ys) >= 2.8).all()  # on the old frame: level √8 at least, clipped
    enc = make_encoder(f"sstq-flat:b=3,frame={kind}", 100, 2.0, radius=1.0)
    assert (certified_level(enc.frame, ys) < 1.6).all()
    s = enc._full_coefficients(ys)
    assert float(s.abs().max()) < enc.bound and enc.encode(ys, np.arange(4)).stats["clipped"] == 0
    assert torch.allclose(enc.frame.synth_(s.clone()), ys, atol=1e-10)
    n = 4000
    est = enc.decode(enc.encode(ys[:1].repeat(n, 1), np.arange(n)))
    err = ((est - ys[:1]) ** 2).sum(1)
    assert abs(float(err.mean()) - float(enc.mse(ys[:1])[0])) <= 4 * float(err.std()) / math.sqrt(n)


def test_the_sphere_search_clips_at_redundancy_2_5_and_not_on_hd3_at_rho_5():
    """The sphere search (plus every coordinate vector as a start) finds inputs above the public level 1.9 on
    ``hd3`` at the default ρ = 2.5 (N = 256 at d = 100), which the encoder clips; at ρ = 5 (N = 512) the same
    search finds nothing above the Douglas–Rachford box 0.97 × 1.9 and nothing is clipped on its worst inputs."""
    gen = torch.Generator().manual_seed(0)
    starts = torch.cat([torch.randn(24, 100, generator=gen, dtype=torch.float64), torch.eye(100, dtype=torch.float64)])
    found = {}
    for rho in (2.5, 5.0):
        enc = make_encoder(f"sstq-flat:b=3,frame=hd3,rho={rho}", 100, 2.0, radius=1.0)
        lvl, ys = sphere_search(enc.frame, starts, iters=150)
        worst = ys[lvl.argsort(descending=True)[:4]]
        found[rho] = (float(lvl.max()), enc.encode(worst, np.arange(4)).stats["clipped"])
    assert found[2.5][0] > 2.1 and found[2.5][1] > 0
    assert found[5.0][0] < 0.97 * 1.9 and found[5.0][1] == 0


@pytest.mark.parametrize("kind", ["hadamard", "hd3", "haar"])
def test_the_certified_level_bounds_every_input_the_searches_find(kind):
    """``Frame.certified_level`` (√N max_j ‖Q_j‖, Cauchy–Schwarz on the minimum-norm start) is at least the
    certified need of every input the searches find: Walsh flats, the sphere search's worst inputs, coordinate
    vectors and frame rows.  On the one-stage frame it is exactly √d (all rows have norm √(d/N))."""
    fr = make_frame(kind, 100, seed=0)
    bound = fr.certified_level()
    gen = torch.Generator().manual_seed(0)
    starts = torch.cat([torch.randn(16, 100, generator=gen, dtype=torch.float64), torch.eye(100, dtype=torch.float64)])
    lvl, ys = sphere_search(fr, starts, iters=100)
    assert float(lvl.max()) > 1.9 and bound >= float(certified_level(fr, ys).max())
    rows = fr.rows(torch.arange(fr.N))
    assert bound == pytest.approx(math.sqrt(fr.N) * float(rows.norm(dim=1).max()), rel=1e-12)
    assert bound >= math.sqrt(100) * (1 - 1e-12)
    if kind == "hadamard":
        assert bound == pytest.approx(10.0, rel=1e-12)
        flats = torch.cat([flat_vector(fr, f) for f in walsh_flats(fr, restarts=20)[:4]])
        assert bound >= float(certified_level(fr, flats).max()) >= 2.8


def test_guarantee_unbiased_is_never_clipped_and_unbiased_on_the_walsh_flat_attack():
    """The attack of ``test_walsh_flat_input_is_clipped_and_mse_declares_the_bias`` against
    ``guarantee=unbiased`` (the public level raised to the frame's certified √d = 10 at d = 100): the flats that
    the default level clips, the sphere search's worst inputs, coordinate vectors and frame rows all keep their
    minimum-norm start (no iteration: the encode time does not depend on the input), nothing is clipped, the
    exact mean of the messages is the input, and the measured error of 4,000 decodes matches the declared
    variance.  The instance declares ``unbiased``; its class, and the default level, do not."""
    default = make_encoder("sstq-flat:b=3", 100, 2.0, radius=1.0)
    flats = torch.cat([flat_vector(default.frame, f) for f in walsh_flats(default.frame, restarts=20)[:4]])
    assert (certified_level(default.frame, flats) > default.kashin_cfg.level).all()  # the default level clips these
    for spec in ("sstq-flat:b=3,guarantee=unbiased", "sqkr:guarantee=unbiased"):
        enc = make_encoder(spec, 100, 2.0, radius=1.0)
        assert enc.unbiased is True and type(enc).unbiased is False and default.unbiased is False
        assert enc.kashin_cfg.level == pytest.approx(10.0 * (1 + 1e-3))
        _, worst = sphere_search(enc.frame, torch.randn(8, 100, generator=torch.Generator().manual_seed(1),
                                                        dtype=torch.float64), iters=100)
        inputs = torch.cat([flats, worst / worst.norm(dim=1, keepdim=True), torch.eye(100, dtype=torch.float64)[:8],
                            enc.frame.rows(torch.arange(8))])
        for x in (inputs, inputs.float()):
            msgs = enc.encode(x, np.arange(x.shape[0]))
            assert msgs.stats["clipped"] == 0 and msgs.stats["kashin_passes_mean"] == 0
        s = kashin(enc.frame, inputs, enc.kashin_cfg).coeffs  # exact, and within the level: never clipped
        assert (s.abs().amax(1) <= enc.kashin_cfg.level * inputs.norm(dim=1)).all()
        assert torch.allclose(enc.frame.synth_(s.clone()), inputs, atol=1e-10)
    enc = make_encoder("sstq-flat:b=3,guarantee=unbiased", 100, 2.0, radius=1.0)
    n, y = 4000, flats[:1]
    err = enc.decode(enc.encode(y.repeat(n, 1), np.arange(n))).mean(0) - y[0]
    assert float((err**2).sum()) <= 2.0 * float(enc.mse(y)[0]) / n  # E‖mean − y‖² = mse / n when unbiased


@pytest.mark.parametrize("spec,why", [("sstq-ma:guarantee=unbiased", "biased whatever its level"),
                                      ("sqkr:guarantee=unbiased,kashin=lv", "needs kashin=linf")])
def test_guarantee_unbiased_is_refused_where_it_cannot_hold(spec, why):
    with pytest.raises(ValueError, match=why):
        make_encoder(spec, 100, 2.0)


def test_the_certified_path_is_the_minimum_norm_start_that_linf_returns():
    """``guarantee=unbiased`` skips the Kashin call (one transform, no branch on the data); its coefficients are
    what ``kashin=linf`` returns at the certified level, zero rows and rows outside the ball included."""
    from sstq_fl.encoders.base import ball_scale

    for spec in ("sstq-flat:b=4,guarantee=unbiased", "sqkr:guarantee=unbiased"):
        enc = make_encoder(spec, 300, 2.0)
        x = torch.randn(20, 300, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        x[0], x[1] = 0.0, x[1] * 10
        idx = torch.randint(0, enc.N, (20, 3), generator=torch.Generator().manual_seed(3))
        got, stats = enc.coefficients(x, idx)
        res = kashin(enc.frame, x, enc.kashin_cfg, idx)
        assert int(res.passes.max()) == 0 and stats["clipped"] == 0 and stats["kashin_passes_mean"] == 0
        assert torch.allclose(got, res.coeffs.double() * ball_scale(x, enc.radius), rtol=0, atol=1e-12)


FIXED_CONFIGS = [KashinConfig(), KashinConfig(method="lv"), KashinConfig(method="ap", ap_iters=40),
                 KashinConfig(linf_iters=2), KashinConfig(linf_level=1.6, linf_iters=40),
                 KashinConfig(linf_iters=6, linf_fallback=False), KashinConfig(linf_warmup="constant", linf_iters=30),
                 KashinConfig(linf_iters=3), KashinConfig(linf_iters=0), KashinConfig(method="lv", max_passes=3),
                 KashinConfig(method="ap", ap_iters=0)]
FIXED_SCHEDULE_RESULTS = {  # (config, full): (passes, converged as bits, contraction failures, Σ residual, Σ|s|, Σ s²)
    (0, True): ([0, 2, 300, 6, 2, 2, 2, 0], 251, 0, 0.0, 52685.79688513836, 1087470.959654453),
    (0, False): ([0, 2, 300, 6, 2, 2, 2, 0], 251, 0, 0.0, 260.4279776842292, 6316.68943667219),
    (1, True): ([0, 3, 40, 6, 4, 4, 4, 0], 251, 40, 0.1723109828477724, 49680.08191845767, 1014863.0992491862),
    (1, False): ([0, 3, 40, 6, 4, 4, 4, 0], 251, 40, 0.1723109828477724, 250.17568924039205, 6130.274365379491),
    (2, True): ([0, 11, 80, 46, 12, 14, 15, 0], 243, 40, 0.1723109828477724, 50089.91605899886, 1024206.0901296037),
    (2, False): ([0, 11, 80, 46, 12, 14, 15, 0], 243, 40, 0.1723109828477724, 246.93034756602003, 5822.1759453363975),
    (3, True): ([0, 2, 2, 2, 2, 2, 2, 0], 243, 0, 0.0, 52637.493075193466, 1087371.0251093088),
    (3, False): ([0, 2, 2, 2, 2, 2, 2, 0], 243, 0, 0.0, 260.30663508503915, 6316.467964834212),
    (4, True): ([0, 7, 40, 40, 6, 6, 7, 0], 243, 0, 0.0, 53663.96736847597, 1104120.7753725683),
    (4, False): ([0, 7, 40, 40, 6, 6, 7, 0], 243, 0, 0.0, 256.70352562861217, 5981.215443774816),
    (5, True): ([0, 2, 6, 6, 2, 2, 2, 0], 251, 0, 0.0, 52685.79688513836, 1087470.959654453),
    (5, False): ([0, 2, 6, 6, 2, 2, 2, 0], 251, 0, 0.0, 260.4279776842292, 6316.68943667219),
    (6, True): ([0, 2, 30, 6, 2, 3, 3, 0], 251, 0, 0.0, 50011.1941612924, 1032550.9989095897),
    (6, False): ([0, 2, 30, 6, 2, 3, 3, 0], 251, 0, 0.0, 239.42363720797255, 5445.030343771827),
    (7, True): ([0, 2, 3, 3, 2, 2, 2, 0], 243, 0, 0.0, 52642.90887961941, 1087355.4623142679),
    (7, False): ([0, 2, 3, 3, 2, 2, 2, 0], 243, 0, 0.0, 260.31260981987936, 6316.229225674946),
    (8, True): ([0, 0, 0, 0, 0, 0, 0, 0], 129, 0, 0.0, 45388.366052333775, 965947.0796106684),
    (8, False): ([0, 0, 0, 0, 0, 0, 0, 0], 129, 0, 0.0, 241.6004289900197, 6925.87790262085),
    (9, True): ([0, 3, 3, 3, 3, 3, 3, 0], 131, 3, 0.37656482280912323, 49668.911107028056, 1014833.1567875262),
    (9, False): ([0, 3, 3, 3, 3, 3, 3, 0], 131, 3, 0.37656482280912323, 250.12390074151614, 6130.168405829922),
    (10, True): ([0, 3, 40, 6, 4, 4, 4, 0], 129, 40, 0.1723109828477724, 49680.08191845767, 1014863.0992491862),
    (10, False): ([0, 3, 40, 6, 4, 4, 4, 0], 129, 40, 0.1723109828477724, 250.17568924039205, 6130.274365379491),
}
"""The fixed schedule's results on :func:`fixed_schedule_inputs` (SQKR's Hadamard frame, d = 300), made with
its implementation as separate functions, before the adaptive and fixed schedules shared one."""


def fixed_schedule_inputs() -> tuple:
    from sstq_fl.bench.timing import timing_inputs

    enc = make_encoder("sqkr", 300, 3.0)
    g = torch.Generator().manual_seed(1)
    x = torch.cat(list(timing_inputs(enc).values()) + [torch.randn(3, 300, dtype=torch.float64, generator=g),
                                                         torch.zeros(1, 300, dtype=torch.float64)])
    return enc.frame, x, torch.randint(0, enc.frame.N, (x.shape[0], 4), generator=g)


@pytest.mark.parametrize("case", sorted(FIXED_SCHEDULE_RESULTS))
def test_the_fixed_schedule_gives_its_recorded_results(case):
    frame, x, idx = fixed_schedule_inputs()
    res = kashin(frame, x, FIXED_CONFIGS[case[0]], None if case[1] else idx, fixed=True)
    passes, conv, fails, resid, l1, l2 = FIXED_SCHEDULE_RESULTS[case]
    c = res.coeffs.double()
    assert res.passes.tolist() == passes and sum(int(b) << i for i, b in enumerate(res.converged.tolist())) == conv
    assert int(res.contraction_failures.sum()) == fails and float(res.residual.sum()) == pytest.approx(resid, rel=1e-12)
    assert float(c.abs().sum()) == pytest.approx(l1, rel=1e-12) and float((c * c).sum()) == pytest.approx(l2, rel=1e-12)
