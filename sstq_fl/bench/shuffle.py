"""The central ε of shuffled LDP messages (``sstq-fl bench shuffle``): per round, over training, and E3.

Three tables, one JSON and one figure:

* ``per_round``: one round of ``n`` shuffled ε₀-LDP messages at ``δ``, three bounds side by side: the
  stronger-clone pair the ledger uses (:class:`~sstq_fl.privacy.events.ShuffledLdpEvent`), the pair of
  Feldman, McMillan & Talwar (FOCS 2021, Thm. 3.2) and their closed form (Thm. 3.1);
* ``rounds``: ``T`` rounds of full participation, the local ε (pure composition: the guarantee against
  the server) beside the central ε (against the analyst, the shuffler trusted);
* ``e3`` (with ``--sweep``, an E3 ε sweep's ``final.csv``): each encoder's final accuracy against both.
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any

from ..io import atomic_write_json, run_meta
from ..privacy.ldp import shuffled_epsilon
from ..privacy.pure_composition import pure_composition_epsilon
from ..privacy.shuffle import fmt21_closed_form, fmt21_pair, pair_pld
from ..progress import progress

log = logging.getLogger(__name__)
GRID = 1e-4
EPSILONS0 = (0.5, 1.0, 2.0, 3.0, 5.0, 8.0)
MESSAGES = (100, 300, 1000, 3000, 10_000, 100_000)


def central_epsilon(epsilon0: float, messages: int, rounds: int, delta: float) -> float:
    """Central ε of ``rounds`` rounds of ``messages`` shuffled ``epsilon0``-LDP messages (never above the
    local ε: the shuffled messages are a post-processing of the identified ones)."""
    return shuffled_epsilon(epsilon0, messages, rounds, delta, GRID)


def per_round_rows(delta: float, epsilons0: tuple[float, ...], messages: tuple[int, ...]) -> list[dict[str, Any]]:
    rows = []
    with progress(len(epsilons0) * len(messages), "shuffle bounds, one round") as bar:
        for e0 in epsilons0:
            for n in messages:
                fmt = float(pair_pld(fmt21_pair(e0, n), GRID).get_epsilon_for_delta(delta))
                rows.append({"epsilon0": e0, "messages": n, "stronger_clone": central_epsilon(e0, n, 1, delta),
                             "fmt21_numerical": fmt, "fmt21_closed_form": fmt21_closed_form(e0, n, delta)})
                bar.advance()
    return rows


def rounds_rows(delta: float, rounds: int, epsilons0: tuple[float, ...], messages: tuple[int, ...]) -> list[dict[str, Any]]:
    rows = []
    for e0 in epsilons0:
        local = pure_composition_epsilon(e0, rounds, delta)  # against the server
        rows += [{"epsilon0": e0, "messages": n, "rounds": rounds, "local": local,
                  "central": central_epsilon(e0, n, rounds, delta)} for n in messages]
    return rows


FINAL_COLUMNS = ("metric_name", "metric_mean", "metric_ci_low", "metric_ci_high", "seeds")


def read_final(final_csv: Path) -> list[dict[str, str]]:
    """A sweep's ``final.csv`` rows of test accuracy; a one-line ``ValueError`` for a file that is missing, not
    UTF-8 CSV, or lacks the columns of a sweep's ``final.csv``."""
    try:
        with final_csv.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in FINAL_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{final_csv} is not a sweep's final.csv (no column {missing[0]!r})")
            return [r for r in reader if r["metric_name"] == "test_accuracy"]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"cannot read {final_csv} ({type(exc).__name__}: {getattr(exc, 'strerror', None) or exc})") from None


def accuracy(r: dict[str, str]) -> dict[str, Any]:
    """Mean accuracy and its 95 % t interval (the mean itself where one seed gives none)."""
    mean = float(r["metric_mean"])
    return {"accuracy": mean, "ci_low": float(r["metric_ci_low"] or mean), "ci_high": float(r["metric_ci_high"] or mean),
            "seeds": int(r["seeds"])}


def e3_rows(final_csv: Path, delta: float, rounds: int, messages: int) -> list[dict[str, Any]]:
    """Each row of a sweep's ``final.csv`` (encoder, ε, accuracy with its interval) with both ε figures: the
    central one as its runs' shuffler ledgers reported it (a sweep run with ``trust = "shuffler"``), else as
    planned for ``messages`` shuffled messages a round."""
    out: list[dict[str, Any]] = []
    for r in read_final(final_csv):
        e0 = float(r["epsilon"])
        central = (float(r["epsilon_central_mean"]) if r.get("epsilon_central_mean")
                   else central_epsilon(e0, messages, rounds, delta))
        out.append({"encoder": r["encoder_spec"], "epsilon0": e0, **accuracy(r), "local": float(r["epsilon_spent_mean"]),
                    "central": central, "messages": messages})
    return out


def curator_rows(final_csv: Path) -> list[dict[str, Any]]:
    """The central-DP reference's rows (``trust = "curator"``): accuracy against its central ε."""
    return [{"encoder": "central Gaussian (curator)", **accuracy(r), "central": float(r["epsilon_central_mean"])}
            for r in read_final(final_csv)]


def shuffle_report(out: str, delta: float = 1e-5, rounds: int = 100, sweep: str | None = None,
                   sweep_messages: int = 100, reference: str | None = None) -> dict[str, Any]:
    """Compute the tables, write ``out`` (JSON) and ``out`` with ``.png``; returns the result.  The input files
    are read first, so a bad one is refused before any bound is computed."""
    if reference and not sweep:
        raise ValueError("--reference is drawn beside --sweep: give both, or neither")
    for path in (sweep, reference):
        if path:
            read_final(Path(path))
    res: dict[str, Any] = {"delta": delta, "grid": GRID, "per_round": per_round_rows(delta, EPSILONS0, MESSAGES),
                           "rounds": rounds_rows(delta, rounds, EPSILONS0, (100, 1000, 10_000))}
    if sweep:
        res["e3"] = {"sweep": sweep, "rows": e3_rows(Path(sweep), delta, rounds, sweep_messages)}
        if reference:
            res["e3"].update(reference=reference, reference_rows=curator_rows(Path(reference)))
    res["meta"] = run_meta()
    atomic_write_json(out, res)
    from .shuffle_plot import plot_shuffle

    plot_shuffle(res, Path(out).with_suffix(".png"))
    return res
