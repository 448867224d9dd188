"""What a DP generative pipeline's run leaves behind, shared by every pipeline: the offline evaluation of its
labelled samples with the sample grid (:func:`evaluate_samples`), the private diagnostics, and ``metrics.json``
(:func:`common_metrics`, :func:`write_metrics`); the order in which a run writes them is
:mod:`sstq_fl.gen.template`'s.

The evaluation follows the pipelines' shared protocol on the held-out ``priv_test`` only (its halves
``eval_fit`` and ``eval_score``, :mod:`sstq_fl.gen.heldout`): a probe (LeNet-5: LeCun et al., "Gradient-Based
Learning Applied to Document Recognition", Proc. IEEE 1998; or logistic regression, an MLP) trained on the samples
and tested on ``eval_score``, a Fréchet distance in the feature space of an evaluator CNN trained on ``eval_fit``
(the FID of Heusel et al., NeurIPS 2017, with our own domain network instead of Inception, so the numbers are not
comparable to Inception FID), and the references ``probe_ceiling`` and ``fd_floor`` that real data reach under
the same protocol.  A black-box membership audit by the distance to the nearest synthetic sample (Chen, Yu, Zhang
& Fritz, "GAN-Leaks: A Taxonomy of Membership Inference Attacks against Generative Models", CCS 2020) reads the
private members, so it goes to ``private_diagnostics.json``, never to ``metrics.json``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config.generative import PipelineConfig
from ..data.workload import WorkloadData
from ..io import atomic_write_json, finite_json, run_meta
from ..progress import PhaseClock

PRIVATE_FILE = "private_diagnostics.json"
RUN_FILES = ("metrics.json", "transcript.jsonl", "samples.png", PRIVATE_FILE)
EVALUATOR_FILE = "evaluator-mnist-eval_fit.pt"
PRIVATE_NOTE = ("PRIVATE: these diagnostics read private priv_train records (the clients' records, or all "
                "of priv_train); they are not differentially private and must not be published")
REFERENCE_KEYS = ("downstream_accuracy_seeds", "probe_ceiling", "fd_floor", "evaluator_accuracy")
DOMAIN_FD_NOTE = "domain-FD, not comparable to Inception FID"


# ----------------------------------------------------------------------------- evaluation of the samples
@dataclass(frozen=True)
class SampleGrid:
    """What a sample grid's title says produced it: the pipeline, its ε and a detail line."""

    pipeline: str
    epsilon: float
    detail: str


def evaluate_samples(x: torch.Tensor, y: torch.Tensor, data: WorkloadData, split: Any, out: Path, grid: SampleGrid,
                     cfg: PipelineConfig) -> dict[str, Any]:
    """The offline evaluation of labelled samples ``(x, y)`` for ``metrics.json``: the sample grid
    (``out/samples.png``) and :func:`heldout_evaluation`.  What reads private records goes to
    ``out/private_diagnostics.json`` (:func:`write_private_diagnostics`), never into the returned dict."""
    from .evaluation import save_sample_grid

    save_sample_grid(x, y, out / "samples.png", pipeline=grid.pipeline, epsilon=grid.epsilon, detail=grid.detail)
    evals, ev, held, proto = heldout_evaluation(x, y, split, cfg)
    write_private_diagnostics(out, data, split, ev, x, held, proto if cfg.private_ceiling else None)
    return evals


def heldout_evaluation(x: torch.Tensor, y: torch.Tensor, split: Any, cfg: PipelineConfig) -> tuple[dict[str, Any],
                                                                                                 Any, Any, Any]:
    """``(metrics, evaluator, held-out split, probe protocol)`` of samples ``(x, y)``, from the held-out
    ``priv_test`` only (:mod:`sstq_fl.gen.heldout`): the probe's accuracy on ``eval_score`` per probe seed and their
    mean, domain-FD against a class-balanced real ``eval_score`` subset, ``sample_label_agreement`` (the share of
    samples that the evaluator CNN, trained on ``eval_fit``, assigns to the class they were drawn for; 0.1 is
    chance), the evaluator's own accuracy and the references ``probe_ceiling`` and ``fd_floor``."""
    from .evaluation import domain_fd, train_evaluator
    from .heldout import ProbeProtocol, evaluator_accuracy, fd_real, fd_size, heldout_split, references

    held, proto = heldout_split(split.test_x, split.test_y), ProbeProtocol.of(cfg)
    accs = proto.accuracies(x, y, held.score_x, held.score_y)
    ev = train_evaluator(held.fit_x, held.fit_y, epochs=cfg.evaluator_epochs, seed=0,
                         cache_path=Path(cfg.cache_dir) / EVALUATOR_FILE)
    m = fd_size(len(y), held.fit_y, held.score_y)
    real = fd_real(held, m)
    fd = domain_fd(ev, held.score_x[real], held.score_y[real], x[:m], y[:m])
    _, pred = ev.features_and_predictions(x, "samples")
    evals = {"downstream_accuracy": float(np.mean(accs)), "downstream_accuracy_seeds": accs,
             "domain_fd": fd["domain_fd"], "domain_fd_detail": fd,
             "sample_label_agreement": float(np.mean(pred == np.asarray(y))),
             "evaluator_accuracy": evaluator_accuracy(ev, held), **references(held, ev, proto, len(y), cfg.cache_dir),
             "probe": {**proto.record(), "train_samples": len(y)}, "heldout": held.record(),
             "evaluator": {"sha256": ev.sha256, "trained_on": "eval_fit", "epochs": cfg.evaluator_epochs}}
    return evals, ev, held, proto


