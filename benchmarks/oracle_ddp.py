"""Cross-check ``sstq_fl.secagg`` (DDGauss / Skellam secure aggregation) against the authors' reference code
(google-research/federated, ``distributed_dp``; Kairouz, Liu & Steinke, ICML 2021; Agarwal, Kairouz & Liu,
NeurIPS 2021).

The reference needs TensorFlow, so it runs once, apart, by ``benchmarks/oracle_ddp_reference.py`` (its
docstring says how), which writes ``benchmarks/results/oracle/ddp_reference.json``: per setting its parameter
search's grid step γ and local σ, its ε at them, and the MSE of the decoded mean over repetitions of its
distributed-mean-estimation pipeline.  This script, in the project's environment, then takes the reference's
(γ, σ) for each setting and computes

* our ε at the same (γ, σ): with the reference's orders (integers 2…128 and 256, the same conversion, so it
  must agree) and with the ledger's orders (a superset of the reference's; the least over more orders can only
  be smaller);
* our calibrated σ for the same target ε (the ledger's orders, and the reference's orders), and our grid step
  for the reference's σ (:func:`make_codec`);
* the MSE of our decoded mean on data of the same law (n Gaussian vectors normalised to the clip norm), as
  many repetitions as ``--reps`` (default: 4× the reference's), with 95% Student-t intervals, and the
  analytic value (noise exact, rounding ``Σ p(1 − p)`` of the data's unconditional rounding).  The reference
  samples DDGauss noise at ``⌈σ⌉`` (its sampler takes integer scales only), so for DDGauss we also run ours
  at ``⌈σ⌉``: that column is the like-for-like pipeline comparison.

    .venv/bin/python benchmarks/oracle_ddp.py --reference-json benchmarks/results/oracle/ddp_reference.json
    .venv/bin/python benchmarks/oracle_ddp.py            # ours only, for the same settings, no comparison

Writes ``benchmarks/results/oracle/ddp.json`` and ``ddp.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from sstq_fl.io import atomic_write_bytes, atomic_write_json
from sstq_fl.secagg import SecAggCodec, calibrate, central_epsilon, make_codec
from sstq_fl.secagg.accounting import REFERENCE_ORDERS

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "oracle"
NOISE = {"ddgauss": "ddgauss", "dskellam": "skellam"}


def interval(xs: list[float]) -> dict[str, float]:
    """Mean and 95% Student-t interval (as the reference's ``mean_confidence_interval``)."""
    a = np.asarray(xs, dtype=float)
    h = float(stats.sem(a) * stats.t.ppf(0.975, a.size - 1)) if a.size > 1 else math.inf
    return {"mean": float(a.mean()), "lo": float(a.mean() - h), "hi": float(a.mean() + h), "reps": int(a.size)}


def client_data(n: int, d: int, clip: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` Gaussian vectors normalised to L2 norm ``clip`` (the reference's ``generate_client_data`` law)."""
    v = rng.normal(size=(n, d))
    return clip * v / np.linalg.norm(v, axis=1, keepdims=True)


def our_mse(codec: SecAggCodec, n: int, reps: int, seed: int) -> tuple[list[float], list[float]]:
    """Per repetition: the MSE of the decoded mean, and its analytic expectation for that data."""
    mses, analytic = [], []
    for r in range(reps):
        rng = np.random.default_rng([seed, r])
        x = client_data(n, codec.dim, codec.clip, rng)
        enc = codec.encode(x, round_seed=r, coins=rng)
        est = codec.decode_sum(codec.modular_sum(enc), round_seed=r) / n
        mses.append(float(np.mean(np.square(est - x.mean(axis=0)))))
        y = codec.rotate(codec.clip_rows(x), r) / codec.scale
        frac = y - np.floor(y)
        rounding = float(np.sum(frac * (1 - frac))) / codec.padded  # per output coordinate, summed over clients
        analytic.append(codec.scale**2 * (n * codec.noise_variance() + rounding) / n**2)
    return mses, analytic


def ours_for(ref: dict[str, Any], reps: int, seed: int) -> dict[str, Any]:
    """Our numbers for one reference setting."""
    noise = NOISE[ref["mechanism"]]
    n, d, bits, T, delta = ref["clients"], ref["dim"], ref["bits"], ref["rounds"], ref["delta"]
    args = (d, ref["clip"], bits)
    codec = SecAggCodec(dim=d, clip=ref["clip"], bits=bits, scale=ref["gamma"], local_stddev=ref["local_stddev_grid"],
                        noise=noise, beta=ref["beta"])
    t0 = time.time()
    row: dict[str, Any] = {
        "eps_ref_orders": central_epsilon(codec, n, T, delta, orders=REFERENCE_ORDERS),
        "eps_ours": central_epsilon(codec, n, T, delta),
        "gamma_make_codec": make_codec(*args, noise, ref["local_stddev_grid"], n, ref["k_stddevs"], ref["beta"]).scale,
    }
    for key, orders in (("sigma_calibrated", None), ("sigma_calibrated_ref_orders", REFERENCE_ORDERS)):
        cal = calibrate(ref["target_epsilon"], delta, T, n, *args, noise=noise, k_stddevs=ref["k_stddevs"],
                        beta=ref["beta"], orders=orders)
        row[key], row[key.replace("sigma", "gamma")] = cal.local_stddev, cal.scale
    mses, analytic = our_mse(codec, n, reps, seed)
    row["mse_of_mean"], row["mse_analytic"] = mses, float(np.mean(analytic))
    if noise == "ddgauss":
        ceil = SecAggCodec(dim=d, clip=ref["clip"], bits=bits, scale=ref["gamma"],
                           local_stddev=float(math.ceil(ref["local_stddev_grid"])), beta=ref["beta"])
        row["mse_of_mean_ceil_sigma"] = our_mse(ceil, n, reps, seed + 1)[0]
    row["seconds"] = round(time.time() - t0, 1)
    return row


def compare(ref: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """Ratios ours / reference, with the MSE intervals."""
    theirs_mse, ours_mse = interval(ref["mse_of_mean"]), interval(ours["mse_of_mean"])
    out = {"eps_ratio_same_orders": ours["eps_ref_orders"] / ref["epsilon"], "eps_ratio_ours": ours["eps_ours"] / ref["epsilon"],
           "gamma_ratio": ours["gamma_make_codec"] / ref["gamma"],
           "sigma_ratio_same_orders": ours["sigma_calibrated_ref_orders"] / ref["local_stddev_grid"],
           "sigma_ratio_ours": ours["sigma_calibrated"] / ref["local_stddev_grid"],
           "mse_theirs": theirs_mse, "mse_ours": ours_mse, "mse_ratio": ours_mse["mean"] / theirs_mse["mean"]}
    like = ours_mse
    if "mse_of_mean_ceil_sigma" in ours:
        like = interval(ours["mse_of_mean_ceil_sigma"])
        out["mse_ours_ceil_sigma"], out["mse_ratio_ceil_sigma"] = like, like["mean"] / theirs_mse["mean"]
    out["mse_agree"] = agree(like, theirs_mse)
    return out


def agree(a: dict[str, float], b: dict[str, float]) -> bool:
    """Within 2%, or the difference within the combined 95% interval (half-widths added in quadrature)."""
    half = math.hypot(a["hi"] - a["mean"], b["hi"] - b["mean"])
    return abs(a["mean"] / b["mean"] - 1) <= 0.02 or abs(a["mean"] - b["mean"]) <= half


def fmt(x: dict[str, float]) -> str:
    """``mean [lo, hi]`` with 3 significant digits."""
    return f"{x['mean']:.3g} [{x['lo']:.3g}, {x['hi']:.3g}]"


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The ``ddp.md`` tables."""
    head = ["**DDGauss / Skellam secure aggregation against the authors' code.**", "",
            f"Reference: {meta['reference']['source']}, run for real (TensorFlow {meta['reference']['tensorflow']}, "
            f"tensorflow-privacy {meta['reference']['tensorflow_privacy']}) by `benchmarks/oracle_ddp_reference.py`; "
            "ours by `benchmarks/oracle_ddp.py`. clip = 1, δ = 1e-5, β = e^-0.5, data: n Gaussian vectors normalised "
            "to the clip norm. σ is the local noise std on the integer grid, γ the grid step.", "",
            "### ε at the reference's (γ, σ), and the σ each calibrates for the target ε", "",
            "| set | noise | n | d | b | T | target ε | ref γ | ref σ | ref ε | ours, ref orders | ratio | ours, ledger orders "
            "| ratio | our γ / ref γ | our σ / ref σ (ref orders) | our σ / ref σ (ours) |",
            "|" + "---|" * 17]
    for r in rows:
        o, c = r["ours"], r["comparison"]
        head.append(f"| {r['name']} | {r['mechanism']} | {r['clients']} | {r['dim']} | {r['bits']} | {r['rounds']} | "
                    f"{r['target_epsilon']:g} | {r['gamma']:.4g} | {r['local_stddev_grid']:.4g} | {r['epsilon']:.6f} | "
                    f"{o['eps_ref_orders']:.6f} | {c['eps_ratio_same_orders']:.6f} | {o['eps_ours']:.6f} | "
                    f"{c['eps_ratio_ours']:.4f} | {c['gamma_ratio']:.6f} | {c['sigma_ratio_same_orders']:.6f} | "
                    f"{c['sigma_ratio_ours']:.4f} |")
    head += ["", "### MSE of the decoded mean, one round at the reference's (γ, σ): mean [95% interval] over repetitions", "",
             "| set | noise | theirs | ours | ratio | ours at ⌈σ⌉ | ratio | agree | analytic (ours, exact σ) |", "|" + "---|" * 9]
    for r in rows:
        o, c = r["ours"], r["comparison"]
        ceil = (fmt(c["mse_ours_ceil_sigma"]), f"{c['mse_ratio_ceil_sigma']:.3f}") if "mse_ours_ceil_sigma" in c else ("–", "–")
        head.append(f"| {r['name']} | {r['mechanism']} | {fmt(c['mse_theirs'])} | {fmt(c['mse_ours'])} | "
                    f"{c['mse_ratio']:.3f} | {ceil[0]} | {ceil[1]} | {'yes' if c['mse_agree'] else 'NO'} | "
                    f"{o['mse_analytic']:.3g} |")
    return "\n".join(head[:4] + summary(rows) + head[4:]) + "\n\n" + NOTES


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """The headline ratios over all settings."""
    same = [r["comparison"]["eps_ratio_same_orders"] for r in rows]
    cont = [r["comparison"]["eps_ratio_ours"] for r in rows]
    sig = [r["comparison"]["sigma_ratio_same_orders"] for r in rows]
    ok = sum(r["comparison"]["mse_agree"] for r in rows)
    return [f"Summary over {len(rows)} settings: ε ours / reference at the same (γ, σ) and orders "
            f"{min(same):.9f}–{max(same):.9f}; "
            f"with the ledger's orders {min(cont):.4f}–{max(cont):.4f}; calibrated σ ours / reference (same orders) "
            f"{min(sig):.6f}–{max(sig):.6f}; MSE of the decoded mean agrees (like for like: DDGauss at ⌈σ⌉) on {ok} of "
            f"{len(rows)} (within 2% or within the combined 95% interval).", ""]


NOTES = """Notes.
* ε: the reference converts RDP to (ε, δ) over the orders 2…128 and 256 with tensorflow-privacy's
  `get_privacy_spent` (the Canonne–Kamath–Steinke conversion). "ours, ref orders" is our RDP through the same
  conversion on the same orders; "ledger orders" is what `central_epsilon` and a run's ledger report: the
  integer orders 2…1024 and 5,001 real orders 1 + 10^-2 … 1 + 10^8 (`sstq_fl.privacy.rdp.CURVE_ORDERS`;
  Skellam's bound is stated at integer orders only). These include the reference's orders, so that ratio
  is ≤ 1 and the difference is the reference's coarser order grid.
* MSE: each repetition draws new data and new noise in both codes (the reference's TensorFlow seed is set
  once per run). "agree": the ratio is within 2%, or the difference within the combined 95% interval.
  The reference samples DDGauss noise at ⌈σ⌉ (its sampler accepts integer scales only) while its
  accounting uses σ, so its MSE is that of ⌈σ⌉; the "ours at ⌈σ⌉" column is the like-for-like comparison, the
  "ours" column what our codec (exact σ) gives. Skellam is sampled at σ by both. The analytic column is
  γ²(n Var(noise) + Σ_ij f_ij(1 − f_ij)/P)/n² for the data of our runs, f_ij the fractional parts of the
  scaled rotated vectors and P the padded dimension (the unconditional rounding variance).
"""


def main() -> None:
    """Compare against a reference JSON, or compute ours for the same settings."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference-json", default=None, help="the JSON benchmarks/oracle_ddp_reference.py wrote")
    ap.add_argument("--reps", type=int, default=0, help="our repetitions per setting (0: 4x the reference's)")
    ap.add_argument("--seed", type=int, default=20240)
    ap.add_argument("--out-dir", default=str(OUT))
    args = ap.parse_args()
    if args.reference_json is None:
        sys.path.insert(0, str(HERE))
        from oracle_ddp_reference import BETA, CLIP, DELTA, SETTINGS

        for name, mech, n, d, bits, eps, rounds, k in SETTINGS:
            cal = calibrate(eps, DELTA, rounds, n, d, CLIP, bits, noise=NOISE[mech], k_stddevs=k, beta=BETA)
            print(json.dumps({"name": name, "gamma": cal.scale, "local_stddev": cal.local_stddev,
                              "epsilon": central_epsilon(cal, n, rounds, DELTA)}))
        return
    ref = json.loads(Path(args.reference_json).read_text())
    rows = []
    for setting in ref["settings"]:
        reps = args.reps or 4 * len(setting["mse_of_mean"])
        ours = ours_for(setting, reps, args.seed)
        rows.append({**{k: v for k, v in setting.items() if k != "mse_of_mean"}, "ours": ours,
                     "comparison": compare(setting, ours)})
        print(setting["name"], json.dumps({k: v for k, v in rows[-1]["comparison"].items() if "ratio" in k}), flush=True)
    meta = {"reference": ref["meta"], "reference_json": str(args.reference_json), "numpy": np.__version__,
            "command": " ".join(sys.argv)}
    out = Path(args.out_dir)
    atomic_write_json(out / "ddp.json", {"meta": meta, "settings": rows})
    atomic_write_bytes(out / "ddp.md", markdown(rows, meta).encode())


if __name__ == "__main__":
    from sstq_fl.process import ProcessOptions, apply_process_options

    apply_process_options(ProcessOptions())  # the sstq-fl command's process settings (sstq_fl.process)
    main()
