"""The communication–privacy–utility frontier: per-message MSE against bits per message, every encoder.

For each dimension ``d`` and per-message ``ε``, every registered encoder (plug-ins included) is built at each
candidate of :func:`sstq_fl.encoders.recommend.candidate_specs` (its default and its width/coin variants); the
input is E1's vector (a fixed Gaussian direction, :func:`sstq_fl.encoders.recommend.e1_vector`) at norm ``R``.  A point
is ``E‖x̂ − x‖²`` of one message: the declared MSE where the encoder is unbiased and declares it (``exact``),
else the mean over ``trials`` messages with a 95 % bootstrap interval (``measured``; for a biased encoder this
includes its squared bias).  A measured candidate whose ``trials`` messages would take more than ``max_point_s``
here (:class:`~sstq_fl.encoders.recommend.CostGate`) is left out, and recorded as such with the reason.
Non-private encoders (compression-only references) are marked.

The frontier of a bit budget ``B`` is the smallest MSE among the private points with at most ``B`` bits.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..encoders import registry
from ..encoders.base import Encoder
from ..encoders.recommend import CostGate, build, candidate_specs, decoded, e1_vector, exact_mse
from ..io import atomic_write_bytes, atomic_write_json, no_duplicate_keys, run_meta
from ..progress import progress
from .mse import CI_METHOD, bootstrap_interval

log = logging.getLogger(__name__)
BUDGETS = (8, 16, 32, 64)
"""The bit budgets the frontier table reports."""
KEYS = ("spec", "bits", "mse", "ci_low", "ci_high", "kind")
"""What the frontier table keeps of a point."""


def errors(enc: Encoder, x: torch.Tensor, trials: int) -> np.ndarray:
    """``‖x̂ − clip(x)‖²`` of ``trials`` messages (seeds ``0..trials−1``; public coins ``10⁹ + seed``)."""
    target = enc.preprocess(x[None]).double().cpu()
    return ((decoded(enc, x, trials) - target) ** 2).sum(1).numpy()


def point(name: str, spec: str, enc: Encoder, x: torch.Tensor, trials: int, gate: CostGate) -> dict[str, Any]:
    """One frontier point (see the module docstring)."""
    row: dict[str, Any] = {"encoder": name, "spec": spec, "bits": enc.payload_bits(), "private": enc.private,
                           "unbiased": str(enc.unbiasedness()["unbiased"])}
    mse = exact_mse(enc, x)
    if mse is not None:
        return {**row, "kind": "exact", "mse": mse, "ci_low": mse, "ci_high": mse}
    ok, why = gate.estimate(enc, x)
    if not ok:
        return {**row, "kind": "skipped", "mse": None, "note": why}
    e = errors(enc, x, trials)
    lo, hi = bootstrap_interval(e)
    return {**row, "kind": "measured", "mse": float(e.mean()), "ci_low": lo, "ci_high": hi, "trials": trials,
            "ci_method": CI_METHOD}


def sweep_setting(d: int, epsilon: float, radius: float, trials: int, max_point_s: float,
                  names: list[str]) -> list[dict[str, Any]]:
    """Every candidate of every encoder named, at one ``(d, ε)``."""
    x, rows = e1_vector(d, radius), []
    reg = registry()
    for name in names:
        built = {s: e for s in candidate_specs(name, reg[name], d) if (e := build(s, d, epsilon, radius)) is not None}
        log.info("d=%d, ε=%g: %s (%d candidates)", d, epsilon, name, len(built))
        gate = CostGate(max_point_s, trials)
        for spec in sorted(built, key=lambda s: built[s].payload_bits()):  # cheapest first (see CostGate)
            rows.append({"d": d, "epsilon": epsilon, **point(name, spec, built[spec], x, trials, gate)})
    return rows


def frontier_table(rows: list[dict[str, Any]], budgets: tuple[int, ...] = BUDGETS) -> list[dict[str, Any]]:
    """Per ``(d, ε, budget)``: the best private point within the budget, and the best SSTQ point beside it."""
    out = []
    for d, eps in sorted({(r["d"], r["epsilon"]) for r in rows}):
        here = [r for r in rows if (r["d"], r["epsilon"]) == (d, eps) and r["private"] and r["mse"] is not None]
        for b in budgets:
            fit = [r for r in here if r["bits"] <= b]
            best = min(fit, key=lambda r: r["mse"], default=None)
            sstq = min((r for r in fit if r["encoder"].startswith("sstq")), key=lambda r: r["mse"], default=None)
            out.append({"d": d, "epsilon": eps, "budget": b,
                        "best": None if best is None else {k: best[k] for k in KEYS},
                        "sstq": None if sstq is None else {k: sstq[k] for k in KEYS},
                        "sstq_ratio": None if best is None or sstq is None else sstq["mse"] / best["mse"]})
    return out


def markdown(result: dict[str, Any]) -> str:
    """The frontier table: per ``(d, ε)`` and bit budget, the best private point and the best SSTQ point."""
    def cell(p: dict[str, Any] | None) -> str:
        if p is None:
            return "–"
        ci = "" if p["kind"] == "exact" else f" [{p['ci_low']:.4g}, {p['ci_high']:.4g}]"
        return f"`{p['spec']}` ({p['bits']} b): {p['mse']:.4g}{ci}"

    out = ["| d | ε | budget (bits) | best private encoder: MSE | best SSTQ: MSE | SSTQ / best |", "|---|---|---|---|---|---|"]
    for f in result["frontier"]:
        ratio = "–" if f["sstq_ratio"] is None else f"{f['sstq_ratio']:.3g}"
        out.append(f"| {f['d']:,} | {f['epsilon']:g} | {f['budget']} | {cell(f['best'])} | {cell(f['sstq'])} | {ratio} |")
    skipped = [r for r in result["rows"] if r["kind"] == "skipped"]
    note = ("Measured points carry a 95 % bootstrap interval; the best of many measured candidates is biased low "
            "by the selection, so read close calls from the intervals." +
            (f" {len(skipped)} measured candidates were left out as too slow to measure here (`rows`, kind "
             f"`skipped`)." if skipped else ""))
    return "\n".join(out) + "\n\n" + note + "\n"


def run(out: str, dims: list[int], epsilons: list[float], radius: float = 1.0, trials: int = 400,
        max_point_s: float = 30.0, encoders: list[str] | None = None, resume: bool = False) -> dict[str, Any]:
    """Measure every ``(d, ε)`` setting (with ``resume``, the settings already in ``out`` are kept), then write
    the JSON (rows, frontier table, meta) and its figure atomically after each setting."""
    names = encoders or sorted(registry())
    done = _read(out) if resume else []
    rows = [r for r in done if r["encoder"] in names]
    settings = [(d, e) for d in dims for e in epsilons if not any((r["d"], r["epsilon"]) == (d, e) for r in rows)]
    t0 = time.perf_counter()
    result: dict[str, Any] = {}
    with progress(len(settings), "frontier settings (d, ε)") as bar:
        for d, eps in settings:
            rows += sweep_setting(d, eps, radius, trials, max_point_s, names)
            result = {"dims": dims, "epsilons": epsilons, "radius": radius, "trials": trials, "rows": rows,
                      "frontier": frontier_table(rows), "wall_s": time.perf_counter() - t0, "meta": run_meta()}
            atomic_write_json(out, result)
            atomic_write_bytes(Path(out).with_suffix(".md"), markdown(result).encode())
            bar.advance(d=d, epsilon=eps)
    if not settings:
        result = {"dims": dims, "epsilons": epsilons, "radius": radius, "trials": trials, "rows": rows,
                  "frontier": frontier_table(rows), "wall_s": 0.0, "meta": run_meta()}
        atomic_write_json(out, result)
        atomic_write_bytes(Path(out).with_suffix(".md"), markdown(result).encode())
    from ..plots import plot_frontier

    plot_frontier(result, str(Path(out).with_suffix(".png")))
    return result


def _read(out: str) -> list[dict[str, Any]]:
    """The rows of an earlier result at ``out`` (none if it does not exist; a one-line error if it is not one)."""
    path = Path(out)
    if not path.exists():
        return []
    try:
        got = json.loads(path.read_text(), object_pairs_hook=no_duplicate_keys)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{out}: not readable JSON ({str(exc).splitlines()[0]}); remove it or drop --resume") from None
    if not isinstance(got, dict) or not isinstance(got.get("rows"), list):
        raise ValueError(f"{out}: not a frontier result (no 'rows' list); remove it or drop --resume")
    return list(got["rows"])
