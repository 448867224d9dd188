"""Fast Walsh–Hadamard transforms, batched over rows, with interchangeable kernels.

``fwht_(x)`` applies the *unnormalised* Sylvester–Hadamard matrix ``H`` (entries ±1,
``H H = N I``) to every row of a ``[n, N]`` tensor in place, ``N`` a power of two.

Kernels are registered by name in :data:`KERNELS` (a taken name is refused). Which one runs by
default is our choice, by measurement (``sstq-fl bench fwht``; figures in
``benchmarks/results/fwht.json``): on the CPU the SIMD kernel of ``fht-cpu`` is about 10x faster
than the best pure-torch transform; on CUDA the ``fast-hadamard-transform`` kernel is used when
installed. The pure-torch kernel works on any device and any float dtype, and is always
available.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...lazy import lazy_module
from ...registry import Registry

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")

Kernel = Callable[["torch.Tensor"], "torch.Tensor"]

KERNELS: Registry[Kernel] = Registry("FWHT kernel")
"""The in-place FWHT kernels by name; a second kernel under a taken name is refused."""
_AVAILABLE: dict[str, Callable[[torch.device], bool]] = {}


def register_kernel(name: str, available: Callable[[torch.device], bool]) -> Callable[[Kernel], Kernel]:
    """Register an in-place row-wise FWHT kernel under ``name``, with ``available(device)`` saying
    whether it runs there (a taken name is a one-line ``ValueError``)."""

    def deco(fn: Kernel) -> Kernel:
        KERNELS.register(name, fn)
        _AVAILABLE[name] = available
        return fn

    return deco


def kernels() -> list[str]:
    """The kernel names, in registration order."""
    return list(KERNELS.as_dict())


def is_available(name: str, device: torch.device) -> bool:
    return name in KERNELS and _AVAILABLE[name](device)


def _check(x: torch.Tensor) -> int:
    if x.dim() != 2:
        raise ValueError(f"fwht expects a [rows, N] tensor, got shape {tuple(x.shape)}")
    n = x.shape[1]
    if n < 1 or n & (n - 1):
        raise ValueError(f"fwht length must be a power of two, got {n}")
    if not x.is_floating_point():
        raise ValueError(f"fwht expects a floating tensor, got {x.dtype}")
    return n


_HCACHE: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}


def hadamard_matrix(n: int, dtype: torch.dtype | None = None, device: torch.device | str = "cpu") -> torch.Tensor:
    """Dense unnormalised Sylvester–Hadamard matrix of order ``n`` (cached; ``dtype`` float32 unless given)."""
    dtype = torch.float32 if dtype is None else dtype
    key = (n, dtype, torch.device(device))
    if key not in _HCACHE:
        h = torch.ones(1, 1, dtype=torch.float64)
        while h.shape[0] < n:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        _HCACHE[key] = h.to(dtype=dtype, device=device)
    return _HCACHE[key]


@register_kernel("torch", lambda dev: True)
def fwht_torch_(x: torch.Tensor) -> torch.Tensor:
    """Blocked pure-torch FWHT: ``H_N = H_{N/k} ⊗ H_k`` applied as two batched matmuls.

    Works on every device and dtype.  For ``N ≤ 4096`` one dense matmul is used.
    """
    n = _check(x)
    rows = x.shape[0]
    if n <= 4096:
        x.copy_(x @ hadamard_matrix(n, x.dtype, x.device))
        return x
    k = 1 << (int(math.log2(n)) // 2)  # inner block, the outer block is n // k >= k
    inner = hadamard_matrix(k, x.dtype, x.device)
    outer = hadamard_matrix(n // k, x.dtype, x.device)
    y = (x.reshape(rows * (n // k), k) @ inner).reshape(rows, n // k, k)
    x.copy_(torch.matmul(outer, y).reshape(rows, n))
    return x


def _has_fht_cpu(dev: torch.device) -> bool:
    if dev.type != "cpu":
        return False
    try:
        import fht_cpu  # noqa: F401
    except ImportError:
        return False
    return True


@register_kernel("fht-cpu", _has_fht_cpu)
def fwht_fht_cpu_(x: torch.Tensor) -> torch.Tensor:
    """SIMD kernel from the ``fht-cpu`` package (CPU, contiguous float32/float64)."""
    import fht_cpu

    _check(x)
    if x.dtype not in (torch.float32, torch.float64) or not x.is_contiguous():
        raise ValueError("fht-cpu needs a contiguous float32/float64 CPU tensor")
    fht_cpu.fht(x.numpy(), axis=-1, inplace=True, num_threads=torch.get_num_threads())
    return x


def _has_fast_hadamard(dev: torch.device) -> bool:
    if dev.type != "cuda":
        return False
    try:
        import fast_hadamard_transform  # noqa: F401
    except ImportError:
        return False
    return True


@register_kernel("fast-hadamard-transform", _has_fast_hadamard)
def fwht_cuda_(x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - needs CUDA
    """Tri Dao's CUDA kernel (``fast-hadamard-transform``); fp32 path, scale 1."""
    from fast_hadamard_transform import hadamard_transform

    _check(x)
    x.copy_(hadamard_transform(x, scale=1.0))
    return x


_PREFERENCE = {"cpu": ["fht-cpu", "torch"], "cuda": ["fast-hadamard-transform", "torch"]}


def default_kernel(device: torch.device | str) -> str:
    dev = torch.device(device)
    for name in _PREFERENCE.get(dev.type, ["torch"]):
        if is_available(name, dev):
            return name
    return "torch"


def fwht_(x: torch.Tensor, kernel: str | None = None) -> torch.Tensor:
    """In-place unnormalised FWHT of each row of ``x`` using ``kernel`` (default: best)."""
    name = kernel or default_kernel(x.device)
    fn = KERNELS[name]
    if x.dtype not in (torch.float32, torch.float64) and name == "fht-cpu":
        fn = KERNELS["torch"]
    return fn(x)
