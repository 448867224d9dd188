"""The words options take, each vocabulary declared once with what its words mean.

A registry or module that acts on these words imports them from here (a test checks each registry's names
against its vocabulary), so an option's ``choices``, its help and the code behind it cannot drift apart.
"""

from __future__ import annotations

TRAIN_ENGINES = ("vectorized", "flower")
"""How a training run executes (``sstq-fl run --engine``)."""
TRAIN_ENGINE_HELP = ("vectorized: every client in this process, a round batched as one array computation; flower: each "
                     "client a Flower ClientApp on Flower's simulation engine (Ray)")
GEN_ENGINES = ("inprocess", "flower")
"""How a DP generative pipeline's clients execute (``sstq-fl gen <pipeline> --engine``)."""
GEN_ENGINE_HELP = ("inprocess: the simulated clients run in this process, one after another; flower: each client a "
                   "Flower ClientApp on Flower's simulation engine (Ray)")

RANDOMNESS = ("reproducible", "secure")
"""Where a run's coins come from (:mod:`sstq_fl.rng`)."""

TRAIN_TRUSTS = ("server", "shuffler", "curator", "secagg")
"""Whom a training run's clients trust (:mod:`sstq_fl.fl.trust`)."""
GEN_TRUSTS = ("aggregator", "secagg")
"""Whom a DP generative pipeline's clients trust with their sums."""
SECAGG_NOISES = ("ddgauss", "skellam")
"""A secure-aggregation client's noise share."""

PROFILES = ("cpu", "full")
"""A DP generative pipeline's sizes: ``cpu`` (our reduction for a few CPU minutes) or ``full`` (the paper's)."""
PROBE_NAMES = ("lenet", "logreg", "mlp")
"""The downstream probes (:data:`sstq_fl.gen.evaluation.PROBES`)."""
PROBE_PROTOCOLS = ("cpu", "papers")
"""The probe's training protocols (:class:`sstq_fl.gen.heldout.ProbeProtocol`)."""

VQG_VARIANTS = ("fp", "pp")
"""DP-VQG's tokenizer: trained by DP-SGD on the clients (``fp``) or on public data (``pp``)."""
VQG_MODES = ("A", "B")
"""DP-VQG's Stage II accounting: basic composition (``A``) or the PLD ledger jointly with Stage I (``B``)."""
VQG_LABELS = ("private", "public")
"""DP-VQG's labels: randomized response (``private``) or released unprivatized (``public``, an ablation)."""
