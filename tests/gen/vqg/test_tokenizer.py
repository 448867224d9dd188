"""DP-VQG Stage I tokenizer: architecture, normalisation, straight-through, per-example
independence, per-example clipping by the project's DP-SGD code, and public (PP-VQG) training."""

import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import grad, vmap
from torch.utils.data import TensorDataset

from sstq_fl.data.workload import WorkloadData, synthetic_records
from sstq_fl.gen.dpsgd import build_model, example_loss, per_example_clipped_sum
from sstq_fl.gen.runner import DPRunner, InProcessPool
from sstq_fl.gen.vqg.tokenizer import HW, TokenizerConfig, VQTokenizer, build_tokenizer, train_public_tokenizer
from sstq_fl.privacy.dpsgd import DPSGD


def images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.as_tensor(synthetic_records(n, seed)[0])


def params_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def per_example_grads(model: VQTokenizer, x: torch.Tensor, gumbel: torch.Tensor) -> dict[str, torch.Tensor]:
    """Unclipped per-example gradients with the project's per-example loss (``tasks._example_loss``)."""
    y = torch.zeros(len(x), dtype=torch.long)
    return vmap(grad(example_loss(model)), in_dims=(None, 0, 0, 0))(params_of(model), x, y, gumbel)  # type: ignore[no-any-return]


@pytest.mark.parametrize("profile", ["cpu", "full"])
def test_no_batchnorm_groupnorm_present_and_profiles(profile):
    cfg = TokenizerConfig.profile(profile)
    assert (cfg.c1, cfg.c2, cfg.dim, cfg.codebook_size) == ((16, 32, 16, 64) if profile == "cpu" else (64, 128, 32, 1024))
    model = build_tokenizer(cfg, seed=0)
    mods = list(model.modules())
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in mods)
    assert any(isinstance(m, nn.GroupNorm) for m in mods)
    assert model.codebook.weight.shape == (cfg.codebook_size, cfg.dim)
    # the registered DP-SGD model passes the runner's BatchNorm check
    assert isinstance(build_model({"model": "vqg-tokenizer", "profile": profile}), VQTokenizer)


def test_dp_builder_refuses_batch_entropy():
    with pytest.raises(ValueError, match="per_example_entropy"):
        build_model({"model": "vqg-tokenizer", "per_example_entropy": False})


def test_init_is_seeded_and_leaves_global_rng_alone():
    state = torch.get_rng_state()
    a, b, c = build_tokenizer(seed=3), build_tokenizer(seed=3), build_tokenizer(seed=4)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.codebook.weight, c.codebook.weight)


def test_tokens_and_codes_have_unit_norm_and_shapes():
    model = build_tokenizer(seed=0).eval()
    x = images(6)
    with torch.no_grad():
        z, c = model.encode_tokens(x), model.codes()
        idx = model.encode_indices(x)
        out = model.decode_indices(idx)
    assert z.shape == (6, HW, 16) and c.shape == (64, 16)
    assert torch.allclose(z.norm(dim=-1), torch.ones(6, HW), atol=1e-5)
    assert torch.allclose(c.norm(dim=-1), torch.ones(64), atol=1e-5)
    assert idx.shape == (6, HW) and int(idx.min()) >= 0 and int(idx.max()) < 64
    assert out.shape == (6, 1, 28, 28) and float(out.min()) >= 0 and float(out.max()) <= 1
    with pytest.raises(ValueError):
        model.decode_indices(torch.full((1, HW), 64))


def test_stochastic_top_k_in_training_argmin_in_eval():
    model = build_tokenizer(seed=0)
    x = images(4)
    g = torch.Generator().manual_seed(0)
    gumbel = model.draw_noise(4, g)
    assert gumbel.shape == (4, HW, 10)
    with torch.no_grad():
        z = model.encode_tokens(x)
        out = model.codebook(torch.cat([z, gumbel], -1))
        dist = out[..., 16:]
        picked = (out[..., None, :16] - model.codes()).abs().sum(-1).argmin(-1)
        rank = (dist < dist.gather(-1, picked[..., None])).sum(-1)
        assert int(rank.max()) < 10  # always among the 10 nearest
        assert not torch.equal(picked, dist.argmin(-1))  # but not always the nearest
        plain = model.codebook(torch.cat([z, z.new_zeros(4, HW, 0)], -1))
        assert torch.equal((plain[..., None, :16] - model.codes()).abs().sum(-1).argmin(-1), dist.argmin(-1))
        a, b = model.eval()(x), model(x, None, gumbel)  # eval ignores the draws
        assert torch.equal(a, b)
    model.train()
    with pytest.raises(ValueError):
        model(x)


def test_straight_through_reaches_encoder_and_codebook_term_reaches_codes():
    # β = 0 and λ_ent = 0: the encoder gets gradient only through the straight-through estimator (reconstruction),
    # the codebook only through the explicit codebook term ‖sg[z] − e‖².
    model = build_tokenizer(TokenizerConfig.cpu(beta=0.0, lambda_ent=0.0), seed=0)
    x = images(4)
    model.loss(x, torch.Generator().manual_seed(0)).sum().backward()
    assert float(model.encoder[0].weight.grad.abs().sum()) > 0
    assert float(model.codebook.weight.grad.abs().sum()) > 0
    # without the codebook term, the reconstruction path alone gives the codes no gradient (sg in z_q)
    model.zero_grad()
    z = model.encode_tokens(x)
    out = model.codebook(torch.cat([z, model.draw_noise(4, torch.Generator().manual_seed(0))], -1))
    e = out[..., :16]
    zq = z + (e - z).detach()
    (x - model.decode_tokens(zq)).pow(2).mean().backward()
    assert model.codebook.weight.grad is None or float(model.codebook.weight.grad.abs().sum()) == 0
    assert float(model.encoder[0].weight.grad.abs().sum()) > 0


