"""Checks ``unbiased`` and ``mse``: the declared mean and mean squared error hold statistically.

For each input ``x`` (one inside the ball, and, unless the encoder is only unbiased when nothing is
clipped, one outside it, so that ``clip(x)`` is exercised), ``n`` messages with fixed seeds are decoded.
``unbiased``: every coordinate's ``|mean − clip(x)_i|`` is within ``z · sd_i/√n`` (two-sided z-test,
Bonferroni over coordinates and inputs at level ``α``; a float32 tolerance ``1e-6 R`` covers encoders
that send the vector itself).  ``mse``: ``|mean ‖x̂ − clip(x)‖² − mse(x)| ≤ z · se`` (Bonferroni over
inputs, plus ``1e-9`` relative).  Both rest on the central limit theorem for ``n`` in the thousands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..encoders.base import Encoder
from ..progress import progress
from . import inputs
from .report import CheckResult, failed, passed, skipped
from .stats import two_sided_z

UNBIASED, MSE = "unbiased", "mse"


@dataclass
class Draws:
    """Decoded estimates ``est`` ``[n, d]`` for the input ``x`` (``clipped``: its projection on the ball)."""

    label: str
    x: torch.Tensor
    clipped: torch.Tensor
    est: torch.Tensor
    kashin_clipped: float


def draw(enc: Encoder, trials: int) -> list[Draws]:
    """``trials`` decoded messages for each of :func:`~sstq_fl.testing.inputs.moment_inputs`."""
    out = []
    xs = inputs.moment_inputs(enc)
    with progress(len(xs) * trials, "mean and MSE messages", key="kit-moments", every=trials) as bar:
        for label, x in xs:
            s = inputs.seeds("moments" + label, trials)
            c = inputs.coins(s)
            msgs = enc.encode(x.repeat(trials, 1), s, coins=c)
            est = enc.decode(msgs, coins=c).double().cpu()
            out.append(Draws(label, x, enc.preprocess(x[None]).double().cpu()[0], est,
                             float(msgs.stats.get("clipped", 0))))
            bar.advance(trials)
    return out


def check_unbiased(enc: Encoder, draws: list[Draws], alpha: float) -> CheckResult:
    """Per-coordinate z-tests of ``E[x̂] = clip(x)`` (Bonferroni), for encoders that declare it."""
    if not (enc.unbiased or enc.unbiased_unless_clipped):
        return skipped(UNBIASED, "the encoder declares itself biased (unbiased=False)")
    z = two_sided_z(alpha, enc.dim * len(draws))
    worst, where = 0.0, ""
    for d in draws:
        if d.kashin_clipped:
            return skipped(UNBIASED, f"input {d.label} had {d.kashin_clipped:g} clipped coefficients "
                                     f"(unbiased only unless clipped): inconclusive")
        n = d.est.shape[0]
        se = d.est.std(0) / math.sqrt(n)
        dev = (d.est.mean(0) - d.clipped).abs()
        ratio = float(((dev - 1e-6 * enc.radius).clamp_min(0) / se.clamp_min(1e-300)).max())
        if ratio > worst:
            worst, where = ratio, d.label
    said = (f"max |mean − clip(x)|/se = {worst:.3g} vs z = {z:.3g} ({len(draws)} inputs × {enc.dim} coordinates, "
            f"{draws[0].est.shape[0]} messages each; two-sided, Bonferroni, level {alpha:g})")
    return failed(UNBIASED, f"{said}: biased at {where}") if worst > z else passed(UNBIASED, said)


def check_mse(enc: Encoder, draws: list[Draws], alpha: float) -> CheckResult:
    """``mse(x)`` against the measured ``E‖x̂ − clip(x)‖²`` (z-test, Bonferroni over inputs)."""
    z = two_sided_z(alpha, len(draws))
    parts, bad = [], ""
    for d in draws:
        declared_t = enc.mse(d.x[None])
        if declared_t is None:
            return skipped(MSE, "no declared mse (mse(x) is None)")
        declared = float(declared_t[0])
        err = ((d.est - d.clipped) ** 2).sum(1)
        mean, se = float(err.mean()), float(err.std()) / math.sqrt(err.shape[0])
        gap = abs(mean - declared)
        parts.append(f"{d.label}: measured {mean:.5g} ± {se:.2g}, declared {declared:.5g}")
        if not (declared >= 0 and gap <= z * se + 1e-9 * abs(declared) + 1e-12):
            bad = d.label
    said = "; ".join(parts) + f" (z = {z:.3g}, level {alpha:g})"
    return failed(MSE, f"declared mse is off at {bad} — {said}") if bad else passed(MSE, said)
