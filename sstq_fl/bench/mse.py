"""Experiment E1: estimation error versus dimension.

One vector ``g ~ N(0, I_d)`` rescaled to ``‖g‖ = C``; every encoder is built with radius
``R = C`` and per-message ``ε``; ``E‖ĝ − g‖²`` is estimated from ``trials`` independent
encodings (seeds ``0..trials-1``) with a 95% bootstrap percentile interval (2000 resamples of
the squared errors, a fixed resampling seed; :func:`bootstrap_interval`), and the exact value is
reported alongside where the encoder declares one (the interval is widened to contain the
estimate in the rare case it does not).  The interval's ends are means of observed
squared errors, so they are never below 0, unlike the normal approximation, which went negative
for heavy-tailed errors from few trials; with few trials it is still only indicative.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..encoders import make_encoder, parse_spec, registry
from ..encoders.recommend import e1_vector
from ..experiments.results import privacy_label
from ..io import atomic_write_json, run_meta
from ..progress import progress

E1_ENCODERS = ["vqsgd", "sqkr", "sqkr:kashin=lv", "privunit", "privunit-mrc", "sstq-flat:codebook=uniform",
               "sstq-flat:codebook=uniform,kashin=lv", "sstq-flat:codebook=optimized", "sstq-ma", "sstq-ma:scale=paper",
               "sstq-ma:decode=identity", "sstq-ma:scale=paper,decode=identity"]
"""The E1 set: kashin=lv rows are the previous default Kashin method (level 2.352), kept side by side with the
new default (linf, 1.9); sstq-ma's calibrated scale beside the paper's, with the default gain decoder and the
paper's identity decoder (``scale=paper,decode=identity`` is the paper's encoder)."""


def with_bits(label: str, bits: int) -> str:
    """Add ``b=bits`` to a spec whose encoder takes a bit width and does not set one."""
    name, params = parse_spec(label)
    reg = registry()
    if name in reg and "b" in reg[name].params and "b" not in params:
        params["b"] = str(bits)
    return name + (":" + ",".join(f"{k}={v}" for k, v in params.items()) if params else "")


CI_METHOD = "bootstrap percentile, 95%, 2000 resamples"


def bootstrap_interval(e: np.ndarray, resamples: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean of the non-negative samples ``e``: the
    ``(1 ± level)/2`` quantiles of the means of ``resamples`` resamples with replacement (fixed
    ``seed``, so a result repeats).  Every resampled mean lies in ``[min e, max e]``, so the
    interval respects ``MSE ≥ 0``.  At least two samples are needed."""
    if len(e) < 2:
        raise ValueError(f"an interval needs at least 2 trials, got {len(e)}")
    gen, chunk = np.random.default_rng(seed), max(1, 4_000_000 // len(e))  # resamples drawn at a time
    means = np.concatenate([e[gen.integers(0, len(e), (min(chunk, resamples - i), len(e)))].mean(1)
                            for i in range(0, resamples, chunk)])
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def measure(label: str, d: int, epsilon: float, bits: int, norm: float, trials: int, chunk: int = 250) -> dict[str, Any]:
    """``E‖ĝ − g‖²`` of one encoder at dimension ``d`` from ``trials`` (≥ 2) encodings, with its interval; each
    chunk of ``chunk`` trials on the frame of the next round (rounds 1, 2, … with ``draw=round``), and the exact
    MSE averaged over the same frames."""
    if trials < 2:
        raise ValueError(f"mse-vs-dim needs at least 2 trials for an interval, got {trials}")
    enc = make_encoder(with_bits(label, bits), d, epsilon, radius=norm)
    g = e1_vector(d, norm)
    errs: list[torch.Tensor] = []
    exact: float | None = 0.0
    with progress(trials, f"{label} d={d} trials", level=logging.DEBUG) as bar:
        for start in range(0, trials, chunk):
            n = min(chunk, trials - start)
            seeds = np.arange(start, start + n)
            rnd = enc.for_round(1 + start // chunk)  # each chunk of trials on the next round's frame (draw=round)
            msgs = rnd.encode(g.repeat(n, 1), seeds, coins=seeds + 10**9)
            est = rnd.decode(msgs, coins=seeds + 10**9)
            errs.append(((est - g.to(est.device)) ** 2).sum(1).cpu())
            got = rnd.mse(g[None, :])
            exact = None if got is None or exact is None else exact + float(got[0]) * n / trials
            bar.advance(n)
    e = torch.cat(errs).double().numpy()
    mean = float(e.mean())
    low, high = bootstrap_interval(e)
    return {"encoder": label, "d": d, "mse": mean, "ci_low": min(low, mean), "ci_high": max(high, mean),
            "ci_method": CI_METHOD,
            "mse_exact": exact, "bits_per_message": enc.payload_bits(),
            "spec": enc.spec, "private": enc.private, "encoder_privacy": privacy_label(label)}


def run(dims: list[int], epsilon: float, bits: int, norm: float, trials: int, out: str,
        encoders: list[str] | None = None, plot: bool = True) -> dict[str, Any]:
    encoders = encoders or E1_ENCODERS
    rows = []
    t0 = time.perf_counter()
    with progress(len(encoders) * len(dims), "E1 points (encoder, d)") as sweep:
        for label in encoders:
            for d in dims:
                rows.append(measure(label, d, epsilon, bits, norm, trials))
                sweep.advance(encoder=label, d=d, mse=rows[-1]["mse"])
    result = {"epsilon": epsilon, "bits": bits, "norm": norm, "trials": trials, "rows": rows,
              "wall_s": time.perf_counter() - t0, "meta": run_meta()}
    atomic_write_json(out, result)
    if plot:
        plot_mse(result, str(Path(out).with_suffix(".png")))
    return result


def plot_mse(result: dict[str, Any], path: str) -> Any:
    """E1's plot (:func:`sstq_fl.plots.plot_mse`; matplotlib is imported only when plotting)."""
    from ..plots import plot_mse as plot

    return plot(result, path)
