"""Clipping on per-round frames: adversarial inputs × rounds, counted, with a 95 % upper bound.

A Kashin encoder clips (and is biased on) an input whose representation needs a level above the public one.
Against one fixed frame that happens on purpose-built inputs (Walsh flats, sphere-search worst inputs:
:mod:`sstq_fl.bench.kashin`).  With ``draw=round`` the frame of round ``t`` is drawn from a public round seed
after the inputs are fixed, so what matters is, for each input, the probability over the frame that it is
clipped.  This benchmark builds the adversarial suite against the fixed frame (and the previous round's
frame), then counts the ``input × round`` pairs clipped on the rounds' fresh frames, for

- ``hadamard_1.9``: the one-stage frame at level 1.9, the adaptive encode (reproducible randomness);
- ``hadamard_1.9_secure``: the same on the short public secure schedule (``secure_iters`` iterations);
- ``hadamard_whp``: ``guarantee=whp`` (minimum-norm coefficients against ``√(2 ln(2N/δ))``);
- ``hd3_1.9``: ``frame=hd3`` at level 1.9, adaptive;
- ``fixed_1.9``: the fixed frame the suite was tuned to, for contrast (every round the same frame).

A pair counts as clipped when any of its coefficients exceeds the public level.  The upper bound is the
one-sided 95 % Clopper–Pearson bound on the clipping probability (``1 − 0.05^{1/n}`` for 0 of ``n``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from scipy import stats

from ..encoders import make_encoder
from ..encoders.framed import FramedEncoder
from ..encoders.maths.frames import HadamardFrame
from ..encoders.maths.kashin import kashin
from ..io import atomic_write_json, run_meta
from ..progress import progress
from .kashin import flat_vector, sphere_search, walsh_flats

log = logging.getLogger("sstq_fl.bench")

CONFIGS = {"hadamard_1.9": "sstq-flat:b=4", "hadamard_1.9_secure": "sstq-flat:b=4",
           "hadamard_whp": "sstq-flat:b=4,guarantee=whp", "hd3_1.9": "sstq-flat:b=4,frame=hd3",
           "fixed_1.9": "sstq-flat:b=4,draw=fixed"}
"""Configuration name → encoder spec (``_secure`` names run the constant-time schedule)."""


def upper95(clipped: int, n: int) -> float:
    """One-sided 95 % Clopper–Pearson upper bound on a probability seen ``clipped`` times in ``n`` trials."""
    return 1.0 if clipped >= n else float(stats.beta.ppf(0.95, clipped + 1, n - clipped))


def fixed_frame_suite(enc: FramedEncoder, flats: int, sphere: int, sphere_iters: int, seed: int) -> dict[str, torch.Tensor]:
    """Inputs tuned to ``enc``'s fixed frame: its largest Walsh flats and sphere-search worst inputs."""
    frame = enc.frame
    assert isinstance(frame, HadamardFrame)
    found = walsh_flats(frame, restarts=200, seed=seed)[:flats]
    flat = torch.cat([flat_vector(frame, f) for f in found])
    gen = torch.Generator().manual_seed(seed)
    _, worst = sphere_search(frame, torch.randn(sphere, frame.d, generator=gen, dtype=torch.float64), iters=sphere_iters)
    return {"walsh_flat": flat, "sphere_worst": worst}


def real_gradients(rounds: int, clients: int, data_dir: str | None, seed: int) -> list[torch.Tensor]:
    """Per round ``t``, the gradients of ``clients`` Fashion-MNIST clients at the model of round ``t − 1`` of a
    clean run (100 clients, the E3 MLP, ``d = 25,450``)."""
    from ..config.train import RunConfig
    from ..fl.engine import Trainer

    tr = Trainer(RunConfig(task="fmnist", encoder="clean", clients=100, rounds=rounds, seed=seed, lr=0.5, clip=0.5,
                           data_dir=data_dir))
    theta = tr.task.init_params(seed)
    out = []
    ids = np.arange(clients)
    for t in range(1, rounds + 1):
        grads, _ = tr.clients.gradients(theta, t, ids, None)
        out.append(grads.double().clone())
        theta = theta - 0.5 * grads.mean(0).to(theta.dtype)
    return out


