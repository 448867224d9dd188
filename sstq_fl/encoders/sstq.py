"""SSTQ — Subsampled Stochastic TurboQuant: one stochastically quantized, privatized Kashin coefficient.

Client: clip ``x`` to the ``R``-ball; Kashin representation ``s`` (``|s_j| ≤ B``); draw
``J ~ Uniform{0..N-1}`` (data-independent); stochastically round ``s_J/B`` onto a codebook
``Γ`` (``c_1 = -1 ≤ … ≤ c_M = 1``, ``Σ c_i = 0``, ``M = 2^b``) to a label ``V`` with
``E[c_V] = s_J/B``; privatize ``V`` into ``Z`` and send ``(J, Z)``: ``log2 N + b`` bits.

``sstq-flat`` (the flat variant, unbiased on every input whose coefficients are not clipped): flat ``M``-ary
randomized response, ``Z = V`` w.p. ``p = e^ε/(e^ε+M−1)``, else uniform over the other labels (``q = 1/(e^ε+M−1)``).  Server:
``ŝ_J = B c_Z/(p−q)`` and ``x̂ = √N ŝ_J Q_J`` (``= d ŷ_J u_J`` in the scaled-Parseval normalisation ``U = √(N/d) Q``).
Exact MSE: ``Σ_j ‖Q_j‖² E[ŝ_j²] − ‖x‖²`` with
``E[ŝ_j² | V] = B² (c_V²/(p−q) + q Σ_l c_l²/(p−q)²)``.

``sstq-ma`` (the metric-aware variant): ``Z`` is the nearest codeword to ``T ~`` Laplace(``c_V``,
``σB``) truncated to ``[-B, B]``, sampled exactly from the closed-form transition matrix;
SSTQ's authors decode by identity, ``ŝ_J = B c_Z`` (biased, bounded variance).  ``scale=paper`` takes their
``σ = 4/ε`` (twice the Laplace mechanism's ``2/ε`` for the range ``2B``, so that the truncation's
normaliser is covered too); its exact worst ratio is only ``e^{0.42ε}``–``e^{0.5ε}`` (b = 2…8).
``scale=exact`` (default) calibrates ``σ`` by bisection so the exact channel's worst ratio is
``e^ε`` (:func:`~sstq_fl.encoders.maths.codebooks.calibrated_scale`; ``σ ≈ 0.42–0.5 × 4/ε``), with the
codebook optimised for that channel (our own choice); less noise, so less shrinkage from identity decoding.
``decode=gain`` (default; our own decoder) decodes ``B c_Z/κ`` with ``κ`` the least-squares slope of ``E[c_Z | y]``
under the public surrogate law (:func:`~sstq_fl.encoders.maths.codebooks.ma_gain`, public): identity decoding's
shrinkage (``κ ≈ 0.5`` at ε = 3, a halved server step in training) is removed to first order, at
``1/κ²`` the variance; still declared biased (``E[c_Z | y]`` is not exactly linear), and ``mse`` is
exact for either decoder.  ``decode=identity`` is the authors' decoder: lower single-vector MSE (it
shrinks toward 0), much lower training accuracy (E3: 0.46 against 0.61 over five seeds).  The
authors' encoder is ``sstq-ma:scale=paper,decode=identity``.

Both are pure ε-LDP per message (replace-one): the label channel's likelihood ratio is at
most ``e^ε`` and ``J`` is independent of the data.  Any finite ε is accepted: the flat
channel's ``p, q`` are computed as ``1/(1+(M−1)e^{−ε})``, ``e^{−ε}/(1+(M−1)e^{−ε})`` where
``e^ε`` would overflow, and the metric-aware channel only evaluates ``e^{−x}``.  (Once the
flip probability ``(M−1)q`` falls below ``2^{−53}``, about ε > 37 + ln(M−1), the 53-bit
uniforms never flip a label: the output is the ideal channel's to within ``2^{−53}`` in total
variation, and a stated ε that large protects nothing in practice anyway.)  The Kashin step
follows Lyubarskii & Vershynin, "Uncertainty principles and vector quantization", IEEE Trans. Inf.
Theory 56(7), 2010 (see :mod:`sstq_fl.encoders.maths.kashin` for the methods and levels).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import rng
from ..lazy import lazy_module
from ..privacy.events import flat_rr_probabilities
from ..privacy.floats import EXP_SAFE
from .base import Field, Messages, Param, register_encoder
from .framed import FRAME_PARAMS, FramedEncoder
from .maths import codebooks
from .maths.kashin import kashin

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")


class _SSTQ(FramedEncoder):
    width = "b"
    params: ClassVar[dict[str, Param]] = {**FRAME_PARAMS, "b": Param(int, 4, "bits per label (M = 2^b codewords)",
                                                                            low=1, high=16)}
    bits_formula = "ceil(log2(N)) + b"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        b = self.cfg["b"]
        if not 1 <= b <= 16:
            raise ValueError(f"bit width b must be an integer in [1, 16], got {b}")
        self.M = 1 << b
        self.code = torch.tensor(self._codebook(), dtype=torch.float64, device=self.device)  # normalised

    @abstractmethod
    def _codebook(self) -> np.ndarray:
        """The normalised codebook of this variant."""

    def layout(self) -> list[Field]:
        return [Field("J", self.log2n, 1, limit=self.N), Field("Z", self.cfg["b"], 1, limit=self.M)]

    def _quantize(self, s: torch.Tensor, seeds: np.ndarray) -> torch.Tensor:
        """Unbiased stochastic rounding of coefficients ``s`` onto the codebook → label ``V``."""
        k, _, theta = self.rounding_moments(s)
        u = torch.from_numpy(rng.uniform(seeds, "sstq-round", 1)[:, 0]).to(s.device)
        return k + (u < theta).long()

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any, fixed: bool = False) -> Messages:
        j = torch.from_numpy(rng.randint(seeds, "sstq-index", 1, self.N)).to(self.device)
        s, stats = self.coefficients(x, j, fixed)
        v = self._quantize(s[:, 0], seeds)
        z = self._channel(v, seeds)
        return Messages({"J": j, "Z": z[:, None]}, stats)

    @abstractmethod
    def _channel(self, v: torch.Tensor, seeds: np.ndarray) -> torch.Tensor:
        """The privatizing label channel ``V → Z``."""

    @abstractmethod
    def _value(self, z: torch.Tensor) -> torch.Tensor:
        """Server's estimate of the scaled coefficient ``s_J`` from a label."""

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        j = msgs.fields["J"][:, 0].to(self.device)
        val = self._value(msgs.fields["Z"][:, 0].to(self.device))
        return math.sqrt(self.N) * val[:, None] * self.frame_rows(j)

    def _contribution(self, msgs: Messages, coins: Any) -> torch.Tensor:
        val = self._value(msgs.fields["Z"][:, 0].to(self.device))
        return self._scatter(msgs.fields["J"][:, 0], self.N * val)

    def rounding_moments(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For coefficients ``s`` (scaled units): lower label ``k`` and weights of ``k``, ``k+1``."""
        y = (s / self.bound).clamp(-1, 1)
        c = self.code
        k = (torch.searchsorted(c, y.contiguous(), right=True) - 1).clamp(0, self.M - 2)
        gap = c[k + 1] - c[k]
        theta = torch.where(gap > 0, (y - c[k]) / torch.where(gap > 0, gap, 1.0), torch.zeros_like(y))
        return k, 1 - theta, theta

    @abstractmethod
    def label_channel(self) -> torch.Tensor:
        """Exact ``P[Z = i | V = k]`` ``[M, M]`` of the label channel."""

    def output_law(self, x: torch.Tensor) -> tuple[Messages, torch.Tensor]:
        """Every message ``(J, Z)`` and its exact probability per input row: ``J`` uniform, then the rounding
        weights of the (clipped) coefficient ``s_J`` through the label channel."""
        s = self._full_coefficients(x)
        k, w0, w1 = self.rounding_moments(s)
        ch = self.label_channel().to(s.device)
        pz = w0[..., None] * ch[k] + w1[..., None] * ch[k + 1]  # [inputs, N, M]
        j = torch.arange(self.N).repeat_interleave(self.M)
        z = torch.arange(self.M).repeat(self.N)
        return Messages({"J": j[:, None], "Z": z[:, None]}), (pz / self.N).reshape(s.shape[0], -1)

    def _full_coefficients(self, x: torch.Tensor) -> torch.Tensor:
        s = kashin(self.frame, self.preprocess(x).double(), self.kashin_cfg).coeffs
        return s.clamp(-self.bound, self.bound)


@register_encoder("sstq-flat")
class SSTQFlat(_SSTQ):
    """SSTQ with flat randomized response (unbiased unless a coefficient is clipped); codebook ``uniform`` or
    ``optimized``."""

    params: ClassVar[dict[str, Param]] = {
        **_SSTQ.params,
        "codebook": Param(str, "uniform", "uniform grid or the privacy-aware optimum", ("uniform", "optimized")),
    }
    unbiased = False  # not at a chosen level (Walsh flats need more); guarantee=unbiased instances are (framed.py)
    unbiased_unless_clipped = True
    summary = "Kashin + 1 subsampled coefficient + stochastic quantizer + flat M-ary RR"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.p, self.q = flat_rr_probabilities(self.epsilon, self.M)  # overflow-free at any finite ε

    def _codebook(self) -> np.ndarray:
        """The uniform grid, or the privacy-aware optimum; above ``EXP_SAFE`` the optimum's privacy term
        ``Σc²/(e^ε−1)`` is below ``e^{−700}`` and the optimum is the uniform grid in float64 (it already
        is to 2e-16 from ε = 30 on), so the uniform grid is returned where ``e^ε`` would overflow."""
        if self.cfg["codebook"] == "optimized" and self.epsilon <= EXP_SAFE:
            return codebooks.flat_optimized(self.epsilon, 1 << self.cfg["b"])
        return codebooks.uniform(1 << self.cfg["b"])

    def _channel(self, v: torch.Tensor, seeds: np.ndarray) -> torch.Tensor:
        u = torch.from_numpy(rng.uniform(seeds, "sstq-rr", 2)).to(v.device)
        other = torch.minimum((u[:, 1] * (self.M - 1)).long(), torch.tensor(self.M - 2))
        other = other + (other >= v).long()
        return torch.where(u[:, 0] < self.p, v, other)

    def _value(self, z: torch.Tensor) -> torch.Tensor:
        return self.bound * self.code[z] / (self.p - self.q)

    def label_channel(self) -> torch.Tensor:
        """Exact ``P[Z = i | V = k]`` of the flat channel (for the exact LDP test)."""
        p = torch.full((self.M, self.M), self.q, dtype=torch.float64)
        return p.fill_diagonal_(self.p)

    def mse(self, x: torch.Tensor) -> torch.Tensor:
        s = self._full_coefficients(x)
        k, w0, w1 = self.rounding_moments(s)
        c = self.code
        cv2 = w0 * c[k] ** 2 + w1 * c[k + 1] ** 2
        pq = self.p - self.q
        es2 = self.bound**2 * (cv2 / pq + self.q * float((c**2).sum()) / pq**2)
        rows = self.frame.row_sq_norms().to(s.device)
        xc = self.preprocess(x).double()
        mean = self.frame.synth_(s.clone())  # E x̂ = Qᵀ clip(s)/√N: x itself unless a coefficient was clipped
        return (es2 * rows).sum(1) - 2 * (mean * xc).sum(1) + (xc**2).sum(1)


@register_encoder("sstq-ma")
class SSTQMetricAware(_SSTQ):
    """SSTQ with the metric-aware truncated-Laplace channel and identity decoding (biased)."""

    params: ClassVar[dict[str, Param]] = {
        **_SSTQ.params,
        "codebook": Param(str, "metric", "codebook optimized for this channel, or uniform", ("metric", "uniform")),
        "law": Param(str, "uniform", "public surrogate law of a coefficient for the codebook", ("uniform", "kashin")),
        "scale": Param(str, "exact", "Laplace scale: calibrated to the exact e^eps ratio, or the paper's 4B/eps",
                       ("exact", "paper")),
        "decode": Param(str, "gain", "gain (B c_Z / kappa, first-order unshrunk) or identity (B c_Z, the paper's)",
                        ("gain", "identity")),
    }
    unbiased = False
    summary = "Kashin + 1 subsampled coefficient + stochastic quantizer + truncated-Laplace channel"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        code = self.code.cpu().numpy()
        exact = self.cfg["scale"] == "exact"
        self.laplace_scale = codebooks.calibrated_scale(code, self.epsilon) if exact else codebooks.paper_scale(self.epsilon)
        self.P = torch.from_numpy(np.exp(codebooks.ma_log_transition(code, self.laplace_scale))).to(self.device)
        self.gain = 1.0
        if self.cfg["decode"] == "gain":
            self.gain = codebooks.ma_gain(self.code.cpu(), self.P.cpu(), self.cfg["law"], self.kashin_cfg.level)
        self.values = self.code / self.gain  # decoded value of label i, normalised
        cum = torch.cumsum(self.P, 1)
        self.cum = (cum / cum[:, -1:]).contiguous()

    def _codebook(self) -> np.ndarray:
        m = 1 << self.cfg["b"]
        if self.cfg["codebook"] == "metric":
            return codebooks.metric_aware(self.epsilon, m, self.cfg["law"], self.kashin_cfg.level, self.cfg["scale"])
        return codebooks.uniform(m)

    def _channel(self, v: torch.Tensor, seeds: np.ndarray) -> torch.Tensor:
        u = torch.from_numpy(rng.uniform(seeds, "sstq-ma", 1)).to(v.device)
        z = torch.searchsorted(self.cum[v], u, right=True)[:, 0]
        return z.clamp_max(self.M - 1)

    def _value(self, z: torch.Tensor) -> torch.Tensor:
        return self.bound * self.values[z]

    def label_channel(self) -> torch.Tensor:
        return self.P.cpu()

    def channel_epsilon(self) -> float:
        """The label channel's exact worst log-ratio (``= ε`` for ``scale=exact``, about ``ε/2`` for ``paper``)."""
        return codebooks.ma_worst_log_ratio(self.code.cpu().numpy(), self.laplace_scale)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "laplace_scale_normalised": self.laplace_scale, "decode_gain": self.gain}

    def mse(self, x: torch.Tensor) -> torch.Tensor:
        s = self._full_coefficients(x)
        k, w0, w1 = self.rounding_moments(s)
        c, p = self.values, self.P
        ez = w0 * (p[k] @ c) + w1 * (p[k + 1] @ c)  # E[v_Z | s_j]
        ez2 = w0 * (p[k] @ c**2) + w1 * (p[k + 1] @ c**2)
        rows = self.frame.row_sq_norms().to(s.device)
        second = self.bound**2 * (ez2 * rows).sum(1)
        mean = self.frame.synth_((self.bound * ez).contiguous())  # E x̂ = Qᵀ(B E[c_Z]) in scaled units
        xc = self.preprocess(x).double()
        return second - 2 * (mean * xc).sum(1) + (xc**2).sum(1)
