"""DP-VQG's run configuration: variant, mode, labels, Stage II, the references and the profiles' sizes
(the pipeline: :mod:`sstq_fl.gen.vqg.pipeline`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .declare import option
from .generative import EPSILON_HELP, PipelineConfig
from .vocab import PROFILES, VQG_LABELS, VQG_MODES, VQG_VARIANTS

REFERENCES = {"none": "", "argmin": "argmin", "public": "public"}
"""The references, as the CLI and the run config write them (``none``: a DP run)."""
STAGE2 = ("em", "dpsgd-prior")


# the prior's peak learning rate: MaskGIT's 1e-4 is for ~60k steps (120 epochs of 60k records); at the CPU profile's
# 50-2,000 steps it barely moves the prior off uniform, so the CPU profile uses 1e-3 (our choice)
PRIOR_LR = {"cpu": 1e-3, "full": 1e-4}
PRIOR_LR_DPSGD = {"cpu": 3e-3, "full": 1e-3}  # dpsgd-prior: AdamW on 400 (cpu) or 2,000 (full) noisy steps
# prior_steps/prior_batch/prior_width: the dpsgd-prior variant's DP-SGD rounds, expected batch and prior d_model (our
# choice; at the CPU profile a 32-wide prior has ~31k parameters, so the noise N(0, σ²C²I)/(q·N_decl) is ~2x smaller in
# norm than for the 64-wide one; at a fixed number of per-example gradients, rounds of 512 carry a third of the
# per-round noise σ/B of rounds of 128 at ε = 10 on all 7,996 records; 400 rounds take about 3 minutes on one core)
PROFILE_DEFAULTS: dict[str, dict[str, float]] = {
    "cpu": {"records": 2000, "steps": 300, "batch": 64, "prior_epochs": 3, "eval_samples": 1000, "probe_epochs": 2,
            "prior_steps": 400, "prior_batch": 512, "prior_width": 32},
    "full": {"records": 0, "steps": 1000, "batch": 256, "prior_epochs": 120, "eval_samples": 10_000, "probe_epochs": 10,
             "prior_steps": 2000, "prior_batch": 512, "prior_width": 384}}


@dataclass(frozen=True)
class VqgConfig(PipelineConfig):
    """A DP-VQG run (profiles: a CPU reduction and the paper-scale MNIST setting; both are our choices); with
    ``randomness="reproducible"`` the ``seed`` determines every number.

    ``variant``: ``fp`` (DP-SGD tokenizer on the clients) or ``pp`` (public tokenizer); ``mode``: ``A`` (pure
    Stage II) or ``B`` (PLD, ε₀ certified jointly with Stage I); ``labels``: ``private`` (RR) or ``public``
    (declared ablation); ``reference``: ``""`` or ``"argmin"`` (not DP, module docstring).  ``steps``/``batch``:
    Stage I updates and expected batch (FP: ``q = batch/N_decl``); ``None`` takes the profile's value."""

    variant: str = option("fp", choices=VQG_VARIANTS, help="fp: tokenizer trained by DP-SGD rounds on the clients (0.8 "
                          "epsilon); pp: tokenizer trained on public Fashion-MNIST (all epsilon to the tokens)")
    epsilon: float = option(10.0, required=True, low=0, strict_low=True, help=EPSILON_HELP + " (replace-one)")
    profile: str = option("cpu", choices=PROFILES, help="cpu: 2,000 records, K=64, 300 rounds, prior 64/2/2 for 3 "
                          "epochs; full: all records, K=1024, 1,000 rounds, prior 384/6/6 for 120 epochs")
    mode: str = option("A", choices=VQG_MODES, help="A: per-location eps0 by basic composition (pure); B: eps0 bisected on "
                                                "the PLD ledger jointly with stage I")
    labels: str = option("private", choices=VQG_LABELS, help="private: labels by k-ary randomized response (0.25 of the "
                         "token budget); public: released unprivatized, an explicitly reported ablation")
    reference: str = option("", choices=tuple(REFERENCES.values()), words=REFERENCES,
                            help="none: a DP run; argmin: stage I as at --epsilon but argmin tokens and true labels in "
                                 "stage II (not DP); public: no private record, the PP tokenizer and the prior trained "
                                 "on public Fashion-MNIST (with --stage2 dpsgd-prior)")
    stage2: str = option("em", choices=STAGE2, help="em: exponential-mechanism tokens and RR labels, prior as "
                         "post-processing; dpsgd-prior: clients tokenize their own records (argmin, never sent) and "
                         "the class-conditional prior is trained by DP-SGD rounds on them")
    steps: int | None = option(None, low=1, unset=0, help="stage I steps: DP-SGD rounds (fp) or public steps (pp) "
                                                          "(default: 300 cpu, 1,000 full)")
    batch: int | None = option(None, low=1, unset=0, help="stage I expected batch, q = batch/records (default: 64 "
                                                          "cpu, 256 full)")
    prior_epochs: int | None = option(None, low=1, unset=0, help="MaskGIT prior epochs (default: 3 cpu, 120 full)")
    prior_lr: float | None = option(None, unset=0.0, help="MaskGIT peak learning rate, cosine decay to 5e-6 "
                                                          "(default: 1e-3 cpu, 1e-4 full; dpsgd-prior 3e-3 cpu, 1e-3 full)")
    prior_steps: int | None = option(None, low=1, unset=0, help="dpsgd-prior: the prior's DP-SGD rounds (default: "
                                                                "400 cpu, 2,000 full)")
    prior_batch: int | None = option(None, low=1, unset=0, help="dpsgd-prior: the prior's expected batch, q = "
                                                                "prior-batch/records (default: 512)")
    prior_width: int | None = option(None, low=1, unset=0, help="dpsgd-prior: the prior's d_model (default: 32 cpu, "
                                                                "384 full)")
    diagnostic_records: int = option(1000, low=1, help="public images for the EM peakedness diagnostic")

    WORKLOAD = "dp-vqg"
    TITLE = "DP-VQG"
    PREFIX = "vqg-"
    CACHE_NAME = "vqg"
    PROFILE_DEFAULTS = PROFILE_DEFAULTS
    NON_PRIVATE_REFERENCE = "non-private (epsilon = inf: Stage I without noise, argmin tokens, true labels; not DP)"

    def __post_init__(self) -> None:
        """The shared checks, then the prior's learning rate (finite, at least the cosine floor)."""
        super().__post_init__()
        if self.prior_lr is not None and not (math.isfinite(self.prior_lr) and self.prior_lr >= 5e-6):
            raise ValueError(f"prior-lr must be a finite learning rate >= 5e-6 (the cosine floor), got {self.prior_lr}")
        if self.stage2 == "dpsgd-prior" and (self.reference == "argmin" or self.labels == "public"):
            raise ValueError("reference=argmin and labels=public apply to stage2=em only (the DP-SGD prior has no EM "
                             "tokens and its gradient covers the labels)")
        if self.reference == "public" and (self.stage2, self.variant) != ("dpsgd-prior", "pp"):
            raise ValueError("reference=public needs stage2=dpsgd-prior and variant=pp (no private record is read)")

    def secagg_refusal(self) -> str | None:
        """DP-VQG sends no sums to an aggregator but DP-SGD's: its Poisson-sampled Gaussian steps have no RDP curve
        on the ledger, which composes the distributed discrete Gaussian by RDP alone."""
        return ("DP-VQG's only sums are its DP-SGD steps, Poisson-sampled Gaussians the ledger cannot compose with the "
                "distributed discrete Gaussian (an RDP bound); its tokens are already LDP")

    @property
    def prior_peak_lr(self) -> float:
        """The prior's peak learning rate: ``prior_lr``, or the profile's (:data:`PRIOR_LR`)."""
        if self.prior_lr is not None:
            return float(self.prior_lr)
        return (PRIOR_LR_DPSGD if self.stage2 == "dpsgd-prior" else PRIOR_LR)[self.profile]

    @property
    def private(self) -> bool:
        """Whether the run is DP (finite ε and no argmin reference)."""
        return math.isfinite(self.epsilon) and not self.reference

    def reference_label(self) -> str:
        """``"dp"``, the non-private reference, or the argmin reference (not DP)."""
        if self.reference == "argmin":
            return "argmin reference (not DP: Stage I as at epsilon, argmin tokens and true labels in Stage II)"
        if self.reference == "public":
            return "public-only reference (no private record: public tokenizer, prior trained on public Fashion-MNIST)"
        return "dp" if math.isfinite(self.epsilon) else self.NON_PRIVATE_REFERENCE
