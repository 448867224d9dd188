"""Cross-check ``privunitg`` and ``projunit`` against the authors' code (apple/ml-projunit; Asi, Feldman,
Nelson, Nguyen & Talwar, NeurIPS 2023; PrivUnitG of Asi, Feldman & Talwar, ICML 2022).

For each setting the same unit Gaussian ``x`` goes through the authors' ``privatize_vector`` (numpy's global
RNG, seeded) and through ours (per-message seeds ``0..reps−1``); the per-message squared errors ``‖x̂ − x‖²``
give a mean with a 95% interval each, and their ratio.  The two agree when the difference is within the
combined 95% Monte-Carlo interval or within 3%.  A second table gives ProjUnit's bias factor
``c = ⟨E x̂, x⟩/‖x‖²`` (exact for ``dense``; measured on the noiseless map ``W^T W u/‖W u‖`` for ``srht``) and
its MSE against PrivUnitG's at the same ``(d, ε)``.

    git -C <mirror of apple/ml-projunit> archive HEAD | tar -x -C /tmp/projunit_oracle
    nice python benchmarks/oracle_projunit.py --oracle /tmp/projunit_oracle [--reps 300] [--dense-reps 200]

Writes ``benchmarks/results/oracle/projunit.json`` (atomically) and ``projunit.md`` (``--render-only`` rewrites the
``.md`` from the ``.json``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.privunitg import calibrate
from sstq_fl.encoders.projunit import SrhtProjection, bias_factor
from sstq_fl.io import atomic_write_bytes, atomic_write_json, run_meta

SETTINGS = [  # (mechanism, d, eps, k); dense k = 1000 left out: ~1 s per message in either code at d = 1024
    ("PrivUnitG", 1024, 1.0, 0), ("PrivUnitG", 8192, 4.0, 0), ("PrivUnitG", 8192, 8.0, 0),
    ("ProjUnit", 1024, 4.0, 100), ("ProjUnit", 8192, 8.0, 100),
    ("FastProjUnit", 1024, 1.0, 100), ("FastProjUnit", 8192, 4.0, 1000), ("FastProjUnit", 8192, 8.0, 100),
]
SPECS = {"PrivUnitG": "privunitg", "ProjUnit": "projunit:k={k},transform=dense",
         "FastProjUnit": "projunit:k={k},transform=srht"}
Z95 = 1.959963984540054


def load_oracle(folder: str) -> Any:
    """The authors' ``PrivUnitAlgs`` module (its ``SQKR`` import needs matplotlib; no window is opened)."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.path.insert(0, folder)
    return importlib.import_module("PrivUnitAlgs")


def summary(err: np.ndarray) -> dict[str, float]:
    """Mean, 95% half-width and count of per-message squared errors."""
    return {"mean": float(err.mean()), "ci95": Z95 * float(err.std(ddof=1)) / math.sqrt(err.size), "n": int(err.size)}


def theirs(alg: Any, mech: str, x: np.ndarray, eps: float, k: int, reps: int, seed: int) -> dict[str, Any]:
    """The authors' per-message errors, their grid calibration ``(p, γ, σ)`` and seconds per message."""
    np.random.seed(seed)
    random.seed(seed)
    p = float(alg.priv_unit_G_get_p(eps))
    gamma, sigma = (float(v) for v in alg.get_gamma_sigma(p, eps))
    t0 = time.perf_counter()
    err = np.array([np.sum((alg.privatize_vector(x, eps, k, mech, p, gamma, sigma) - x) ** 2) for _ in range(reps)])
    return {**summary(err), "s_per_message": (time.perf_counter() - t0) / reps,
            "calibration": {"p": p, "gamma": gamma, "sigma": sigma}}


def ours(spec: str, x: np.ndarray, eps: float, reps: int) -> dict[str, Any]:
    """Our per-message errors (seeds ``0..reps−1``, in batches of 50), calibration and seconds per message."""
    enc = make_encoder(spec, x.size, eps)
    xt = torch.from_numpy(x)
    t0 = time.perf_counter()
    errs = []
    for lo in range(0, reps, 50):
        n = min(50, reps - lo)
        est = enc.decode(enc.encode(xt.expand(n, -1), np.arange(lo, lo + n)))
        errs.append(((est - xt) ** 2).sum(1).numpy())
    declared = enc.mse(xt[None])
    cal = enc.cal  # type: ignore[attr-defined]
    return {**summary(np.concatenate(errs)), "s_per_message": (time.perf_counter() - t0) / reps, "spec": enc.spec,
            "declared_mse": None if declared is None else float(declared[0]),
            "calibration": {"p": cal.p, "gamma": cal.gamma, "sigma": cal.sigma}}


