"""``encoders recommend``: candidates within the budget, exact figures equal to the declared MSE / n, the measured
figure's bias correction, ranking, and the CLI's refusals."""

import json
import math

import numpy as np
import pytest
import torch

from sstq_fl.cli import main
from sstq_fl.encoders import make_encoder, registry
from sstq_fl.encoders.recommend import candidate_specs, e1_vector, measured, recommend


def test_candidates_vary_the_declared_width_within_its_range():
    specs = candidate_specs("sstq-flat", registry()["sstq-flat"], 50)
    assert "sstq-flat" in specs and "sstq-flat:b=1" in specs and "sstq-flat:b=8" in specs
    assert not any(s.startswith("sstq-flat:b=9") for s in specs)
    mrc = candidate_specs("privunit-mrc", registry()["privunit-mrc"], 50)
    assert "privunit-mrc:bits=16,coin=public" in mrc and "privunit-mrc:bits=3" in mrc
    assert candidate_specs("vqsgd", registry()["vqsgd"], 50) == ["vqsgd"]


def test_every_row_fits_the_budget_and_private_rows_are_ranked_by_the_mean_mse():
    rows = recommend(40, 2.0, 50, bits=10, trials=200)
    assert rows and all(r.bits <= 10 for r in rows)
    private = [r.mse_mean for r in rows if r.private]
    assert private == sorted(private)
    assert [r.private for r in rows] == sorted((r.private for r in rows), reverse=True)


def test_an_exact_row_is_the_declared_mse_over_n():
    rows = {r.spec.split(":")[0]: r for r in recommend(30, 1.5, 200, names=["vqsgd", "privunit"])}
    x = e1_vector(30, 1.0)
    for name in ("vqsgd", "privunit"):
        declared = float(make_encoder(name, 30, 1.5).mse(x[None])[0])
        assert rows[name].kind == "exact"
        assert rows[name].mse_mean == pytest.approx(declared / 200, rel=1e-12)


def test_the_measured_figure_removes_the_sampling_noise_from_the_bias():
    """vqsgd is unbiased: the measured mean's MSE (bias² corrected by V/T, plus V/n) is its exact mse/n within the
    Monte-Carlo error, where the uncorrected ‖mean − x‖² would add V/T (here 25x the answer)."""
    enc, x = make_encoder("vqsgd", 20, 1.0), e1_vector(20, 1.0)
    exact = float(enc.mse(x[None])[0])
    got, per_msg = measured(enc, x, clients=10_000, trials=400)
    assert per_msg == pytest.approx(exact, rel=0.15)
    assert got < 3 * exact / 10_000 + 4 * exact / 400 / math.sqrt(20)


def test_cli_json_and_table(capsys):
    assert main(["encoders", "recommend", "--dim", "24", "--epsilon", "2", "--clients", "10", "--bits", "12",
                 "--encoders", "vqsgd sstq-flat", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["spec"].split(":")[0] for r in rows} == {"vqsgd", "sstq-flat"}
    assert main(["encoders", "recommend", "--dim", "24", "--epsilon", "2", "--clients", "10",
                 "--encoders", "vqsgd clean"]) == 0
    out = capsys.readouterr().out
    assert "| 1 | vqsgd |" in out and "clean (NOT private" in out and "| ref |" in out


@pytest.mark.parametrize("argv,msg", [
    (["--dim", "1", "--epsilon", "2", "--clients", "3"], "dim >= 2"),
    (["--dim", "8", "--epsilon", "2", "--clients", "3", "--encoders", "nope"], "unknown encoder(s) ['nope']"),
    (["--dim", "8", "--epsilon", "0", "--clients", "3"], "epsilon"),
    (["--dim", "8", "--epsilon", "2", "--clients", "3", "--bits", "0"], "bits"),
])
def test_cli_refuses_bad_input_in_one_line(argv, msg, capsys):
    try:
        code = main(["encoders", "recommend", *argv])
    except SystemExit as exc:  # argparse's own refusal of a bad value
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and msg in err[-1]


def test_no_candidate_in_budget_leaves_the_encoder_out():
    assert recommend(100, 2.0, 10, bits=2, names=["sstq-flat", "vqsgd"]) == []
    assert np.isfinite([r.encode_ms for r in recommend(8, 1.0, 5, names=["vqsgd"])]).all()
    assert torch.isfinite(torch.tensor([r.mse_mean for r in recommend(8, 1.0, 5, names=["vqsgd"])])).all()


def test_the_cost_gate_times_one_message_and_refuses_wider_ones_untimed():
    from sstq_fl.encoders.recommend import CostGate

    x = e1_vector(24, 1.0)
    narrow, wide = make_encoder("privunit-mrc:bits=4", 24, 1.0), make_encoder("privunit-mrc:bits=9", 24, 1.0)
    public = make_encoder("privunit-mrc:bits=9,coin=public", 24, 1.0)
    assert CostGate(60.0, 10).estimate(narrow, x) == (True, "")
    gate = CostGate(1e-9, 10)
    ok, why = gate.estimate(narrow, x)
    assert not ok and "10 messages would take" in why
    ok, why = gate.estimate(wide, x)
    assert not ok and "already too slow (24 bits)" in why
    ok, why = gate.estimate(public, x)  # another coin: timed on its own
    assert not ok and "would take" in why
