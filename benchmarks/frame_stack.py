"""One-stage vs stacked randomized Hadamard frames: worst Kashin levels, sparse and flat inputs, cost.

Run: ``PYTHONPATH=. python benchmarks/frame_stack.py [--quick]``; writes ``benchmarks/results/frame_stack/frame_stack.json``.
All levels in units ``||x|| / sqrt(N)`` (scaled coefficients), as in :mod:`sstq_fl.bench.kashin`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from typing import Any

import numpy as np
import torch

from sstq_fl import rng
from sstq_fl.bench.kashin import certified_level, flat_vector, natural_inputs, sphere_search, walsh_flats
from sstq_fl.encoders.maths.frames import DEFAULT_RHO, HadamardFrame, frame_size, make_frame
from sstq_fl.encoders.maths.kashin import LINF_LEVEL, KashinConfig, kashin
from sstq_fl.encoders.maths.linf_min import linf_min
from sstq_fl.io import atomic_write_json, run_meta

KINDS = ["hadamard", "hadamard2", "hadamard3", "hd2", "hd3", "haar"]  # haar: dense reference (no fast transform)
FAST = KINDS[:5]
SPARSE_K = [1, 2, 4, 8, 16, 32, 64]
RAISED_LEVELS = (2.1, 2.3, 2.5)  # public levels (``level=``) above the default 1.9 whose clipping is counted
# --part NAME: (result key, d, frame seeds, random starts, old-frame flat restarts, draws per sparsity k, kinds, rho)
SEARCH_PARTS: dict[str, tuple[str, int, list[int], int, int, int, list[str], float]] = {
    "xl": ("d25450", 25450, [0], 32, 200, 2, ["hadamard", "hd2", "hd3"], DEFAULT_RHO),  # the E1/E3 model, N = 65,536
    "rho": ("d100_rho5", 100, [0, 1, 2, 3, 4], 128, 2000, 4, ["hadamard", "hd3", "haar"], 5.0),  # N = 512
    "xl-rho": ("d25450_rho5", 25450, [0], 32, 200, 2, ["hd3"], 5.0),  # N = 131,072
}


def sparse_inputs(d: int, per_k: int, seed: int) -> dict[str, torch.Tensor]:
    """``e_i`` for ``per_k`` random ``i``, and ``sum of k random signed e_i`` (``per_k`` draws per ``k``)."""
    out: dict[str, torch.Tensor] = {}
    seeds = np.arange(seed, seed + per_k, dtype=np.uint64)
    for k in SPARSE_K:
        if k > d:
            continue
        x = torch.zeros(per_k, d, dtype=torch.float64)
        pos = rng.sample_without_replacement(seeds, f"frame-stack-sparse{k}", k, d)
        sg = np.where(rng.raw_bits(seeds, f"frame-stack-sparse-sign{k}", k) >> np.uint64(63), -1.0, 1.0)
        for i in range(per_k):
            x[i, torch.from_numpy(pos[i])] = torch.from_numpy(sg[i]) if k > 1 else 1.0
        out[f"sparse_k{k}"] = x
    return out


def evaluate(frame, x: torch.Tensor, dr_iters: int) -> dict[str, Any]:
    """Minimal-level bracket (linf_min) and the default ``linf`` method's clipping, per input row."""
    r = linf_min(frame, x, iters=dr_iters)
    norms = torch.linalg.vector_norm(x, dim=1)
    res: dict[str, Any] = {"n": int(x.shape[0]), "min_level_upper_max": float(r.level.max()),
                           "min_level_lower_max": float(r.lower.max()),
                           "min_level_upper": [round(float(v), 4) for v in r.level],
                           "min_level_lower": [round(float(v), 4) for v in r.lower]}
    cfg = KashinConfig()
    res["clipped_f64_at_level"] = {}
    for lvl in RAISED_LEVELS:  # the default method at a raised public level: coefficients it still clips
        s = kashin(frame, x, KashinConfig(linf_level=lvl)).coeffs
        res["clipped_f64_at_level"][str(lvl)] = int((s.abs() > lvl * norms[:, None] * (1 + 1e-6)).sum())
    for dt, name in ((torch.float64, "f64"), (torch.float32, "f32")):
        out = kashin(frame, x.to(dt), cfg)
        s = out.coeffs.double()
        res[f"linf_{name}"] = {"achieved_max": float((s.abs().amax(1) / norms).max()),
                               "clipped_coeffs": int((s.abs() > cfg.level * norms[:, None] * (1 + 1e-6)).sum()),
                               "rows_not_converged": int((~out.converged).sum())}
    return res


