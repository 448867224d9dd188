"""Shared machinery of the Kashin-based encoders (SSTQ, SQKR).

Public inputs: the frame ``(kind, d, N = 2^⌈log2(ρ d)⌉, seed)`` and the Kashin parameters;
from them the public coefficient bound ``B = K · R`` in scaled units ``s = √N a`` (``K`` the
Kashin level of :class:`~sstq_fl.encoders.maths.kashin.KashinConfig`: 1.9 for the default ``kashin=linf``), i.e.
``|a_j| ≤ K R / √N``.  A coefficient that exceeds ``B`` (a row that did not reach ``K``:
``lv``'s contraction check failed, or ``linf``/``ap`` hit their iteration cap) is clipped to
``[-B, B]``; privacy is unaffected, a bias appears, and the count is reported in
``Messages.stats['clipped']``.  No configuration avoids clipping on every input: the
randomized partial Hadamard frame contains Walsh flats, sparse inputs that certifiably need level
``√(2^k)`` (≥ 3.02 at d = 100, ≥ 5.66 at d = 25,450; :mod:`sstq_fl.bench.kashin`), above every
practical ``K``, ``lv``'s 2.352 included.  So the unbiased Kashin encoders declare
``unbiased_unless_clipped`` (exactly unbiased on every input they do not clip: no clipping on
Gaussian inputs, the E1 vector or frame rows at the default level), not ``unbiased``; their
``mse`` includes the clipping bias.  ``frame=hd3`` (three randomized Hadamard stages, no permutation) has no
Walsh flats: the one-stage frame's flats need level ≤ 1.28 there and are not clipped, and its worst level
found by search is the dense Haar frame's, for 2.6–3.0× the encode time at d = 25,450
(``benchmarks/results/frame_stack/``).  At the default ρ = 2.5 that level is above 1.9 for every frame
(2.20–2.27 at d = 100, 2.24 at d = 25,450): the limit is the redundancy, not the structure.  The encoders'
MSE does not depend on ``N`` (within 1 % in ``e1_rho.json``), so ``frame=hd3,rho=5`` trades one bit a message
(SSTQ; four for SQKR) and twice the transform for a worst level found of 1.75 at d = 100 and at d = 25,450,
where nothing is clipped at the default level; raising ``level`` instead costs ``(K/1.9)²`` in MSE.  These are
search results, so at a chosen level no class declares ``unbiased``.  The one bound proven over all inputs is
:meth:`~sstq_fl.encoders.maths.frames.Frame.certified_level`, ``√N max_j ‖Q_j‖`` (``√d`` on the one-stage frame):
``guarantee=unbiased`` makes it the public level, every input's minimum-norm start is then within it, nothing is
ever clipped, and the instance declares ``unbiased``.  Its coefficients are one transform of every row with no
branch on the data, so its encode time does not depend on the input in either randomness mode: one transform pair
a row (``O(N log N)``) against the fixed schedule's whole iteration cap in secure mode
(``benchmarks/results/frame_stack/encode_speed_certified.json``).  The price is the level: at ``d = 100, 1,000, 10,000``
the exact MSE of ``sstq-flat:b=4`` is 14.6×, 141× and 1,412× the default level's, SQKR's 28×, 278× and
2,774× (``benchmarks/results/frame_stack/e1_certified.json``): a representation that is flat
by proof is not yet known at these sizes.

**Frames drawn afresh each round** (``draw=round``, the default).  :meth:`FramedEncoder.for_round` gives round
``t``'s encoder: the same configuration on the frame of the public seed :func:`round_frame_seed` (fresh signs and
column set, ``O(N)`` to draw, nothing sent; the fingerprint names the round).  Clipping is then a property of
an input *and* a draw: an input fixed before the round's frame is drawn (an honest client's gradient at the
published model) meets a frame it could not be tuned to.  On the one-stage frame the minimum-norm coefficients
of such an input are Rademacher sums, so ``guarantee=whp`` can make ``√(2 ln(2N/δ))`` the public level with a
proof (:func:`whp_level`): unbiased except with probability ``δ`` per message, at 6–8× the MSE of level 1.9
(``sstq-flat:b=4``, ε = 3, d = 100–10,000), where the every-input proof costs 14.6–1,412×.  At the default level
1.9 nothing is proven, but the measured clipping of adversarial inputs over fresh frames is reported by
``sstq-fl bench frame-round`` (``benchmarks/results/frame_round/``).  ``draw=fixed`` keeps one frame for the run.

**Secure schedule.**  In secure randomness the Kashin step must take the same time on every input.  With
``kashin=linf`` every row runs ``secure_iters`` iterations (warm-up and Douglas–Rachford, no ``lv`` fallback),
a public number; on per-round frames the adversarial suite needs at most 2–3 transform pairs at d = 25,450, so
a short schedule reaches the level there.  The messages equal the adaptive encode of the same configuration
bit for bit.  Reproducible randomness keeps the adaptive encode (up to ``iters`` iterations and the fallback).

Server side, contributions are accumulated as a dense ``N``-vector in scaled units and the
frame synthesis is applied once per round (:meth:`_finish`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from abc import abstractmethod
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import rng
from ..lazy import lazy_module
from ..stages import stage
from .base import Encoder, Messages, Param, ball_scale, check_input
from .maths.frames import FRAME_KINDS, Frame, make_frame
from .maths.kashin import LINF_LEVEL, METHODS, WARMUPS, KashinConfig, kashin

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")

GUARANTEES = ("none", "whp", "unbiased")
DRAWS = ("round", "fixed")
WHP_FRAMES = ("hadamard", "haar")
"""Frames whose coefficients of a fixed unit input are, over a fresh draw, sub-Gaussian with variance proxy 1
(one-stage Hadamard: a Rademacher sum; Haar: a coordinate of a uniform point of the sphere): ``guarantee=whp``
needs one of them (:func:`whp_level`)."""
SECURE_ITERS = 6
"""Default public number of ``kashin=linf`` iterations (warm-up steps plus Douglas–Rachford iterations) of the
short secure schedule, chosen by measurement on per-round frames (``benchmarks/results/frame_round/``)."""
CERTIFIED_MARGIN = 1e-3
"""Relative margin of ``guarantee=unbiased``'s level over the certified ``√N max_j ‖Q_j‖``: float32 transforms
round the minimum-norm start by far less (about ``log2 N`` float32 ulps of ``‖x‖``)."""

FRAME_PARAMS: dict[str, Param] = {
    "frame": Param(str, "hadamard", "public frame: randomized partial Hadamard (one stage), hadamard2/hadamard3 "
                   "(two or three stages, permutations between them), hd2/hd3 (two or three stages, no "
                   "permutation; hd3: no Walsh flats at about 3x the encode time) or dense Haar", tuple(FRAME_KINDS)),
    "rho": Param(float, 2.5, "frame redundancy: N = 2^ceil(log2(rho d))", above=1.0),
    "kashin": Param(str, "linf", "Kashin method: linf (level-targeted, default), lv (Lyubarskii-Vershynin) or ap "
                    "(alternating projections)", METHODS),
    "eta": Param(float, 0.55, "LV truncation ratio eta", above=0.0, high=0.999999),
    "delta": Param(float, 0.9, "LV uncertainty parameter delta", above=0.0, high=1.0),
    "passes": Param(int, 40, "maximum LV passes", low=1),
    "level": Param(float, LINF_LEVEL, "public level for kashin=linf, target level for kashin=ap (units of R/sqrt(N))",
                   above=1.0),
    "iters": Param(int, 300, "iteration cap for kashin=linf and kashin=ap", low=1),
    "guarantee": Param(str, "none", "whp: the public level is sqrt(2 ln(2N/whp_delta)), which a fixed input exceeds "
                       "with probability at most whp_delta over the round's fresh frame (draw=round; hadamard or haar "
                       "frames): unbiased except with that probability, about 10-14x the MSE; unbiased: the frame's "
                       "certified level sqrt(N) max_j |Q_j| (sqrt(d) on the one-stage frame), which no input exceeds: "
                       "never clipped, at (level/1.9)^2 the MSE; none: the level option (measured, not proven)",
                       GUARANTEES),
    "whp_delta": Param(float, 1e-6, "guarantee=whp: the probability, over the round's frame, that a fixed input has "
                       "a coefficient above the public level", above=0.0, high=0.5),
    "draw": Param(str, "round", "round: the frame is drawn afresh each round from a public round seed (signs and "
                  "columns; the whp guarantee and the short secure schedule rest on it); fixed: one frame for the run",
                  DRAWS),
    "secure_iters": Param(int, SECURE_ITERS, "kashin=linf in secure randomness: the public number of iterations "
                          "every row runs (warm-up and Douglas-Rachford, no lv fallback), whatever its input", low=1),
    "warmup": Param(str, "schedule", "kashin=linf warm-up: schedule (2 transform pairs on typical inputs) or constant "
                    "(3; the results committed before schedule)", WARMUPS),
}


@lru_cache(maxsize=8)
def cached_frame(kind: str, d: int, rho: float, seed: int, device: str) -> Frame:
    return make_frame(kind, d, rho, seed, device)


def round_frame_seed(seed: int, t: int) -> int:
    """The public seed of round ``t``'s frame (``t ≥ 1``): a hash of the run's frame seed and the round, so every
    client and the server draw the same frame and no round's frame is any other's (or the fixed one's)."""
    return rng.derive_seed(int(seed), 0xF4A3E, int(t))


def whp_level(n_frame: int, delta: float) -> float:
    """``√(2 ln(2N/δ))``: for an input fixed before the frame is drawn, the probability over the draw that any of
    its ``N`` minimum-norm coefficients exceeds this level (in units of ``‖x‖``) is at most ``δ``.

    Proof.  Scaled coefficients of the minimum-norm representation are ``s_j = √N ⟨Q_j, x⟩``.  On the one-stage
    Hadamard frame ``Q = (H D)[:, S]/√N`` with fresh signs ``D``, given the column set ``S``,
    ``s_j = Σ_k H_{j,S_k} D_{S_k} x_k`` is a Rademacher sum with ``Σ_k x_k² = ‖x‖²``, so Hoeffding's inequality
    gives ``P(|s_j| ≥ t‖x‖) ≤ 2 e^{−t²/2}`` (W. Hoeffding, "Probability inequalities for sums of bounded random
    variables", JASA 58(301), 1963, Thm. 2).  On a Haar frame ``Q x/‖x‖`` is uniform on the sphere ``S^{N−1}``
    and the same tail holds for each coordinate of ``√N`` times it (R. Vershynin, *High-Dimensional Probability*,
    Cambridge 2018, Thm. 3.4.6: the uniform distribution on ``√N S^{N−1}`` is sub-Gaussian with constant 1 in
    the form ``P(|⟨v, e_j⟩| ≥ t) ≤ 2 e^{−t²/2}``).  A union bound over the ``N`` rows gives
    ``P(‖s‖_∞ ≥ t‖x‖) ≤ 2N e^{−t²/2} = δ`` at ``t = √(2 ln(2N/δ))``.  ∎"""
    return math.sqrt(2.0 * math.log(2.0 * n_frame / delta))


class FramedEncoder(Encoder):
    params: ClassVar[dict[str, Param]] = dict(FRAME_PARAMS)

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        c = self.cfg
        self.round: int | None = None  # set on the encoders of :meth:`for_round`
        self.certified = c["guarantee"] == "unbiased"  # the level is proven for every input: see _certified_level
        self.whp = c["guarantee"] == "whp"
        if self.whp and (c["draw"] != "round" or c["frame"] not in WHP_FRAMES):
            raise ValueError(f"guarantee=whp needs draw=round and frame in {WHP_FRAMES} (a fresh draw whose "
                             f"coefficients are sub-Gaussian), got draw={c['draw']}, frame={c['frame']}")
        if self.whp or self.certified:
            self._check_direct()
        self._set_frame(cached_frame(c["frame"], self.dim, c["rho"], self.seed, str(self.device)))

    def _set_frame(self, frame: Frame) -> None:
        """Use ``frame`` and derive the public level, Kashin configurations and coefficient bound from it."""
        c = self.cfg
        self.frame, self.N = frame, frame.N
        level = (self._certified_level() if self.certified else max(c["level"], whp_level(self.N, c["whp_delta"]))
                 if self.whp else c["level"])
        self.kashin_cfg = KashinConfig(method=c["kashin"], eta=c["eta"], delta=c["delta"], max_passes=c["passes"],
                                       ap_level=c["level"], ap_iters=c["iters"], linf_level=level,
                                       linf_iters=c["iters"], linf_warmup=c["warmup"])
        self.secure_cfg = (dataclasses.replace(self.kashin_cfg, linf_iters=c["secure_iters"], linf_fallback=False)
                           if c["kashin"] == "linf" else self.kashin_cfg)
        self.log2n = int(math.log2(self.N)) if self.N & (self.N - 1) == 0 else math.ceil(math.log2(self.N))
        self.bound = self.kashin_cfg.level * self.radius  # B in scaled units s = √N a

    def for_round(self, t: int) -> FramedEncoder:
        """The encoder of round ``t`` (training rounds are ``t ≥ 1``): with ``draw=round`` the same configuration on
        the frame of :func:`round_frame_seed` (its fingerprint names the round, so a message of another round's frame is
        foreign); with ``draw=fixed``, this encoder."""
        if self.cfg["draw"] == "fixed":
            return self
        if int(t) < 0:
            raise ValueError(f"a round is a non-negative integer, got {t}")
        enc = copy.copy(self)
        enc.round = int(t)
        enc._set_frame(cached_frame(self.cfg["frame"], self.dim, self.cfg["rho"], round_frame_seed(self.seed, t),
                                    str(self.device)))
        return enc

    def _check_direct(self) -> None:
        """``guarantee=whp`` and ``unbiased`` encode the minimum-norm start (:meth:`_direct_coefficients`): only
        for the unbiased-where-not-clipped encoders on ``kashin=linf``."""
        c = self.cfg
        if not self.unbiased_unless_clipped:
            raise ValueError(f"guarantee={c['guarantee']}: {self.name} is biased whatever its level (only sstq-flat "
                             "and sqkr are unbiased where nothing is clipped)")
        if c["kashin"] != "linf":
            raise ValueError(f"guarantee={c['guarantee']} needs kashin=linf (the method that keeps a start within the "
                             f"level), got kashin={c['kashin']}")
        if self.certified:
            self.__dict__["unbiased"] = True  # this instance's declaration; the class's stays False

    def _certified_level(self) -> float:
        """``guarantee=unbiased``: the public level ``max(level, (1 + margin) √N max_j ‖Q_j‖)``.  Every input's
        minimum-norm start is then within it (:meth:`~sstq_fl.encoders.maths.frames.Frame.certified_level`), and
        ``kashin=linf`` returns a row's start when it is within the level, so nothing is ever clipped: this
        instance is unbiased on every input (it says so in ``unbiased``, over its class's ``False``)."""
        return max(self.cfg["level"], self.frame.certified_level() * (1.0 + CERTIFIED_MARGIN))

    def unbiasedness(self) -> dict[str, Any]:
        """``guarantee=whp``: unbiased except with probability at most ``whp_delta`` per message, over the
        round's public frame, for an input fixed before that frame is drawn (:func:`whp_level`)."""
        if not self.whp:
            return super().unbiasedness()
        return {"unbiased": "except_with_probability", "delta": self.cfg["whp_delta"],
                "over": "the round's public frame, for an input fixed before it is drawn", "level": self.kashin_cfg.level}

    def describe(self) -> dict[str, Any]:
        rnd = {} if self.round is None else {"frame_round": self.round}
        return {**super().describe(), "N": self.N, "kashin_level": self.kashin_cfg.level, "B_scaled": self.bound, **rnd}

    def bits_quantities(self) -> dict[str, Any]:
        """``d``, the parameters and the frame size ``N``."""
        return {**super().bits_quantities(), "N": self.N}

    def encode(self, x: torch.Tensor, seeds: Any, coins: Any = None, constant_time: bool | None = None) -> Messages:
        """:meth:`Encoder.encode`; with ``constant_time`` (default: for secure keys) the Kashin step runs its
        public schedule on every row (:func:`~sstq_fl.encoders.maths.kashin.kashin`, ``fixed``): for
        ``kashin=linf`` the short one of ``secure_iters`` iterations, else the method's cap."""
        with stage("clip"):
            x = check_input(x, self.dim).to(self.device)
        s = rng.as_seeds(seeds, x.shape[0])
        with stage("encode"):
            return self._encode(x, s, coins, rng.is_keys(s) if constant_time is None else constant_time)

    @abstractmethod
    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any, fixed: bool = False) -> Messages:
        """The messages of the validated rows ``x``, not yet projected onto the ball: :meth:`coefficients`
        projects them."""

    def coefficients(self, x: torch.Tensor, idx: torch.Tensor, fixed: bool = False) -> tuple[torch.Tensor, dict[str, float]]:
        """Kashin coefficients at ``idx``, in scaled units, of ``x`` projected onto the ball of radius ``R``,
        clipped to ``[-B, B]`` (``fixed``: on the public iteration schedule, in input-independent time).

        The representation is homogeneous (:func:`kashin` normalises each row and scales its result by the
        row's norm), so the projected row's coefficients are ``x``'s times ``min(1, R/‖x‖)``: the projected
        ``[n, d]`` copy is never made (at 1,000 clients of ``d = 25,450`` it cost more than its arithmetic)."""
        with stage("clip"):
            scale = ball_scale(x, self.radius)
        if self.certified or self.whp:
            return self._direct_coefficients(x, idx, scale)
        with stage("kashin"):
            res = kashin(self.frame, x, self.secure_cfg if fixed else self.kashin_cfg, idx, fixed)
        s = res.coeffs.double().mul_(scale)
        over = s.abs() > self.bound
        stats = {"clipped": float(over.sum()), "kashin_passes_mean": float(res.passes.double().mean()),
                 "contraction_failures": float(res.contraction_failures.sum()),
                 "not_converged": float((~res.converged).sum())}
        return s.clamp(-self.bound, self.bound), stats

    def _direct_coefficients(self, x: torch.Tensor, idx: torch.Tensor, scale: torch.Tensor
                             ) -> tuple[torch.Tensor, dict[str, float]]:
        """``guarantee=unbiased`` or ``whp``: the minimum-norm representation ``√N Q x`` at ``idx`` (what
        ``kashin=linf`` returns for a start within the level), as one transform of every row with no branch on
        the data: the same operations for every input, so secure mode needs no schedule.  The clip to ``[-B, B]``
        is counted: never more than 0 up to rounding with ``unbiased``; with ``whp``, for an input fixed before
        the round's frame is drawn, with probability at most ``whp_delta``."""
        with stage("kashin"):
            s = torch.gather(self.frame.coef(x), 1, idx.to(x.device)).double().mul_(scale)
        stats = {"clipped": float((s.abs() > self.bound).sum()), "kashin_passes_mean": 0.0,
                 "contraction_failures": 0.0, "not_converged": 0.0}
        return s.clamp(-self.bound, self.bound), stats

    def _finish(self, total: torch.Tensor) -> torch.Tensor:
        return self.frame.synth_(total[None, :].contiguous())[0]

    def _scatter(self, idx: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        acc = torch.zeros(self.N, dtype=torch.float64, device=values.device)
        return acc.index_add_(0, idx.reshape(-1).to(values.device), values.reshape(-1))

    def frame_rows(self, idx: torch.Tensor) -> torch.Tensor:
        return self.frame.rows(idx.cpu()).to(self.device)
