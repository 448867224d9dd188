"""DP-VQG Stage III MaskGIT prior: masking schedule, training, sampling, CFG."""

import math

import pytest
import torch

from sstq_fl.gen.vqg.maskgit import (
    PriorConfig,
    build_prior,
    cosine_lr,
    draw_mask,
    guided_logits,
    mask_count,
    mask_schedule,
    masked_loss,
    sample,
    train_prior,
)

TINY = PriorConfig(vocab_size=16, hw=16, num_classes=3, d_model=32, layers=1, heads=2, batch=8, sample_steps=6)


def test_profiles():
    cpu, full = PriorConfig.cpu(), PriorConfig.full()
    assert (cpu.vocab_size, cpu.hw, cpu.d_model, cpu.layers, cpu.heads, cpu.sample_steps) == (64, 49, 64, 2, 2, 8)
    assert (full.vocab_size, full.d_model, full.layers, full.heads, full.sample_steps) == (1024, 384, 6, 6, 16)
    assert (cpu.lr, cpu.lr_min, cpu.label_dropout, cpu.choice_temperature) == (1e-4, 5e-6, 0.1, 4.5)
    assert cpu.mask_id == 64 and cpu.null_class == 10


def test_training_mask_count_follows_the_cosine_schedule():
    mask, r = draw_mask(2000, 49, torch.Generator().manual_seed(0))
    want = torch.tensor([min(49, max(1, math.ceil(math.cos(math.pi * float(v) / 2) * 49))) for v in r])
    assert torch.equal(mask.sum(1), want)
    assert torch.equal(mask_count(torch.tensor([0.0, 0.5, 0.999999]), 49), torch.tensor([49, 35, 1]))
    # positions are uniform: every position is masked about equally often
    freq = mask.float().mean(0)
    assert float(freq.max() - freq.min()) < 0.12
    assert abs(float(mask.float().mean()) - 2 / math.pi) < 0.03  # E[cos(πr/2)] = 2/π (plus the ceiling)


def test_decoding_schedule_and_lr():
    assert mask_schedule(49, 8) == [48, 45, 40, 34, 27, 18, 9, 0]
    for hw, steps in ((49, 16), (16, 6), (3, 8), (1, 1)):
        s = mask_schedule(hw, steps)
        assert len(s) == steps and s[-1] == 0
        assert all(b < a or b == 0 for a, b in zip([hw, *s], s))  # strictly decreasing until empty
    assert cosine_lr(0, 100) == pytest.approx(1e-4)
    assert cosine_lr(100, 100) == pytest.approx(5e-6)
    assert cosine_lr(50, 100) == pytest.approx((1e-4 + 5e-6) / 2)


def test_loss_is_cross_entropy_on_masked_positions_with_label_dropout():
    model = build_prior(TINY, seed=0)
    tokens = torch.randint(0, 16, (2000, 16), generator=torch.Generator().manual_seed(1))
    labels = torch.randint(0, 3, (2000,), generator=torch.Generator().manual_seed(2))
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    model.register_forward_hook(lambda m, inp, out: seen.append((inp[0], inp[1])))
    loss = masked_loss(model, tokens, labels, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)  # replay the draws: mask, then label-dropout coins
    mask, _ = draw_mask(2000, 16, g)
    drop = torch.rand(2000, generator=g) < 0.1
    inp, lab = seen[0]
    assert torch.equal(inp, tokens.masked_fill(mask, TINY.mask_id))
    assert torch.equal(lab, labels.masked_fill(drop, TINY.null_class))
    assert abs(float(drop.float().mean()) - 0.1) < 0.03
    with torch.no_grad():
        want = torch.nn.functional.cross_entropy(model(inp, lab)[mask], tokens[mask])
    assert torch.allclose(loss, want, atol=1e-6)


