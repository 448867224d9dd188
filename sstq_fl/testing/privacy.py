"""Check ``epsilon-ldp``: the message law is ε-LDP (pure, replace-one), exactly where it can be enumerated.

*Exact* (the encoder defines ``output_law(x) -> (messages, probabilities)``): the worst likelihood ratio
``max_m max_{x,x'} P(m|x)/P(m|x')`` over a boundary set of inputs (zero, ``±R e_i``, random boundary points,
frame rows) must be at most ``e^ε`` (relative slack 1e-9); and the declared law must be the one the encoder
samples: every sampled message is in the enumeration and Pearson's χ² goodness-of-fit test does not reject
the declared probabilities at level ``α/2`` for two inputs.

*Audit* (otherwise): for each worst-case pair ``(x, x')`` an event ``E`` is chosen on a first sample (a
threshold on ``⟨x̂, x − x'⟩``, or a single message when the messages are discrete), then on a fresh sample
(four times larger) the Clopper–Pearson bounds give ``ε_lb = log(P_lo(E|x)/P_hi(E|x'))`` (Jagielski, Ullman, Oprea, NeurIPS 2020,
§3).  With level ``α/(2·pairs·orders)`` per bound, an ε-LDP encoder gets ``ε_lb > ε`` with probability at most
``α``; an encoder that exceeds ε by a wide margin (e.g. runs at 3ε) is caught.  ``ε_lb`` is a lower bound,
not an estimate: an honest encoder usually shows ``ε_lb`` well below ε.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..encoders.base import Encoder, Messages
from ..progress import progress
from . import inputs
from .report import CheckResult, failed, passed, skipped
from .stats import chi_square_pvalue, cp_lower, epsilon_lower_bound

NAME = "epsilon-ldp"
THRESHOLDS = 40
MAX_MESSAGE_EVENTS = 64


@dataclass(frozen=True)
class Budget:
    """Sample sizes and level of the check: ``trials`` messages per input and stage, false-failure ``alpha``."""

    trials: int
    alpha: float


def check_privacy(enc: Encoder, budget: Budget) -> CheckResult:
    """Exact when the encoder publishes its output law, else an audited lower bound on ε."""
    if not enc.private:
        return skipped(NAME, "not private (the encoder declares private=False): no ε to check")
    law = getattr(enc, "output_law", None)
    if callable(law):
        return _exact(enc, law, budget)
    return _audit(enc, budget)


# ---------------------------------------------------------------------- exact
def _exact(enc: Encoder, law: Callable[[torch.Tensor], tuple[Messages, torch.Tensor]], budget: Budget) -> CheckResult:
    xs = inputs.boundary_set(enc)
    msgs, probs = law(xs)
    probs = probs.double().cpu()
    if not (bool((probs >= 0).all()) and torch.allclose(probs.sum(1), torch.ones(len(xs), dtype=torch.float64),
                                                          atol=1e-9)):
        return failed(NAME, "output_law's probabilities are negative or do not sum to 1")
    hi, lo = probs.max(0).values, probs.min(0).values
    if bool(((lo <= 0) & (hi > 0)).any()):
        return failed(NAME, f"exact: a message has probability 0 for one input and > 0 for another "
                            f"(ε = ∞ > {enc.epsilon:g}) over {len(xs)} boundary inputs")
    worst = float(torch.log(hi[hi > 0] / lo[hi > 0]).max())
    said = f"exact: worst log-ratio {worst:.6g} vs ε = {enc.epsilon:g} over {len(xs)} boundary inputs, {msgs.n} messages"
    if worst > enc.epsilon * (1 + 1e-9):
        return failed(NAME, said + " (exceeds ε)")
    why = _fidelity(enc, msgs, law, budget)
    if why:
        return failed(NAME, f"{said}, but {why}")
    return passed(NAME, f"{said}; sampled law matches it (χ², level {budget.alpha / 2:g})")


def _keys(msgs: Messages, names: list[str]) -> np.ndarray:
    return np.concatenate([msgs.fields[k].cpu().double().numpy().reshape(msgs.n, -1) for k in names], axis=1)


def _fidelity(enc: Encoder, space: Messages, law: Callable[[torch.Tensor], tuple[Messages, torch.Tensor]],
              budget: Budget) -> str | None:
    """Why the sampled messages do not follow the declared law (``None``: χ² does not reject it)."""
    names = sorted(space.fields)
    index = {tuple(r): i for i, r in enumerate(_keys(space, names))}
    for label, x in (("R e0", inputs.basis(enc, 0)), ("R g", inputs.direction(enc, 11, 1.0))):
        s = inputs.seeds(NAME + "-law" + label, budget.trials)
        got = enc.encode(x.repeat(budget.trials, 1), s, coins=inputs.coins(s))
        idx = [index.get(tuple(r), -1) for r in _keys(got, names)]
        if min(idx) < 0:
            return f"x={label} produced a message outside the declared output law"
        counts = np.bincount(idx, minlength=space.n)
        expected = law(x[None])[1].double().cpu().numpy()[0] * budget.trials
        pval, dof = chi_square_pvalue(counts, expected)
        if pval < budget.alpha / 4:
            return f"x={label}: the sampled messages do not follow the declared law (χ² p = {pval:.3g}, {dof} dof)"
    return None


# ---------------------------------------------------------------------- audit
def _audit(enc: Encoder, budget: Budget) -> CheckResult:
    pairs = inputs.worst_pairs(enc)
    a = budget.alpha / (2 * 2 * len(pairs))  # two bounds per ordered pair, both orders of each pair
    best, where = -math.inf, ""
    per_pair = 2 * (_selection_size(budget.trials) + budget.trials)
    with progress(2 * len(pairs) * per_pair, f"{NAME} audit messages", key="kit-audit") as bar:
        for label, x, y in pairs:
            for order, (u, v) in (("", (x, y)), (" (reversed)", (y, x))):
                lb = _audit_pair(enc, u, v, budget.trials, a, label + order, bar.advance)
                if lb > best:
                    best, where = lb, label + order
    said = (f"audit: ε lower bound {max(best, 0.0):.4g} vs ε = {enc.epsilon:g} (worst pair {where}; {len(pairs)} pairs, "
            f"{budget.trials} audit messages per input; Clopper–Pearson, confidence {1 - budget.alpha:.10g})")
    return failed(NAME, said + " — ε exceeded") if best > enc.epsilon else passed(NAME, said)


def _sample(enc: Encoder, x: torch.Tensor, n: int, tag: str) -> tuple[Messages, torch.Tensor]:
    s = inputs.seeds(tag, n)
    c = inputs.coins(s)
    msgs = enc.encode(x.repeat(n, 1), s, coins=c)
    return msgs, enc.decode(msgs, coins=c).double().cpu()


def _selection_size(n: int) -> int:
    """Messages per input of the sample an audit event is chosen on (it only has to find a good event)."""
    return max(n // 4, 100)


def _audit_pair(enc: Encoder, x: torch.Tensor, y: torch.Tensor, n: int, a: float, tag: str,
                done: Callable[[int], None]) -> float:
    """Choose the event on one sample, bound ε on a fresh one (``a``: level of each one-sided bound); ``done(k)``
    after each sample of ``k`` messages."""
    m = _selection_size(n)
    sel_x = _sample(enc, x, m, tag + "-select-x")
    done(m)
    sel_y = _sample(enc, y, m, tag + "-select-y")
    done(m)
    event = _choose(enc, sel_x, sel_y, x - y, a)
    aud_x = _sample(enc, x, n, tag + "-audit-x")
    done(n)
    aud_y = _sample(enc, y, n, tag + "-audit-y")
    done(n)
    return epsilon_lower_bound(int(event(*aud_x).sum()), int(event(*aud_y).sum()), n, a)


Event = Callable[[Messages, torch.Tensor], np.ndarray]


def _choose(enc: Encoder, sx: tuple[Messages, torch.Tensor], sy: tuple[Messages, torch.Tensor], w: torch.Tensor,
            a: float) -> Event:
    """The candidate event with the largest selection-sample lower bound on ``P(E|x)/P(E|x')``."""
    cands = _threshold_events(sx[1], sy[1], w) + _message_events(enc, sx[0], sy[0])
    n = sx[0].n

    def score(ev: Event) -> float:
        kx, ky = int(ev(*sx).sum()), int(ev(*sy).sum())
        return -math.inf if kx == 0 else math.log(cp_lower(kx, n, a) / ((ky + 1) / (n + 1)))

    return max(cands, key=score)


def _threshold_events(ex: torch.Tensor, ey: torch.Tensor, w: torch.Tensor) -> list[Event]:
    """``{⟨x̂, w⟩ > t}`` for thresholds at quantiles of the pooled selection scores."""
    pooled = torch.cat([ex, ey]) @ w.double()
    ts = np.unique(np.quantile(pooled.numpy(), np.linspace(0.5, 0.999, THRESHOLDS)))
    return [_above(w.double(), float(t)) for t in ts]


def _above(w: torch.Tensor, t: float) -> Event:
    def event(msgs: Messages, est: torch.Tensor) -> np.ndarray:
        return np.asarray((est @ w).numpy() > t)
    return event


def _equals(names: list[str], row: np.ndarray) -> Event:
    def event(msgs: Messages, est: torch.Tensor) -> np.ndarray:
        return np.asarray((_keys(msgs, names) == row).all(1))
    return event


def _message_events(enc: Encoder, mx: Messages, my: Messages) -> list[Event]:
    """``{message = m}`` for the discrete messages most frequent under ``x`` (integer fields only)."""
    if any(f.kind != "uint" for f in enc.layout()):
        return []
    names = sorted(mx.fields)
    kx = _keys(mx, names)
    uniq, counts = np.unique(kx, axis=0, return_counts=True)
    top = uniq[np.argsort(-counts, kind="stable")[:MAX_MESSAGE_EVENTS]]
    return [_equals(names, row) for row in top]
