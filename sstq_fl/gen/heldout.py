"""The held-out evaluation of a DP generative pipeline's samples and its calibration references.

``priv_test`` never enters any mechanism.  It is split once (class-stratified, seed 0) into two halves
(:func:`heldout_split`): ``eval_fit`` trains the evaluator CNN behind domain-FD and label agreement, and is the
real training set of the reference probe; ``eval_score`` tests every probe and is the real side of every
domain-FD.  So nothing an evaluation publishes depends on ``priv_train`` except through the mechanism's output.

The references put a number beside each score (:func:`references`): ``probe_ceiling``, the same probe under the
same protocol (as many class-balanced training records, the same epochs and seeds) trained on real ``eval_fit``
and tested on ``eval_score``, and ``fd_floor``, the domain-FD of real ``eval_fit`` against the same real
``eval_score`` subset the samples are compared with.  A synthetic set that were as good as real data would reach
about the ceiling and the floor.  Both are cached per (held-out data, evaluator, probe, protocol, seeds, sizes).

The probe protocols: ``cpu`` trains the probe for the profile's ``probe_epochs``; ``papers`` for 10 epochs on all
generated samples, the downstream protocol of the pipelines' papers (e.g. DP-MEPF: Harder, Jalali Asadabadi,
Sutherland & Park, "Pre-trained Perceptual Features Improve Differentially Private Image Generation", TMLR 2023).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..io import atomic_write_json
from ..privacy.dataset_ledger import dataset_digest
from .evaluation import Evaluator, balanced_indices, domain_fd, downstream_accuracy

PAPERS_EPOCHS = 10
REFERENCE_VERSION = "references-v1"
NOTE = ("probe_ceiling: the same probe and protocol trained on real eval_fit; fd_floor: domain-FD of real eval_fit "
        "against the same real eval_score subset; eval_fit and eval_score are the halves of the held-out priv_test")


@dataclass(frozen=True, eq=False)
class HeldOut:
    """The two halves of the held-out ``priv_test``, and the digest of the whole of it."""

    fit_x: np.ndarray
    fit_y: np.ndarray
    score_x: np.ndarray
    score_y: np.ndarray
    digest: str

    def record(self) -> dict[str, Any]:
        """What ``metrics.json`` says of the held-out data."""
        return {"digest": self.digest, "eval_fit": len(self.fit_y), "eval_score": len(self.score_y),
                "split": "priv_test halves, class-stratified, seed 0"}


def heldout_split(test_x: np.ndarray, test_y: np.ndarray, seed: int = 0) -> HeldOut:
    """``priv_test`` into ``eval_fit`` (⌊n_c/2⌋ records of each class c) and ``eval_score`` (the rest), by
    :func:`sstq_fl.data.mnist.split_private` with ``train_frac`` ½ (deterministic, class-stratified)."""
    from ..data.mnist import split_private

    x, y = np.asarray(test_x, np.float32), np.asarray(test_y, np.int64)
    s = split_private(x, y, train_frac=0.5, seed=seed)
    return HeldOut(s.train_x, s.train_y, s.test_x, s.test_y, dataset_digest(x, y))


def filled_indices(labels: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """Exactly ``min(n, len(labels))`` indices, as class-balanced as the classes allow (water-filling: each
    class gets ``min(n_c, L)`` records with the level ``L`` as high as ``n`` permits, the remainder to randomly
    chosen classes still below their size), drawn uniformly without replacement; sorted."""
    y = np.asarray(labels)
    classes, counts = np.unique(y, return_counts=True)
    n = min(n, len(y))
    per = np.zeros(len(classes), dtype=np.int64)
    g = np.random.default_rng(seed)
    while per.sum() < n:
        open_ = np.flatnonzero(per < counts)
        step = max(1, (n - int(per.sum())) // len(open_))
        if step == 1:
            pick = g.permutation(open_)[: n - int(per.sum())]
            per[pick] += 1
        else:
            per[open_] = np.minimum(per[open_] + step, counts[open_])
    keep = [g.permutation(np.flatnonzero(y == c))[:k] for c, k in zip(classes, per)]
    return np.sort(np.concatenate(keep))


def fd_size(n: int, *labels: np.ndarray) -> int:
    """The size of the class-balanced real sets of a domain-FD of ``n`` samples: ``K·min(⌊n/K⌋, smallest class
    of any of the label sets)``, so the same size is drawable from each of them."""
    k = min([n // 10] + [int(np.bincount(np.asarray(y), minlength=10).min()) for y in labels])
    if k < 1:
        raise ValueError(f"cannot draw a class-balanced real set for a domain-FD of {n} samples")
    return 10 * k


@dataclass(frozen=True)
class ProbeProtocol:
    """How the downstream probe is trained: which probe, which protocol (epochs) and on which seeds."""

    probe: str = "lenet"
    protocol: str = "cpu"
    epochs: int = 2
    seeds: tuple[int, ...] = (0,)

    @classmethod
    def of(cls, cfg: Any) -> ProbeProtocol:
        """A pipeline config's protocol: its ``probe``, the profile's ``probe_epochs`` (``cpu``) or 10 epochs
        (``papers``), and ``probe_seeds`` seeds from its ``seed`` on."""
        epochs = PAPERS_EPOCHS if cfg.probe_protocol == "papers" else cfg.resolved("probe_epochs")
        return cls(cfg.probe, cfg.probe_protocol, epochs, tuple(cfg.seed + k for k in range(cfg.probe_seeds)))

    def accuracies(self, x: Any, y: Any, test_x: Any, test_y: Any) -> list[float]:
        """The probe's accuracy on ``(test_x, test_y)`` after training on ``(x, y)``, once per seed."""
        return [downstream_accuracy(x, y, test_x, test_y, epochs=self.epochs, seed=s, probe=self.probe)
                for s in self.seeds]

    def record(self) -> dict[str, Any]:
        return {**asdict(self), "seeds": list(self.seeds)}


