"""StraightDP Stage 1: the moment release and its post-processing into a Gaussian mixture.

The PCA feature space and the order of the post-processing steps are our own reading.

Per-record feature: ``f(z) = clip_{R_f}(P(z − m_pub))`` where ``P`` is a public-PCA basis with orthonormal
rows (``p = 64``; CPU profile ``p = 16``), ``m_pub`` the public mean and ``R_f`` a public norm quantile, with
``clip_R(v) = v·min(1, R/‖v‖)``.  A client sends, per class ``y``, the count and the whitened sum
``Σ_{i: y_i = y} f_i/(2R_f)`` (whitening by ``(1, 2R_f)``), and the unnormalised second moment ``Σ_i f_i f_iᵀ``.

Sensitivities.  StraightDP's ledger is add/remove with a public ``N_decl`` (a removed record is a zero "null
record"), so a release's shift is one record's contribution, attained by any record with ``‖P(z − m_pub)‖ ≥ R_f``
(then ``‖f‖ = R_f``):

* (counts, sums_w) moves by ``‖(e_y, f/(2R_f))‖ = √(1 + ‖f‖²/(4R_f²)) ≤ √5/2`` (:data:`CLASS_MOMENTS_SHIFT`);
* ``Σ f fᵀ`` moves by ``‖f fᵀ‖_F = ‖f‖² ≤ R_f²`` (:func:`second_moment_shift`).

Both maxima are met by the same record, so the composition of the two Gaussian releases is tight, not merely an
upper bound.  For reference, replace-one shifts are ``√(5/2)`` (different classes; ``1`` for the same class) and
``2R_f²``; they bound the add/remove shifts too, but declaring them there would add √2× and 2× the necessary noise.

Everything after the Gaussian release is post-processing (:func:`postprocess`, steps 1–6), and yields the
:class:`GaussianMixture` whose Bayes flow field is :mod:`sstq_fl.gen.straightdp.field`.  All maths is numpy float64;
nothing here touches the network or the global RNG.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...privacy.clipping import clip_rows

CLASS_MOMENTS_SHIFT = float(np.sqrt(5.0) / 2)
"""The add/remove ℓ2 shift of the whitened (counts, sums): ``√(1 + 1/4)``, one record's largest contribution."""
ORTHONORMAL_ATOL = 1e-6
"""Tolerance on ``max |PPᵀ − I|`` / ``max |WᵀW − I|`` for a basis to count as orthonormal."""


# ----------------------------------------------------------------------------------------------- input checks


