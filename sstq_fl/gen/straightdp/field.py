"""StraightDP Stage 2: the analytic flow field of the released Gaussian mixture and its time calibration.

Convention (flow matching, Lipman et al., ICLR 2023; rectified flow, Liu, Gong & Liu, ICLR 2023): ``x_t = (1 − t)ξ + t·z`` with
**t = 0 the noise end** (``ξ ~ N(0, I)``) and ``z`` data; the Bayes (minimum-MSE) velocity is
``v*(x, t) = (E[z | x_t = x] − x)/(1 − t)``.

The field in closed form (Gaussian conditioning): for ``z ~ Σ_y π_y N(μ_y, Σ)``, with ``A_t = (1 − t)²I + t²Σ``,

* ``E[z | x_t = x, y] = μ_y + tΣA_t⁻¹(x − tμ_y)``;
* ``E[z | x_t = x] = Σ_y w_y E[z | x, y]``, ``w_y = softmax_y(log π_y − ½(x − tμ_y)ᵀA_t⁻¹(x − tμ_y))`` (``log det A_t``
  is common to all ``y`` and cancels).  Because ``x ↦ tΣA_t⁻¹x`` is linear and shared, this equals the conditional
  formula with ``μ_y`` replaced by ``μ̄ = Σ_y w_y μ_y``, which is how it is computed.

``Σ = W diag(s) Wᵀ + λ₀(I − WWᵀ)`` is inverted in its eigenbasis, never as a ``D × D`` matrix: ``A_t`` has eigenvalues
``a_i = (1 − t)² + t²s_i`` on span(W) and ``a₀ = (1 − t)² + t²λ₀`` on the complement, so
``A_t⁻¹v = W((1/a − 1/a₀) ⊙ Wᵀv) + v/a₀`` and ``ΣA_t⁻¹v = W((s/a − λ₀/a₀) ⊙ Wᵀv) + (λ₀/a₀)v``.

Near ``t = 1`` the velocity divides by ``1 − t``: every function here clamps ``t`` to ``[0, 1 − ONE_MINUS_T_MIN]``
(both in ``A_t`` and in the division), i.e. for ``t > 1 − 10⁻⁴`` it returns the field at ``t = 1 − 10⁻⁴``.  ``t = 0`` is
exact: the conditional velocity is ``μ_y − x`` and the null one ``Σ_y π_y μ_y − x``.

Labels: ``y`` is an int64 ``[n]`` tensor with values in ``[0, Y]``; the value ``Y`` (= ``field.null``) selects the
unconditional (null) branch, so one batch can mix conditional and null rows (classifier-free guidance training).
Maths in float64; outputs in the input's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .moments import GaussianMixture

ONE_MINUS_T_MIN = 1e-4
"""Smallest ``1 − t`` used anywhere (``t`` is clamped to ``[0, 1 − ONE_MINUS_T_MIN]``)."""
DEFAULT_TS = tuple(float(t) for t in np.round(np.linspace(0.05, 0.95, 19), 10))
"""Default time grid for the calibration curves."""
TAU_RANGE = (0.05, 0.95)
"""``tau_from_curve`` clamps τ to this interval."""


# ----------------------------------------------------------------------------------------------- input checks


def _records(x: Any, dim: int, name: str = "x") -> Tensor:
    """A floating ``[n, dim]`` tensor with finite entries (dtype and device kept)."""
    t = torch.as_tensor(x)
    if t.ndim != 2 or t.shape[1] != dim:
        raise ValueError(f"{name}: expected shape [n, {dim}], got {tuple(t.shape)}")
    if not t.is_floating_point():
        raise ValueError(f"{name}: must be a floating tensor, got {t.dtype}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return t


def _times(t: Any, n: int, device: torch.device) -> Tensor:
    """``t`` (scalar or ``[n]``) as a float64 ``[n, 1]`` column clamped to ``[0, 1 − ONE_MINUS_T_MIN]``.

    Raises outside [0, 1]."""
    tt = torch.as_tensor(t, dtype=torch.float64).to(device)
    if tt.ndim == 0:
        tt = tt.expand(n)
    if tt.ndim != 1 or tt.shape[0] != n:
        raise ValueError(f"t: expected a scalar or shape [{n}], got {tuple(tt.shape)}")
    if not bool(torch.isfinite(tt).all()) or (n and (float(tt.min()) < 0 or float(tt.max()) > 1)):
        raise ValueError("t: times must be finite and lie in [0, 1]")
    return tt.clamp(max=1.0 - ONE_MINUS_T_MIN).unsqueeze(1)


def _int_labels(y: Any, n: int | None, upper: int, device: torch.device, name: str = "y") -> Tensor:
    """int64 labels ``[n]`` in ``[0, upper]`` (inclusive) on ``device``."""
    t = torch.as_tensor(y)
    if t.ndim != 1 or (n is not None and t.shape[0] != n):
        raise ValueError(f"{name}: expected shape [{n if n is not None else 'n'}], got {tuple(t.shape)}")
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name}: labels must be integers, got {t.dtype}")
    t = t.to(device=device, dtype=torch.int64)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) > upper):
        raise ValueError(f"{name}: labels must lie in [0, {upper}], got [{int(t.min())}, {int(t.max())}]")
    return t


def _t64(a: np.ndarray, device: torch.device) -> Tensor:
    """A float64 tensor copy of a (possibly read-only) numpy array on ``device``."""
    return torch.from_numpy(np.array(a, dtype=np.float64)).to(device)


# ----------------------------------------------------------------------------------------------- the field


class AnalyticField:
    """The Bayes field ``v*(x, t | y)`` of a :class:`GaussianMixture` (the closed form above), batched in torch.

    Parameters are held in float64 on ``device``; inputs on another device are served by moving the (small)
    parameters there.  ``y = null`` (``= classes``) rows take the unconditional branch.
    """

    def __init__(self, mixture: GaussianMixture, device: str | torch.device = "cpu") -> None:
        self.mixture = mixture
        dev = torch.device(device)
        self._mu = _t64(mixture.mu, dev)
        with np.errstate(divide="ignore"):
            self._log_pi = _t64(np.log(mixture.pi), dev)
        self._basis = _t64(mixture.basis, dev)
        self._evals = _t64(mixture.evals, dev)
        self._floor = float(mixture.floor)

    @property
    def classes(self) -> int:
        """Number of components ``Y``."""
        return self.mixture.classes

    @property
    def null(self) -> int:
        """The label value that selects the unconditional branch (``= Y``)."""
        return self.mixture.classes

    @property
    def dim(self) -> int:
        """Ambient dimension ``D``."""
        return self.mixture.dim

    def _params(self, device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(μ, log π, W, s)`` on ``device``."""
        return self._mu.to(device), self._log_pi.to(device), self._basis.to(device), self._evals.to(device)

    def _eig_a(self, t: Tensor, evals: Tensor) -> tuple[Tensor, Tensor]:
        """Eigenvalues of ``A_t``: ``a [n, r] = (1 − t)² + t²s`` and ``a₀ [n, 1] = (1 − t)² + t²λ₀``."""
        return (1 - t) ** 2 + t**2 * evals, (1 - t) ** 2 + t**2 * self._floor

    def _apply(self, v: Tensor, t: Tensor, sigma: bool) -> Tensor:
        """``A_t⁻¹v`` (``sigma=False``) or ``ΣA_t⁻¹v`` (``sigma=True``) row-wise, ``t`` a ``[n, 1]`` column."""
        _, _, basis, evals = self._params(v.device)
        a, a0 = self._eig_a(t, evals)
        if sigma:
            coef, c0 = evals / a - self._floor / a0, self._floor / a0
        else:
            coef, c0 = 1 / a - 1 / a0, 1 / a0
        return c0 * v + ((v @ basis) * coef) @ basis.T

    def apply_a_inv(self, v: Tensor, t: Any) -> Tensor:
        """``A_t⁻¹v`` for ``v [n, D]`` (float64), ``t`` scalar or ``[n]``, via the eigenbasis (no ``D × D`` matrix)."""
        v64 = _records(v, self.dim, "v").to(torch.float64)
        return self._apply(v64, _times(t, v64.shape[0], v64.device), sigma=False)

    def apply_sigma_a_inv(self, v: Tensor, t: Any) -> Tensor:
        """``ΣA_t⁻¹v`` for ``v [n, D]`` (float64), ``t`` scalar or ``[n]``."""
        v64 = _records(v, self.dim, "v").to(torch.float64)
        return self._apply(v64, _times(t, v64.shape[0], v64.device), sigma=True)

    def null_weights(self, x: Tensor, t: Tensor) -> Tensor:
        """``w_y = softmax_y(log π_y − ½(x − tμ_y)ᵀA_t⁻¹(x − tμ_y))`` ``[n, Y]`` for float64 ``x`` and ``[n, 1]`` ``t``.

        The quadratic form is expanded as ``(−2t xᵀμ_y + t²‖μ_y‖²)/a₀ + Σ_i (1/a_i − 1/a₀)(Wᵀx − tWᵀμ_y)_i²``; the
        ``‖x‖²/a₀`` term is the same for every ``y`` and dropped before the softmax.  Inputs are not re-checked (the
        public entry points are :meth:`posterior_mean` and :meth:`velocity`).
        """
        mu, log_pi, basis, evals = self._params(x.device)
        a, a0 = self._eig_a(t, evals)
        iso = (-2 * t * (x @ mu.T) + t**2 * (mu * mu).sum(1)) / a0
        diff = (x @ basis).unsqueeze(1) - t.unsqueeze(2) * (mu @ basis).unsqueeze(0)
        low = (diff**2 * (1 / a - 1 / a0).unsqueeze(1)).sum(2)
        return torch.softmax(log_pi - 0.5 * (iso + low), dim=1)

    def _posterior_mean64(self, x: Tensor, t: Any, y: Any) -> tuple[Tensor, Tensor, Tensor]:
        """``(E[z | x_t = x(, y)], x, t)`` in float64, ``t`` as the clamped ``[n, 1]`` column."""
        x64 = _records(x, self.dim).to(torch.float64)
        tt = _times(t, x64.shape[0], x64.device)
        labels = _int_labels(y, x64.shape[0], self.null, x64.device)
        mu = self._params(x64.device)[0]
        is_null = labels == self.null
        mean = mu[labels.clamp(max=self.classes - 1)]
        if bool(is_null.any()):
            mean[is_null] = self.null_weights(x64[is_null], tt[is_null]) @ mu
        return mean + tt * self._apply(x64 - tt * mean, tt, sigma=True), x64, tt

    def posterior_mean(self, x: Tensor, t: Any, y: Any) -> Tensor:
        """``E[z | x_t = x, y]`` (conditional rows) or ``E[z | x_t = x]`` (``y = null`` rows), ``[n, D]`` in x's dtype.

        ``μ̄ + tΣA_t⁻¹(x − tμ̄)`` with ``μ̄ = μ_y`` (conditional) or ``Σ_y w_y μ_y`` (null; Proposition 3.1).
        """
        return self._posterior_mean64(x, t, y)[0].to(torch.as_tensor(x).dtype)

    def velocity(self, x: Tensor, t: Any, y: Any) -> Tensor:
        """``v*(x, t | y) = (E[z | x_t = x, y] − x)/(1 − t)`` ``[n, D]`` in x's dtype (``t`` clamped near 1)."""
        mean, x64, tt = self._posterior_mean64(x, t, y)
        return ((mean - x64) / (1 - tt)).to(torch.as_tensor(x).dtype)

    def posterior_variance_trace(self, t: float) -> float:
        """``V̄(t) = tr(Σ − t²ΣA_t⁻¹Σ) = tr Cov[z | x_t, y]`` (within one component) in closed form.

        Per eigenvalue ``λ`` of ``Σ``: ``λ − t²λ²/a = λ(1 − t)²/a`` with ``a = (1 − t)² + t²λ``, so
        ``V̄(t) = Σ_i s_i(1 − t)²/a_i + (D − r)λ₀(1 − t)²/a₀`` (exact on [0, 1]; ``V̄(0) = tr Σ``, ``V̄(1) = 0``).
        """
        tf = float(t)
        if not 0.0 <= tf <= 1.0:
            raise ValueError(f"t: must lie in [0, 1], got {t}")
        s, lam0 = np.asarray(self.mixture.evals), self.mixture.floor
        one = (1 - tf) ** 2
        rest = self.dim - s.shape[0]
        return float(np.sum(s * one / (one + tf**2 * s)) + rest * lam0 * one / (one + tf**2 * lam0))


