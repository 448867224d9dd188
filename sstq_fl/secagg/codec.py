"""The client encoding and server decoding of secure aggregation with distributed discrete noise.

The pipeline is that of the distributed discrete Gaussian (DDGauss) mechanism of Kairouz, Liu & Steinke
("The Distributed Discrete Gaussian Mechanism for Federated Learning with Secure Aggregation", ICML 2021,
Sec. 4), with the Skellam noise of Agarwal, Kairouz & Liu ("The Skellam Mechanism for Differentially
Private Federated Learning", NeurIPS 2021) as the alternative noise:

1. clip each client's vector ``x ∈ R^d`` to ``‖x‖₂ ≤ C``;
2. zero-pad to ``p = 2^⌈log₂ d⌉`` and rotate, ``y = H D x / √p`` with ``H`` the ``p × p`` Walsh–Hadamard
   matrix and ``D`` a diagonal of random signs drawn from the round's PUBLIC seed (the same for every client
   of a round); ``H D / √p`` is orthonormal, so ``‖y‖₂ = ‖x‖₂``, and it flattens ``y`` (paper Sec. 4.2);
3. scale to the integer grid, ``y / γ``, and round each coordinate up with probability its fractional part
   (unbiased), redrawing the whole rounding until ``‖r‖₂ ≤`` :func:`rounded_l2_norm_bound` (conditional
   randomized rounding, paper Thm. 1, Eq. 2, and Prop. 22; ``β = 0`` keeps the first draw);
4. add the client's own integer noise ``z``, ``N_Z(0, σ²)`` per coordinate (DDGauss) or ``Sk(σ²)``
   (Skellam), and send ``(r + z) mod m`` with ``m = 2^b``.

The server receives only ``Σ_i (r_i + z_i) mod m`` from secure aggregation; :meth:`SecAggCodec.decode_sum`
centres it into ``[−m/2, m/2)``, multiplies by ``γ`` and applies the inverse rotation ``D H / √p``.  The
decoded sum is exact (up to the rounding and the noise) only while every coordinate of ``Σ_i (r_i + z_i)``
lies in ``[−m/2, m/2)``; a coordinate outside aliases by a multiple of ``m`` and decodes wrongly, and the
server cannot detect it from the modular sum.  :func:`make_codec` chooses ``γ`` so that ``k`` standard
deviations of that sum fit (paper Sec. 4.2 and 4.4), which makes wrap-around rare, not impossible.

All secret randomness (rounding and noise) comes from the generator ``coins`` handed to
:meth:`SecAggCodec.encode`, consumed row by row: for row ``i = 0, 1, …`` first the rounding attempts
(``p`` uniforms each, until one is accepted), then that row's noise (:mod:`.samplers`).  Encoding rows one
call at a time with the same generator therefore gives the same output as encoding them in one batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .samplers import discrete_gaussian, discrete_gaussian_variance, skellam

NOISES = ("ddgauss", "skellam")
DEFAULT_BETA = math.exp(-0.5)
FLATNESS_RHO = 1.0  # the flatness parameter of the randomized Hadamard rotation the scale heuristic uses (paper Sec. 4.2)
MAX_ROUNDING_TRIES = 10_000  # conditional rounding redraws; each is rejected with probability <= beta (paper Thm. 1)
_SIGN_DOMAIN = 0x5EC466  # mixed into the round seed so the rotation signs are a stream of their own


def padded_dim(dim: int) -> int:
    """The least power of two ``≥ dim`` (the Walsh–Hadamard transform needs one)."""
    return 1 << (int(dim) - 1).bit_length()


def rounded_l2_norm_bound(l2: float, beta: float, dim: int) -> float:
    """The L2 norm bound of a vector of L2 norm ``≤ l2`` after (conditional) randomized rounding to the
    integers in dimension ``dim`` (Kairouz, Liu & Steinke, ICML 2021, Thm. 1, Eq. 2, and Prop. 22):
    ``min(l2 + √d, √(l2² + d/4 + √(2 log(1/β)) (l2 + √d/2)))``, the second term only for ``β > 0``.
    The first holds for every rounding (each coordinate moves by less than 1); the second is what
    conditional rounding enforces by redrawing, and a draw exceeds it with probability at most ``β``."""
    if not 0 <= beta < 1:
        raise ValueError(f"beta must be in [0, 1), got {beta}")
    bound1 = l2 + math.sqrt(dim)
    if beta == 0:
        return bound1
    bound2 = math.sqrt(l2 * l2 + 0.25 * dim + math.sqrt(2 * math.log(1 / beta)) * (l2 + 0.5 * math.sqrt(dim)))
    return min(bound1, bound2)


def fwht(x: np.ndarray) -> np.ndarray:
    """``x H / √p`` for each row of ``x`` (shape ``[n, p]``, ``p`` a power of two), ``H`` the Sylvester
    Walsh–Hadamard matrix (symmetric, ``H² = p I``), so the map is orthonormal and its own inverse."""
    n, p = x.shape
    y = np.array(x, dtype=np.float64, copy=True)
    h = 1
    while h < p:
        y = y.reshape(n, p // (2 * h), 2, h)
        y = np.stack((y[:, :, 0, :] + y[:, :, 1, :], y[:, :, 0, :] - y[:, :, 1, :]), axis=2)
        h *= 2
    return y.reshape(n, p) / math.sqrt(p)


def rotation_signs(padded: int, round_seed: int) -> np.ndarray:
    """The diagonal ``D`` of the round's rotation: ``padded`` i.i.d. uniform ``±1`` from the public
    ``round_seed`` (a non-negative integer), float64."""
    rng = np.random.default_rng(np.random.SeedSequence([int(round_seed), _SIGN_DOMAIN]))
    return rng.integers(0, 2, size=padded).astype(np.float64) * 2 - 1


@dataclass(frozen=True)
class SecAggCodec:
    """Parameters of one secure-aggregation round (see the module docstring for the pipeline).

    ``dim`` d; ``clip`` the L2 clip C; ``bits`` b of the field ``Z_m``, ``m = 2^b``; ``scale`` the grid step
    γ; ``local_stddev`` σ, each client's noise standard deviation on the integer grid (DDGauss: the
    parameter of ``N_Z(0, σ²)``; Skellam: ``Sk(μ)`` with ``μ = σ²``); ``noise`` one of :data:`NOISES`;
    ``beta`` β of conditional rounding (0: unconditional)."""

    dim: int
    clip: float
    bits: int
    scale: float
    local_stddev: float
    noise: str = "ddgauss"
    beta: float = DEFAULT_BETA

    def __post_init__(self) -> None:
        checks = [
            (self.dim >= 1, f"dim must be >= 1, got {self.dim}"),
            (self.clip > 0 and math.isfinite(self.clip), f"clip must be finite and > 0, got {self.clip}"),
            (1 <= self.bits <= 62, f"bits must be in [1, 62], got {self.bits}"),
            (self.scale > 0 and math.isfinite(self.scale), f"scale must be finite and > 0, got {self.scale}"),
            (self.local_stddev >= 0 and math.isfinite(self.local_stddev), f"local_stddev must be >= 0, got {self.local_stddev}"),
            (self.noise in NOISES, f"noise must be one of {NOISES}, got {self.noise!r}"),
            (0 <= self.beta < 1, f"beta must be in [0, 1), got {self.beta}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def padded(self) -> int:
        """``p``, the least power of two ``≥ dim``."""
        return padded_dim(self.dim)

    @property
    def modulus(self) -> int:
        """``m = 2^bits``."""
        return 1 << self.bits

    def rounded_l2(self) -> float:
        """``Δ₂``, the L2 bound of a client's rounded integer vector: :func:`rounded_l2_norm_bound` of
        ``C/γ`` in dimension ``p``."""
        return rounded_l2_norm_bound(self.clip / self.scale, self.beta, self.padded)

    def noise_variance(self) -> float:
        """The variance of one client's noise in one integer coordinate: ``Var N_Z(0, σ²)`` (just below
        σ²) or ``σ²`` for Skellam."""
        if self.noise == "ddgauss":
            return discrete_gaussian_variance(self.local_stddev)
        return self.local_stddev**2

    def clip_rows(self, x: np.ndarray) -> np.ndarray:
        """Each row of ``x`` scaled by ``min(1, C/‖row‖₂)``."""
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        return x * np.minimum(1.0, self.clip / np.maximum(norms, np.finfo(np.float64).tiny))

    def rotate(self, x: np.ndarray, round_seed: int) -> np.ndarray:
        """``H D x / √p`` of each row of ``x`` (``[n, dim]`` → ``[n, p]``, zero-padded first)."""
        padded = np.zeros((x.shape[0], self.padded))
        padded[:, : self.dim] = x
        return fwht(padded * rotation_signs(self.padded, round_seed))

    def unrotate(self, y: np.ndarray, round_seed: int) -> np.ndarray:
        """``D H y / √p`` of each row of ``y`` (``[n, p]`` → ``[n, dim]``), the inverse of :meth:`rotate`."""
        return (fwht(y) * rotation_signs(self.padded, round_seed))[:, : self.dim]

    def encode(self, x: np.ndarray, round_seed: int, coins: np.random.Generator) -> np.ndarray:
        """The clients' messages ``(r_i + z_i) mod m``, int64 ``[n, p]`` in ``[0, m)``, for the float rows
        ``x`` (``[n, dim]``, one client each): clip, rotate by ``round_seed``, scale by ``1/γ``, round
        conditionally, add noise, reduce; secret randomness from ``coins`` row by row (module docstring)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.dim or not np.all(np.isfinite(x)):
            raise ValueError(f"encode: x must be a finite float array of shape [n, {self.dim}], got shape {x.shape}")
        scaled = self.rotate(self.clip_rows(x), round_seed) / self.scale
        bound = self.rounded_l2()
        out = np.empty(scaled.shape, dtype=np.int64)
        for i, row in enumerate(scaled):
            out[i] = np.mod(self._round_row(row, bound, coins) + self.noise_row(coins), self.modulus)
        return out

    def _round_row(self, y: np.ndarray, bound: float, coins: np.random.Generator) -> np.ndarray:
        """Conditional randomized rounding of one row: ``⌊y⌋ + Bernoulli(y − ⌊y⌋)`` per coordinate, redrawn
        until ``‖r‖₂ ≤ bound`` (any draw when ``β = 0``), int64."""
        floor = np.floor(y)
        frac = y - floor
        for _ in range(MAX_ROUNDING_TRIES):
            r = floor + (coins.random(y.size) < frac)
            if self.beta == 0 or math.sqrt(float(np.dot(r, r))) <= bound:
                return r.astype(np.int64)
        raise RuntimeError(f"conditional rounding: no draw within the norm bound in {MAX_ROUNDING_TRIES} tries")

    def noise_row(self, coins: np.random.Generator) -> np.ndarray:
        """One client's noise vector of length ``p`` from ``coins``."""
        if self.noise == "ddgauss":
            return discrete_gaussian(self.local_stddev, self.padded, coins)
        return skellam(self.local_stddev**2, self.padded, coins)

    def modular_sum(self, encoded: np.ndarray) -> np.ndarray:
        """``Σ_i encoded[i] mod m`` over the rows (int64 ``[p]``), exactly: rows are added in chunks small
        enough that no partial sum reaches ``2^63``."""
        encoded = np.asarray(encoded)
        if encoded.ndim != 2 or encoded.shape[1] != self.padded:
            raise ValueError(f"modular_sum: expected shape [n, {self.padded}], got {encoded.shape}")
        if encoded.size and (encoded.min() < 0 or encoded.max() >= self.modulus):
            raise ValueError(f"modular_sum: entries must lie in [0, {self.modulus})")
        m = self.modulus
        chunk = ((1 << 63) - m) // (m - 1)  # chunk·(m − 1) + (m − 1) ≤ 2^63 − 1
        acc = np.zeros(self.padded, dtype=np.int64)
        for start in range(0, encoded.shape[0], chunk):
            acc = np.mod(acc + encoded[start : start + chunk].astype(np.int64).sum(axis=0, dtype=np.int64), m)
        return acc

    def centre(self, modsum: np.ndarray) -> np.ndarray:
        """The representative of ``modsum mod m`` in ``[−m/2, m/2)`` (int64)."""
        v = np.mod(np.asarray(modsum, dtype=np.int64), self.modulus)
        return np.where(v >= self.modulus // 2, v - self.modulus, v)

    def decode_sum(self, modsum: np.ndarray, round_seed: int) -> np.ndarray:
        """The estimate of ``Σ_i clip(x_i)`` (float64 ``[dim]``) from the modular sum of the clients'
        messages: centre into ``[−m/2, m/2)``, multiply by γ, rotate back with ``round_seed``, drop the
        padding.  A coordinate of the true integer sum outside ``[−m/2, m/2)`` decodes aliased by a multiple
        of ``m`` (undetectable here; see the module docstring)."""
        modsum = np.asarray(modsum)
        if modsum.shape != (self.padded,):
            raise ValueError(f"decode_sum: expected shape [{self.padded}], got {modsum.shape}")
        y = self.centre(modsum).astype(np.float64) * self.scale
        return self.unrotate(y[None, :], round_seed)[0]


def make_codec(
    dim: int,
    clip: float,
    bits: int,
    noise: str,
    local_stddev: float,
    expected_clients: int,
    k_stddevs: float = 4.0,
    beta: float = DEFAULT_BETA,
) -> SecAggCodec:
    """A codec whose grid step γ fits ``k`` standard deviations of the aggregate in the field (Kairouz, Liu &
    Steinke, ICML 2021, Sec. 4.2 and 4.4): with ``n`` expected clients, ``p`` the padded dimension and ρ the
    rotation's flatness, each coordinate of the integer aggregate has variance at most
    ``ρ C² n²/(p γ²) + n (1/4 + σ²)`` (signal after rotation, rounding, noise), and
    ``2^b = 2k √(that)`` gives ``γ = C n √(ρ/p) / √((2^b/(2k))² − n (1/4 + σ²))``.  This is the authors'
    scale heuristic with the noise stated on the integer grid (σ there is σγ in input units)."""
    n = int(expected_clients)
    if n < 1 or not k_stddevs > 0:
        raise ValueError(f"make_codec: expected_clients must be >= 1 and k_stddevs > 0, got {expected_clients}, {k_stddevs}")
    room = (2.0**bits / (2 * k_stddevs)) ** 2 - n * (0.25 + local_stddev**2)
    if not room > 0:
        raise ValueError(
            f"bits={bits} is too small: {k_stddevs:g} stddevs of {n} clients' rounding and noise (local_stddev={local_stddev:g}) "
            "already exceed the field; raise bits or lower local_stddev, k_stddevs or expected_clients"
        )
    gamma = clip * n * math.sqrt(FLATNESS_RHO / padded_dim(dim)) / math.sqrt(room)
    return SecAggCodec(dim=dim, clip=clip, bits=bits, scale=gamma, local_stddev=local_stddev, noise=noise, beta=beta)