def model_mse(mech: str, d: int, eps: float, k: int) -> float:
    """``E‖x̂ − x‖²`` at ``‖x‖ = R = 1``: exact for PrivUnitG and dense ProjUnit; for FastProjUnit (``d = P``, so
    ``E‖x̂‖²`` is exact) with the Haar bias factor in place of the SRHT one (measured equal below)."""
    cal = calibrate(eps)
    if mech == "PrivUnitG":
        return d * cal.sigma**2 + cal.gamma * cal.sigma - 1
    return d * cal.sigma**2 + d / k * cal.gamma * cal.sigma - (2 * bias_factor(d, k) - 1)


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Ratio ours/theirs with its 95% interval (delta method) and the agreement verdict."""
    ratio = a["mean"] / b["mean"]
    half = ratio * math.hypot(a["ci95"] / a["mean"], b["ci95"] / b["mean"])
    within_mc = abs(a["mean"] - b["mean"]) <= math.hypot(a["ci95"], b["ci95"])
    return {"ratio": ratio, "ratio_ci95": half, "within_mc": within_mc, "agree": within_mc or abs(ratio - 1) <= 0.03}


def unit_gaussian(d: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed).standard_normal(d)
    return np.asarray(g / np.linalg.norm(g))


def cross_check(alg: Any, reps: int, dense_reps: int) -> list[dict[str, Any]]:
    rows = []
    for i, (mech, d, eps, k) in enumerate(SETTINGS):
        x, n = unit_gaussian(d, 100 + i), dense_reps if mech == "ProjUnit" else reps
        a = ours(SPECS[mech].format(k=k), x, eps, n)
        b = theirs(alg, mech, x, eps, k, n, 1000 + i)
        rows.append({"mechanism": mech, "d": d, "epsilon": eps, "k": k or None, "model_mse": model_mse(mech, d, eps, k),
                     "ours": a, "theirs": b, **compare(a, b)})
        print(f"{mech} d={d} eps={eps:g} k={k}: ours {a['mean']:.6g} ± {a['ci95']:.3g}, theirs {b['mean']:.6g} ± "
              f"{b['ci95']:.3g}, ratio {rows[-1]['ratio']:.4f}", flush=True)
    return rows


def srht_bias(d: int, k: int, draws: int, seed: int) -> dict[str, float]:
    """``E_W[W^T W u/‖W u‖]`` for FastProjUnit by Monte Carlo over ``draws`` projections: the factor along ``u``
    and the orthogonal residual (with its noise floor ``√(tr Cov/draws)``)."""
    proj, u = SrhtProjection(d, k), torch.from_numpy(unit_gaussian(d, seed))[None]
    wseeds = np.arange(draws, dtype=np.uint64) + np.uint64(10**9)
    back = []
    for lo in range(0, draws, 256):
        w = proj.forward(u.expand(min(256, draws - lo), -1).contiguous(), wseeds[lo : lo + 256])
        back.append(proj.backward(w / torch.linalg.vector_norm(w, dim=1, keepdim=True), wseeds[lo : lo + 256]))
    b = torch.cat(back)
    along = b @ u[0]
    mean = b.mean(0)
    resid = float(torch.linalg.vector_norm(mean - float(along.mean()) * u[0]))
    floor = math.sqrt(float(b.var(0).sum()) / draws)
    return {"c": float(along.mean()), "c_ci95": Z95 * float(along.std()) / math.sqrt(draws), "orthogonal": resid,
            "orthogonal_noise_floor": floor, "draws": draws}


def mse_table(draws: int) -> list[dict[str, Any]]:
    """ProjUnit's MSE over PrivUnitG's at ``‖x‖ = R = 1``: ``dσ² + (d/k)γσ − (2c − 1)`` over ``dσ² + γσ − 1``
    (``c`` exact for dense; measured for srht from ``draws`` projections, a quarter of them at ``k = 1000``, where
    ``d = P`` makes ``E‖x̂‖²`` exact)."""
    rows = []
    for d in (1024, 8192):
        for k in (100, 1000):
            c_srht = srht_bias(d, k, draws if k <= 100 else draws // 4, d + k)
            for eps in (1.0, 4.0, 8.0):
                cal = calibrate(eps)
                base = d * cal.sigma**2 + cal.gamma * cal.sigma - 1
                proj = d * cal.sigma**2 + d / k * cal.gamma * cal.sigma
                dense_c = bias_factor(d, k)
                rows.append({"d": d, "k": k, "epsilon": eps, "privunitg_mse": base,
                             "dense": {"c": dense_c, "mse": proj - (2 * dense_c - 1), "ratio": (proj - 2 * dense_c + 1) / base},
                             "srht": {**c_srht, "mse": proj - (2 * c_srht["c"] - 1),
                                      "ratio": (proj - 2 * c_srht["c"] + 1) / base}})
    return rows


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]], table: list[dict[str, Any]]) -> str:
    head = ["# PrivUnitG / ProjUnit / FastProjUnit against the authors' code (apple/ml-projunit)", "",
            f"Command: `{meta['command']}`  ", f"Machine: {machine_line(meta)}", ""]
    return "\n".join(head + cross_lines(rows) + [""] + bias_lines(table)) + "\n"


def machine_line(meta: dict[str, Any]) -> str:
    m, v = meta["machine"], meta["versions"]
    return (f"{m['platform']}, {m['cpus']} CPUs ({m.get('cpu_model')}), torch threads {m['torch_threads']}; Python "
            f"{v['python']}, numpy {v['numpy']}, torch {v['torch']}; {meta['time_utc']}")


def cross_lines(rows: list[dict[str, Any]]) -> list[str]:
    out = ["Per-message MSE `E‖x̂ − x‖²`, unit Gaussian `x`, `R = 1`, mean ± 95% half-width; agree: within the "
           "combined 95% Monte-Carlo interval (or, marked 3%, within 3%).", "",
           "| setting | n | ours | theirs | ratio ours/theirs | agree? | model | σ ours / theirs | ms/message ours / theirs |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a, b = r["ours"], r["theirs"]
        model = f"{r['model_mse']:.6g}" if a["declared_mse"] is not None else f"≈ {r['model_mse']:.6g}"
        k = "" if r["k"] is None else f" k={r['k']}"
        verdict = ("yes" if r["agree"] else "NO") + ("" if r["within_mc"] else " (3%)")
        out.append(f"| {r['mechanism']} d={r['d']} ε={r['epsilon']:g}{k} | {a['n']} | {a['mean']:.6g} ± {a['ci95']:.3g} | "
                   f"{b['mean']:.6g} ± {b['ci95']:.3g} | {r['ratio']:.4f} ± {r['ratio_ci95']:.4f} | {verdict} | {model} | "
                   f"{a['calibration']['sigma']:.7g} / {b['calibration']['sigma']:.7g} | "
                   f"{1e3 * a['s_per_message']:.3g} / {1e3 * b['s_per_message']:.3g} |")
    return out + ["", "Model: our declared `mse` (PrivUnitG, dense); ≈: FastProjUnit with the Haar bias factor. Reduced "
                  "for two shared cores: dense ProjUnit at k = 1000 is left out (about 1 s per message in either code at "
                  "d = 1024), 200 messages per dense setting, 300 otherwise. Our ms/message covers encode and decode; "
                  "the authors' code does both in one call; wall-clock on two cores shared with other jobs, indicative only."]


def bias_lines(table: list[dict[str, Any]]) -> list[str]:
    out = ["ProjUnit against PrivUnitG (`‖x‖ = R = 1`): bias factor `c = ⟨E x̂, x⟩` (exact for dense; Monte Carlo "
           "over projections for srht, ± 95%; the orthogonal part of `E x̂` beside its noise floor) and the MSE "
           "ratio ProjUnit/PrivUnitG.", "",
           "| d | k | ε | PrivUnitG MSE | dense c | dense MSE ratio | srht c | srht orthogonal bias (floor) | srht MSE ratio |",
           "|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        s = t["srht"]
        out.append(f"| {t['d']} | {t['k']} | {t['epsilon']:g} | {t['privunitg_mse']:.6g} | {t['dense']['c']:.5f} | "
                   f"{t['dense']['ratio']:.4f} | {s['c']:.5f} ± {s['c_ci95']:.5f} | {s['orthogonal']:.4f} "
                   f"({s['orthogonal_noise_floor']:.4f}) | {s['ratio']:.4f} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oracle", default="/tmp/projunit_oracle", help="exported apple/ml-projunit tree")
    ap.add_argument("--reps", type=int, default=300, help="messages per setting (PrivUnitG, FastProjUnit)")
    ap.add_argument("--dense-reps", type=int, default=200, help="messages per dense ProjUnit setting")
    ap.add_argument("--bias-draws", type=int, default=40000, help="projections per srht bias estimate (k = 100)")
    ap.add_argument("--out", default="benchmarks/results/oracle/projunit")
    ap.add_argument("--render-only", action="store_true", help="rewrite the .md from an existing .json")
    args = ap.parse_args()
    if args.render_only:
        done = json.loads(Path(args.out + ".json").read_text())
        atomic_write_bytes(args.out + ".md", markdown(done, done["cross_check"], done["projunit_vs_privunitg"]).encode())
        return
    alg = load_oracle(args.oracle)
    rows = cross_check(alg, args.reps, args.dense_reps)
    table = mse_table(args.bias_draws)
    meta = run_meta()
    meta["machine"]["cpu_model"] = cpu_model()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out + ".json", {**meta, "oracle": "apple/ml-projunit (PrivUnitAlgs.privatize_vector)",
                                           "cross_check": rows, "projunit_vs_privunitg": table})
    atomic_write_bytes(args.out + ".md", markdown(meta, rows, table).encode())
    print(f"wrote {args.out}.json and {args.out}.md")


def cpu_model() -> str | None:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), None)


if __name__ == "__main__":
    from sstq_fl.process import ProcessOptions, apply_process_options

    apply_process_options(ProcessOptions())  # the sstq-fl command's process settings (sstq_fl.process)
    main()
