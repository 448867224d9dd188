"""The configuration of an LDP training run, declared once: the ``run`` / ``compare`` options, the
Flower run config's keys and the options reference are generated from :class:`RunConfig`."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import check_array, torch_device
from ..data.partitioners import PARTITIONERS
from ..options import Options, option

RANDOMNESS_HELP = ("secure: each client keys its coins and minibatches with a fresh OS-CSPRNG key it never sends, and "
                   "the server samples from the OS CSPRNG (the LDP guarantee holds against the server); reproducible: "
                   "everything derives from --seed, for simulation research (no guarantee against whoever holds the "
                   "seed) (default: %(default)s)")


@dataclass
class RunConfig(Options):
    """Everything that determines a run (with the seed, it determines every number)."""

    task: str = option("fmnist", help="FL task: fmnist / cifar10 (MLP) or lsq (synthetic least squares), a "
                                      "registered plug-in, or your own: PKG.MODULE:NAME or path/to/file.py:NAME, where "
                                      "NAME(**task-params) returns an sstq_fl.Task (model and data)")
    task_params: str = option("", help="the task's parameters as a JSON object, e.g. '{\"records\": 2000}' (your own "
                                       "or a plug-in task; the built-in tasks take none)", metavar="JSON")
    encoder: str = option("sstq-flat:b=4", help="encoder spec (see sstq-fl encoders)")
    clients: int = option(100, help="simulated clients", low=1)
    rounds: int = option(100, help="training rounds", low=1)
    epsilon: float = option(3.0, help="per-message LDP epsilon", low=0, strict_low=True, finite=True)
    seed: int = option(0, help="run seed (minibatches, coins, model init, partition)")
    batch: int = option(64, help="minibatch size per client", low=1)
    clip: float = option(0.1, help="client clip norm C (the encoders' radius)", low=0, strict_low=True, finite=True)
    lr: float = option(0.2, help="server learning rate", low=0, strict_low=True, finite=True)
    server_cap: float = option(10.0, help="cap on the norm of the aggregated update", low=0, strict_low=True,
                               finite=True)
    partition: str = option(
        "iid", choices=tuple(PARTITIONERS.names()),
        help="how the training records are split among clients, as flwr-datasets' partitioners: iid (equal random "
             "shards), dirichlet (each class split by Dirichlet(alpha) proportions), shard (label-sorted shards, "
             "shards-per-client each), pathological (classes-per-client random classes each), natural-id (one "
             "client per distinct id of the task's natural_ids)")
    alpha: float = option(0.5, help="dirichlet partition: concentration (small: strong label skew)", low=0,
                          strict_low=True, finite=True)
    min_partition_size: int = option(10, low=0, help="dirichlet partition: the partition is drawn again (at most 11 "
                                                      "draws) until every client holds at least this many records")
    self_balancing: bool = option(False, help="dirichlet partition: give no more of a class to a client already "
                                              "above the mean share of records (flwr-datasets' self_balancing)")
    shards_per_client: int = option(2, low=1, help="shard partition: label-sorted shards per client")
    classes_per_client: int = option(2, low=1, help="pathological partition: distinct classes per client")
    sampling_rate: float = option(1.0, help="probability q that a client joins a round", low=0, strict_low=True,
                                  high=1)
    delta: float = option(1e-5, help="delta at which epsilon is reported")
    budget_epsilon: float | None = option(None, help="refuse to start if the plan exceeds it", unset=0.0)
    client_budget_epsilon: float = option(
        0.0, low=0, help="flower engine: each client's own budget over all its messages, at --delta (0: none); its "
                         "ledger lives in the node's state, and a client past it refuses to encode (an error reply: "
                         "the server leaves it out)")
    device: str = option("cpu", key="", metavar="DEVICE",
                         help="vectorized engine: where the clients' side of a round runs (minibatch gradients, "
                              "clipping, Kashin, encoding): cpu, cuda or cuda:N; the server unpacks, decodes and "
                              "steps on the CPU.  On CUDA a run agrees with the CPU's to float32 rounding, not bit "
                              "for bit")
    engine: str = option("vectorized", help="vectorized (one process, batched) or flower (Flower simulation on Ray)",
                         choices=("vectorized", "flower"), key="")
    data_dir: str | None = option(None, help="data set folder (default: the installed Fashion-MNIST; cifar10 needs it)",
                                  unset="")
    dim: int = option(100, help="lsq: dimension", low=1)
    n: int = option(4000, help="lsq: samples", low=1)
    lsq_noise: float = option(0.1, help="lsq: standard deviation of the label noise", low=0, finite=True)
    lsq_theta_scale: float | None = option(
        None, unset=0.0, help="lsq: theta_true ~ N(0, s^2 I) (default 1/sqrt(dim), norm about 1; 1 is the paper's E2 "
                              "regime)")
    randomness: str = option("reproducible", help=RANDOMNESS_HELP, choices=("reproducible", "secure"))
    trust: str = option("server", choices=("server", "shuffler", "curator", "secagg"),
                        help="whom the clients trust: server (the decoder sees each message with its sender; the "
                             "run's epsilon is the local one); shuffler (a trusted shuffler permutes each round's "
                             "messages and drops their senders; the run also reports the central epsilon against "
                             "whoever sees only the shuffled messages; vectorized engine); curator (the central-DP "
                             "reference: encoder clean, a trusted curator adds Gaussian noise to the sum of the "
                             "clipped updates, calibrated to --central-epsilon; vectorized engine); secagg (secure "
                             "aggregation with distributed noise: encoder clean, each client adds its share of "
                             "discrete noise to its quantized update and the server learns only the modular sum; "
                             "--central-epsilon holds against the server; on Flower through SecAgg+)")
    central_epsilon: float = option(0.0, low=0, finite=True,
                                    help="trust=curator or secagg: the run's central epsilon at --delta, over all its "
                                         "rounds")
    secagg_bits: int = option(16, low=2, high=24, help="trust=secagg: bits per coordinate of the secure sum (the field "
                                                      "Z_m, m = 2^bits, that each client's share lives in)")
    secagg_noise: str = option("ddgauss", choices=("ddgauss", "skellam"),
                               help="trust=secagg: each client's noise share: ddgauss (discrete Gaussian, Kairouz, Liu "
                                    "& Steinke 2021) or skellam (Agarwal, Kairouz & Liu 2021)")
    secagg_dropout: float = option(0.0, low=0, high=0.9, finite=True,
                                   help="trust=secagg: the fraction of a round's clients that may drop out after "
                                        "sending their masked share; the sum is still recovered (SecAgg+ threshold), "
                                        "and the noise is calibrated for the fewest survivors (a round with fewer "
                                        "participants releases nothing)")
    diagnostics: bool = option(False, help="also record the encoders' data-dependent statistics (reproducible mode "
                                           "only; labelled non-private in metrics.json)")
    pooled_diagnostics: bool = option(False, help="randomness=secure: write the diagnostics computed on the pooled "
                                                  "private training data (train_loss, distance_to_optimum) to "
                                                  "pooled_diagnostics.json, labelled non-private (never to metrics.json; "
                                                  "reproducible mode keeps them in metrics.json, labelled)")
    clients_per_node: int = option(
        1, low=1, help="flower engine (simulation): each simulated node hosts a cohort of this many virtual clients, "
                       "run batched (one gradient, one encode) with one LDP message and its own coins per client "
                       "(run-config key clients-per-node; 1: one client per node; a deployment keeps one client per "
                       "SuperNode)")

    def __post_init__(self) -> None:
        """The declared choices and ranges (:class:`~sstq_fl.options.Options`), then the checks no single
        declaration states: finiteness and one field against another."""
        super().__post_init__()
        self.task, self.task_params = absolute_task(self.task), canonical_params(self.task_params)
        if self.diagnostics and self.randomness != "reproducible":
            raise ValueError("diagnostics (data-dependent, not covered by the LDP guarantee) are available only with "
                             "randomness=reproducible")
        if self.pooled_diagnostics and self.randomness != "secure":
            raise ValueError("pooled diagnostics go to their own file with randomness=secure only (reproducible mode "
                             "records them in metrics.json, labelled non-private)")
        if self.budget_epsilon is not None and not (self.budget_epsilon > 0 and math.isfinite(self.budget_epsilon)):
            raise ValueError(f"budget epsilon must be positive and finite (omit it for no budget), got {self.budget_epsilon}")
        if not math.isfinite(self.client_budget_epsilon):
            raise ValueError(f"client budget epsilon must be finite (0: none), got {self.client_budget_epsilon}")
        if self.client_budget_epsilon and self.engine != "flower":
            raise ValueError("client budget epsilon: client-side ledgers exist on the flower engine only "
                             "(use --engine flower, or the run budget --budget-epsilon)")
        self._check_trust()
        if torch_device(self.device, present=False) != "cpu" and self.engine != "vectorized":
            raise ValueError(f"device {self.device}: the flower engine's nodes compute on the CPU (their GPUs come from "
                             f"--client-gpus); use --engine vectorized")
        self.device = torch_device(self.device)
        check_array(f"one round's minibatches ({self.clients} clients × batch {self.batch})", self.clients * self.batch)
        if not 0 <= self.delta < 1:
            raise ValueError(f"delta must be in [0, 1), got {self.delta}")
        if not 1 <= self.clients_per_node <= self.clients:
            raise ValueError(f"clients per node must be in 1..clients ({self.clients}), got {self.clients_per_node}")

    def _check_trust(self) -> None:
        """A trusted stage runs on the vectorized engine; the curator takes clean updates and a target epsilon."""
        if self.trust not in ("server", "secagg") and self.engine != "vectorized":
            raise ValueError(f"trust={self.trust}: the trusted stage runs on the vectorized engine only (the Flower apps "
                             f"decode replies by node); use --engine vectorized")
        if self.trust == "secagg" and self.client_budget_epsilon:
            raise ValueError("client budget epsilon: a secagg share's guarantee rests on the other clients' noise too; "
                             "client ledgers count LDP releases only (use --budget-epsilon)")
        if self.trust == "secagg" and self.engine == "flower" and self.clients < 3:
            raise ValueError(f"trust=secagg on Flower: SecAgg+ needs at least 3 clients, got {self.clients}")
        if self.trust == "secagg" and self.clients_per_node > 1:
            raise ValueError("trust=secagg: each SecAgg+ party is one node, so clients per node must be 1")
        central = self.trust in ("curator", "secagg")
        if central != (self.central_epsilon > 0):
            raise ValueError("trust=curator or secagg needs --central-epsilon > 0, and --central-epsilon needs one of "
                             "them")
        if central and self.encoder.split(":")[0] != "clean":
            raise ValueError(f"trust={self.trust}: the clients' clipped updates are summed unencoded (encoder clean), "
                             f"not {self.encoder!r}")

    def task_kwargs(self) -> dict[str, Any]:
        """The task's own parameters (:func:`~sstq_fl.fl.tasks.make_task`)."""
        return {"data_dir": self.data_dir, "dim": self.dim, "n": self.n, "noise": self.lsq_noise,
                "theta_scale": self.lsq_theta_scale, "task_params": json.loads(self.task_params or "{}")}


