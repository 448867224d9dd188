"""Adversarial search of a frame's worst Kashin level, with certificates (``kashin_search``).

In scaled units the minimal level of an input ``x`` is (see :func:`sstq_fl.encoders.maths.linf_min.linf_min`)

    level(x) = min{‖s‖_∞ : Qᵀ s = √N x/‖x‖} = √N max_y ⟨x, y⟩ / (‖x‖ ‖Q y‖_1)

(LP duality), so the frame's worst case is ``K* = sup_x level(x) = √N / min_{‖y‖=1} ‖Q y‖_1``,
attained at ``x = y*``.  Every unit ``y`` certifies ``K* ≥ N / ‖√N Q y‖_1`` (and that the input
``x = y`` needs at least that level); an upper bound on ``K*`` is not computable this way
(minimising ``‖Q y‖_1`` on the sphere is non-convex), so the search reports lower bounds.

Two searches:

* **Walsh flats** (randomized partial Hadamard frames only).  The range of
  ``Q = (H D)[:, S]/√N`` is spanned by the Walsh functions ``w_c, c ∈ S`` (the signs ``D`` scale
  columns and do not change it).  If ``S`` contains an affine subspace ``F = c₀ ⊕ V`` of
  ``F₂^m`` with ``dim V = k``, then ``Σ_{c∈F} w_c = w_{c₀} · 2^k 1_{V^⊥}`` is flat on
  ``N/2^k`` coordinates, so ``N/‖√N Q y‖_1 = √(2^k)`` exactly: the Hadamard uncertainty
  principle is tight on subgroups.  A random ``S`` of density ``d/N ≈ 0.39`` contains
  ``k``-flats up to ``k = 3–4`` at ``N = 256`` and ``k = 5`` at ``N = 65536`` (expected
  count ``≈ [m k]₂ 2^{m−k} (d/N)^{2^k}``), hence worst levels ``√8–4`` and ``√32 ≈ 5.66``.
* **Riemannian subgradient** on ``f(y) = ‖√N Q y‖_1`` over the unit sphere (batched, FWHT),
  from random starts, frame-row certificates and flats: the generic local search in the spirit
  of Qu, Sun & Wright (2014), "Finding a sparse vector in a subspace".
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from .. import rng
from ..encoders.maths.frames import Frame, HadamardFrame, make_frame
from ..encoders.maths.kashin import LINF_LEVEL, KashinConfig, kashin
from ..encoders.maths.linf_min import dual_bound, linf_min
from ..encoders.recommend import e1_vector
from ..io import atomic_write_json, run_meta


def certified_level(frame: Frame, y: torch.Tensor) -> torch.Tensor:
    """``N / ‖√N Q ŷ‖_1`` per row (``ŷ = y/‖y‖``): a lower bound on ``K*``, attained by ``x = ŷ``
    (the weak-duality bound :func:`~sstq_fl.encoders.maths.linf_min.dual_bound` with ``u = y``)."""
    return dual_bound(frame, y.double(), y.double())


def walsh_flats(frame: HadamardFrame, restarts: int = 200, seed: int = 0, greedy_dim: int = 2) -> list[np.ndarray]:
    """Largest affine subspaces ``F ⊂ S`` of Walsh indices found from random starts.

    From a random point, ``greedy_dim`` random extensions ``F ← F ∪ (F ⊕ a)`` (``a`` admissible:
    every ``f ⊕ a ∈ S``, ``a ∉ F ⊕ F``), then an exhaustive depth-first search over all further
    extensions; returns the distinct flats of the largest dimension met (sorted index arrays).
    """
    in_s = np.zeros(frame.N, dtype=bool)
    in_s[frame._cols_np] = True
    gen, found = np.random.default_rng(seed), {}
    for _ in range(restarts):
        flat = np.array([gen.choice(frame._cols_np)])
        for _ in range(greedy_dim):
            cand = _extensions(in_s, flat)
            if not cand.size:
                break
            flat = np.sort(np.concatenate([flat, flat ^ gen.choice(cand)]))
        for f in _dfs(in_s, flat):
            found[f.tobytes()] = f
    top = max(f.size for f in found.values())
    return [f for f in found.values() if f.size == top]


def _extensions(in_s: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """All ``a`` with ``F ⊕ a ⊂ S`` and ``a ∉ F ⊕ F`` (so ``F ∪ (F ⊕ a)`` is a larger flat)."""
    ok = in_s[np.bitwise_xor.outer(flat, np.arange(in_s.size))].all(0)
    ok[flat ^ flat[0]] = False
    return np.flatnonzero(ok)


def _dfs(in_s: np.ndarray, flat: np.ndarray) -> list[np.ndarray]:
    """The largest flats reachable from ``flat`` by extension (exhaustive; the branching is small
    once ``|F| ≥ 4`` at the densities used)."""
    best = [flat]
    for a in _extensions(in_s, flat):
        if a > (a ^ flat[0] ^ flat).min():  # each larger flat once per coset representative
            continue
        sub = _dfs(in_s, np.sort(np.concatenate([flat, flat ^ a])))
        if sub[0].size > best[0].size:
            best = sub
        elif sub[0].size == best[0].size and sub[0].size > flat.size:
            best = best + sub
    return best


def flat_vector(frame: HadamardFrame, flat: np.ndarray) -> torch.Tensor:
    """The unit ``y ∈ R^d`` whose coefficients ``√N Q y`` are ``Σ_{c∈F} w_c`` (flat on ``N/|F|``)."""
    pos = np.searchsorted(frame._cols_np, flat)
    y = torch.zeros(1, frame.d, dtype=torch.float64)
    y[0, torch.from_numpy(pos)] = frame._signs64[torch.from_numpy(pos)]
    return y / math.sqrt(flat.size)


def sphere_search(frame: Frame, y: torch.Tensor, iters: int = 600, step: float = 1.0,
                  decay: float = 0.98) -> tuple[torch.Tensor, torch.Tensor]:
    """Riemannian subgradient descent of ``‖√N Q y‖_1`` on the unit sphere, rows in parallel.

    ``g = √N Qᵀ sign(√N Q y)``, tangent part ``g − ⟨g, y⟩ y``, normalized step ``t_k = t_0 γ^k``,
    retraction by normalisation; returns the best certified level per row and its ``y``.
    """
    y = y.double() / torch.linalg.vector_norm(y.double(), dim=1, keepdim=True)
    best, best_y = torch.full((len(y),), -math.inf, dtype=torch.float64), y.clone()
    for k in range(iters + 1):
        c = frame.coef(y)  # one analysis per iterate: its level (y is unit) and its subgradient
        lvl = frame.N / c.abs().sum(1)
        up = lvl > best
        best[up], best_y[up] = lvl[up], y[up]
        if k == iters:
            break
        g = frame.synth_(c.sign_())
        g -= (g * y).sum(1, keepdim=True) * y
        y = y - step * decay**k * g / torch.linalg.vector_norm(g, dim=1, keepdim=True).clamp_min(1e-300)
        y /= torch.linalg.vector_norm(y, dim=1, keepdim=True)
    return best, best_y


def natural_inputs(frame: Frame, n_gauss: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    """Gaussian inputs, the E1 test vector (``e1_vector(d, 0.2)``), frame rows, coordinate vectors."""
    seeds = np.arange(seed, seed + n_gauss, dtype=np.uint64)
    gauss = torch.from_numpy(rng.normal(seeds, "kashin-search-gauss", frame.d))
    j = torch.from_numpy(rng.randint(seeds[:2], "kashin-search-rows", 1, frame.N)[:, 0])
    return {"gaussian": gauss, "e1_vector": e1_vector(frame.d, 0.2)[None], "frame_row": frame.rows(j),
            "coordinate": torch.eye(frame.d, dtype=torch.float64)[:2]}


def _methods_on(frame: Frame, x: torch.Tensor) -> dict[str, Any]:
    """Achieved level, clipping count (coefficients above the public ``K‖x‖``) and convergence
    of ``linf`` (default level) and ``lv`` on inputs ``x``."""
    out: dict[str, Any] = {}
    norms = torch.linalg.vector_norm(x, dim=1)
    for name, cfg in {"linf": KashinConfig(), "lv": KashinConfig(method="lv")}.items():
        for dt in (torch.float32, torch.float64):
            res = kashin(frame, x.to(dt), cfg)
            s = res.coeffs.double()
            lvl = s.abs().amax(1) / norms
            key = f"{name}_{'f32' if dt == torch.float32 else 'f64'}"
            out[key] = {"public_level": cfg.level, "achieved_max": float(lvl.max()),
                        "clipped": int((s.abs() > cfg.level * norms[:, None] * (1 + 1e-6)).sum()),
                        "not_converged": int((~res.converged).sum()), "passes_max": int(res.passes.max())}
    return out


def _bracket(frame: Frame, x: torch.Tensor, iters: int) -> dict[str, Any]:
    r = linf_min(frame, x, iters=iters)
    return {"n": x.shape[0], "min_level_upper": [float(v) for v in r.level],
            "min_level_lower": [float(v) for v in r.lower], "dr_iters": r.iters}


def kashin_search(dim: int, out: str | None = None, rho: float = 2.5, seed: int = 0, starts: int = 128,
                  sphere_iters: int = 300, dr_iters: int = 600, flat_restarts: int = 2000) -> dict[str, Any]:
    """Worst Kashin level of the public Hadamard frame ``(d, ρ, seed)``: natural input classes
    bracketed by :func:`linf_min`, adversarial lower bounds from flats and sphere search, and how
    ``linf``/``lv`` fare on each; written to ``out`` (JSON) when given."""
    t0 = time.perf_counter()
    frame = make_frame("hadamard", dim, rho, seed)
    assert isinstance(frame, HadamardFrame)
    classes = natural_inputs(frame)
    natural = {k: {**_bracket(frame, x, dr_iters), **_methods_on(frame, x)} for k, x in classes.items()}
    flats = walsh_flats(frame, flat_restarts, seed, greedy_dim=max(1, int(math.log2(frame.N)) - 13))
    y_flat = torch.cat([flat_vector(frame, f) for f in flats[:8]])
    gen = torch.Generator().manual_seed(seed)
    y_rows = linf_min(frame, classes["frame_row"][:1], iters=dr_iters).dual
    y0 = torch.cat([torch.randn(starts, dim, generator=gen, dtype=torch.float64), y_rows, y_flat])
    sph, sph_y = sphere_search(frame, y0, sphere_iters)
    worst_i = int(sph.argmax())
    worst_y = sph_y[worst_i : worst_i + 1]
    bracket = _bracket(frame, worst_y, dr_iters)
    worst = {"certified_lower_bound": max(float(sph[worst_i]), bracket["min_level_lower"][0]),
             "start": "random" if worst_i < starts else ("frame_row_dual" if worst_i == starts else "flat"),
             "input_bracket": bracket, **_methods_on(frame, worst_y)}
    result = {
        "d": dim, "N": frame.N, "rho": rho, "frame_seed": seed, "units": "||x|| / sqrt(N)",
        "default_linf_level": LINF_LEVEL, "natural_inputs": natural,
        "flats": {"dim": int(math.log2(flats[0].size)), "count_found": len(flats),
                  "certified_level": float(certified_level(frame, y_flat[:1])[0]), "example": flats[0].tolist()},
        "sphere_search": {"starts": int(y0.shape[0]), "iters": sphere_iters,
                          "best_random": float(sph[:starts].max()), "frame_row_dual_start": float(sph[starts]),
                          "best_from_flats": float(sph[starts + 1 :].max())},
        "worst": worst, "seconds": time.perf_counter() - t0, "meta": run_meta(),
    }
    if out:
        atomic_write_json(out, result)
    return result


__all__ = ["certified_level", "dual_bound", "flat_vector", "kashin_search", "kashin_search_report", "natural_inputs",
           "sphere_search",
           "walsh_flats"]


def kashin_search_report(dims: list[int], out: str, rho: float = 2.5, seed: int = 0, **kw: Any) -> dict[str, Any]:
    """:func:`kashin_search` at each dimension, in one JSON (``sstq-fl bench kashin-search``)."""
    by_dim = [kashin_search(d, None, rho, seed, **kw) for d in dims]
    for r in by_dim:
        r.pop("meta", None)
    result = {"by_dim": by_dim, "meta": run_meta()}
    atomic_write_json(out, result)
    if out.endswith(".json"):
        plot_kashin_search(result, out[: -len(".json")] + ".png")
    return result


def plot_kashin_search(result: dict[str, Any], path: str) -> None:
    """Per dimension: ℓ∞-minimal level of each input class (primal, with the dual certificate as
    a tick), the worst level certified by the search, and the public levels of ``linf``/``lv``."""
    from matplotlib.figure import Figure

    from ..plots import save

    fig = Figure(figsize=(9, 3.6))
    axes = fig.subplots(1, len(result["by_dim"]), squeeze=False)[0]
    for ax, r in zip(axes, result["by_dim"], strict=True):
        names = [*r["natural_inputs"], "worst found"]
        up = [max(v["min_level_upper"]) for v in r["natural_inputs"].values()] + [r["worst"]["certified_lower_bound"]]
        lo = [max(v["min_level_lower"]) for v in r["natural_inputs"].values()] + [r["worst"]["certified_lower_bound"]]
        ax.bar(names, up, color=["C0"] * (len(names) - 1) + ["C3"])
        ax.scatter(names, lo, marker="_", color="k", s=200, zorder=3, label="dual certificate")
        ax.axhline(r["default_linf_level"], color="C2", ls="--", label=f"linf public level {r['default_linf_level']}")
        lv = KashinConfig(method="lv").level
        ax.axhline(lv, color="C1", ls=":", label=f"lv public level {lv:.3f}")
        ax.set_title(f"d = {r['d']}, N = {r['N']}", fontsize=9)
        ax.set_ylabel("level (units ||x|| / sqrt(N))")
        ax.tick_params(axis="x", labelsize=7, rotation=20)
    axes[0].legend(fontsize=7)
    fig.suptitle("Minimal Kashin level per input class, Hadamard frame (rho 2.5, seed 0)", fontsize=9)
    fig.tight_layout()
    save(fig, path)