@pytest.mark.parametrize("per_example", [True, False])
def test_per_example_loss_independent_of_other_examples(per_example):
    model = build_tokenizer(TokenizerConfig.cpu(per_example_entropy=per_example), seed=1)
    x = images(3)
    gumbel = model.draw_noise(3, torch.Generator().manual_seed(0))
    x2 = x.clone()
    x2[2] = torch.rand(1, 28, 28, generator=torch.Generator().manual_seed(5))

    def grad0(inp):
        model.zero_grad()
        model(inp, None, gumbel)[0].backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    a, b = grad0(x), grad0(x2)
    if per_example:
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    else:  # the batch entropy couples examples: the check does detect coupling
        assert not torch.allclose(a, b, rtol=1e-5, atol=1e-7)


def test_project_per_example_clipping_includes_the_codebook():
    """``tasks.per_example_clipped_sum`` (what ``DPRunner.dpsgd_round`` runs on clients): each example's whole
    gradient, codebook included, is scaled by one factor min(1, C/‖g_i‖)."""
    model = build_model({"model": "vqg-tokenizer"})
    x = images(4)
    y = torch.zeros(4, dtype=torch.long)
    gumbel = model.draw_noise(4, torch.Generator().manual_seed(0))
    raw = per_example_grads(model, x, gumbel)
    norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in raw.values()))
    assert bool((raw["codebook.weight"].flatten(1).norm(dim=1) > 0).all())
    clip = float(norms.min()) / 4  # every example is clipped
    for i in range(4):
        s = per_example_clipped_sum(model, params_of(model), x[i:i + 1], y[i:i + 1], clip, gumbel[i:i + 1])
        total = torch.sqrt(sum(v.pow(2).sum() for v in s.values()))
        assert float(total) == pytest.approx(clip, rel=1e-4)
        scale = clip / float(norms[i])
        assert torch.allclose(s["codebook.weight"], raw["codebook.weight"][i] * scale, rtol=1e-4, atol=1e-9)
    s = per_example_clipped_sum(model, params_of(model), x, y, clip, gumbel)
    assert float(torch.sqrt(sum(v.pow(2).sum() for v in s.values()))) <= 4 * clip * (1 + 1e-5)


class _Ledger:
    """Records charges without accounting (a σ this small is refused by the real ledger, rightly)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def record(self, *args: object) -> None:
        self.calls.append(args)


def test_opacus_dpsgd_clips_the_codebook_with_the_rest():
    """``privacy.dpsgd.DPSGD`` (Opacus): one record, q = 1, negligible noise: the step's gradient is that record's
    gradient scaled by C/‖g‖, codebook included (Opacus's functorch path handles :class:`Codebook`)."""
    model = build_tokenizer(seed=2)
    x = images(1)
    gumbel = model.draw_noise(1, torch.Generator().manual_seed(0))
    raw = per_example_grads(model, x, gumbel)
    norm = float(torch.sqrt(sum(v.pow(2).sum() for v in raw.values())))
    clip = norm / 3
    tr = DPSGD(model, torch.optim.SGD(model.parameters(), lr=0.0), TensorDataset(x), sample_rate=1.0,
               noise_multiplier=1e-9, max_grad_norm=clip, ledger=_Ledger(), seed=0)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr.step((x,), lambda m, batch: m(batch[0], None, gumbel).sum())
    assert len(tr.ledger.calls) == 1
    got = {k: p.grad for k, p in model.named_parameters()}
    total = float(torch.sqrt(sum(v.pow(2).sum() for v in got.values())))
    assert total == pytest.approx(clip, rel=1e-3)
    assert float(got["codebook.weight"].abs().sum()) > 0
    assert torch.allclose(got["codebook.weight"], raw["codebook.weight"][0] * clip / norm, rtol=1e-3, atol=1e-8)


def test_dpsgd_round_on_the_runner_trains_the_registered_tokenizer():
    data = WorkloadData(dataset="synthetic", clients=2, records=60, seed=0)
    runner = DPRunner(InProcessPool(data), "dp-vqg", "replace_one", seed=0, randomness="reproducible")
    model = build_model({"model": "vqg-tokenizer"})
    payload = {k: v.detach().numpy() for k, v in model.named_parameters()}
    g = runner.dpsgd_round("stage1", "dpsgd.clipped_sum", payload, {"model": "vqg-tokenizer"}, q=0.1, clip=1.0,
                           noise_multiplier=1.0)
    assert set(g) == set(payload) and all(np.all(np.isfinite(v)) for v in g.values())
    assert runner.ledger.entries[-1].event.sampling_probability == 0.1  # type: ignore[attr-defined]


def test_public_training_reduces_the_loss():
    x = images(64, seed=1)
    ticks = []
    base = build_tokenizer(seed=0).eval()
    with torch.no_grad():
        before = float(base(x).mean())
    model, hist = train_public_tokenizer(x, steps=25, batch_size=16, seed=0, progress=lambda s, n, v: ticks.append(s))
    with torch.no_grad():
        after = float(model(x).mean())
    assert ticks == list(range(1, 26)) and len(hist) == 25 and not model.training
    assert after < before - 0.01
    assert np.mean(hist[-5:]) < np.mean(hist[:5])