def split_task(task: str) -> tuple[str, str] | None:
    """``(module or file, NAME)`` of a user task string ``PKG.MODULE:NAME`` / ``path/to/file.py:NAME``;
    ``None`` for a registered task's name."""
    where, sep, name = task.rpartition(":")
    return (where, name) if sep else None


def absolute_task(task: str) -> str:
    """A ``file.py:NAME`` task with its file made absolute, so that Ray actors and cohort nodes, whatever
    their working directory, load the same file; any other task string as it is."""
    parts = split_task(task)
    if parts is None or not parts[0].endswith(".py") or Path(parts[0]).is_absolute():
        return task
    return f"{Path(parts[0]).resolve()}:{parts[1]}"


def canonical_params(text: str) -> str:
    """``task-params`` as canonical JSON (sorted keys, no spaces; ``""``: none): one spelling per value,
    so a resumed run's config compares equal; a one-line error unless it is a JSON object."""
    if not text.strip():
        return ""
    try:
        value = json.loads(text)
        canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
    except RecursionError:
        raise ValueError(f"task-params nest deeper than Python's recursion limit ({sys.getrecursionlimit()}) "
                         f"allows ({len(text)} characters)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"task-params must be a JSON object such as '{{\"records\": 2000}}', got {text!r} ({exc.msg})") \
            from None
    if not isinstance(value, dict):
        raise ValueError(f"task-params must be a JSON object such as '{{\"records\": 2000}}', got a JSON "
                         f"{type(value).__name__}: {text!r}")
    return canonical