def _components(mixture: GaussianMixture, y: Any, generator: torch.Generator) -> Tensor:
    """Labels ``y`` in ``[0, Y]`` on the generator's device, null rows (``= Y``) replaced by draws from ``π``."""
    labels = _int_labels(y, None, mixture.classes, generator.device).clone()
    is_null = labels == mixture.classes
    if bool(is_null.any()):
        pi = _t64(mixture.pi, generator.device)
        labels[is_null] = torch.multinomial(pi, int(is_null.sum()), replacement=True, generator=generator)
    return labels


def guidance_start(
    mixture: GaussianMixture,
    t0: float,
    y: Any,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """``x_{t₀} ~ N(t₀μ_y, t₀²Σ + (1 − t₀)²I)`` ``[n, D]``: the exact law of ``x_{t₀}`` under component ``y``
    (the time calibration; the knee and plateau rules are our own).

    Drawn as ``t₀μ_y + B^{1/2}η``, ``η ~ N(0, I)``, where ``B = t₀²Σ + (1 − t₀)²I`` has eigenvalues
    ``b_i = t₀²s_i + (1 − t₀)²`` on span(W) and ``b₀ = t₀²λ₀ + (1 − t₀)²`` elsewhere.  Rows with ``y = Y`` (null) draw
    their component from ``π`` first.  All randomness comes from ``generator`` (on its device).
    """
    tf = float(t0)
    if not 0.0 <= tf <= 1.0:
        raise ValueError(f"t0: must lie in [0, 1], got {t0}")
    dev = generator.device
    labels = _components(mixture, y, generator)
    mu, basis, evals = _t64(mixture.mu, dev), _t64(mixture.basis, dev), _t64(mixture.evals, dev)
    eta = torch.randn(labels.shape[0], mixture.dim, generator=generator, dtype=torch.float64, device=dev)
    b0 = math.sqrt(tf**2 * mixture.floor + (1 - tf) ** 2)
    b = torch.sqrt(tf**2 * evals + (1 - tf) ** 2)
    x = tf * mu[labels] + b0 * eta + ((eta @ basis) * (b - b0)) @ basis.T
    return x.to(dtype)


# ----------------------------------------------------------------------------------------------- empirical field


def empirical_field(x: Tensor, t: Any, data_z: Any, max_elements: int = 1 << 22) -> Tensor:
    """The Bayes field of the empirical distribution of ``data_z [m, D]`` (public records), ``[n, D]`` in x's dtype.

    ``v = (E_emp − x)/(1 − t)`` with ``E_emp = Σ_i softmax_i(−‖x − tz_i‖²/(2(1 − t)²)) z_i``; ``‖x‖²`` is dropped from
    the logits (common to all ``i``).  Query rows are processed in chunks of about ``max_elements/m`` so the
    ``[rows, m]`` logit matrix stays bounded.  ``t`` clamped as in the module docstring.
    """
    z = torch.as_tensor(data_z)
    if z.ndim != 2 or z.shape[0] == 0:
        raise ValueError(f"data_z: expected a non-empty [m, D] matrix, got shape {tuple(z.shape)}")
    x64 = _records(x, z.shape[1]).to(torch.float64)
    z64 = _records(z, z.shape[1], "data_z").to(device=x64.device, dtype=torch.float64)
    tt = _times(t, x64.shape[0], x64.device)
    half_sq = 0.5 * (z64 * z64).sum(1)
    rows = max(1, int(max_elements) // z64.shape[0])
    out = torch.empty_like(x64)
    for lo in range(0, x64.shape[0], rows):
        xc, tc = x64[lo : lo + rows], tt[lo : lo + rows]
        logits = (tc * (xc @ z64.T) - tc**2 * half_sq) / (1 - tc) ** 2
        out[lo : lo + rows] = (torch.softmax(logits, dim=1) @ z64 - xc) / (1 - tc)
    return out.to(torch.as_tensor(x).dtype)


def field_agreement(
    field: AnalyticField,
    data_z: Any,
    data_y: Any,
    ts: Sequence[float],
    n_probe: int,
    generator: torch.Generator,
) -> np.ndarray:
    """Mean cosine between the analytic conditional velocity and the empirical one, for each ``t`` in ``ts``.

    Estimator, per ``t``: draw ``n_probe`` public records ``(z_j, y_j)`` (without replacement when ``n_probe ≤ m``,
    else with) and ``ξ_j ~ N(0, I)``, set ``x_j = (1 − t)ξ_j + t z_j`` and return
    ``(1/n_probe) Σ_j cos(v*(x_j, t | y_j), v_emp(x_j, t | y_j))`` where ``v_emp(· | y)`` is :func:`empirical_field`
    over the public records of class ``y`` (including ``z_j``: the exact Bayes field of the class's empirical law).
    Randomness from ``generator`` only (CPU), so a seed fixes the curve.
    """
    z = _records(data_z, field.dim, "data_z").to(torch.float64).cpu()
    labels = _int_labels(data_y, z.shape[0], field.classes - 1, torch.device("cpu"), "data_y")
    if isinstance(n_probe, bool) or not isinstance(n_probe, int) or n_probe < 1 or z.shape[0] == 0:
        raise ValueError(f"n_probe: must be an integer ≥ 1 with non-empty data, got {n_probe}")
    out = np.empty(len(ts))
    for k, t in enumerate(ts):
        m = z.shape[0]
        if n_probe <= m:
            idx = torch.randperm(m, generator=generator)[:n_probe]
        else:
            idx = torch.randint(m, (n_probe,), generator=generator)
        xi = torch.randn(idx.shape[0], field.dim, generator=generator, dtype=torch.float64)
        x = (1 - float(t)) * xi + float(t) * z[idx]
        v_a, v_e = field.velocity(x, float(t), labels[idx]), torch.empty_like(x)
        for c in torch.unique(labels[idx]).tolist():
            rows = labels[idx] == c
            v_e[rows] = empirical_field(x[rows], float(t), z[labels == c])
        out[k] = float(torch.nn.functional.cosine_similarity(v_a, v_e, dim=1, eps=1e-12).mean())
    return out


# ----------------------------------------------------------------------------------------------- calibration


def knee(ts: Any, values: Any) -> float:
    """Kneedle-style knee (Satopää, Albrecht, Irwin & Raghavan 2011) of the curve ``(ts, values)``.

    Both axes are normalised to [0, 1] (min–max); the knee is the ``t`` of the point with the largest perpendicular
    distance from the chord joining the first and last normalised points (first such point on ties; a constant
    curve returns ``ts[0]``).  ``ts`` must be strictly increasing, with at least 3 points.
    """
    t = np.asarray(ts, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if t.ndim != 1 or v.shape != t.shape or t.size < 3:
        raise ValueError(f"ts/values: expected two vectors of the same length ≥ 3, got {t.shape} and {v.shape}")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(v)) and np.all(np.diff(t) > 0)):
        raise ValueError("ts/values: must be finite with ts strictly increasing")
    tn = (t - t[0]) / (t[-1] - t[0])
    span = v.max() - v.min()
    vn = (v - v.min()) / span if span > 0 else np.zeros_like(v)
    rise = vn[-1] - vn[0]
    dist = np.abs(rise * tn - vn + vn[0]) / math.hypot(rise, 1.0)
    return float(t[int(np.argmax(dist))])


def tau_from_curve(ts: Any, cosines: Any) -> float:
    """``τ`` = knee of the time-weighted cosine ``t·cos(t)`` (our rule), clamped to :data:`TAU_RANGE`.

    Weighting by ``t`` makes the curve rise linearly while the analytic field agrees with the empirical one
    (``cos ≈ 1``) and bend once it stops agreeing; the knee is that bend.
    """
    t = np.asarray(ts, dtype=np.float64)
    return float(np.clip(knee(t, t * np.asarray(cosines, dtype=np.float64)), *TAU_RANGE))


def t0_from_curve(ts: Any, cosines: Any, tol: float = 0.02) -> float:
    """``t₀`` = the public plateau edge (our rule): starting at the argmax ``t*`` of the cosine curve (first on ties),
    the largest ``t ≥ t*`` such that every grid point in ``[t*, t]`` has ``cos ≥ max cos − tol``."""
    t = np.asarray(ts, dtype=np.float64)
    c = np.asarray(cosines, dtype=np.float64)
    if t.ndim != 1 or c.shape != t.shape or t.size == 0 or not np.all(np.diff(t) > 0) or not np.all(np.isfinite(c)):
        raise ValueError("ts/cosines: expected finite vectors of the same non-zero length, ts strictly increasing")
    if not tol >= 0:
        raise ValueError(f"tol: must be ≥ 0, got {tol}")
    j = k = int(np.argmax(c))
    while j + 1 < c.size and c[j + 1] >= c[k] - tol:
        j += 1
    return float(t[j])


def calibrate_times(
    field: AnalyticField,
    public_z: Any,
    public_y: Any,
    ts: Sequence[float] = DEFAULT_TS,
    n_probe: int = 256,
    seed: int = 0,
    tol: float = 0.02,
) -> tuple[float, float, np.ndarray]:
    """``(τ, t₀, cosines)`` from PUBLIC data only: :func:`tau_from_curve` and :func:`t0_from_curve` of one
    :func:`field_agreement` curve over ``ts`` (seeded ``torch.Generator``).

    ``field`` must be the analytic field of the public mixture (e.g. ``moments.public_mixture``), ``public_z`` the
    flattened public records and ``public_y`` their labels.
    """
    curve = field_agreement(field, public_z, public_y, ts, n_probe, torch.Generator().manual_seed(int(seed)))
    return tau_from_curve(ts, curve), t0_from_curve(ts, curve, tol), curve
