"""Measuring Kashin representations: the level a configuration achieves on given inputs, and the hard inputs
(frame rows, sparse and Gaussian vectors) the benchmarks and tests measure it on."""

from __future__ import annotations

import numpy as np
import torch

from ... import rng
from .frames import Frame
from .kashin import KashinConfig, kashin


def achieved_level(frame: Frame, x: torch.Tensor, cfg: KashinConfig) -> torch.Tensor:
    """Measured level ``max_j |s_j| / ‖x‖`` per row (the quantity the public bound must cover)."""
    res = kashin(frame, x, cfg)
    norms = torch.linalg.vector_norm(x, dim=1).clamp_min(1e-300)
    return res.coeffs.abs().amax(dim=1).double() / norms.double()


def adversarial_inputs(frame: Frame, n_each: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    """Hard inputs for measuring a level: frame rows, sparse vectors, and Gaussian vectors."""
    seeds = np.arange(seed, seed + n_each, dtype=np.uint64)
    j = torch.from_numpy(rng.randint(seeds, "adv-rows", 1, frame.N)[:, 0])
    rows = frame.rows(j)
    sparse = torch.zeros(n_each, frame.d, dtype=torch.float64)
    for i in range(n_each):
        pos = torch.from_numpy(rng.sample_without_replacement(seeds[i : i + 1], "adv-sparse", 1 + i, frame.d)[0])
        sparse[i, pos] = 1.0
    gauss = torch.from_numpy(rng.normal(seeds, "adv-gauss", frame.d))
    return {"frame_row": rows, "sparse": sparse, "gaussian": gauss}