def test_tiny_prior_overfits_a_tiny_token_set():
    g = torch.Generator().manual_seed(0)
    base = torch.randint(0, 16, (3, 16), generator=g)
    tokens, labels = base.repeat(4, 1), torch.arange(3).repeat(4)
    cfg = PriorConfig(**{**TINY.__dict__, "lr": 1e-2, "lr_min": 1e-3, "epochs": 100, "batch": 12})
    ticks: list[tuple[int, int]] = []
    model, hist = train_prior(tokens, labels, cfg, g, progress=lambda s, n, v: ticks.append((s, n)))
    assert ticks[-1] == (100, 100) and len(hist) == 100 and not model.training
    first, last = sum(hist[:5]) / 5, sum(hist[-5:]) / 5
    assert first > 2.0 and last < 0.3 * first
    # the trained prior reproduces its class's sequence when sampled with the class
    out = sample(model, torch.arange(3), PriorConfig(**{**cfg.__dict__, "cfg_scale": 1.0}), torch.Generator().manual_seed(1))
    assert float((out == base).float().mean()) > 0.8


def test_sampling_valid_deterministic_no_mask_left():
    model = build_prior(PriorConfig.cpu(), seed=0)
    labels = torch.tensor([0, 1, 2, 3, 9, 10])  # 10 = null class: unconditional
    a = sample(model, labels, generator=torch.Generator().manual_seed(5))
    b = sample(model, labels, generator=torch.Generator().manual_seed(5), batch_size=6)
    c = sample(model, labels, generator=torch.Generator().manual_seed(6))
    assert a.shape == (6, 49) and a.dtype == torch.long
    assert int(a.min()) >= 0 and int(a.max()) < 64  # in [0, K): no [MASK] (= 64) left
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert model.training  # restored
    with pytest.raises(ValueError):
        sample(model, torch.tensor([11]))


def test_cfg_combination():
    model = build_prior(TINY, seed=0).eval()
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 17, (4, 16), generator=g)  # includes [MASK] = 16
    labels = torch.tensor([0, 1, 2, 0])
    null = torch.full_like(labels, TINY.null_class)
    with torch.no_grad():
        lc, lu = model(tokens, labels), model(tokens, null)
        assert torch.allclose(guided_logits(model, tokens, labels, 0.0), lu, atol=1e-5)
        assert torch.allclose(guided_logits(model, tokens, labels, 1.0), lc, atol=1e-5)
        assert torch.allclose(guided_logits(model, tokens, labels, 3.0), lu + 3.0 * (lc - lu), atol=1e-4)
        assert not torch.allclose(lc, lu, atol=1e-3)


def test_cfg_scale_zero_samples_ignore_the_label():
    """w = 0 samples from the unconditional logits: the class cannot matter; at w = 4 it does."""
    model = build_prior(TINY, seed=3)
    w0 = PriorConfig(**{**TINY.__dict__, "cfg_scale": 0.0})
    w4 = PriorConfig(**{**TINY.__dict__, "cfg_scale": 4.0})
    la, lb = torch.zeros(8, dtype=torch.long), torch.full((8,), 2)
    s = {(w.cfg_scale, int(lab[0])): sample(model, lab, w, torch.Generator().manual_seed(9))
         for w in (w0, w4) for lab in (la, lb)}
    assert torch.equal(s[(0.0, 0)], s[(0.0, 2)])
    assert not torch.equal(s[(4.0, 0)], s[(4.0, 2)])


@pytest.mark.slow  # 74 s of training on 2 cores
def test_cpu_prior_follows_its_class_label():
    """Conditioning end to end (class token, CFG, iterative decoding): class c's token maps use codes 6c..6c+5 only;
    the CPU profile's prior (peak lr 10⁻³) trained for 150 steps must sample class c's codes for label c far above
    the 6/64 a label-blind prior would give.  At the spec's full-scale lr 10⁻⁴ the same steps stay near chance,
    which is why the CPU profile raises it (issue 13's sweep was at chance for every run)."""
    gen = torch.Generator().manual_seed(0)
    y = torch.arange(1200) % 10
    tokens = 6 * y[:, None] + torch.randint(0, 6, (1200, 49), generator=gen)
    shares = {}
    for lr in (1e-3, 1e-4):
        cfg = PriorConfig.cpu(epochs=15, lr=lr)
        model, _ = train_prior(tokens, y, cfg, torch.Generator().manual_seed(1))
        labels = torch.arange(200) % 10
        out = sample(model, labels, cfg, torch.Generator().manual_seed(2))
        shares[lr] = float((out // 6 == labels[:, None]).double().mean())
    assert shares[1e-3] > 0.9 and shares[1e-4] < 0.3, shares  # measured 0.96 and 0.10
