"""The decoded-data cache (:mod:`sstq_fl.data.cache`): a hit returns the decoded arrays without decoding, a
changed source file is a new entry, a damaged entry is decoded again, and the cache can be turned off."""

import numpy as np
import pytest

from sstq_fl.data import cache, idx
from sstq_fl.data.idx import FMNIST_FILES, load_fashion_mnist, write_idx


@pytest.fixture
def fmnist(tmp_path, monkeypatch):
    """Tiny Fashion-MNIST files in ``tmp_path/src`` and an empty cache in ``tmp_path/cache``."""
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.mkdir()
    rs = np.random.default_rng(0)
    for name, shape in (("train_images", (12, 28, 28)), ("test_images", (5, 28, 28))):
        write_idx(src / FMNIST_FILES[name], rs.integers(0, 256, shape))
    write_idx(src / FMNIST_FILES["train_labels"], rs.integers(0, 10, 12))
    write_idx(src / FMNIST_FILES["test_labels"], rs.integers(0, 10, 5))
    return src


def entries(tmp_path):
    return sorted(p.name for p in (tmp_path / "cache" / "decoded").glob("fashion-mnist-*"))


def refuse_decoding(monkeypatch):
    def boom(p):
        raise AssertionError("decoded again")

    monkeypatch.setattr(idx, "decode_fashion_mnist", boom)


def test_a_second_load_reads_the_cache_and_gives_the_same_arrays(fmnist, tmp_path, monkeypatch):
    first = load_fashion_mnist(str(fmnist))
    assert len(entries(tmp_path)) == 1
    refuse_decoding(monkeypatch)
    second = load_fashion_mnist(str(fmnist))
    for a, b in zip(first, second, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert second[0].dtype == np.float32 and second[1].dtype == np.int64


def test_a_changed_source_file_is_a_new_entry(fmnist, tmp_path):
    before = load_fashion_mnist(str(fmnist))[1]
    write_idx(fmnist / FMNIST_FILES["train_labels"], (before + 1) % 10)
    after = load_fashion_mnist(str(fmnist))[1]
    assert np.array_equal(after, (before + 1) % 10) and len(entries(tmp_path)) == 2


def test_a_damaged_entry_is_decoded_again(fmnist, tmp_path):
    want = load_fashion_mnist(str(fmnist))[0]
    (entry,) = entries(tmp_path)
    npy = tmp_path / "cache" / "decoded" / entry / "x_train.npy"
    npy.write_bytes(npy.read_bytes()[:100])
    assert np.array_equal(load_fashion_mnist(str(fmnist))[0], want)
    assert np.array_equal(np.load(npy), want)  # rewritten whole


def test_an_entry_without_its_manifest_is_not_read(fmnist, tmp_path, monkeypatch):
    load_fashion_mnist(str(fmnist))
    (entry,) = entries(tmp_path)
    (tmp_path / "cache" / "decoded" / entry / cache.MANIFEST).unlink()  # as after an interrupted write
    calls = []
    real = idx.decode_fashion_mnist
    monkeypatch.setattr(idx, "decode_fashion_mnist", lambda p: calls.append(p) or real(p))
    load_fashion_mnist(str(fmnist))
    assert len(calls) == 1


def test_the_cache_can_be_turned_off(fmnist, tmp_path, monkeypatch):
    monkeypatch.setenv(cache.OFF_ENV, "0")
    load_fashion_mnist(str(fmnist))
    assert entries(tmp_path) == []


def test_the_digest_covers_names_bytes_and_the_decoder_version(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"x")
    b.write_bytes(b"x")
    d = cache.source_digest("v1", [a])
    assert d == cache.source_digest("v1", [a]) and d != cache.source_digest("v2", [a])
    assert d != cache.source_digest("v1", [b])
    a.write_bytes(b"y")
    assert d != cache.source_digest("v1", [a])


def test_a_cached_array_is_writable_and_a_write_stays_in_the_process(fmnist, tmp_path, monkeypatch):
    want = load_fashion_mnist(str(fmnist))[0].copy()
    refuse_decoding(monkeypatch)
    got = load_fashion_mnist(str(fmnist))[0]
    got[0, 0] = 7.0  # copy-on-write mapping: allowed, and private to this process
    (entry,) = entries(tmp_path)
    assert np.array_equal(np.load(tmp_path / "cache" / "decoded" / entry / "x_train.npy"), want)
    assert np.array_equal(load_fashion_mnist(str(fmnist))[0], want)
