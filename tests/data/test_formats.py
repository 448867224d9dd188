import pickle

import numpy as np
import pytest

from sstq_fl.data.cifar import load_cifar10, read_batch, write_batch
from sstq_fl.data.idx import find_fashion_mnist, load_fashion_mnist, read_idx, write_idx


def test_idx_round_trip_and_validation(tmp_path):
    a = (np.arange(2 * 28 * 28) % 256).astype(np.uint8).reshape(2, 28, 28)
    for name in ("x-idx3-ubyte", "x-idx3-ubyte.gz"):
        write_idx(tmp_path / name, a)
        assert np.array_equal(read_idx(tmp_path / name), a)
    raw = (tmp_path / "x-idx3-ubyte").read_bytes()
    (tmp_path / "bad").write_bytes(raw[:-5])
    with pytest.raises(ValueError, match="payload"):
        read_idx(tmp_path / "bad")
    (tmp_path / "bad2").write_bytes(b"\x01\x02" + raw[2:])
    with pytest.raises(ValueError, match="magic"):
        read_idx(tmp_path / "bad2")


def test_fashion_mnist_loader_on_tiny_files(tmp_path):
    rs = np.random.default_rng(0)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", rs.integers(0, 256, (12, 28, 28)))
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", rs.integers(0, 10, 12))
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", rs.integers(0, 256, (5, 28, 28)))
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", rs.integers(0, 10, 5))
    xtr, ytr, xte, yte = load_fashion_mnist(str(tmp_path))
    assert xtr.shape == (12, 784) and xte.shape == (5, 784) and 0 <= xtr.min() and xtr.max() <= 1
    with pytest.raises(FileNotFoundError, match="not found"):
        find_fashion_mnist(str(tmp_path / "nowhere"))


def test_cifar_batches_in_the_official_format(tmp_path):
    rs = np.random.default_rng(1)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        write_batch(tmp_path / name, rs.integers(0, 256, (4, 3072)), rs.integers(0, 10, 4))
    xtr, ytr, xte, yte = load_cifar10(tmp_path)
    assert xtr.shape == (20, 3072) and ytr.shape == (20,) and xte.shape == (4, 3072)


def test_hostile_cifar_pickle_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (tmp_path / "data_batch_1").write_bytes(pickle.dumps({b"data": Evil(), b"labels": [1]}))
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        read_batch(tmp_path / "data_batch_1")