def _matrix(a: Any, name: str, rows: int | None = None, cols: int | None = None) -> np.ndarray:
    """A finite float64 ``[rows, cols]`` array (``None``: any size)."""
    m = np.asarray(a, dtype=np.float64)
    if m.ndim != 2 or (rows is not None and m.shape[0] != rows) or (cols is not None and m.shape[1] != cols):
        raise ValueError(f"{name}: expected a [{rows or 'n'}, {cols or 'd'}] matrix, got shape {m.shape}")
    if not np.all(np.isfinite(m)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return m


def _vector(a: Any, name: str, size: int | None = None) -> np.ndarray:
    """A finite float64 vector of length ``size`` (``None``: any)."""
    v = np.asarray(a, dtype=np.float64)
    if v.ndim != 1 or (size is not None and v.shape[0] != size):
        raise ValueError(f"{name}: expected a vector of length {size or 'n'}, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return v


def _flat(x: Any, name: str, dim: int | None = None) -> np.ndarray:
    """Records ``[n, ...]`` flattened to a finite float64 ``[n, D]`` matrix."""
    a = np.asarray(x)
    if a.ndim < 2:
        raise ValueError(f"{name}: expected records [n, ...] with at least 2 dimensions, got shape {a.shape}")
    return _matrix(a.reshape(a.shape[0], -1), name, cols=dim)


def _positive(value: float, name: str) -> float:
    """``value`` as a finite float > 0."""
    v = float(value)
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name}: must be a finite number > 0, got {value}")
    return v


def _labels(y: Any, n: int | None, classes: int, name: str = "y") -> np.ndarray:
    """int64 labels ``[n]`` in ``[0, classes)`` (``n = None``: any length)."""
    a = np.asarray(y)
    if a.ndim != 1 or (n is not None and a.shape[0] != n):
        raise ValueError(f"{name}: expected shape ({n if n is not None else 'n'},), got {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name}: labels must be integers, got dtype {a.dtype}")
    a = a.astype(np.int64)
    if a.size and (a.min() < 0 or a.max() >= classes):
        raise ValueError(f"{name}: labels must lie in [0, {classes}), got [{a.min()}, {a.max()}]")
    return a


def _check_orthonormal_rows(m: np.ndarray, name: str) -> None:
    """Raise unless ``m mᵀ = I`` within :data:`ORTHONORMAL_ATOL`."""
    err = np.max(np.abs(m @ m.T - np.eye(m.shape[0]))) if m.size else 0.0
    if err > ORTHONORMAL_ATOL:
        raise ValueError(f"{name}: rows must be orthonormal (max |M Mᵀ − I| = {err:.3g})")


def _frozen(a: np.ndarray) -> np.ndarray:
    """A read-only copy, so frozen dataclasses really are immutable."""
    c = np.array(a, dtype=np.float64, copy=True)
    c.setflags(write=False)
    return c


# ----------------------------------------------------------------------------------------------- public basis


def public_pca(public_x: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Public-PCA basis ``P [p, D]`` and public mean ``m_pub [D]`` (pixel space).

    ``m_pub = (1/n) Σ_i z_i`` and the rows of ``P`` are the top-``p`` eigenvectors of the public scatter matrix
    ``Σ_i (z_i − m_pub)(z_i − m_pub)ᵀ`` (orthonormal, by decreasing eigenvalue).  Sign convention, for
    determinism: each row's entry of largest absolute value (the first such on ties) is positive.
    """
    x = _flat(public_x, "public_x")
    n, d = x.shape
    if isinstance(p, bool) or not isinstance(p, int | np.integer) or not 1 <= p <= min(n, d):
        raise ValueError(f"p: must be an integer in [1, min(n, D)] = [1, {min(n, d)}], got {p}")
    m_pub = x.mean(axis=0)
    xc = x - m_pub
    _, vecs = np.linalg.eigh(xc.T @ xc)
    basis = vecs[:, ::-1][:, :p].T.copy()
    lead = basis[np.arange(p), np.argmax(np.abs(basis), axis=1)]
    basis *= np.where(lead < 0, -1.0, 1.0)[:, None]
    return basis, m_pub


def _project(x: np.ndarray, basis: np.ndarray, m_pub: np.ndarray) -> np.ndarray:
    """``P(z − m_pub)`` row-wise, with shape checks; ``[n, p]``."""
    b = _matrix(basis, "P")
    xf = _flat(x, "x", dim=b.shape[1])
    m = _vector(m_pub, "m_pub", size=b.shape[1])
    return (xf - m) @ b.T


def norm_quantile(public_x: np.ndarray, P: np.ndarray, m_pub: np.ndarray, q: float = 0.99) -> float:
    """``R_f``: the ``q``-quantile of ``‖P(z − m_pub)‖`` over the public records (linear interpolation)."""
    if not 0 < float(q) <= 1:
        raise ValueError(f"q: must lie in (0, 1], got {q}")
    norms = np.linalg.norm(_project(public_x, P, m_pub), axis=1)
    if norms.size == 0:
        raise ValueError("public_x: no records")
    r_f = float(np.quantile(norms, float(q)))
    if r_f <= 0:
        raise ValueError(f"public_x: the {q}-quantile of the projected norms is {r_f}, must be > 0")
    return r_f


def features(x: np.ndarray, P: np.ndarray, m_pub: np.ndarray, r_f: float) -> np.ndarray:
    """Per-record features ``f(z) = clip_{R_f}(P(z − m_pub))`` with ``clip_R(v) = v·min(1, R/‖v‖)``."""
    r = _positive(r_f, "r_f")
    return clip_rows(_project(x, P, m_pub), r)


# ----------------------------------------------------------------------------------------------- client side


def _clipped(f: Any, r_f: float) -> np.ndarray:
    """``f [n, p]`` as float64, refusing rows with ``‖f_i‖ > R_f`` (the sensitivities assume clipped features)."""
    fm = _matrix(f, "f")
    if fm.size and np.max(np.linalg.norm(fm, axis=1)) > r_f * (1 + 1e-9):
        raise ValueError(f"f: every row must be clipped to norm ≤ r_f = {r_f} (use features())")
    return fm


def record_contributions(f: np.ndarray, y: np.ndarray, r_f: float, classes: int = 10) -> dict[str, np.ndarray]:
    """A client's per-class sums: ``{"counts": [Y], "sums_w": [Y, p]}``.

    ``counts_y = #{i: y_i = y}`` and ``sums_w_y = Σ_{i: y_i = y} f_i/(2R_f)`` (whitening by ``(1, 2R_f)``), so one
    record adds ``(e_y, f_i/(2R_f))``, of norm ``≤ √5/2`` (:data:`CLASS_MOMENTS_SHIFT`, the declared shift).
    """
    r = _positive(r_f, "r_f")
    if isinstance(classes, bool) or not isinstance(classes, int | np.integer) or classes < 1:
        raise ValueError(f"classes: must be an integer ≥ 1, got {classes}")
    fm = _clipped(f, r)
    labels = _labels(y, fm.shape[0], int(classes))
    counts = np.bincount(labels, minlength=classes).astype(np.float64)
    sums_w = np.zeros((int(classes), fm.shape[1]))
    np.add.at(sums_w, labels, fm / (2.0 * r))
    return {"counts": counts, "sums_w": sums_w}


def second_moment_sum(f: np.ndarray) -> np.ndarray:
    """``Σ_i f_i f_iᵀ`` ``[p, p]``, NOT divided (the server divides the noisy total by ``N_decl``)."""
    fm = _matrix(f, "f")
    return fm.T @ fm


def second_moment_shift(r_f: float) -> float:
    """The add/remove Frobenius shift of ``Σ f fᵀ``: ``R_f²``, one clipped record's ``‖f fᵀ‖_F = ‖f‖²``."""
    if not r_f > 0:
        raise ValueError(f"the feature bound R_f must be positive, got {r_f}")
    return float(r_f) ** 2


# ----------------------------------------------------------------------------------------------- server side


@dataclass(frozen=True, eq=False)
class MomentRelease:
    """The noisy released moments, all float64.

    ``counts [Y]`` noisy ``n̂_y``; ``sums_w [Y, p]`` noisy whitened sums ``Σ f_i/(2R_f)``; ``m2 [p, p]`` noisy
    average-form second moment ``M̃₂ ≈ Σ f fᵀ/N_decl`` (already divided); ``count_std`` the noise std on the counts
    (``2σ₁``; 0 for a noiseless reference); ``r_f`` the clip radius ``R_f``.
    """

    counts: np.ndarray
    sums_w: np.ndarray
    m2: np.ndarray
    count_std: float
    r_f: float

    def __post_init__(self) -> None:
        counts = _vector(self.counts, "counts")
        sums_w = _matrix(self.sums_w, "sums_w", rows=counts.shape[0])
        m2 = _matrix(self.m2, "m2", rows=sums_w.shape[1], cols=sums_w.shape[1])
        count_std = float(self.count_std)
        if not np.isfinite(count_std) or count_std < 0:
            raise ValueError(f"count_std: must be a finite number ≥ 0, got {self.count_std}")
        object.__setattr__(self, "counts", _frozen(counts))
        object.__setattr__(self, "sums_w", _frozen(sums_w))
        object.__setattr__(self, "m2", _frozen(m2))
        object.__setattr__(self, "count_std", count_std)
        object.__setattr__(self, "r_f", _positive(self.r_f, "r_f"))

    @property
    def classes(self) -> int:
        """Number of classes ``Y``."""
        return int(self.counts.shape[0])

    @property
    def p(self) -> int:
        """Feature dimension ``p``."""
        return int(self.sums_w.shape[1])


def exact_moments(f: np.ndarray, y: np.ndarray, n_decl: float, r_f: float, classes: int = 10) -> MomentRelease:
    """A noiseless :class:`MomentRelease` (``count_std = 0``, ``m2 = Σ f fᵀ/N_decl``) for references and tests."""
    contrib = record_contributions(f, y, r_f, classes)
    n = _positive(n_decl, "n_decl")
    return MomentRelease(contrib["counts"], contrib["sums_w"], second_moment_sum(f) / n, 0.0, r_f)


@dataclass(frozen=True, eq=False)
class GaussianMixture:
    """``z ~ Σ_y π_y N(μ_y, Σ)`` in ambient space ``R^D`` with a shared low-rank-plus-floor covariance.

    ``Σ = W diag(s) Wᵀ + λ₀(I − W Wᵀ)``: ``mu [Y, D]``, ``pi [Y]`` (≥ 0, sums to 1), ``basis W [D, r]`` (orthonormal
    columns, ``0 ≤ r ≤ D``), ``evals s [r]`` (each ≥ λ₀) and ``floor λ₀ > 0`` (step 6).
    """

    mu: np.ndarray
    pi: np.ndarray
    basis: np.ndarray
    evals: np.ndarray
    floor: float

    def __post_init__(self) -> None:
        mu = _matrix(self.mu, "mu")
        pi = _vector(self.pi, "pi", size=mu.shape[0])
        if mu.shape[0] < 1 or np.any(pi < 0) or abs(pi.sum() - 1.0) > 1e-8:
            raise ValueError(f"pi: must be ≥ 0 and sum to 1 over ≥ 1 classes, got sum {pi.sum():.12g}")
        basis = _matrix(self.basis, "basis", rows=mu.shape[1])
        if basis.shape[1] > basis.shape[0]:
            raise ValueError(f"basis: rank r = {basis.shape[1]} exceeds D = {basis.shape[0]}")
        _check_orthonormal_rows(basis.T, "basis (columns)")
        floor = _positive(self.floor, "floor")
        evals = _vector(self.evals, "evals", size=basis.shape[1])
        if evals.size and evals.min() < floor * (1 - 1e-12):
            raise ValueError(f"evals: must all be ≥ floor = {floor}, got min {evals.min():.6g}")
        for name, value in (("mu", mu), ("pi", pi), ("basis", basis), ("evals", evals)):
            object.__setattr__(self, name, _frozen(value))
        object.__setattr__(self, "floor", floor)

    @property
    def dim(self) -> int:
        """Ambient dimension ``D``."""
        return int(self.mu.shape[1])

    @property
    def classes(self) -> int:
        """Number of components ``Y``."""
        return int(self.mu.shape[0])

    def covariance(self) -> np.ndarray:
        """Dense ``Σ = W diag(s − λ₀) Wᵀ + λ₀ I`` ``[D, D]`` (for tests and small ``D``)."""
        return (self.basis * (self.evals - self.floor)) @ self.basis.T + self.floor * np.eye(self.dim)

    def sample(self, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``z_i ~ N(μ_{y_i}, Σ)`` ``[n, D]``, via ``Σ^{1/2}ξ = √λ₀ ξ + W((√s − √λ₀) ⊙ Wᵀξ)``, ``ξ ~ N(0, I)``."""
        labels = _labels(y, None, self.classes)
        xi = rng.standard_normal((labels.shape[0], self.dim))
        low = ((xi @ self.basis) * (np.sqrt(self.evals) - np.sqrt(self.floor))) @ self.basis.T
        return self.mu[labels] + np.sqrt(self.floor) * xi + low


def _class_means(release: MomentRelease, fallback_factor: float) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Steps 1–3: ``ñ_y = max(n̂_y, 1)``, ``μ^f_y = 2R_f·sums_w_y/ñ_y``, and classes with
    ``ñ_y < fallback_factor·count_std`` replaced by the global mean ``ΣŜ/Σñ``; returns ``(μ^f, ñ, fallback)``."""
    n_tilde = np.maximum(release.counts, 1.0)
    s_hat = 2.0 * release.r_f * release.sums_w
    mu_f = s_hat / n_tilde[:, None]
    fallback = np.flatnonzero(n_tilde < fallback_factor * release.count_std)
    if fallback.size:
        mu_f[fallback] = s_hat.sum(axis=0) / n_tilde.sum()
    return mu_f, n_tilde, [int(c) for c in fallback]


def _psd_truncate(cov: np.ndarray, rank: int, floor: float) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Step 5 (after the mean subtraction): eigendecompose ``cov``, clip negative eigenvalues to 0, keep
    the top ``rank`` eigenpairs and floor them at ``λ₀``; returns ``(V_r [p, r], max(λ_r, λ₀), #negative, λ_min)``."""
    lam, vecs = np.linalg.eigh(cov)
    lam, vecs = lam[::-1], vecs[:, ::-1]
    n_negative = int(np.sum(lam < 0))
    kept = np.maximum(np.maximum(lam[:rank], 0.0), floor)
    return vecs[:, :rank], kept, n_negative, float(lam[-1])


def postprocess(
    release: MomentRelease,
    P: np.ndarray,
    m_pub: np.ndarray,
    rank: int,
    floor: float = 1e-2,
    fallback_factor: float = 3.0,
) -> tuple[GaussianMixture, dict[str, Any]]:
    """The released moments → :class:`GaussianMixture`, in order (post-processing only).

    1. ``ñ_y = max(n̂_y, 1)``;  2. ``μ^f_y = Ŝ_y/ñ_y`` with ``Ŝ_y = 2R_f·sums_w_y``;  3. classes with
    ``ñ_y < fallback_factor·count_std`` take the global mean ``ΣŜ/Σñ``;  4. ``π̃_y = ñ_y/Σñ``;
    5. ``Σ^f = sym(M̃₂) − Σ_y π̃_y μ^f_y μ^fᵀ_y``, then the PSD projection (negative eigenvalues → 0) AFTER the
    subtraction, rank-``r`` truncation and the floor ``λ₀``;  6. lift: ``μ_y = m_pub + Pᵀμ^f_y``,
    ``Σ = PᵀΣ^fP + λ₀(I − PᵀP)``, i.e. ``W = PᵀV_r``, ``s = max(λ_r, λ₀)`` and ``λ₀`` on the complement.

    Diagnostics: ``fallback_classes``, ``negative_eigenvalues`` (clipped in step 5), ``min_raw_eigenvalue`` (of
    ``Σ^f`` before the projection), ``n_tilde``.
    """
    basis = _matrix(P, "P", rows=release.p)
    _check_orthonormal_rows(basis, "P")
    m = _vector(m_pub, "m_pub", size=basis.shape[1])
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or not 0 <= rank <= release.p:
        raise ValueError(f"rank: must be an integer in [0, p] = [0, {release.p}], got {rank}")
    lam0 = _positive(floor, "floor")
    if not np.isfinite(float(fallback_factor)) or fallback_factor < 0:
        raise ValueError(f"fallback_factor: must be a finite number ≥ 0, got {fallback_factor}")
    mu_f, n_tilde, fallback = _class_means(release, float(fallback_factor))
    pi = n_tilde / n_tilde.sum()
    cov_f = 0.5 * (release.m2 + release.m2.T) - (mu_f.T * pi) @ mu_f
    vecs, kept, n_negative, lam_min = _psd_truncate(cov_f, int(rank), lam0)
    mixture = GaussianMixture(m + mu_f @ basis, pi, basis.T @ vecs, kept, lam0)
    diagnostics = {
        "fallback_classes": fallback,
        "negative_eigenvalues": n_negative,
        "min_raw_eigenvalue": lam_min,
        "n_tilde": [float(v) for v in n_tilde],
    }
    return mixture, diagnostics


def public_mixture(
    public_x: np.ndarray,
    public_y: np.ndarray,
    P: np.ndarray,
    m_pub: np.ndarray,
    r_f: float,
    rank: int,
    floor: float = 1e-2,
    classes: int = 10,
) -> GaussianMixture:
    """The noiseless mixture of the PUBLIC data (``N_decl = n``): :func:`features` → :func:`exact_moments` →
    :func:`postprocess`; the public analytic field used to calibrate τ and t₀."""
    f = features(public_x, P, m_pub, r_f)
    release = exact_moments(f, public_y, f.shape[0], r_f, classes)
    return postprocess(release, P, m_pub, rank, floor)[0]
