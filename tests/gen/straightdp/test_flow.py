"""StraightDP flow model: conventions, per-example gradients, low-B₀ constraints, training."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from sstq_fl.gen.dpsgd import build_model
from sstq_fl.gen.straightdp.blocks import FlowConfig, SpectralCappedLinear, caption_bytes, patchify, unpatchify
from sstq_fl.gen.straightdp.flow import FlowModel, build_flow, interpolate, to_model_space, to_pixels
from sstq_fl.gen.straightdp.training import ema_update, pretrain, sample


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """One intra-op thread: much faster than two on a shared 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _jitter(model: nn.Module, scale: float = 0.05, seed: int = 0) -> nn.Module:
    """Perturb every parameter (the adaLN-Zero/zero-init layers would otherwise hide most gradients)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return model


def _frozen(low_b0: bool, seed: int = 0, **over: object) -> FlowModel:
    model = build_flow(FlowConfig.cpu(low_b0=low_b0, **over), seed).freeze_captions()  # type: ignore[arg-type]
    return _jitter(model, seed=seed)  # type: ignore[return-value]


def _inputs(n: int, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g), torch.rand(n, generator=g)


# ----------------------------------------------------------------------------------------------- config, captions


def test_config_profiles_and_validation() -> None:
    cpu, full = FlowConfig.cpu(), FlowConfig.full()
    assert (cpu.width, cpu.depth, cpu.heads, cpu.patch, cpu.grid ** 2, cpu.sample_steps) == (64, 2, 2, 7, 16, 10)
    assert (full.width, full.depth, full.heads, full.patch, full.grid ** 2, full.sample_steps) == (192, 6, 6, 4, 49, 25)
    assert FlowConfig.profile("cpu", low_b0=True).low_b0 and cpu.null_label == 10 and cpu.cfg_scale == 1.5
    bad = [dict(patch=5), dict(heads=3), dict(t_min=0.5, t_max=0.5), dict(t_max=1.5), dict(p_uncond=1.0),
           dict(late_blocks=3), dict(classes=1000), dict(b0=0.0), dict(width=0), dict(multiplicity=True)]
    for over in bad:
        with pytest.raises(ValueError):
            FlowConfig.cpu(**over)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        FlowConfig.profile("gpu")


def test_caption_bytes() -> None:
    out = caption_bytes(torch.tensor([3, 10, 0]))
    assert out.shape == (3, 8) and out.dtype == torch.long
    assert bytes(out[0].tolist()) == b"class 3\x00" and bytes(out[2].tolist()) == b"class 0\x00"
    assert out[1].eq(0).all()  # null caption = all padding
    assert bytes(caption_bytes(torch.tensor([9]), classes=100)[0].tolist()) == b"class 9\x00"
    with pytest.raises(ValueError):
        caption_bytes(torch.tensor([11]))
    with pytest.raises(ValueError):
        caption_bytes(torch.tensor([1.0]))


# ----------------------------------------------------------------------------------------------- shapes, conventions


def test_shapes_noise_and_patchify() -> None:
    cfg = FlowConfig.cpu(multiplicity=3, t_min=0.2, t_max=0.6, p_uncond=0.25)
    model = build_flow(cfg)
    x, y, t = _inputs(4)
    assert model.velocity(x, t, y).shape == (4, 1, 28, 28)
    assert torch.equal(unpatchify(patchify(x, 7), 7), x) and torch.equal(unpatchify(patchify(x, 4), 4), x)
    assert torch.equal(patchify(x, 7)[:, 1], x[:, 0, :7, 7:14].reshape(4, 49))  # row-major patches
    noise = model.draw_noise(2000, torch.Generator().manual_seed(0))
    assert noise.shape == (2000, 3, 786)
    assert noise[..., 0].min() >= 0.2 and noise[..., 0].max() <= 0.6
    assert set(noise[..., 1].unique().tolist()) == {0.0, 1.0} and abs(noise[..., 1].mean().item() - 0.25) < 0.03
    assert abs(noise[..., 2:].std().item() - 1.0) < 0.01
    assert model(x, y, noise[:4]).shape == (4,)
    with pytest.raises(ValueError):
        model(x, y, noise[:4, :, :785])
    with pytest.raises(ValueError):
        model.velocity(x[:, :, :27], t, y)


def test_interpolation_target_and_euler_reach_the_point_mass(monkeypatch: pytest.MonkeyPatch) -> None:
    """t = 0 is the noise end: x_0 = ξ, x_1 = z, and the exact field of a point mass z = c, (c − x)/(1 − t),
    has zero flow-matching loss and carries ξ to c under Euler sampling."""
    xi, z, c = torch.randn(3, 1, 28, 28), torch.rand(3, 1, 28, 28), torch.rand(1, 1, 28, 28)
    assert torch.equal(interpolate(xi, z, torch.zeros(3)), xi) and torch.equal(interpolate(xi, z, torch.ones(3)), z)
    assert torch.allclose(interpolate(xi, z, torch.full((3,), 0.25)), 0.75 * xi + 0.25 * z)
    model = build_flow(FlowConfig.cpu(multiplicity=2, t_max=0.99))
    cm = to_model_space(c)  # the records are in [0, 1]; the flow runs in [−1, 1]
    exact = lambda x, t, labels, states=None: (cm - x) / (1 - t).view(-1, 1, 1, 1)  # noqa: E731
    monkeypatch.setattr(model, "_run", exact)
    y = torch.tensor([1, 2, 3])
    loss = model(c.expand(3, 1, 28, 28), y, model.draw_noise(3, torch.Generator().manual_seed(0)))
    assert loss.shape == (3,) and loss.max() < 1e-8
    out = sample(model, y, steps=7, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(to_pixels(out), c.expand(3, 1, 28, 28), atol=1e-5)


def test_multiplicity_average_is_inside_the_per_example_loss() -> None:
    model = _frozen(False, multiplicity=3)
    x, y, _ = _inputs(4)
    noise = model.draw_noise(4, torch.Generator().manual_seed(2))
    noise[:, 1, 1] = 1.0  # one null-caption draw
    singles = torch.stack([model(x, y, noise[:, m:m + 1]) for m in range(3)], dim=1)
    assert torch.allclose(model(x, y, noise), singles.mean(1), rtol=1e-5, atol=1e-7)
    assert not torch.allclose(singles[:, 0], singles[:, 1])
    flagged, dropped = noise[:, 1:2].clone(), noise[:, 1:2].clone()
    dropped[..., 1] = 0.0  # the flag means "caption replaced by the null caption"
    assert torch.equal(model(x, y, flagged), model(x, torch.full_like(y, model.cfg.null_label), dropped))
    assert not torch.allclose(model(x, y, flagged), model(x, y, dropped))


# ----------------------------------------------------------------------------------------------- freezing, DP-SGD


def test_frozen_captions_state_dict_roundtrip() -> None:
    cfg = FlowConfig.cpu()
    live = build_flow(cfg, seed=3)
    x, y, t = _inputs(5)
    y[0] = cfg.null_label
    before = live.velocity(x, t, y)
    assert any(k.startswith("captions.") for k, _ in live.named_parameters())
    frozen = live.freeze_captions()
    assert not any("caption" in k for k, _ in frozen.named_parameters())
    sd = frozen.state_dict()
    assert sd["caption_table"].shape == (11, 8, 64) and sd["caption_table"].abs().sum() > 0
    assert not any(k.startswith("captions.") for k in sd)
    fresh = FlowModel(cfg, frozen_captions=True)
    assert fresh.caption_tokens().abs().sum() == 0 and not any("caption" in k for k, _ in fresh.named_parameters())
    fresh.load_state_dict(sd)
    assert torch.allclose(fresh.velocity(x, t, y), before, atol=1e-6)
    assert torch.allclose(frozen.velocity(x, t, y), before, atol=1e-6)


@pytest.mark.parametrize("low_b0", [False, True])
def test_vmap_per_example_gradients_match_a_loop(low_b0: bool) -> None:
    """vmap(grad(functional_call)) over {params} ∪ {buffers}, as DP-SGD runs it, equals per-example autograd."""
    model = _frozen(low_b0, multiplicity=2)
    if low_b0:  # make the spectral cap active (σ_max ≫ 1) so its gradient path is exercised
        with torch.no_grad():
            model.cross_projections()[-1].weight.copy_(torch.randn(64, 64, generator=torch.Generator().manual_seed(4)))
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}
    assert "caption_table" in buffers and not any("caption" in k for k in params)
    x, y, _ = _inputs(4, seed=1)
    y[1] = 10
    noise = model.draw_noise(4, torch.Generator().manual_seed(5))

    def loss(p: dict[str, Tensor], xi: Tensor, yi: Tensor, ni: Tensor) -> Tensor:
        return functional_call(model, {**p, **buffers}, (xi[None], yi[None], ni[None])).reshape(())

    per_ex = vmap(grad(loss), in_dims=(None, 0, 0, 0))(params, x, y, noise)
    named = dict(model.named_parameters())
    for i in range(4):
        ref = torch.autograd.grad(model(x[i:i + 1], y[i:i + 1], noise[i:i + 1]).sum(), list(named.values()))
        for (k, _), r in zip(named.items(), ref):
            assert torch.allclose(per_ex[k][i], r, rtol=1e-4, atol=1e-6), k
    assert all(torch.isfinite(v).all() for v in per_ex.values())
    assert per_ex["blocks.0.img.qkv.weight"].abs().sum() > 0


# ----------------------------------------------------------------------------------------------- low-B₀


def test_low_b0_stream_norm_clamp() -> None:
    x, y, t = _inputs(3)
    norms = {}
    for low_b0 in (False, True):
        model = _frozen(low_b0)
        with torch.no_grad():
            model.patch_embed.weight.mul_(200.0)
            model.context_in.weight.mul_(200.0)
        states = model.stream_states(x, t, y)
        assert len(states) == model.cfg.depth + 1
        norms[low_b0] = torch.stack([torch.cat([a.norm(dim=-1).flatten(), b.norm(dim=-1).flatten()]).max()
                                     for a, b in states])
    assert norms[True].max() <= 16.0 + 1e-4 and norms[True][0] >= 16.0 - 1e-3  # the clamp binds and holds
    assert norms[False].max() > 16.0


def test_low_b0_late_injection_and_t_only_adaln() -> None:
    """With low-B₀ the caption reaches the image stream only in the last block, the caption stream never sees
    the image before it, and adaLN ignores the caption; the joint-attention model mixes them from block 0."""
    x, y, t = _inputs(2)
    other_y, other_x = (y + 3) % 10, torch.rand(2, 1, 28, 28)
    for low_b0 in (True, False):
        model = _frozen(low_b0, depth=3)
        base, cap = model.stream_states(x, t, y), model.stream_states(x, t, other_y)
        img = model.stream_states(other_x, t, y)
        early_img = all(torch.equal(base[k][0], cap[k][0]) for k in range(3))
        early_txt = all(torch.equal(base[k][1], img[k][1]) for k in range(3))
        captions = model.caption_tokens()
        same_c = torch.equal(model.condition(t, captions[y]), model.condition(t, captions[other_y]))
        assert (early_img, early_txt, same_c) == (low_b0, low_b0, low_b0)
        assert not torch.allclose(base[3][0], cap[3][0])  # the last block does inject the caption
        assert not torch.allclose(model.velocity(x, t, y), model.velocity(x, t, other_y))
        assert (model.pool_mlp is None) == low_b0


def test_low_b0_spectral_cap() -> None:
    model = _frozen(True, depth=3, late_blocks=2)
    names = [k for k, m in model.named_modules() if isinstance(m, SpectralCappedLinear)]
    assert names == ["blocks.1.img.cross_out", "blocks.1.txt.cross_out", "blocks.2.img.cross_out"]
    layer, h = model.cross_projections()[-1], torch.randn(5, 64)
    assert _frozen(False).cross_projections() == []
    with torch.no_grad():
        layer.weight.copy_(7.0 * torch.randn(64, 64))
    sigma = torch.linalg.matrix_norm(layer.weight, 2)
    capped = layer.capped_weight()
    assert sigma > 10 and torch.linalg.matrix_norm(capped, 2) <= 1.0 + 1e-5
    assert torch.allclose(layer(h), F.linear(h, layer.weight / sigma), atol=1e-5)
    with torch.no_grad():
        layer.weight.mul_(0.5 / sigma)  # σ = 0.5 < s: untouched
    assert torch.allclose(layer.capped_weight(), layer.weight)


# ----------------------------------------------------------------------------------------------- training, sampling


@pytest.mark.parametrize("low_b0", [False, True])
def test_pretrain_lowers_loss_and_cfg_samples_follow_the_class(low_b0: bool) -> None:
    g = torch.Generator().manual_seed(1)
    y = torch.arange(256) % 2  # class 0 dark, class 1 bright
    x = ((0.1 + 0.8 * y.float()).view(-1, 1, 1, 1) + 0.05 * torch.rand(256, 1, 28, 28, generator=g)).clamp(0, 1)
    seen: list[int] = []
    model, losses = pretrain(x, y, FlowConfig.cpu(low_b0=low_b0, classes=2), steps=60, batch=32, lr=2e-3, seed=0,
                             progress=lambda s, total, loss: seen.append(s))
    assert seen == list(range(1, 61)) and len(losses) == 60
    assert sum(losses[-10:]) / 10 < 0.6 * sum(losses[:10]) / 10  # measured 0.52 (targets in [−1, 1])
    assert not model.training and model.captions is None
    labels = torch.tensor([0] * 8 + [1] * 8)
    out = sample(model, labels, steps=5, generator=torch.Generator().manual_seed(0))
    assert out.shape == (16, 1, 28, 28)
    assert out[8:].mean() > out[:8].mean() + 0.5
    assert torch.equal(out, sample(model, labels, steps=5, generator=torch.Generator().manual_seed(0)))


def test_sample_start_and_validation() -> None:
    model = build_flow(FlowConfig.cpu())
    model.train()
    x0 = torch.randn(3, 1, 28, 28)
    # untrained model: zero-initialised final layer, v ≡ 0, so any start stays where it is
    assert torch.equal(sample(model, torch.tensor([0, 1, 10]), steps=2, t0=0.5, x0=x0), x0)
    assert model.training
    with pytest.raises(ValueError):
        sample(model, torch.tensor([0]), t0=0.5)
    with pytest.raises(ValueError):
        sample(model, torch.tensor([11]))
    with pytest.raises(ValueError):
        sample(model, torch.tensor([0]), steps=0)


def test_ema_update() -> None:
    a, b = _frozen(False, seed=1), _frozen(False, seed=2)
    wa, wb = a.final.weight.clone(), b.final.weight.clone()
    ema_update(a, b, 0.75)
    assert torch.allclose(a.final.weight, 0.75 * wa + 0.25 * wb)
    ema_update(a, b, 0.0)
    assert torch.equal(a.final.weight, wb)
    with pytest.raises(ValueError):
        ema_update(a, build_flow(FlowConfig.cpu()), 0.5)  # live caption encoder vs frozen table
    with pytest.raises(ValueError):
        ema_update(a, b, 1.5)


def test_registered_builder() -> None:
    model = build_model({"model": "straightdp-flow", "profile": "cpu", "low_b0": "true", "multiplicity": "2",
                         "b0": "8", "q": 0.1, "clip": 1.0})
    assert isinstance(model, FlowModel) and model.returns_loss
    assert model.cfg.low_b0 and model.cfg.multiplicity == 2 and model.cfg.b0 == 8.0 and model.cfg.width == 64
    assert model.captions is None and "caption_table" in model.state_dict()
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert not build_model({"model": "straightdp-flow", "low_b0": "false"}).cfg.low_b0  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        build_model({"model": "straightdp-flow", "low_b0": "maybe"})
