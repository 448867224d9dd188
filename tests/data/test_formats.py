import gzip
import pickle

import numpy as np
import pytest

from sstq_fl.data import idx
from sstq_fl.data.cifar import load_cifar10, read_batch, write_batch
from sstq_fl.data.idx import FMNIST_FILES, find_fashion_mnist, load_fashion_mnist, read_idx, write_idx


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


def _write_fmnist(folder, skip=()):
    """The four Fashion-MNIST ``.gz`` IDX files (tiny, valid), leaving out the names in ``skip``."""
    rs = np.random.default_rng(3)
    arrays = {"train-images-idx3-ubyte.gz": rs.integers(0, 256, (40, 28, 28)),
              "train-labels-idx1-ubyte.gz": rs.integers(0, 10, 40),
              "t10k-images-idx3-ubyte.gz": rs.integers(0, 256, (6, 28, 28)),
              "t10k-labels-idx1-ubyte.gz": rs.integers(0, 10, 6)}
    folder.mkdir(parents=True, exist_ok=True)
    for name, a in arrays.items():
        if name not in skip:
            write_idx(folder / name, a)
    return folder


@pytest.mark.parametrize("keep", [0.5, 0.9, 12 / 100])
def test_truncated_gz_idx_is_a_one_line_value_error_naming_the_file(tmp_path, keep):
    _write_fmnist(tmp_path)
    f = tmp_path / "train-images-idx3-ubyte.gz"
    raw = f.read_bytes()
    f.write_bytes(raw[: max(11, int(len(raw) * keep))])
    for call in (lambda: read_idx(f), lambda: load_fashion_mnist(str(tmp_path))):
        with pytest.raises(ValueError, match=r"train-images-idx3-ubyte\.gz.*truncated or corrupt") as info:
            call()
        assert "\n" not in str(info.value)


def test_corrupt_gz_idx_is_a_value_error_naming_the_file(tmp_path):
    _write_fmnist(tmp_path)
    f = tmp_path / "t10k-images-idx3-ubyte.gz"
    f.write_bytes(f.read_bytes()[:10] + b"\xff" * 64)  # a gzip header, then no valid deflate stream (zlib.error) ...
    with pytest.raises(ValueError, match=r"t10k-images-idx3-ubyte\.gz.*truncated or corrupt"):
        read_idx(f)
    raw = bytearray(gzip.compress(b"\x00\x00\x08\x01\x00\x00\x00\x02ab"))
    raw[-8] ^= 0xFF  # ... and a CRC mismatch (gzip.BadGzipFile, an OSError)
    f.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"t10k-images-idx3-ubyte\.gz.*truncated or corrupt"):
        read_idx(f)


def test_data_dir_missing_one_file_names_the_needed_files(tmp_path):
    _write_fmnist(tmp_path, skip={"t10k-labels-idx1-ubyte.gz"})
    with pytest.raises(FileNotFoundError) as info:
        load_fashion_mnist(str(tmp_path))
    msg = str(info.value)
    assert "missing t10k-labels-idx1-ubyte.gz" in msg and str(tmp_path) in msg
    assert all(name in msg for name in FMNIST_FILES.values()) and "\n" not in msg


def test_fmnist_env_var_without_the_data_is_an_error_not_a_fallback(tmp_path, monkeypatch):
    other = _write_fmnist(tmp_path / "other")
    monkeypatch.setattr(idx, "FMNIST_SEARCH", [str(other), str(tmp_path / "cache")])
    monkeypatch.delenv("SSTQ_FL_FMNIST", raising=False)
    assert find_fashion_mnist(download=False) == other
    monkeypatch.setenv("SSTQ_FL_FMNIST", str(tmp_path / "nonexistent"))
    with pytest.raises(FileNotFoundError, match=r"\$SSTQ_FL_FMNIST.*nonexistent"):
        find_fashion_mnist(download=False)
    with pytest.raises(FileNotFoundError, match=r"\$SSTQ_FL_FMNIST.*nonexistent"):
        load_fashion_mnist()
    monkeypatch.setenv("SSTQ_FL_FMNIST", str(_write_fmnist(tmp_path / "mine")))
    assert find_fashion_mnist(download=False) == tmp_path / "mine"
    with pytest.raises(FileNotFoundError, match=r"not found in .*nowhere \(no such folder\)"):
        find_fashion_mnist(str(tmp_path / "nowhere"))


def test_cli_run_with_a_truncated_data_dir_exits_2_with_one_line(tmp_path, capsys):
    from sstq_fl.cli import main

    _write_fmnist(tmp_path)
    f = tmp_path / "train-labels-idx1-ubyte.gz"
    f.write_bytes(f.read_bytes()[:20])
    rc = main(["run", "--task", "fmnist", "--data-dir", str(tmp_path), "--rounds", "1", "--clients", "2",
               "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("sstq-fl: error: ") and "train-labels-idx1-ubyte.gz" in err
    assert "truncated" in err and "\n" not in err


def test_truncated_or_hostile_cifar_batch_is_a_value_error_naming_the_file(tmp_path):
    rs = np.random.default_rng(5)
    write_batch(tmp_path / "data_batch_1", rs.integers(0, 256, (4, 3072)), rs.integers(0, 10, 4))
    raw = (tmp_path / "data_batch_1").read_bytes()
    damaged = [raw[:cut] for cut in (0, 40, len(raw) // 2, len(raw) - 1)] + [raw.replace(b"latin1", b"latXn1")]
    for blob in damaged:  # truncated; a damaged codec name (LookupError inside the unpickler)
        (tmp_path / "cut").write_bytes(blob)
        with pytest.raises(ValueError, match=r"cut.*truncated or corrupt") as info:
            read_batch(tmp_path / "cut")
        assert "\n" not in str(info.value)

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (tmp_path / "evil").write_bytes(pickle.dumps({b"data": Evil(), b"labels": [1]}))
    with pytest.raises(ValueError, match=r"evil.*refusing to load builtins\.print"):
        read_batch(tmp_path / "evil")
