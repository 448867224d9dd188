"""The setting of Isik, Chen, Özgür, Weissman & No, "Exact optimality of communication-privacy-utility tradeoffs in
distributed mean estimation", NeurIPS 2023, §6 (Figures 2 and 3), on our encoders.

Data as in their experiments: ``n = 5,000`` unit vectors in ``d = 500``, half ``N(10, 1)^d`` and half ``N(1, 1)^d``,
each normalised.  The figure is ``‖x̄̂ − x̄‖²`` (the decoded mean of the ``n`` messages against the true mean), in two
sweeps: ε = 6 with 1–8 bits per message, and ε = 1–8 with bits = ε.  The low-bit encoders use shared randomness
(``coin=public``), as the paper's comparison does, so a message is exactly ``bits`` bits; PrivUnit and PrivUnitG
send ``32 d`` bits and are drawn as the unlimited-communication reference.

* ``exact``: unbiased encoders that declare their MSE (``rrsc``, ``privunit``, ``privunitg``): the messages are
  independent, so ``E‖x̄̂ − x̄‖² = Σ_i mse(x_i) / n²`` exactly, on the first repetition's data;
* ``measured``: the others (``mmrc``, ``privunit-mrc``, ``sqkr``): ``reps`` repetitions, each on fresh data and
  coins, mean with a 95 % Student-t interval.

Usage::

    python benchmarks/isik_setting.py [--reps 5] [--out benchmarks/results/isik_setting.json]

writes the JSON (atomically), a markdown table and a PNG next to it.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats

from sstq_fl.encoders import make_encoder
from sstq_fl.io import atomic_write_bytes, atomic_write_json, run_meta

D, N = 500, 5000
FAMILIES = {"rrsc": "rrsc:bits={b},coin=public", "mmrc": "mmrc:bits={b},coin=public",
            "privunit-mrc": "privunit-mrc:bits={b},coin=public", "sqkr": "sqkr:k={b},coin=public"}
REFERENCES = {"privunit": "privunit", "privunitg": "privunitg"}
SWEEPS = {"eps6_bits": [(6.0, b) for b in range(1, 9)], "bits_eq_eps": [(float(e), e) for e in range(1, 9)]}


def data(seed: int, n: int = N, d: int = D) -> torch.Tensor:
    """Their inputs: the first half of the rows ``N(10, 1)^d``, the second ``N(1, 1)^d``, each normalised."""
    gen = np.random.default_rng(seed)
    x = np.concatenate([gen.normal(10, 1, (n // 2, d)), gen.normal(1, 1, (n - n // 2, d))])
    return torch.from_numpy(x / np.linalg.norm(x, axis=1, keepdims=True))


def mean_error(spec: str, eps: float, x: torch.Tensor, rep: int, chunk: int = 500) -> float:
    """``‖x̄̂ − x̄‖²`` of one repetition (seeds and public coins drawn from ``rep``)."""
    enc = make_encoder(spec, x.shape[1], eps)
    total = torch.zeros(x.shape[1], dtype=torch.float64)
    for lo in range(0, x.shape[0], chunk):
        ids = np.arange(lo, min(lo + chunk, x.shape[0]), dtype=np.uint64) + np.uint64(rep * 10**6)
        coins = ids + np.uint64(2**40) if enc.public_coins else None
        total += enc.decode(enc.encode(x[lo:lo + chunk], ids, coins=coins), coins=coins).double().sum(0).cpu()
    return float(((total / x.shape[0] - x.mean(0)) ** 2).sum())


def point(spec: str, eps: float, reps: int) -> dict[str, Any]:
    """One (spec, ε) point: exact when the encoder is unbiased and declares its MSE, else measured."""
    enc = make_encoder(spec, D, eps)
    out: dict[str, Any] = {"spec": spec, "epsilon": eps, "bits": enc.payload_bits()}
    if enc.unbiased and (m := enc.mse(data(0))) is not None:
        val = float(m.sum()) / N**2
        return {**out, "kind": "exact", "mse": val, "low": val, "high": val}
    vals = [mean_error(spec, eps, data(r), r) for r in range(reps)]
    mean, sd = float(np.mean(vals)), float(np.std(vals, ddof=1))
    half = float(stats.t.ppf(0.975, reps - 1)) * sd / math.sqrt(reps)
    return {**out, "kind": "measured", "mse": mean, "low": mean - half, "high": mean + half, "reps": vals}


def run(reps: int) -> list[dict[str, Any]]:
    rows = []
    for sweep, pts in SWEEPS.items():
        for eps, b in pts:
            for fam, tmpl in FAMILIES.items():
                t0 = time.perf_counter()
                try:
                    row = point(tmpl.format(b=b), eps, reps)
                except ValueError as exc:  # e.g. an index too wide for the encoder
                    row = {"spec": tmpl.format(b=b), "epsilon": eps, "kind": "refused", "note": str(exc)}
                rows.append({"sweep": sweep, "family": fam, "budget": b, **row, "seconds": time.perf_counter() - t0})
                print(f"{sweep} ε={eps:g} b={b} {fam}: {row.get('mse')}", flush=True)
        for eps in sorted({e for e, _ in pts}):
            for fam, spec in REFERENCES.items():
                rows.append({"sweep": sweep, "family": fam, "budget": None, **point(spec, eps, reps)})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    out = []
    for sweep, head in (("eps6_bits", "ε = 6, bits per message 1–8"), ("bits_eq_eps", "ε = 1–8, bits = ε")):
        rs = [r for r in rows if r["sweep"] == sweep]
        fams = list(dict.fromkeys(r["family"] for r in rs))
        cols = sorted({(r["epsilon"], r["budget"]) for r in rs if r["budget"] is not None})
        out += [f"**{head}** (‖x̄̂ − x̄‖², d = {D}, n = {N}; measured: mean [95 % t-interval])", "",
                "| encoder | " + " | ".join(f"ε={e:g}, {b} b" for e, b in cols) + " |", "|---" * (len(cols) + 1) + "|"]
        for f in fams:
            cells = []
            for e, b in cols:
                r = next((r for r in rs if r["family"] == f and r["epsilon"] == e and r["budget"] in (b, None)), None)
                cells.append("–" if r is None or r.get("mse") is None else
                             f"{r['mse']:.3g}" + ("" if r["kind"] == "exact" else f" [{r['low']:.3g}, {r['high']:.3g}]"))
            out.append(f"| {f} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    from matplotlib.figure import Figure

    from sstq_fl.plots import save, title

    fig = Figure(figsize=(11, 4.4), layout="constrained")
    for ax, (sweep, xkey, xlabel) in zip(fig.subplots(1, 2), (("eps6_bits", "budget", "bits per message (ε = 6)"),
                                                              ("bits_eq_eps", "epsilon", "ε (bits = ε)"))):
        rs = [r for r in rows if r["sweep"] == sweep and r.get("mse") is not None]
        for fam in dict.fromkeys(r["family"] for r in rs):
            pts = [r for r in rs if r["family"] == fam]
            if pts[0]["budget"] is None and xkey == "budget":
                ax.axhline(pts[0]["mse"], ls="--", lw=1, color="0.4" if fam == "privunit" else "0.7",
                           label=f"{fam} ({pts[0]['bits']} bits)")
                continue
            xs = [r[xkey] if r[xkey] is not None else r["epsilon"] for r in pts]
            m = np.array([r["mse"] for r in pts])
            ax.errorbar(xs, m, yerr=[m - [r["low"] for r in pts], np.array([r["high"] for r in pts]) - m], marker="o",
                        capsize=3, ls="--" if pts[0]["budget"] is None else "-", label=fam)
        ax.set(yscale="log", xlabel=xlabel, ylabel="‖x̄̂ − x̄‖²")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title("Isik et al. (NeurIPS 2023) setting on sstq-fl's encoders", {"d": D, "n": N}, width=100))
    save(fig, path)
    save(fig, path.with_suffix(".pdf"))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5, help="repetitions per measured point (at least 2)")
    p.add_argument("--out", default="benchmarks/results/isik_setting.json", help="result JSON")
    args = p.parse_args(argv)
    if args.reps < 2:
        print("isik_setting: --reps must be at least 2 (an interval needs two repetitions)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows = run(args.reps)
    out = Path(args.out)
    atomic_write_json(out, {"d": D, "n": N, "reps": args.reps, "rows": rows, "wall_s": time.perf_counter() - t0,
                            "meta": run_meta()})
    atomic_write_bytes(out.with_suffix(".md"), markdown(rows).encode())
    plot(rows, out.with_suffix(".png"))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    from sstq_fl.process import ProcessOptions, apply_process_options

    apply_process_options(ProcessOptions())  # the sstq-fl command's process settings (sstq_fl.process)
    torch.set_num_threads(1)
    sys.exit(main(sys.argv[1:]))
