"""DP-MEPF's run configuration (the pipeline: :mod:`sstq_fl.gen.mepf.pipeline`; Harder, Jalali Asadabadi,
Sutherland & Park, "Pre-trained Perceptual Features Improve Differentially Private Image Generation", TMLR 2023)."""

from __future__ import annotations

from dataclasses import dataclass

from .declare import option
from .generative import EPSILON_HELP, PipelineConfig
from .vocab import PROFILES

MOMENTS = {"1": (1,), "1,2": (1, 2)}
"""The moment sets, as the CLI and the run config write them: φ₁, or φ₁ and φ₂."""


def parse_ints(text: str) -> tuple[int, ...]:
    """``"1,2"`` → ``(1, 2)`` (a moment set as a client task's config carries it)."""
    return tuple(int(v) for v in text.split(",") if v.strip())


@dataclass(frozen=True)
class MepfConfig(PipelineConfig):
    """A DP-MEPF run; the profiles are our CPU reduction (a 3-conv Φ, 2,000 records, 500 generator steps) and the
    a full profile (a ResNet-18 Φ trained on public Fashion-MNIST, all records, 20,000 steps).

    ``moments``: φ₁, or φ₁ and φ₂; ``public_only``: the zero-information reference; ``public_records``: the first N
    public images, for Φ and that reference (0: all 70k; :func:`~sstq_fl.data.mnist.public_records`);
    ``inception_weights``: a local Inception file for FID."""

    epsilon: float = option(1.0, required=True, low=0, strict_low=True, help=EPSILON_HELP + " (replace-one)")
    delta: float = option(1e-5, low=0, strict_low=True, high=1, strict_high=True,
                          help="record-level delta of the release (replace-one)")
    profile: str = option("cpu", choices=PROFILES, help="cpu: 3-conv Phi, 2,000 records, 500 generator steps; full: "
                                                        "ResNet-18 Phi, all records, 20k steps")
    public_records: int | None = option(0, help="public images for Phi: the first N (0: all 70k)", low=0, unset=0)
    moments: tuple[int, ...] = option((1,), help="phi1, or phi1 and phi2", choices=tuple(MOMENTS.values()),
                                      words=MOMENTS, metavar="{1|1,2}")
    public_only: bool = option(False, help="zero-information reference (no private data)")
    extractor_epochs: int = option(1, help="epochs of Phi's training on public Fashion-MNIST", low=1, flag="")
    generator_steps: int | None = option(None, help="generator training steps (default: 500 cpu, 20,000 full)",
                                         low=1, unset=0)
    inception_weights: str = option("", help="local Inception weights file for FID (never downloaded)")

    WORKLOAD = "dp-mepf"
    TITLE = "DP-MEPF"
    PREFIX = "mepf-"
    CACHE_NAME = "mepf"
    PROFILE_DEFAULTS = {"cpu": {"records": 2000, "generator_steps": 500, "eval_samples": 1000, "probe_epochs": 2},
                        "full": {"records": 0, "generator_steps": 20_000, "eval_samples": 10_000, "probe_epochs": 10}}
    NON_PRIVATE_REFERENCE = "non-private (epsilon = inf: the release carries no noise)"

    def secagg_refusal(self) -> str | None:
        """DP-MEPF's one release is additive: it runs under secure aggregation
        (:func:`sstq_fl.gen.mepf.pipeline.calibrate_secure`)."""
        return None

    def reference_label(self) -> str:
        """``"dp"``, the non-private reference, or the public-only reference (zero information)."""
        if self.public_only:
            return "public-only (zero information: generator trained on public Fashion-MNIST statistics)"
        return super().reference_label()