def run_dim(d: int, seeds: list[int], starts: int, sphere_iters: int, dr_iters: int, flat_restarts: int,
            per_k: int, kinds: list[str], rho: float = DEFAULT_RHO) -> dict[str, Any]:
    n = frame_size(d, rho)
    by_seed = []
    for seed in seeds:
        t0 = time.perf_counter()
        old = make_frame("hadamard", d, rho, seed=seed)
        assert isinstance(old, HadamardFrame)
        flats = walsh_flats(old, flat_restarts, seed, greedy_dim=max(1, int(math.log2(n)) - 13))
        x_flat = torch.cat([flat_vector(old, f) for f in flats[:8]])
        x_sparse = sparse_inputs(d, per_k, seed)
        gen = torch.Generator().manual_seed(1000 + seed)
        y_random = torch.randn(starts, d, generator=gen, dtype=torch.float64)
        n_coord = min(d, 128)
        coord = torch.eye(d, dtype=torch.float64)[torch.randperm(d, generator=gen)[:n_coord]]
        shared_starts = torch.cat([y_random, coord, x_flat, *x_sparse.values()])
        per_kind: dict[str, Any] = {}
        for kind in kinds:
            fr = make_frame(kind, d, rho, seed=seed)
            nat = natural_inputs(fr, seed=seed)
            y_rows = linf_min(fr, nat["frame_row"][:1], iters=dr_iters).dual
            y0 = torch.cat([shared_starts, y_rows])
            sph, sph_y = sphere_search(fr, y0, sphere_iters)
            wi = int(sph.argmax())
            labels = (["random"] * starts + ["coordinate"] * n_coord + ["old_flat"] * x_flat.shape[0]
                      + ["sparse"] * (y0.shape[0] - starts - n_coord - x_flat.shape[0] - 1) + ["frame_row_dual"])
            worst_y = sph_y[wi : wi + 1]
            inputs = {**nat, **x_sparse, "old_frame_flats": x_flat, "sphere_worst": worst_y}
            ev = {k: evaluate(fr, v, dr_iters) for k, v in inputs.items()}
            per_kind[kind] = {
                "max_row_sq_norm_over_d_by_N": float(fr.row_sq_norms().max()) * n / d,
                "sphere": {"starts": int(y0.shape[0]), "iters": sphere_iters,
                           "worst_certified": max(float(sph[wi]), ev["sphere_worst"]["min_level_lower_max"]),
                           "worst_start": labels[wi],
                           "best_by_start": {lab: float(sph[[i for i, v in enumerate(labels) if v == lab]].max())
                                             for lab in dict.fromkeys(labels)}},
                "old_flat_certified_level": [round(float(v), 4) for v in certified_level(fr, x_flat)],
                "inputs": ev,
            }
        by_seed.append({"seed": seed, "old_flat_dim": int(math.log2(flats[0].size)), "old_flat_count": len(flats),
                        "frames": per_kind, "seconds": time.perf_counter() - t0})
        print(f"d={d} seed={seed}: " + ", ".join(f"{k} {v['sphere']['worst_certified']:.3f}" for k, v in per_kind.items()),
              f"({by_seed[-1]['seconds']:.0f}s)", flush=True)
    return {"d": d, "N": n, "rho": rho, "flat_restarts": flat_restarts, "kinds": kinds, "seeds": by_seed}


def timing(d: int, rows: int, reps: int) -> dict[str, Any]:
    """Median wall time of ``synth_(coef(r))`` per row, float32 and float64, one thread."""
    out: dict[str, Any] = {"d": d, "N": frame_size(d), "rows": rows, "reps": reps, "threads": torch.get_num_threads()}
    for dt in (torch.float32, torch.float64):
        r = torch.randn(rows, d, dtype=dt)
        cw, rw = torch.empty(rows, frame_size(d), dtype=dt), torch.empty(rows, d, dtype=dt)
        per: dict[str, float] = {}
        for kind in FAST:
            fr = make_frame(kind, d, seed=0)
            fr.synth_(fr.coef(r, cw), rw)
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fr.synth_(fr.coef(r, cw), rw)
                ts.append(time.perf_counter() - t0)
            per[kind] = statistics.median(ts) / rows
        out[str(dt).split(".")[-1]] = {"seconds_per_row": per,
                                       "ratio_vs_hadamard": {k: v / per["hadamard"] for k, v in per.items()}}
    t0 = time.perf_counter()
    make_frame("hadamard2", d, seed=0).row_sq_norms()
    out["hadamard2_row_sq_norms_build_seconds"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/frame_stack/frame_stack.json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--part", choices=["small", "large", *SEARCH_PARTS, "timing", "all"], default="all")
    ap.add_argument("--seeds", type=int, nargs="*", help="frame seeds for --part large (merged into --out)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    q = a.quick
    res: dict[str, Any] = {"units": "||x|| / sqrt(N)", "public_level": LINF_LEVEL, "kinds": KINDS}
    try:
        with open(a.out) as f:
            res.update(json.load(f))
    except FileNotFoundError:
        pass
    if a.part in ("small", "all"):
        res["d100"] = run_dim(100, [0] if q else [0, 1, 2, 3, 4], 16 if q else 128, 50 if q else 300, 200 if q else 600,
                              200 if q else 2000, 2 if q else 4, KINDS)
    if a.part in ("large", "all"):
        new = run_dim(2000, a.seeds or ([0] if q else [0, 1, 2]), 16 if q else 128, 50 if q else 300,
                      200 if q else 600, 200, 2 if q else 4, FAST)  # dense haar: too slow at N = 8192 here
        if "d2000" in res and a.seeds:
            keep = [s for s in res["d2000"]["seeds"] if s["seed"] not in a.seeds]
            new["seeds"] = sorted(keep + new["seeds"], key=lambda s: s["seed"])
        res["d2000"] = new
    if a.part in SEARCH_PARTS:
        key, d, seeds, starts, flat_restarts, per_k, kinds, rho = SEARCH_PARTS[a.part]
        res[key] = run_dim(d, a.seeds or seeds, starts // 4 if q else starts, 50 if q else 300, 200 if q else 600,
                           flat_restarts // 4 if q else flat_restarts, per_k, kinds, rho)
    if a.part in ("timing", "all"):
        res["timing"] = timing(25450, 4, 5 if q else 21)
    res["meta"] = run_meta()
    atomic_write_json(a.out, res)


if __name__ == "__main__":
    from sstq_fl.process import ProcessOptions, apply_process_options

    apply_process_options(ProcessOptions())  # the sstq-fl command's process settings (sstq_fl.process)
    main()
