"""StraightDP's run configuration: the method (which of ε's shares go to the moment release and to DP-SGD flow
matching), the port by which the released moments enter, THA, the low-B₀ backbone, and the profiles' sizes.

The CPU profile is our reduction for a few minutes on two cores; the full profile follows the paper-scale
setting (the flow-matching model of Lipman et al., "Flow Matching for Generative Modeling", ICLR 2023, trained
with DP-SGD, Abadi et al., CCS 2016, for 2,000 steps at q = 0.02).  The CPU profile's DP-SGD and pretraining learning
rates and EMAs are raised (our choice): the full profile's are for 2,000/20,000 steps and leave 100- and 300-step
runs near their starting weights.
"""

from __future__ import annotations

from dataclasses import dataclass

from .declare import option
from .generative import EPSILON_HELP, PipelineConfig
from .vocab import PROFILES

METHODS = ("sgd", "moments", "moments+sgd")
PORTS = ("none", "distill", "guidance")
SPACES = ("pixel", "latent")
PROFILE_DEFAULTS: dict[str, dict[str, float]] = {
    "cpu": {"records": 2000, "pca": 16, "rank": 8, "public_records": 5000, "pretrain_steps": 300,
            "ae_steps": 2000, "ae_batch": 128, "latent_pretrain_steps": 300,
            "pretrain_batch": 128, "distill_steps": 100, "distill_batch": 128, "sgd_steps": 100, "q": 0.05,
            "multiplicity": 2, "euler_steps": 10, "eval_samples": 1000, "probe_epochs": 2, "sgd_lr": 5e-4,
            "ema": 0.95, "pretrain_lr": 1e-3, "pretrain_ema": 0.99},
    "full": {"records": 0, "pca": 64, "rank": 32, "public_records": 0, "pretrain_steps": 20_000,
             "ae_steps": 10_000, "ae_batch": 256, "latent_pretrain_steps": 12_000,
             "pretrain_batch": 256, "distill_steps": 3000, "distill_batch": 256, "sgd_steps": 2000, "q": 0.02,
             "multiplicity": 4, "euler_steps": 25, "eval_samples": 10_000, "probe_epochs": 10, "sgd_lr": 5e-5,
             "ema": 0.999, "pretrain_lr": 1e-4, "pretrain_ema": 0.999}}
LATENT_DIM = 32
"""The latent dimension ``d`` of StraightDP's autoencoder (:mod:`sstq_fl.gen.straightdp.autoencoder`: 2x4x4)."""
ALLOWED_PORTS = {"sgd": ("none",), "moments": ("none", "guidance"), "moments+sgd": ("distill", "guidance")}


def _profile_default(what: str) -> str:
    return f"{what} (default: the profile's)"