def balanced_subset(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Indices of a class-balanced, seeded subset of at most ``n`` records: ``k = min(⌊n/K⌋, smallest class)``
    of each of the ``K`` classes present (``priv_test`` is sorted by class, so a prefix is not a sample)."""
    from .evaluation import balanced_indices

    counts = np.bincount(np.asarray(labels))
    present = counts[counts > 0]
    k = min(n // len(present), int(present.min()))
    if k < 1:
        raise ValueError(f"cannot draw a class-balanced subset of {n} records from {len(present)} classes")
    return balanced_indices(labels, k * len(present), seed)


# ----------------------------------------------------------------------------- diagnostics that read private records
def write_private_diagnostics(out: Path, data: WorkloadData, split: Any, ev: Any, samples: torch.Tensor, held: Any,
                              ceiling: Any = None) -> dict[str, Any]:
    """Write ``out/private_diagnostics.json`` (atomically): the membership audit (:func:`membership_audit`) and,
    with a probe protocol ``ceiling``, the probe trained on all ``priv_train`` for 10 epochs (the papers'
    protocol) and tested on ``eval_score``.  Both read private records: they are not DP and must not be
    published, which the file's ``note`` says."""
    diag: dict[str, Any] = {"note": PRIVATE_NOTE, "membership_audit": membership_audit(data, ev, samples, held)}
    if ceiling is not None:
        from .heldout import PAPERS_EPOCHS, ProbeProtocol

        proto = ProbeProtocol(ceiling.probe, "papers", PAPERS_EPOCHS, ceiling.seeds)
        accs = proto.accuracies(split.train_x, split.train_y, held.score_x, held.score_y)
        diag["priv_train_ceiling"] = {"accuracy": float(np.mean(accs)), "accuracy_seeds": accs,
                                      "train_records": len(split.train_y), "probe": proto.record()}
    atomic_write_json(out / PRIVATE_FILE, finite_json(diag))
    return diag


def membership_audit(data: WorkloadData, ev: Any, samples: torch.Tensor, held: Any, n: int = 1000) -> dict[str, Any]:
    """Black-box membership inference: score each record by its distance to the nearest synthetic sample in the
    evaluator's feature space (closer = "member"); AUC over up to ``n`` records released by the clients against
    up to ``n`` from ``eval_score`` (held out, and unseen by the evaluator like the members), both class-balanced
    (so the class mix cannot tell them apart).  ≈ 0.5 means no detectable leakage (an attack only ever gives a
    lower bound).  It reads the members: a private diagnostic."""
    from .evaluation import membership_auc

    xs, ys = zip(*(data.client_records(c) for c in range(data.clients)))
    mx, my = np.concatenate(xs), np.concatenate(ys)
    members = mx[balanced_subset(my, n, data.seed)]
    nonmembers = held.score_x[balanced_subset(held.score_y, n, data.seed)]
    fs = torch.as_tensor(ev.features_and_predictions(samples)[0])

    def score(x: np.ndarray) -> np.ndarray:
        return torch.cdist(torch.as_tensor(ev.features_and_predictions(x)[0]), fs).min(dim=1).values.numpy()

    return {"auc": membership_auc(score(members), score(nonmembers)), "members": len(members),
            "nonmembers": len(nonmembers), "score": "distance to the nearest synthetic sample (evaluator features)"}


# ----------------------------------------------------------------------------- metrics.json
def common_metrics(cfg: PipelineConfig, data: WorkloadData, privacy: dict[str, Any], evals: dict[str, Any],
                   dropped: list[Any], top: Sequence[str] = ("downstream_accuracy", "domain_fd",
                                                             "sample_label_agreement")) -> dict[str, Any]:
    """The fields every pipeline's ``metrics.json`` has: the privacy result, the reference kind, the evaluation
    (``top`` of its entries and the references at the top level, the rest under ``evaluation``), the records and clients, the
    clients left out, the config and the run's metadata."""
    top = tuple(dict.fromkeys((*top, *REFERENCE_KEYS)))
    return {**privacy, "reference": cfg.reference_label(), **{k: evals[k] for k in top if k in evals},
            "domain_fd_note": DOMAIN_FD_NOTE, "records": data.n_decl, "clients": cfg.clients, "dropped": dropped,
            "evaluation": {k: v for k, v in evals.items() if k not in top},
            "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()}, "meta": run_meta()}


def eps_text(value: float | None) -> str:
    """An ε as a summary line prints it: ``None`` (an infinite ε in written metrics) is ``inf``."""
    return "inf" if value is None else f"{value:.4g}"


def dataset_text(m: dict[str, Any]) -> str:
    """The summary line about the data set's ledger: its cumulative ε, the relation it is stated under, the runs,
    and how many add/remove runs were restated under replace-one by group privacy."""
    book = m.get("dataset_ledger")
    if not book:
        return "data set: no ledger"
    group = sum(e["method"].startswith("group") for e in book.get("entries", []))
    mixed = {e["relation"] for e in book.get("entries", [])} == {"replace_one", "add_or_remove_one"}
    how = f", add/remove runs restated under replace-one ({group} by group privacy)" if mixed else ""
    return (f"data set {book['digest'][:12]}: cumulative epsilon {eps_text(m['dataset_epsilon_cumulative'])} "
            f"({book['relation']}{how}) over {book['runs']} run(s) (ledger {book['path']})")


def write_metrics(out: Path, metrics: dict[str, Any], t0: float, clock: PhaseClock) -> dict[str, Any]:
    """Add the wall time and the phases' timings, write ``out/metrics.json`` and return the metrics as written
    (an infinite value, e.g. the ε of a reference run, is ``None``)."""
    metrics = finite_json({**metrics, "wall_s": time.perf_counter() - t0, "timings_s": clock.seconds})
    atomic_write_json(out / "metrics.json", metrics)
    return metrics  # type: ignore[no-any-return]
