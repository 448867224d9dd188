"""DP-MEPF model pieces: Φ, normalized moments, class statistics, generator training."""

import math

import numpy as np
import pytest
import torch

from sstq_fl.gen import tensors
from sstq_fl.gen.mepf import features as mepf
from sstq_fl.gen.mepf import generator as mgen

SLICE = 3000  # public FMNIST images used to train the test Φ


def _fmnist() -> tuple[np.ndarray, np.ndarray] | None:
    from sstq_fl.data.idx import find_fashion_mnist, load_fashion_mnist

    try:
        root = find_fashion_mnist(download=False)
    except FileNotFoundError:
        return None
    x, y, _, _ = load_fashion_mnist(str(root))
    return x[: SLICE + 1000], y[: SLICE + 1000]


def _synthetic(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Class-dependent images in [0, 1]: a bright horizontal bar whose row encodes the class, plus noise."""
    rs = np.random.default_rng(seed)
    y = rs.integers(0, 10, n)
    x = rs.uniform(0, 0.2, (n, 28, 28)).astype(np.float32)
    for i, c in enumerate(y):
        x[i, 2 + 2 * c : 5 + 2 * c, 4:24] = 0.9
    return x.reshape(n, 784), y.astype(np.int64)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    real = _fmnist()
    return real if real is not None else _synthetic(SLICE + 1000)


@pytest.fixture(scope="module")
def phi(data) -> mepf.FeatureExtractor:
    x, y = data
    return mepf.train_feature_extractor(x[:SLICE], y[:SLICE], "cpu", epochs=1, seed=0, batch_size=128)


def _block_norms(e: torch.Tensor, m: int) -> torch.Tensor:
    return torch.linalg.vector_norm(e.reshape(e.shape[0], m, -1), dim=2)


# ----------------------------------------------------------------------------------------------- embeddings


def test_moments_are_unit_norm_per_block_nonnegative_and_zero_safe():
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(6, 50, generator=g)
    feats[2] = 0.0
    feats[4] *= 1e30  # squaring would overflow float32 without the scale step
    feats.requires_grad_(True)
    e = mepf.normalize_moments(feats, (1, 2))
    norms = _block_norms(e.detach(), 2)
    assert torch.allclose(norms[[0, 1, 3, 4, 5]], torch.ones(5, 2), atol=1e-6)
    assert torch.equal(norms[2], torch.zeros(2)) and torch.equal(e[2], torch.zeros(100))
    assert bool((e[:, 50:] >= 0).all())
    assert torch.allclose(e[4], mepf.normalize_moments(feats[4:5].detach() / 1e30, (1, 2))[0], atol=1e-6)
    e.sum().backward()
    assert bool(torch.isfinite(feats.grad).all())


def test_embed_with_extractor_has_unit_blocks(data):
    fx = mepf.build_feature_extractor("cpu", seed=1)
    x = data[0][:20]
    for moments in [(1,), (1, 2)]:
        e = mepf.embed(fx, x, moments, batch_size=7)
        assert e.shape == (20, len(moments) * fx.dim) and e.dtype == torch.float32
        assert torch.allclose(_block_norms(e, len(moments)), torch.ones(20, len(moments)), atol=1e-5)
    assert bool((mepf.embed(fx, x, (1, 2))[:, fx.dim:] >= 0).all())
    with pytest.raises(ValueError, match="moments"):
        mepf.embed(fx, x, (2,))


# ----------------------------------------------------------------------------------------------- class statistics


@pytest.mark.parametrize("moments", [(1,), (1, 2)])
def test_class_sums_match_brute_force_and_bound_each_record(moments):
    m, k, d = len(moments), 4, 30
    emb = mepf.normalize_moments(torch.randn(25, d, generator=torch.Generator().manual_seed(3)), moments)  # float32
    labels = torch.arange(25) % 3  # class 3 left empty
    counts, sums = mepf.class_sums(emb, labels, k, moments)
    assert counts.dtype == sums.dtype == torch.float64 and sums.shape == (k, m * d)
    assert counts.tolist() == [9, 8, 8, 0]
    for c in range(k):
        brute = sum((emb[i].double() for i in range(25) if labels[i] == c), torch.zeros(m * d, dtype=torch.float64))
        assert torch.allclose(sums[c], brute.double(), atol=1e-6)
    for i in range(25):  # the per-record contribution (e_y, φ1⊗e_y[, φ2⊗e_y]) has norm √(1+m)
        c1, s1 = mepf.class_sums(emb[i : i + 1], labels[i : i + 1], k, moments)
        norm = float(torch.linalg.vector_norm(torch.cat([c1, s1.flatten()])))
        assert norm == pytest.approx(math.sqrt(1 + m), abs=1e-6)
        assert norm <= mepf.contribution_bound(moments) + 1e-12  # float32 rounding excess clipped away
    assert mepf.contribution_bound(moments, labelled=False) == pytest.approx(math.sqrt(m))


def test_class_sums_rejects_bad_input():
    emb = mepf.normalize_moments(torch.randn(5, 8, generator=torch.Generator().manual_seed(0)), (1,))
    with pytest.raises(ValueError, match="normalized"):
        mepf.class_sums(emb * 2, torch.zeros(5, dtype=torch.long), 3, (1,))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        mepf.class_sums(emb, torch.tensor([0, 1, 2, 3, 0]), 3)
    with pytest.raises(ValueError, match="shape"):
        mepf.class_sums(emb, torch.zeros(4, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="NaN"):
        mepf.class_sums(emb.masked_fill(emb == emb.max(), float("nan")), torch.zeros(5, dtype=torch.long), 3)


def test_streaming_class_sums_equal_one_shot_and_handle_empty_clients(data):
    fx = mepf.build_feature_extractor("cpu", seed=2)
    x, y = data[0][:50], data[1][:50]
    counts, sums = mepf.embedded_class_sums(fx, x, y, (1, 2), batch_size=16)
    c2, s2 = mepf.class_sums(mepf.embed(fx, x, (1, 2)), y, 10, (1, 2))
    assert torch.equal(counts, c2) and torch.allclose(sums, s2, atol=1e-5)
    c0, s0 = mepf.embedded_class_sums(fx, x[:0], y[:0], (1,))
    assert c0.shape == (10,) and s0.shape == (10, fx.dim) and not c0.any() and not s0.any()


def test_class_means_use_clamped_noisy_counts():
    sums = torch.tensor([[2.0, -4.0], [0.5, 0.5], [10.0, 5.0]], dtype=torch.float64)
    means, probs = mepf.class_means(torch.tensor([-3.2, 0.4, 5.0]), sums)
    assert torch.equal(means[0], sums[0]) and torch.equal(means[1], sums[1]) and torch.equal(means[2], sums[2] / 5)
    assert torch.allclose(probs, torch.tensor([1.0, 1.0, 5.0], dtype=torch.float64) / 7)
    with pytest.raises(ValueError, match="class rows"):
        mepf.class_means(torch.ones(2), sums)
    with pytest.raises(ValueError, match="NaN"):
        mepf.class_means(torch.tensor([1.0, float("nan"), 1.0]), sums)


# ----------------------------------------------------------------------------------------------- generator


def test_generator_output_and_sampling():
    gen = tensors.seeded(lambda: mgen.Generator(code_dim=10, hidden=128), 0)
    x, y = mgen.sample(gen, 37, seed=5)
    assert x.shape == (37, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert float(x.min()) >= 0 and float(x.max()) <= 1
    assert sorted(torch.bincount(y, minlength=10).tolist()) == [3] * 3 + [4] * 7  # class-balanced
    x2, y2 = mgen.sample(gen, 37, seed=5)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    _, y3 = mgen.sample(gen, 20, labels=torch.full((20,), 7))
    assert bool((y3 == 7).all())
    _, y4 = mgen.sample(gen, 50, class_probs=[0.0] * 9 + [1.0])
    assert bool((y4 == 9).all())
    assert gen.training  # sampling runs in eval mode and restores the mode


def test_generator_config_presets_and_validation():
    cpu, full = mgen.GeneratorConfig.cpu(), mgen.GeneratorConfig.full()
    assert (cpu.code_dim, cpu.hidden, cpu.steps, cpu.batch, cpu.beta1) == (10, 128, 500, 100, 0.5)
    assert (full.code_dim, full.hidden, full.lr, full.m_avg_lr) == (90, 500, 1e-5, 1e-4)
    assert mgen.GeneratorConfig.full("fmnist", steps=7).lr == 1e-4 and mgen.GeneratorConfig.full("fmnist", steps=7).steps == 7
    with pytest.raises(ValueError, match="steps"):
        mgen.GeneratorConfig.cpu(steps=0)
    with pytest.raises(ValueError, match="dataset"):
        mgen.GeneratorConfig.full("cifar")


def _real_targets(fx, data, moments, n=300):
    x, y = data[0][SLICE : SLICE + n], data[1][SLICE : SLICE + n]
    counts, sums = mepf.embedded_class_sums(fx, x, y, moments)
    return mepf.class_means(counts, sums)


@pytest.mark.parametrize("moving_average", [False, True])
@pytest.mark.parametrize("moments", [(1,), (1, 2)])
def test_train_generator_decreases_matching_loss(phi, data, moments, moving_average):
    means, probs = _real_targets(phi, data, moments)
    probs = torch.tensor([1.0, 1.0, 1.0] + [0.0] * 7)  # 3 classes keep tiny batches covering every drawn class
    cfg = mgen.GeneratorConfig.cpu(steps=25, batch=24, moving_average=moving_average)
    gen, hist = mgen.train_generator(phi, means, probs, moments, cfg, seed=0)
    assert len(hist) == 25 and all(math.isfinite(h) for h in hist)
    assert np.mean(hist[-5:]) < 0.8 * np.mean(hist[:5]), hist
    assert not gen.training
    assert all(not p.requires_grad and p.grad is None for p in phi.parameters())  # Φ frozen, never updated


def test_train_generator_is_seeded_and_validates(phi, data):
    means, probs = _real_targets(phi, data, (1,), n=100)
    cfg = mgen.GeneratorConfig.cpu(steps=3, batch=20)
    _, h1 = mgen.train_generator(phi, means, probs, (1,), cfg, seed=4)
    _, h2 = mgen.train_generator(phi, means, probs, (1,), cfg, seed=4)
    assert h1 == h2
    with pytest.raises(ValueError, match="columns"):
        mgen.train_generator(phi, means, probs, (1, 2), cfg)
    with pytest.raises(ValueError, match="class_probs"):
        mgen.train_generator(phi, means, probs[:5], (1,), cfg)


# ----------------------------------------------------------------------------------------------- feature extractor


def test_cpu_extractor_dimension_training_state_and_batch_independence(phi, data):
    assert 15_000 <= phi.dim <= 25_000 and phi.dim == 20_384
    assert not phi.training and all(not p.requires_grad for p in phi.parameters())
    assert phi.train_info["n_train"] == SLICE and phi.train_info["epochs"] == 1
    x = torch.as_tensor(data[0][:9])
    whole = phi.features(x, batch_size=9)
    assert whole.shape == (9, phi.dim)
    assert torch.allclose(phi.features(x[4:5])[0], whole[4], atol=1e-5)
    assert torch.allclose(phi.features(x.flip(0), batch_size=2)[4], whole[4], atol=1e-5)


def test_full_extractor_dimension_and_eval_mode_batchnorm(data):
    fx = mepf.build_feature_extractor("full", seed=0)
    assert fx.dim == 434_176 and len(fx.layer_shapes) == 17
    fx.train()
    x = torch.as_tensor(data[0][:3])
    alone, batched = fx.features(x[1:2]), fx.features(x)
    assert torch.allclose(alone[0], batched[1], atol=1e-4)
    assert fx.training  # features() switches to eval mode temporarily


def test_extractor_save_load_round_trip(phi, data, tmp_path):
    path = tmp_path / "phi.pt"
    mepf.save_extractor(phi, path)
    loaded = mepf.load_extractor(path)
    x = data[0][:16]
    assert torch.equal(loaded.features(x), phi.features(x))
    assert mepf.extractor_fingerprint(loaded) == mepf.extractor_fingerprint(phi)
    assert len(mepf.extractor_fingerprint(phi)) == 64
    other = mepf.build_feature_extractor("cpu", seed=9)
    assert mepf.extractor_fingerprint(other) != mepf.extractor_fingerprint(phi)
    torch.save(other.state_dict(), path)
    with pytest.raises(ValueError, match="fingerprint"):
        mepf.load_extractor(path)


def test_extractor_input_validation(data):
    with pytest.raises(ValueError, match="profile"):
        mepf.build_feature_extractor("vgg")
    fx = mepf.build_feature_extractor("cpu")
    with pytest.raises(ValueError, match="images"):
        fx.features(torch.zeros(3, 27, 27))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fx.features(torch.full((2, 784), 2.0))
    with pytest.raises(ValueError, match="NaN"):
        fx.features(torch.full((2, 784), float("nan")))
    with pytest.raises(ValueError, match="labels"):
        mepf.train_feature_extractor(data[0][:10], data[1][:9])


# ----------------------------------------------------------------------------------------------- end to end


def test_non_private_end_to_end_samples_carry_their_label(phi):
    """Generator trained on real (non-noisy) FMNIST class means; a pixel logistic-regression probe trained on real
    images recognizes the conditioning label of its samples well above chance (0.1)."""
    real = _fmnist()
    if real is None:
        pytest.skip("Fashion-MNIST not installed")
    x, y = torch.as_tensor(real[0]), torch.as_tensor(real[1])
    counts, sums = mepf.embedded_class_sums(phi, x[SLICE:], y[SLICE:], (1,))
    means, probs = mepf.class_means(counts, sums)
    gen, _ = mgen.train_generator(phi, means, probs, (1,), mgen.GeneratorConfig.cpu(steps=60, batch=50), seed=0)
    xs, ys = mgen.sample(gen, 300, seed=1)
    probe = torch.nn.Linear(784, 10)
    opt = torch.optim.Adam(probe.parameters(), lr=1e-2)
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(probe(x[:SLICE]), y[:SLICE]).backward()
        opt.step()
    acc = float((probe(xs.flatten(1)).argmax(1) == ys).float().mean())
    assert acc > 0.3, acc  # ≈0.6 measured
