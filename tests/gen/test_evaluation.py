import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import torch

from sstq_fl.gen import evaluation as ev
from sstq_fl.gen.evaluation import (
    DOMAIN_FD_NOTE,
    as_images,
    as_labels,
    domain_fd,
    downstream_accuracy,
    frechet_distance,
    frechet_distance_from_stats,
    inception_fid,
    inception_preprocess,
    load_evaluator,
    membership_auc,
    save_sample_grid,
    train_evaluator,
)

FMNIST = Path("/usr/share/datasets/fashion-mnist")


def blobs(n: int, seed: int, noise: float = 0.15) -> tuple[np.ndarray, np.ndarray]:
    """An easily separable 10-class image set: class c is a bright 6×5 patch at its own place, plus noise."""
    rs = np.random.default_rng(seed)
    y = rs.permutation(np.arange(n) % 10)
    x = rs.normal(0.1, noise, (n, 1, 28, 28))
    for i, c in enumerate(y):
        r0, c0 = 3 + 13 * (c // 5), 1 + 5 * (c % 5)
        x[i, 0, r0 : r0 + 6, c0 : c0 + 5] += 0.8
    return np.clip(x, 0, 1).astype(np.float32), y.astype(np.int64)


@pytest.fixture(scope="module")
def data():
    return blobs(1000, 0), blobs(300, 1)


# ----------------------------------------------------------------------------------- Fréchet distance
def _spd(d: int, rs: np.random.Generator) -> np.ndarray:
    a = rs.standard_normal((d, d))
    return a @ a.T / d + 0.1 * np.eye(d)


def test_fd_closed_forms_and_symmetry(rs):
    a = rs.standard_normal((400, 6))
    assert frechet_distance(a, a) == pytest.approx(0, abs=1e-9)
    mu1, mu2, d1, d2 = rs.standard_normal(5), rs.standard_normal(5), rs.random(5) + 0.1, rs.random(5) + 0.1
    want = np.sum((mu1 - mu2) ** 2) + np.sum((np.sqrt(d1) - np.sqrt(d2)) ** 2)
    assert frechet_distance_from_stats(mu1, np.diag(d1), mu2, np.diag(d2)) == pytest.approx(want, rel=1e-10)
    s1, s2 = _spd(8, rs), _spd(8, rs)
    m1, m2 = rs.standard_normal(8), rs.standard_normal(8)
    ref = np.sum((m1 - m2) ** 2) + np.trace(s1 + s2 - 2 * scipy.linalg.sqrtm(s1 @ s2).real)
    assert frechet_distance_from_stats(m1, s1, m2, s2) == pytest.approx(ref, rel=1e-8)
    assert frechet_distance_from_stats(m2, s2, m1, s1) == pytest.approx(ref, rel=1e-8)
    b = rs.standard_normal((300, 6)) * 2 + 1
    assert frechet_distance(a, b) == pytest.approx(frechet_distance(b, a), rel=1e-9)


def test_fd_of_samples_approaches_the_gaussian_value(rs):
    s1, s2, m1, m2 = _spd(4, rs), _spd(4, rs), np.zeros(4), np.ones(4)
    a = rs.multivariate_normal(m1, s1, 40_000)
    b = rs.multivariate_normal(m2, s2, 40_000)
    assert frechet_distance(a, b) == pytest.approx(frechet_distance_from_stats(m1, s1, m2, s2), rel=0.05)


def test_fd_rejects_bad_input(rs):
    a = rs.standard_normal((10, 3))
    with pytest.raises(ValueError, match="equal d"):
        frechet_distance(a, a[:, :2])
    with pytest.raises(ValueError, match="at least 2"):
        frechet_distance(a, a[:1])
    bad = a.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        frechet_distance(bad, a)


# ----------------------------------------------------------------------------------- probes
def test_probe_learns_real_structure_and_not_random_labels(data):
    (x, y), (tx, ty) = data
    assert downstream_accuracy(x, y, tx, ty, epochs=2, seed=0) > 0.9
    shuffled = np.random.default_rng(9).permutation(y)
    assert downstream_accuracy(x, shuffled, tx, ty, epochs=2, seed=0) < 0.25
    acc = downstream_accuracy(x, y, tx, ty, epochs=2, seed=0, probe="logreg")
    assert acc > 0.8 and acc == downstream_accuracy(x, y, tx, ty, epochs=2, seed=0, probe="logreg")


@pytest.mark.skipif(not FMNIST.is_dir(), reason="Fashion-MNIST (dataset-fashion-mnist) not installed")
def test_lenet_probe_on_a_fashion_mnist_slice():
    from sstq_fl.data.idx import read_idx

    x = read_idx(FMNIST / "t10k-images-idx3-ubyte.gz")[:2000].astype(np.float32) / 255
    y = read_idx(FMNIST / "t10k-labels-idx1-ubyte.gz")[:2000].astype(np.int64)
    assert downstream_accuracy(x[:1000], y[:1000], x[1000:], y[1000:], epochs=2, seed=1) > 0.6


def test_inputs_are_checked(data):
    (x, y), _ = data
    assert as_images(x.reshape(-1, 784)).shape == (1000, 1, 28, 28)
    with pytest.raises(ValueError, match="expected \\[n, 1, 28, 28\\]"):
        as_images(x[:, :, :14])
    with pytest.raises(ValueError, match=r"\(x \+ 1\) / 2"):
        as_images(2 * x - 1)
    nan = x.copy()
    nan[3, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        downstream_accuracy(nan, y, x, y, epochs=1)
    with pytest.raises(ValueError, match="shape"):
        as_labels(y[:-1], 1000)
    with pytest.raises(ValueError, match="0..9"):
        as_labels(y + 1, 1000)
    with pytest.raises(ValueError, match="unknown probe"):
        downstream_accuracy(x, y, x, y, probe="resnet")
    with pytest.raises(ValueError, match="epochs"):
        downstream_accuracy(x, y, x, y, epochs=0)


# ----------------------------------------------------------------------------------- evaluator + domain-FD
@pytest.fixture(scope="module")
def evaluator(data, tmp_path_factory):
    (x, y), _ = data
    path = tmp_path_factory.mktemp("ev") / "sub" / "evaluator.pt"
    return train_evaluator(x[:400], y[:400], epochs=2, seed=0, cache_path=path, batch_size=32)


def test_evaluator_is_cached_hashed_and_reused(data, evaluator, tmp_path, monkeypatch):
    (x, y), (tx, ty) = data
    e, path = evaluator, evaluator.path
    assert path.parent.name == "sub" and e.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and e.path == path
    monkeypatch.setattr(ev, "_fit", lambda *a, **k: pytest.fail("retrained despite a matching cache"))
    again = train_evaluator(x[:400], y[:400], epochs=2, seed=0, cache_path=path, batch_size=32)
    assert again.sha256 == e.sha256
    assert np.array_equal(again.features_and_predictions(tx)[0], e.features_and_predictions(tx)[0])
    assert load_evaluator(path, expected_sha256=e.sha256).sha256 == e.sha256
    copy = tmp_path / "copy.pt"
    copy.write_bytes(path.read_bytes())
    calls = []
    monkeypatch.setattr(ev, "_fit", lambda model, *a, **k: calls.append(a[2:]) or model.eval())
    other = train_evaluator(x[:400], y[:400], epochs=2, seed=1, cache_path=copy, batch_size=32)
    assert calls == [(2, 1, 32)] and other.sha256 == hashlib.sha256(copy.read_bytes()).hexdigest() != e.sha256
    with pytest.raises(ValueError, match="differs"):
        load_evaluator(path, expected_sha256="0" * 64)
    with pytest.raises(FileNotFoundError, match="not found"):
        load_evaluator(tmp_path / "none.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="delete it to retrain"):
        load_evaluator(tmp_path / "junk.pt")


def test_domain_fd_orders_good_and_bad_samples(data, evaluator):
    (x, y), (tx, ty) = data
    e = evaluator
    gx, gy = blobs(300, 2)
    good = domain_fd(e, tx, ty, gx, gy)
    assert good["note"] == DOMAIN_FD_NOTE and good["metric"] == "domain_fd" and good["evaluator_sha256"] == e.sha256
    assert good["label_consistency"] > 0.9 and set(good["per_class_fd"]) == {str(c) for c in range(10)}
    noisy = np.clip(gx + np.random.default_rng(3).normal(0, 0.3, gx.shape), 0, 1).astype(np.float32)
    bad = domain_fd(e, tx, ty, noisy, np.random.default_rng(4).permutation(gy))
    assert bad["domain_fd"] > 3 * good["domain_fd"] and bad["label_consistency"] < 0.3
    json.dumps(good)
    one = domain_fd(e, tx, ty, gx[:5], np.array([0, 0, 1, 2, 2]))
    assert one["per_class_fd"]["1"] is None and one["per_class_fd"]["0"] is not None


def test_domain_fd_refuses_an_unbalanced_real_set(data, evaluator):
    """priv_test is sorted by class: its prefix holds the first classes only, which the FD must refuse."""
    _, (tx, ty) = data
    order = np.argsort(ty, kind="stable")
    sx, sy = tx[order], ty[order]
    gx, gy = blobs(150, 2)
    with pytest.raises(ValueError, match=r"classes \[5, 6, 7, 8, 9\] of the generated samples are absent"):
        domain_fd(evaluator, sx[:150], sy[:150], gx, gy)
    skew = np.concatenate([np.flatnonzero(sy == c)[: 3 if c == 9 else 30] for c in range(10)])
    with pytest.raises(ValueError, match=r"classes \[9\] have fewer than half the mean count"):
        domain_fd(evaluator, sx[skew], sy[skew], gx, gy)
    idx = ev.balanced_indices(sy, 150, seed=0)
    assert np.bincount(sy[idx], minlength=10).tolist() == [15] * 10
    assert domain_fd(evaluator, sx[idx], sy[idx], gx, gy)["n_real"] == 150


def test_balanced_indices_are_seeded_exact_and_checked():
    y = np.repeat(np.arange(10), [30, 25, 40, 30, 30, 30, 30, 30, 30, 12])
    a, b = ev.balanced_indices(y, 103, seed=1), ev.balanced_indices(y, 103, seed=1)
    counts = np.bincount(y[a], minlength=10)
    assert np.array_equal(a, b) and len(np.unique(a)) == 103 and set(counts.tolist()) == {10, 11}
    assert not np.array_equal(a, ev.balanced_indices(y, 103, seed=2))
    with pytest.raises(ValueError, match=r"class\(es\) \[9\] have fewer than 13"):
        ev.balanced_indices(y, 130)
    with pytest.raises(ValueError, match="need 0 < m"):
        ev.balanced_indices(y, 0)


# ----------------------------------------------------------------------------------- Inception FID
def test_inception_fid_never_downloads_and_fails_clearly(tmp_path, data):
    (x, _), _ = data
    missing = tmp_path / "pt_inception-2015-12-05-6726825d.pth"
    with pytest.raises(FileNotFoundError, match="pt_inception-2015-12-05-6726825d.pth.*not found"):
        inception_fid(missing, x[:4], x[4:8])
    torch.save({"conv.weight": torch.zeros(1)}, tmp_path / "junk.pth")
    with pytest.raises(ValueError, match="not an Inception-v3 state dict"):
        inception_fid(tmp_path / "junk.pth", x[:4], x[4:8])
    torch.save({"fc.weight": torch.zeros(1008, 2048)}, tmp_path / "partial.pth")
    try:
        import torchvision  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="torchvision"):
            inception_fid(tmp_path / "partial.pth", x[:4], x[4:8])
    else:
        with pytest.raises(RuntimeError):  # torchvision present: strict load of an incomplete state dict
            inception_fid(tmp_path / "partial.pth", x[:4], x[4:8])


def test_inception_preprocessing():
    x = torch.rand(2, 1, 28, 28)
    out = inception_preprocess(x)
    assert out.shape == (2, 3, 299, 299) and torch.equal(out[:, 0], out[:, 2])
    assert -1 <= out.min() and out.max() <= 1


# ----------------------------------------------------------------------------------- grid and audit
def test_sample_grid_is_a_png_with_one_row_per_class(tmp_path, data):
    (x, y), _ = data
    path = save_sample_grid(x[:200], y[:200], tmp_path / "out" / "grid.png", per_class=7, pipeline="test", epsilon=1.0)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread

    img = imread(path)
    assert img.shape[1] >= 800 and img.shape[0] > img.shape[1]  # 900 px wide, ten labelled rows
    assert [p.name for p in path.parent.iterdir()] == ["grid.png"]


def test_membership_auc(rs):
    same = membership_auc(rs.normal(0, 1, 2000), rs.normal(0, 1, 2000))
    assert abs(same - 0.5) < 0.05
    assert membership_auc(rs.normal(0, 1, 500), rs.normal(10, 1, 500)) > 0.999
    assert membership_auc(rs.normal(10, 1, 500), rs.normal(0, 1, 500)) < 0.001
    m, n = rs.integers(0, 5, 40).astype(float), rs.integers(0, 5, 30).astype(float)
    brute = np.mean([(b > a) + 0.5 * (b == a) for a in m for b in n])
    assert membership_auc(m, n) == pytest.approx(brute, abs=1e-12)
    assert membership_auc(np.ones(3), np.ones(4)) == 0.5
    with pytest.raises(ValueError, match="NaN"):
        membership_auc(np.array([np.nan]), np.ones(2))
    with pytest.raises(ValueError, match="non-empty"):
        membership_auc(np.array([]), np.ones(2))
