import pytest
import torch

from sstq_fl.encoders.maths.fwht import default_kernel, fwht_, hadamard_matrix, is_available, kernels


@pytest.mark.parametrize("n", [1, 2, 8, 64, 4096, 8192, 65536])
def test_kernels_match_dense_definition(n):
    x = torch.randn(3, n, dtype=torch.float64)
    if n <= 4096:
        ref = x @ hadamard_matrix(n, torch.float64)
    else:
        ref = fwht_(x.clone(), "torch")
    for name in kernels():
        if is_available(name, torch.device("cpu")):
            assert torch.allclose(fwht_(x.clone(), name), ref, atol=1e-9 * n)


def test_involution_and_float32():
    x = torch.randn(5, 1024)
    y = fwht_(fwht_(x.clone())) / 1024
    assert torch.allclose(x, y, atol=1e-5)


def test_cpu_prefers_simd_kernel_when_installed():
    assert default_kernel("cpu") in ("fht-cpu", "torch")
    if is_available("fht-cpu", torch.device("cpu")):
        assert default_kernel("cpu") == "fht-cpu"


def test_rejects_bad_lengths():
    with pytest.raises(ValueError, match="power of two"):
        fwht_(torch.zeros(2, 12))
    with pytest.raises(ValueError, match="unknown FWHT kernel"):
        fwht_(torch.zeros(2, 8), "nope")


def test_a_second_kernel_under_a_taken_name_is_refused():
    from sstq_fl.encoders.maths.fwht import KERNELS, register_kernel

    with pytest.raises(ValueError, match="FWHT kernel named 'torch' is already registered") as e:
        register_kernel("torch", lambda dev: True)(lambda x: x)
    assert "\n" not in str(e.value) and kernels()[0] == "torch" and KERNELS["torch"] is not None