@dataclass(frozen=True)
class StraightConfig(PipelineConfig):
    """A StraightDP run; ``None`` sizes take the profile's value (:data:`PROFILE_DEFAULTS`).

    ``method``/``port``: the row (:mod:`~sstq_fl.gen.straightdp.pipeline`; ``port=""`` is the method's default);
    ``tha``: time-bucketed clipping with ``beta`` (``None``: the public proxy picks it from {0, ¼, ½, ¾, 1});
    ``pca``/``rank``: the feature dimension ``p`` and the released covariance's rank ``r``;
    ``tau``/``t0``: ``None`` calibrates them on public data; ``low_b0``: the low-B₀ backbone (constraints active
    from pretraining on)."""

    method: str = option("moments+sgd", choices=METHODS, help="sgd: uniform DP-SGD with all of epsilon; moments: the "
                         "moment release alone (samples from the released Gaussians); moments+sgd: 0.235 epsilon to "
                         "the moments, the rest to DP-SGD on t >= tau")
    port: str = option("", choices=("", *PORTS), help="how the released moments enter: guidance (moments+sgd default: "
                       "sampling starts from the released Gaussian's marginal at t0, after DP-SGD at tau; with "
                       "--method moments: the public prior + guidance row) or distill (the model is first trained on "
                       "the released field for t < tau)")
    epsilon: float = option(3.0, required=True, low=0, strict_low=True, help=EPSILON_HELP + " (add/remove)")
    profile: str = option("cpu", choices=PROFILES, help="cpu: 2,000 records, p=16, r=8, DiT 64/2/2 patch 7, 300 "
                          "pretraining, 100 distillation and 100 DP-SGD steps; full: all records, p=64, r=32, DiT "
                          "192/6/6 patch 4, 20k/3k/2k steps")
    tha: bool = option(False, help="time-bucketed clip profile (4 buckets, one shared noise std)")
    beta: float | None = option(None, low=0, high=1, unset=-1.0, help="THA clip-profile exponent in [0, 1] (default: "
                                "chosen by a public proxy from 0, .25, .5, .75, 1)")
    low_b0: bool = option(False, help="low-B0 backbone: stream-norm clamp, late injection, decoupled attention, "
                                      "spectral cap")
    space: str = option("pixel", choices=SPACES, help="pixel: moments in a public-PCA space of the [-1, 1] pixels, "
                        "the flow on 28x28 images; latent: everything on the d = 32 latents (2x4x4, 16 tokens) of a "
                        "frozen conv autoencoder trained on public Fashion-MNIST, f = clip_R(z), samples decoded")
    ae_steps: int | None = option(None, low=1, unset=0,
                                  help=_profile_default("training steps of the public autoencoder (--space latent)"))
    clip: float = option(1.0, low=0, strict_low=True, flag="", help="the DP-SGD clip C (THA: the reference clip)")
    tau: float | None = option(None, unset=0.0, help="moments/DP-SGD time split (default: public knee)")
    t0: float | None = option(None, unset=0.0, help="guidance start time (default: the public plateau edge; after "
                              "DP-SGD, max(that, tau), where the private gradients begin)")
    public_records: int | None = option(None, low=0, unset=0, help="public Fashion-MNIST images for calibration and "
                                        "pretraining, drawn by --seed (default: 5000 cpu, all full)")
    pca: int | None = option(None, low=1, high=784, unset=0, help="public-PCA dimension p of the moment features "
                             "(default: 16 cpu, 64 full)")
    rank: int | None = option(None, low=1, unset=0, help="rank r of the released covariance after the PSD projection, "
                              "at most p (default: 8 cpu, 32 full)")
    pretrain_steps: int | None = option(None, low=1, unset=0, help=_profile_default("public pretraining steps"))
    distill_steps: int | None = option(None, low=1, unset=0, help=_profile_default("distillation steps"))
    sgd_steps: int | None = option(None, low=1, unset=0, help=_profile_default("DP-SGD rounds"))
    q: float | None = option(None, unset=0.0, help="DP-SGD Poisson sampling rate in (0, 1] (default: 0.05 cpu, 0.02 "
                                                   "full)")
    multiplicity: int | None = option(None, low=1, unset=0,
                                      help=_profile_default("noise draws per example before the clip"))
    eval_samples: int | None = option(None, low=10, unset=0,
                                      help=_profile_default("synthetic samples for the evaluation"))
    probe_epochs: int | None = option(None, low=1, unset=0,
                                      help=_profile_default("epochs of the downstream LeNet-5 probe"))

    WORKLOAD = "straightdp"
    TITLE = "StraightDP"
    PREFIX = "sdp-"
    CACHE_NAME = "straightdp"
    PROFILE_DEFAULTS = PROFILE_DEFAULTS
    FLOAT_KNOBS = ("q", "sgd_lr", "ema", "pretrain_lr", "pretrain_ema")
    NON_PRIVATE_REFERENCE = "non-private (epsilon = inf: the same releases without noise; not DP)"

    def __post_init__(self) -> None:
        """The shared checks, then the combinations: the port must suit the method, THA needs DP-SGD, and the
        times ``tau``, ``t0`` lie in (0, 1) and the sampling rate ``q`` in (0, 1]."""
        super().__post_init__()
        if self.resolved_port not in ALLOWED_PORTS[self.method]:
            raise ValueError(f"port {self.port!r} does not apply to method {self.method!r} "
                             f"(allowed: {list(ALLOWED_PORTS[self.method])})")
        if self.tha and "sgd" not in self.method:
            raise ValueError("--tha needs a method with DP-SGD (sgd or moments+sgd)")
        for name in ("tau", "t0"):
            v = getattr(self, name)
            if v is not None and not 0 < v < 1:
                raise ValueError(f"{name} must lie in (0, 1), got {v}")
        if self.q is not None and not 0 < self.q <= 1:
            raise ValueError(f"q must lie in (0, 1], got {self.q}")
        self._check_dimensions()

    def _check_dimensions(self) -> None:
        """``pca`` is pixel space's; the rank is at most the feature dimension (``p``, or the latent ``d``)."""
        if self.space == "latent" and self.pca is not None:
            raise ValueError(f"--pca applies to --space pixel (latent features are the autoencoder's d = {LATENT_DIM})")
        dim, what = (LATENT_DIM, "latent dimension") if self.space == "latent" else (self.resolved("pca"), "PCA dimension")
        if self.resolved("rank") > dim:
            raise ValueError(f"rank {self.resolved('rank')} exceeds the {what} {dim}")

    def secagg_refusal(self) -> str | None:
        """The moment releases run under secure aggregation; DP-SGD's steps do not: they are Poisson-sampled
        Gaussians, which have no RDP curve on the ledger to compose with the distributed discrete Gaussian."""
        if self.method == "moments":
            return None
        return (f"StraightDP --method {self.method} runs DP-SGD, whose Poisson-sampled Gaussian steps the ledger cannot "
                f"compose with the distributed discrete Gaussian (an RDP bound); use --method moments")

    @property
    def resolved_port(self) -> str:
        """The port: the given one, or the method's default (``guidance`` for moments+sgd, else ``none``)."""
        return self.port or ("guidance" if self.method == "moments+sgd" else "none")

    @property
    def uses_moments(self) -> bool:
        """Whether the moment release runs (every method but plain DP-SGD)."""
        return self.method != "sgd"

    @property
    def uses_sgd(self) -> bool:
        """Whether DP-SGD rounds run."""
        return "sgd" in self.method

    @property
    def uses_flow(self) -> bool:
        """Whether samples come from the flow model (all rows but plain moments-only)."""
        return self.uses_sgd or self.resolved_port == "guidance"
