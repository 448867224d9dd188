"""Which encoder for a dimension, an ε, a cohort and a bit budget: every registered encoder ranked.

For each registered encoder (plug-ins included) the candidates are its default spec and the specs that vary
the parameter it declares as its ``width`` (:attr:`~sstq_fl.encoders.base.Encoder.width`: ``b``, ``bits``, ``k`` or
``s``, within the declared range) and its ``coin`` (``public`` sends fewer bits but needs shared per-client
coins).  A candidate whose payload exceeds the budget, or that its encoder refuses for this setting, is dropped.
Each encoder keeps its best candidate.

**The figure ranked** is the expected squared error of the decoded mean of ``n`` clients that all hold the
same input ``x`` with ``‖x‖ = R`` (a fixed Gaussian direction, :func:`e1_vector`):

* ``exact``: the encoder declares ``mse(x)`` and is unbiased (or unbiased unless clipped, and nothing was
  clipped): the messages are independent and unbiased, so the mean's error is ``mse(x)/n`` exactly;
* ``measured``: a biased encoder, or one without a declared MSE: ``trials`` messages give the bias ``b`` (its
  square corrected for the sampling noise of the mean) and the trace ``V`` of the per-message covariance, and
  the mean's error is ``‖b‖² + V/n`` (a Monte-Carlo estimate, with its trial count; the candidate is picked
  on a quarter of the trials, then measured again on all of them; candidates whose screening would take more
  than :data:`MAX_SCREEN_S` here are not screened).

The client's encode cost is the wall time per client of encoding one batch on this machine (median of 3).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from .. import rng
from .base import Encoder, make_encoder, registry

WIDTH_VALUES: dict[str, tuple[int, ...]] = {
    "b": tuple(range(1, 9)),
    "bits": tuple(range(1, 17)),
    "k": tuple(range(1, 9)) + (16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
    "s": (1, 2, 4, 8, 16),
}
"""The values tried for each width parameter (clipped to the encoder's declared range)."""
MAX_SCREEN_S = 10.0
"""A measured candidate whose screening messages would take longer than this here is not screened (unless no
candidate is cheaper: then all are)."""



def e1_vector(d: int, norm: float, seed: int = 0) -> torch.Tensor:
    """E1's input: a fixed Gaussian direction in ``d`` dimensions (its own stream per ``d`` and ``seed``) at norm
    ``norm``; the ranking's ``x`` and the benchmarks' (``bench mse``, ``bench frontier``, ``bench kashin``)."""
    g = torch.from_numpy(rng.normal(np.array([seed], np.uint64), f"e1-vector-{d}", d)[0])
    return g / torch.linalg.vector_norm(g) * norm


@dataclass(frozen=True)
class Row:
    """One encoder's best candidate: spec, bits per message, the mean's MSE and how it was obtained."""

    spec: str
    private: bool
    bits: int
    mse_mean: float
    kind: str
    per_message_mse: float
    encode_ms: float
    unbiased: str
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def candidate_specs(name: str, cls: type[Encoder], dim: int) -> list[str]:
    """The default spec and its variants: the declared ``width`` parameter over :data:`WIDTH_VALUES` (within its
    declared range, ``k`` at most ``dim``), each also with ``coin=public`` where the encoder has that coin."""
    variants: list[dict[str, Any]] = [{}]
    key = cls.width
    p = cls.params.get(key) if key else None
    if key and p is not None and p.type is int:
        ok = [v for v in WIDTH_VALUES.get(key, ()) if p.out_of_range(v) is None and (key != "k" or v <= dim)]
        variants += [{key: w} for w in ok if w != p.default]
    coin = cls.params.get("coin")
    if coin is not None and coin.choices and "public" in coin.choices:
        variants = variants + [{**v, "coin": "public"} for v in variants]
    return [name + (":" + ",".join(f"{k}={v}" for k, v in v.items()) if v else "") for v in variants]


def build(spec: str, dim: int, epsilon: float, radius: float) -> Encoder | None:
    """The encoder, or ``None`` when it refuses this setting (a ``ValueError``: e.g. a codebook larger than ``d``)."""
    try:
        return make_encoder(spec, dim, epsilon, radius=radius)
    except ValueError:
        return None


def unbiasedness(enc: Encoder) -> str:
    return str(enc.unbiasedness()["unbiased"])


def exact_mse(enc: Encoder, x: torch.Tensor) -> float | None:
    """``mse(x)`` when it is exact for the mean (unbiased; or unbiased unless clipped, and ``x`` is not clipped)."""
    if not (enc.unbiased or enc.unbiased_unless_clipped):
        return None
    val = enc.mse(x[None])
    if val is None:
        return None
    seed = np.zeros(1, dtype=np.uint64)
    if not enc.unbiased and enc.encode(x[None], seed, coins=_coins(enc, seed)).stats.get("clipped"):
        return None
    return float(val[0])


def _coins(enc: Encoder, seeds: np.ndarray) -> np.ndarray | None:
    """Public per-client coins for public-coin encoders (``10⁹ + seed``), else ``None``."""
    return seeds + np.uint64(10**9) if enc.public_coins else None


def decoded(enc: Encoder, x: torch.Tensor, trials: int, chunk: int = 256) -> torch.Tensor:
    """``[trials, d]`` decoded messages of ``x`` (seeds ``0..trials−1``), float64 on the CPU."""
    est = torch.zeros(trials, enc.dim, dtype=torch.float64)
    for lo in range(0, trials, chunk):
        seeds = np.arange(lo, min(trials, lo + chunk), dtype=np.uint64)
        coins = _coins(enc, seeds)
        est[lo:lo + len(seeds)] = enc.decode(enc.encode(x.expand(len(seeds), -1), seeds, coins=coins), coins=coins).cpu()
    return est


class CostGate:
    """Which measured candidates of one encoder are affordable here: ``messages`` messages within ``budget_s``
    seconds, estimated from one timed message (its first call, one-time costs included, so the estimate errs
    high).  Candidates should come cheapest first (by payload): one as long as a candidate already too slow,
    with the same ``coin``, is refused without being timed (an encoder's cost grows with its width)."""

    def __init__(self, budget_s: float, messages: int):
        self.budget_s, self.messages = budget_s, messages
        self.too_slow: dict[Any, int] = {}  # coin -> the shortest payload found too slow

    def estimate(self, enc: Encoder, x: torch.Tensor) -> tuple[bool, str]:
        """``(affordable, why not)`` for ``enc`` on input ``x``."""
        coin, bits = enc.cfg.get("coin"), enc.payload_bits()
        if coin in self.too_slow and bits >= self.too_slow[coin]:
            return False, f"at least as long as a candidate already too slow ({self.too_slow[coin]} bits)"
        t0 = time.perf_counter()
        decoded(enc, x, 1)
        if (est := self.messages * (time.perf_counter() - t0)) <= self.budget_s:
            return True, ""
        self.too_slow[coin] = min(bits, self.too_slow.get(coin, bits))
        return False, f"{self.messages} messages would take about {est:.3g} s here (> {self.budget_s:g} s)"


def measured(enc: Encoder, x: torch.Tensor, clients: int, trials: int) -> tuple[float, float]:
    """``(mean's MSE, per-message MSE)`` from ``trials`` messages (seeds ``0..trials−1``)."""
    est = decoded(enc, x, trials)
    target = enc.preprocess(x[None]).double().cpu()[0]
    var = float(est.var(0).sum())  # trace of the per-message covariance (unbiased sample variance)
    bias2 = max(float(((est.mean(0) - target) ** 2).sum()) - var / trials, 0.0)  # E‖mean − b‖² = ‖b‖² + var/T
    return bias2 + var / clients, bias2 + var


def encode_ms(enc: Encoder, x: torch.Tensor, batch: int = 16) -> float:
    """Median over 3 repeats of the wall time per client of encoding ``batch`` copies of ``x``."""
    seeds = np.arange(batch, dtype=np.uint64)
    coins, times = _coins(enc, seeds), []
    for _ in range(3):
        t0 = time.perf_counter()
        enc.encode(x.expand(batch, -1), seeds, coins=coins)
        times.append((time.perf_counter() - t0) / batch * 1e3)
    return float(np.median(times))


def best_row(name: str, cls: type[Encoder], x: torch.Tensor, epsilon: float, clients: int, bits: int | None,
             trials: int) -> Row | None:
    """The encoder's best candidate within the budget (``None``: no candidate fits or builds)."""
    dim, radius = x.shape[0], float(torch.linalg.vector_norm(x))
    built = {s: e for s in candidate_specs(name, cls, dim) if (e := build(s, dim, epsilon, radius)) is not None
             and (bits is None or e.payload_bits() <= bits)}
    if not built:
        return None
    exact = [(m, s) for s, m in ((s, exact_mse(e, x)) for s, e in built.items()) if m is not None]
    if exact:
        per_msg, spec = min(exact, key=lambda t: (t[0], built[t[1]].payload_bits()))
        mean_mse, kind, note = per_msg / clients, "exact", ""
    else:
        screen, gate = max(100, trials // 4), CostGate(MAX_SCREEN_S, max(100, trials // 4))
        cheapest_first = sorted(built, key=lambda s: built[s].payload_bits())
        affordable = {s: built[s] for s in cheapest_first if gate.estimate(built[s], x)[0]} or built
        spec = min(affordable, key=lambda s: measured(built[s], x, clients, screen)[0]) if len(affordable) > 1 \
            else next(iter(affordable))
        mean_mse, per_msg = measured(built[spec], x, clients, trials)
        kind, note = "measured", f"Monte Carlo over {trials} messages (bias and variance; picked on {screen})"
    enc = built[spec]
    return Row(spec=spec, private=enc.private, bits=enc.payload_bits(), mse_mean=mean_mse, kind=kind,
               per_message_mse=per_msg, encode_ms=encode_ms(enc, x), unbiased=unbiasedness(enc), note=note)


def recommend(dim: int, epsilon: float, clients: int, bits: int | None = None, radius: float = 1.0,
              trials: int = 400, names: list[str] | None = None) -> list[Row]:
    """Every registered encoder's best candidate for ``(d, ε, n, budget)``, private ones first, each group by
    the MSE of the decoded mean (see the module docstring for what is exact and what is measured)."""
    if dim < 2 or not (epsilon > 0 and math.isfinite(epsilon)) or clients < 1 or (bits is not None and bits < 1):
        raise ValueError(f"recommend needs dim >= 2, a positive finite epsilon, clients >= 1 and bits >= 1; got "
                         f"dim={dim}, epsilon={epsilon}, clients={clients}, bits={bits}")
    x = e1_vector(dim, radius)
    reg = registry()
    unknown = sorted(set(names or []) - set(reg))
    if unknown:
        raise ValueError(f"unknown encoder(s) {unknown}; registered: {sorted(reg)}")
    rows = [r for n in (names or sorted(reg)) if (r := best_row(n, reg[n], x, epsilon, clients, bits, trials))]
    return sorted(rows, key=lambda r: (not r.private, r.mse_mean))


def table(rows: list[Row], *, dim: int, epsilon: float, clients: int, bits: int | None) -> str:
    """A markdown table of :func:`recommend`'s rows, with the setting and what the columns mean."""
    budget = f"at most {bits} bits per message" if bits is not None else "no bit budget (each encoder's best)"
    out = [f"Encoders for d = {dim}, ε = {epsilon:g} per message, n = {clients} clients, {budget}.",
           "MSE of the decoded mean of n clients holding the same x with ‖x‖ = R (exact: the encoder's declared "
           "MSE / n; measured: Monte Carlo bias and variance).", "",
           "| rank | encoder | bits/msg | MSE of mean | figure | unbiased | encode ms/client |",
           "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        rank = str(i) if r.private else "ref"
        name = r.spec if r.private else f"{r.spec} (NOT private: compression only)"
        out.append(f"| {rank} | {name} | {r.bits} | {r.mse_mean:.4g} | {r.kind} | {r.unbiased} | {r.encode_ms:.3g} |")
    skipped = "Encoders with no candidate within the budget or for this d are left out."
    return "\n".join(out + ["", skipped]) + "\n"