def evaluator_accuracy(ev: Evaluator, held: HeldOut) -> float:
    """The evaluator CNN's accuracy on ``eval_score`` (it was trained on ``eval_fit``)."""
    return float(np.mean(ev.features_and_predictions(held.score_x, "eval_score")[1] == held.score_y))


def references(held: HeldOut, ev: Evaluator, proto: ProbeProtocol, n_samples: int, cache_dir: str | Path
               ) -> dict[str, Any]:
    """``probe_ceiling`` (mean and per seed) and ``fd_floor`` for an evaluation of ``n_samples`` samples, read from
    ``cache_dir/references/<key>.json`` when computed before with the same inputs, else computed and cached
    (atomically)."""
    n_train, m = min(n_samples, len(held.fit_y)), fd_size(n_samples, held.fit_y, held.score_y)
    spec = {"version": REFERENCE_VERSION, "data": held.digest, "evaluator": ev.sha256, "probe": proto.record(),
            "n_train": n_train, "fd_n": m}
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    path = Path(cache_dir).expanduser() / "references" / f"{key[:32]}.json"
    if path.is_file():
        cached: dict[str, Any] = json.loads(path.read_text())
        if cached.get("spec") == spec:
            return cached["references"]
    fit = filled_indices(held.fit_y, n_train, 0)
    accs = proto.accuracies(held.fit_x[fit], held.fit_y[fit], held.score_x, held.score_y)
    real, floor = fd_real(held, m), balanced_indices(held.fit_y, m, 0)
    fd = domain_fd(ev, held.score_x[real], held.score_y[real], held.fit_x[floor], held.fit_y[floor])
    refs = {"probe_ceiling": float(np.mean(accs)), "probe_ceiling_seeds": accs, "probe_ceiling_train_samples": len(fit),
            "fd_floor": fd["domain_fd"], "fd_floor_n": m, "references_note": NOTE}
    atomic_write_json(path, {"spec": spec, "references": refs})
    return refs


def fd_real(held: HeldOut, m: int) -> np.ndarray:
    """The class-balanced real ``eval_score`` subset (seed 0) that ``m`` samples and the floor are compared with."""
    return balanced_indices(held.score_y, m, 0)
