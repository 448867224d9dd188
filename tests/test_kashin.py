import pytest
import torch

from sstq_fl.frames import make_frame
from sstq_fl.kashin import KashinConfig, achieved_level, adversarial_inputs, kashin

from .conftest import unit_rows


@pytest.mark.parametrize("kind,d", [("hadamard", 10), ("hadamard", 300), ("hadamard", 3000), ("haar", 200)])
def test_reconstruction_and_public_bound_on_adversarial_inputs(kind, d):
    fr = make_frame(kind, d, seed=1)
    cfg = KashinConfig()
    for name, x in adversarial_inputs(fr, 6).items():
        res = kashin(fr, x, cfg)
        rec = fr.synth_(res.coeffs.clone())
        assert torch.allclose(rec, x, atol=1e-10), name
        lvl = achieved_level(fr, x, cfg)
        assert (lvl <= cfg.level + 1e-9).all(), (name, lvl.max(), cfg.level)
        assert res.converged.all() and (res.contraction_failures == 0).all(), name


def test_level_bound_formula():
    cfg = KashinConfig(eta=0.5, delta=0.7, fold_tol=0.01)
    assert cfg.level == pytest.approx(1 / (0.5 * 0.7**0.5) + 0.01)


def test_gathered_coefficients_equal_full_and_batch_independent():
    fr = make_frame("hadamard", 500, seed=2)
    x = unit_rows(7, 500, seed=3).float()
    idx = torch.randint(0, fr.N, (7, 3))
    full = kashin(fr, x, KashinConfig()).coeffs
    part = kashin(fr, x, KashinConfig(), idx).coeffs
    assert torch.equal(full.gather(1, idx), part)
    for i in range(7):
        alone = kashin(fr, x[i : i + 1], KashinConfig(), idx[i : i + 1]).coeffs
        assert torch.equal(alone[0], part[i])


def test_zero_vector_and_scaling():
    fr = make_frame("hadamard", 40, seed=0)
    x = torch.zeros(2, 40, dtype=torch.float64)
    x[1] = unit_rows(1, 40)[0] * 3.0
    res = kashin(fr, x, KashinConfig())
    assert torch.equal(res.coeffs[0], torch.zeros(fr.N, dtype=torch.float64))
    unit = kashin(fr, x[1:] / 3.0, KashinConfig()).coeffs
    assert torch.allclose(res.coeffs[1:], 3.0 * unit, atol=1e-12)


def test_alternating_projections_reach_a_lower_level():
    fr = make_frame("hadamard", 300, seed=1)
    x = adversarial_inputs(fr, 4)["frame_row"]
    lv = achieved_level(fr, x, KashinConfig())
    ap_cfg = KashinConfig(method="ap", ap_level=1.8, ap_iters=400)
    res = kashin(fr, x, ap_cfg)
    assert torch.allclose(fr.synth_(res.coeffs.clone()), x, atol=1e-9)
    ap = achieved_level(fr, x, ap_cfg)
    assert (ap <= ap_cfg.level + 1e-9).all() and ap.max() < lv.min() - 0.3


def test_contraction_failure_is_detected():
    fr = make_frame("hadamard", 300, seed=1)
    x = adversarial_inputs(fr, 2)["frame_row"]
    res = kashin(fr, x, KashinConfig(eta=0.3, delta=1.0, max_passes=8))
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
    import sstq_fl.fwht as fw

    fr = make_frame("hadamard", 3000, seed=4)
    x = unit_rows(5, 3000, seed=1).float()
    ref = kashin(fr, x, KashinConfig()).coeffs
    monkeypatch.setattr(fw, "default_kernel", lambda device: "torch")
    got = kashin(fr, x, KashinConfig()).coeffs
    assert torch.allclose(got, ref, atol=1e-4)