def pair_levels(enc: FramedEncoder, x: torch.Tensor, secure: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``x``: the largest coefficient over ``‖x‖`` that ``enc`` would send before clipping, and the
    Kashin transform pairs it used."""
    norms = torch.linalg.vector_norm(x, dim=1)
    if enc.whp or enc.certified:
        s = enc.frame.coef(x / norms[:, None])
        return s.abs().amax(1), torch.zeros(len(x), dtype=torch.int64)
    res = kashin(enc.frame, x, enc.secure_cfg if secure else enc.kashin_cfg, fixed=secure)
    return res.coeffs.abs().amax(1) / norms, res.passes


def frame_round_clipping(out: str, dim: int = 25450, rounds: int = 25, flats: int = 8, sphere: int = 8,
                         sphere_iters: int = 200, prev_rows: int = 8, gauss: int = 8, gradients: int = 16,
                         configs: list[str] | None = None, data_dir: str | None = None, seed: int = 0) -> dict[str, Any]:
    """Count the clipped ``input × round`` pairs of each configuration (module doc); write JSON to ``out``."""
    names = configs or list(CONFIGS)
    if gradients and dim != 25450:
        raise ValueError(f"--gradients needs --dim 25450 (the Fashion-MNIST MLP's), got {dim}; or --gradients 0")
    base = make_encoder(CONFIGS["fixed_1.9"], dim, 3.0, seed=seed)
    assert isinstance(base, FramedEncoder)
    t0 = time.perf_counter()
    suite = fixed_frame_suite(base, flats, sphere, sphere_iters, seed)
    grads = real_gradients(rounds, gradients, data_dir, seed) if gradients else []
    gen = torch.Generator().manual_seed(seed + 1)
    fixed_gauss = torch.randn(gauss, dim, generator=gen, dtype=torch.float64)
    log.info("frame-round: suite built in %.1f s", time.perf_counter() - t0)
    res: dict[str, Any] = {"meta": run_meta(), "dim": dim, "rounds": rounds, "seed": seed, "configs": {}}
    for name in names:
        res["configs"][name] = _count(name, rounds, lambda t, enc: _inputs(enc, base, t, suite, fixed_gauss, grads, prev_rows,
                                                                          seed), dim, seed)
        atomic_write_json(out, res)
    return res


def _inputs(enc: FramedEncoder, fixed: FramedEncoder, t: int, suite: dict[str, torch.Tensor], gauss: torch.Tensor,
            grads: list[torch.Tensor], prev_rows: int, seed: int) -> dict[str, torch.Tensor]:
    """Round ``t``'s inputs: the fixed suite, rows of round ``t − 1``'s frame, Gaussians, the round's gradients."""
    prev = enc.for_round(t - 1) if t > 1 else fixed  # round 1 follows the fixed (round-0) frame
    j = torch.from_numpy(np.random.default_rng([seed, t]).integers(0, enc.N, prev_rows))
    got = {**suite, "previous_frame_row": prev.frame.rows(j), "gaussian": gauss}
    if grads:
        g = grads[t - 1]
        got["gradient"] = g[torch.linalg.vector_norm(g, dim=1) > 0]
    return got


def _count(name: str, rounds: int, inputs: Callable[[int, FramedEncoder], dict[str, torch.Tensor]], dim: int,
           seed: int) -> dict[str, Any]:
    """Clipped pairs per input class over ``rounds`` rounds of configuration ``name``."""
    base = make_encoder(CONFIGS[name], dim, 3.0, seed=seed)
    assert isinstance(base, FramedEncoder)
    secure = name.endswith("_secure")
    per: dict[str, dict[str, Any]] = {}
    if base.cfg["draw"] == "fixed":
        rounds = 1  # the same frame every round: one round's pairs are every round's
    with progress(rounds, f"frame-round {name}") as bar:
        for t in range(1, rounds + 1):
            enc = base.for_round(t)
            for cls, x in inputs(t, enc).items():
                lvl, passes = pair_levels(enc, x, secure)
                c = per.setdefault(cls, {"pairs": 0, "clipped": 0, "max_level": 0.0, "passes": []})
                c["pairs"] += len(x)
                c["clipped"] += int((lvl > enc.kashin_cfg.level * (1 + 1e-6)).sum())
                c["max_level"] = max(c["max_level"], float(lvl.max()))
                c["passes"] += passes.tolist()
            bar.advance(clipped=sum(c["clipped"] for c in per.values()))
    pairs, clipped = sum(c["pairs"] for c in per.values()), sum(c["clipped"] for c in per.values())
    allp = np.concatenate([np.asarray(c.pop("passes"), dtype=np.int64) for c in per.values()])
    return {"spec": base.spec, "public_level": base.kashin_cfg.level, "secure_schedule": secure, "pairs": pairs,
            "clipped": clipped, "upper95": upper95(clipped, pairs), "max_level": max(c["max_level"] for c in per.values()),
            "passes_max": int(allp.max()), "passes_p99": float(np.percentile(allp, 99)), "by_input": per}
