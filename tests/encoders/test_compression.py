"""The compression-only references ``qsgd``, ``signsgd`` and ``randk``: the conformance kit, exact MSE against
Monte Carlo, bits against bytes, wire refusals, parameter refusals, and that they are never given an ε — the
ledger charges a ``NonPrivateEvent`` (a run reports ε = ∞ / null) and tables and figures say
``non-private (compression only)``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from sstq_fl import wire
from sstq_fl.aggregation import charge_joins
from sstq_fl.encoders import WireError, make_encoder
from sstq_fl.encoders.compression import NON_PRIVATE_LABEL
from sstq_fl.fl.engine import RunConfig, run
from sstq_fl.privacy.events import NonPrivateEvent
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.testing import CHECKS, check_encoder
from sstq_fl.testing.wirecheck import forge

SPECS = ["qsgd", "qsgd:s=4", "signsgd", "randk", "randk:k=3", "randk:k=2,coin=public"]
TINY = dict(task="lsq", dim=8, n=80, clients=4, batch=20, clip=1.0, lr=0.5, rounds=2, epsilon=3.0)


def vector(d: int, norm: float, seed: int = 0) -> torch.Tensor:
    g = torch.from_numpy(np.random.default_rng(seed).standard_normal(d))
    return g / torch.linalg.vector_norm(g) * norm


def monte_carlo(enc, x: torch.Tensor, n: int) -> tuple[float, float]:
    """Mean and standard error of ``‖x̂ − x‖²`` over ``n`` messages (seeds ``0..n−1``, coins beside them)."""
    seeds = np.arange(n, dtype=np.uint64)
    est = enc.decode(enc.encode(x.repeat(n, 1), seeds, coins=seeds + 99), coins=seeds + 99)
    err = ((est - x) ** 2).sum(1)
    return float(err.mean()), float(err.std()) / math.sqrt(n)


# ---------------------------------------------------------------------- the kit


@pytest.mark.parametrize("spec", SPECS)
def test_the_conformance_kit_passes(spec):
    report = check_encoder(spec, dim=6, epsilon=1.0)
    assert [r.name for r in report] == list(CHECKS) and report.passed, str(report)
    assert "not private" in report.get("epsilon-ldp").detail  # skipped, never audited against an ε


# ---------------------------------------------------------------------- MSE


@pytest.mark.parametrize("spec,d,radius", [("qsgd", 10, 1.0), ("qsgd:s=4", 10, 2.0), ("qsgd:s=3", 25, 0.5),
                                           ("randk", 10, 1.0), ("randk:k=4", 25, 2.0),
                                           ("randk:k=3,coin=public", 10, 1.0)])
def test_declared_mse_matches_monte_carlo(spec, d, radius):
    enc = make_encoder(spec, d, 1.0, radius=radius)
    x = vector(d, 0.9 * radius, seed=d)
    declared = float(enc.mse(x[None])[0])
    mean, se = monte_carlo(enc, x, 40000)
    assert abs(mean - declared) < 5 * se, (mean, se, declared)


@pytest.mark.parametrize("s", [1, 2, 4, 7])
def test_qsgd_mse_is_the_papers_variance(s):
    """``Σ_i ‖x‖²/s² f_i(1 − f_i)`` with ``f_i`` the fractional part of ``s|x_i|/‖x‖`` (the norm rounded up to
    float32 changes it by a relative 1e-7 at most)."""
    x = vector(12, 0.7, seed=s)
    r = s * x.abs() / torch.linalg.vector_norm(x)
    f = r - r.floor()
    want = float(0.7**2 / s**2 * (f * (1 - f)).sum())
    assert float(make_encoder(f"qsgd:s={s}", 12, 1.0).mse(x[None])[0]) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("k", [1, 3, 12])
def test_randk_mse_is_d_over_k_minus_one_times_the_squared_norm(k):
    x = vector(12, 0.7, seed=k)
    got = float(make_encoder(f"randk:k={k}", 12, 1.0).mse(x[None])[0])
    assert got == pytest.approx((12 / k - 1) * 0.49, rel=1e-6, abs=1e-12)


def test_signsgd_is_deterministic_and_its_mse_is_its_error():
    enc = make_encoder("signsgd", 4, 1.0, radius=10.0)
    x = torch.tensor([[3.0, -1.0, 0.0, 0.5]], dtype=torch.float64)
    seeds = np.array([1, 2], dtype=np.uint64)
    est = enc.decode(enc.encode(x.repeat(2, 1), seeds))
    assert torch.equal(est[0], est[1])  # the seed does not matter
    assert est[0].tolist() == [1.125, -1.125, 1.125, 1.125]  # ‖x‖₁/d = 4.5/4; the sign of 0 is +
    assert float(enc.mse(x)[0]) == pytest.approx(float(((est[0] - x[0]) ** 2).sum()), rel=1e-15)
    assert not enc.unbiased and enc.unbiasedness() == {"unbiased": "no"}


def test_the_input_is_clipped_first():
    enc = make_encoder("qsgd:s=4", 6, 1.0, radius=0.5)
    x = vector(6, 3.0)
    msgs = enc.encode(x[None], np.array([5], dtype=np.uint64))
    assert float(msgs.fields["norm"][0, 0]) == pytest.approx(0.5, rel=1e-7)
    assert float(enc.mse(x[None])[0]) == pytest.approx(float(enc.mse(x[None] / 6)[0]), rel=1e-12)


# ---------------------------------------------------------------------- bits


@pytest.mark.parametrize("spec,d,bits", [("qsgd", 6, 32 + 6 * 2), ("qsgd:s=4", 6, 32 + 6 * 4), ("qsgd:s=3", 1000, 32 + 3000),
                                         ("qsgd:s=255", 7, 32 + 7 * 9), ("signsgd", 6, 38), ("signsgd", 1000, 1032),
                                         ("randk", 6, 35), ("randk:k=3", 6, 3 * 35), ("randk:k=5", 1000, 5 * 42),
                                         ("randk:k=2,coin=public", 6, 64), ("randk", 1, 32)])
def test_bits_formula_layout_and_bytes_agree(spec, d, bits):
    enc = make_encoder(spec, d, 1.0)
    assert enc.formula_bits() == enc.payload_bits() == bits
    seeds = np.arange(3, dtype=np.uint64)
    msgs = enc.encode(torch.stack([vector(d, 0.5, i) for i in range(3)]), seeds, coins=seeds)
    blobs = wire.pack(enc, msgs)
    assert {len(b) for b in blobs} == {wire.HEADER_BYTES + math.ceil(bits / 8)}
    back = wire.unpack(enc, blobs)
    assert torch.equal(enc.decode(back, coins=seeds), enc.decode(msgs, coins=seeds))


def test_randk_public_coin_sends_no_index_and_needs_the_coins():
    enc = make_encoder("randk:k=2,coin=public", 6, 1.0)
    assert enc.public_coins and [f.name for f in enc.layout()] == ["val"]
    with pytest.raises(ValueError, match="needs the public per-client coins"):
        enc.encode(vector(6, 0.5)[None], np.array([0], dtype=np.uint64))


# ---------------------------------------------------------------------- wire refusals


def _message(spec: str, d: int = 6) -> tuple[object, dict[str, np.ndarray]]:
    enc = make_encoder(spec, d, 1.0)
    msgs = enc.encode(vector(d, 0.8)[None], np.array([3], dtype=np.uint64))
    return enc, {k: v[0].numpy().copy() for k, v in msgs.fields.items()}


@pytest.mark.parametrize("spec,field,value,words", [
    ("qsgd", "norm", -0.5, "finite and non-negative"),
    ("qsgd", "norm", 1.5, "exceeds its bound"),
    ("qsgd", "norm", np.inf, "NaN or infinite"),
    ("signsgd", "scale", -0.1, "finite and non-negative"),
    ("signsgd", "scale", 0.5, "exceeds its bound"),  # above R/√d ≈ 0.41
    ("randk:k=2", "val", 0.9, "exceeds its bound"),  # two values of 0.9: norm 1.27 > R
    ("randk:k=2", "idx", 4, "repeats an index"),
    ("qsgd:s=4", "level", 5, "out of range"),
])
def test_malformed_messages_are_refused(spec, field, value, words):
    enc, vals = _message(spec)
    assert wire.unpack(enc, [forge(enc, vals)], round=3).n == 1  # the honest message passes
    vals[field] = np.full_like(vals[field], value)
    with pytest.raises(WireError, match=words):
        wire.unpack(enc, [forge(enc, vals)], round=3)


# ---------------------------------------------------------------------- parameters


@pytest.mark.parametrize("spec,words", [("randk:k=7", "'k' must be at most d = 6, got 7"),
                                        ("randk:k=0", "'k' must be >= 1"), ("qsgd:s=0", "'s' must be >= 1"),
                                        ("qsgd:s=70000", "'s' must be >= 1 and <= 65535"),
                                        ("randk:coin=shared", "'coin' must be one of"), ("signsgd:s=2", "no parameter")])
def test_bad_parameters_are_one_line_errors(spec, words):
    with pytest.raises(ValueError) as info:
        make_encoder(spec, 6, 1.0)
    assert words in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------------- no privacy: ledger (a)


@pytest.mark.parametrize("spec", SPECS)
def test_each_message_is_a_non_private_event_and_the_ledger_reports_no_finite_epsilon(spec, tmp_path):
    enc = make_encoder(spec, 6, 3.0)
    assert not enc.private and enc.privacy_event() == NonPrivateEvent() and enc.privacy_event().pure_epsilon() is None
    assert enc.describe()["epsilon"] is None and enc.fingerprint == make_encoder(spec, 6, 0.5).fingerprint
    led = PrivacyLedger("replace_one")
    led.start([(enc.privacy_event(), 3)], None)
    charge_joins(led, enc, [1, 3, 2], round=1)  # the engine's charge: the busiest client's messages
    assert led.epsilon(1e-5) == math.inf and led.delta(100.0) == 1.0 and led.basic_epsilon() == math.inf
    led.write_transcript(tmp_path / "t.jsonl", delta=1e-5)
    replayed, summary = PrivacyLedger.from_transcript(tmp_path / "t.jsonl")
    assert replayed.epsilon(1e-5) == math.inf and summary["epsilon"] in (None, math.inf)


def test_a_training_run_reports_epsilon_null_and_its_transcript_replays(tmp_path):
    from sstq_fl.privacy.replay import check_metrics

    m = run(RunConfig(encoder="qsgd:s=4", **TINY), tmp_path, progress=False)  # type: ignore[arg-type]
    assert m["final"]["epsilon_total"] == math.inf and m["final"]["bits_per_client"] == 32 + 8 * 4
    stored = json.loads((tmp_path / "metrics.json").read_text())
    assert stored["final"]["epsilon_total"] is None and all(r["epsilon_spent"] is None for r in stored["rounds"])
    kinds = {json.loads(line).get("event", {}).get("kind") for line in (tmp_path / "transcript.jsonl").open()}
    assert "non_private" in kinds and "pure_dp" not in kinds
    check_metrics(stored, tmp_path / "transcript.jsonl")


# ---------------------------------------------------------------------- no privacy: tables and figures (b)


def test_comparison_tables_label_them_non_private_not_with_an_epsilon(tmp_path):
    import csv

    from sstq_fl.experiments.compare import compare

    specs = ["clean", "qsgd", "randk:k=2", "signsgd", "sqkr"]
    rows = compare(RunConfig(encoder="sqkr", **{**TINY, "rounds": 1}), specs, tmp_path)["rows"]  # type: ignore[arg-type]
    labels = {r["encoder"]: (r["encoder_privacy"], r["epsilon_total"]) for r in rows}
    assert labels == {"clean": ("non-private", math.inf), "qsgd": (NON_PRIVATE_LABEL, math.inf),
                      "randk:k=2": (NON_PRIVATE_LABEL, math.inf), "signsgd": (NON_PRIVATE_LABEL, math.inf),
                      "sqkr": ("ε-LDP", pytest.approx(3.0, abs=1e-3))}
    md = (tmp_path / "comparison.md").read_text().splitlines()
    assert md[0].split(" | ")[4:6] == ["epsilon_total", "encoder_privacy"]
    assert md[3].split(" | ")[4:6] == ["inf", NON_PRIVATE_LABEL] and md[6].split(" | ")[4:6] == ["3", "ε-LDP"]
    final = {r["encoder_spec"]: r for r in csv.DictReader((tmp_path / "final.csv").open())}
    assert final["signsgd"]["encoder_privacy"] == NON_PRIVATE_LABEL and final["signsgd"]["epsilon_spent_mean"] == ""
    assert final["sqkr"]["encoder_privacy"] == "ε-LDP" and float(final["sqkr"]["epsilon_spent_mean"]) > 0


def test_comparison_figures_label_them_non_private(tmp_path):
    from sstq_fl.experiments import compare, figures

    def metrics(spec: str, eps: float | None) -> dict:
        rounds = [{"round": t, "train_loss": 1 / t, "distance_to_optimum": 2 / t, "epsilon_spent": eps} for t in (1, 2)]
        return {"config": {"encoder": spec}, "rounds": rounds, "final": {"distance_to_optimum": 1.0, "bits_per_client": 9}}

    results = {"qsgd": metrics("qsgd", None), "clean": metrics("clean", None), "sqkr": metrics("sqkr", 3.0)}
    fig = compare.plot_comparison(results, tmp_path / "c.png", RunConfig(encoder="sqkr", **TINY))  # type: ignore[arg-type]
    eps_lines = [ln.get_label() for ln in fig.get_axes()[2].get_lines()]
    assert eps_lines == [f"qsgd (9 b) ({NON_PRIVATE_LABEL})", "clean (9 b) (non-private)", "sqkr (9 b)"]
    group = {"encoder_spec": "randk:k=2", "encoder_privacy": NON_PRIVATE_LABEL, "epsilon": 3.0}
    assert figures.label_of(group, ["epsilon"]) == f"randk:k=2 — {NON_PRIVATE_LABEL}, epsilon 3.0"
    assert figures.label_of({**group, "encoder_privacy": "ε-LDP"}, []) == "randk:k=2"
    rows = [{**group, "seeds": 1}, {**group, "encoder_spec": "sqkr", "encoder_privacy": "ε-LDP", "seeds": 1}]
    assert figures.varying(rows, ()) == []  # the privacy column follows the encoder: never a legend column of its own


def test_the_e1_figure_labels_a_non_private_encoder(tmp_path):
    from sstq_fl.bench.mse import measure
    from sstq_fl.plots import plot_mse

    rows = [measure(spec, 8, 3.0, 4, 1.0, trials=50) for spec in ("randk:k=2", "vqsgd")]
    assert [(r["private"], r["encoder_privacy"]) for r in rows] == [(False, NON_PRIVATE_LABEL), (True, "ε-LDP")]
    fig = plot_mse({"epsilon": 3.0, "bits": 4, "norm": 1.0, "trials": 50, "rows": rows}, Path(tmp_path) / "e1.png")
    legend = [t.get_text() for t in fig.get_axes()[0].get_legend().get_texts()]
    assert legend == [f"randk:k=2 (70 b, {NON_PRIVATE_LABEL})", "vqsgd (4 b)"]
