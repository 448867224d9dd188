import json
import math

import pytest

from sstq_fl.cli import main
from sstq_fl.encoders import make_encoder
from sstq_fl.privacy.calibration import calibrate_ldp_epsilon, calibrate_noise_multiplier
from sstq_fl.privacy.events import GaussianEvent, PoissonSampledEvent
from sstq_fl.privacy.ldp import advanced_composition, ldp_plan_report
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.privacy.pure_composition import amplified_pure_epsilon


def test_plan_report_full_participation():
    rep = ldp_plan_report(0.5, 100, 1e-5)
    assert rep["per_message"] == 0.5 and rep["basic"] == 50
    assert rep["pld"] == pytest.approx(31.17, abs=0.05)
    assert rep["advanced"] == pytest.approx(0.5 * math.sqrt(200 * math.log(1e5)) + 50 * math.expm1(0.5))
    assert rep["pld"] < rep["basic"] and "amplified" not in rep


def test_plan_report_sampled_variants_are_labelled():
    rep = ldp_plan_report(1.0, 200, 1e-5, sampling_rate=0.05)
    idf, amp = rep["identified"], rep["amplified"]
    assert "server sees which client" in idf["threat_model"] and "does not learn" in amp["threat_model"]
    assert idf["rounds_expected"] == 10 and idf["pld_all_rounds"] == rep["pld"]
    assert idf["pld_expected_rounds"] < idf["pld_p99_rounds"] < rep["pld"]
    assert amp["per_round"] == pytest.approx(math.log1p(0.05 * math.expm1(1.0)))
    assert amp["pld"] < rep["pld"] and amp["pld"] <= amp["basic"]


def test_amplification_formula_limits():
    assert amplified_pure_epsilon(2.0, 1.0) == pytest.approx(2.0)
    assert amplified_pure_epsilon(2.0, 1e-6) == pytest.approx(1e-6 * math.expm1(2.0), rel=1e-3)
    assert advanced_composition(1.0, 0, 1e-5) == 0


def test_calibration_hits_targets():
    eps = calibrate_ldp_epsilon(10.0, 1e-5, 100)
    led = PrivacyLedger()
    led.record(make_encoder("sstq-flat", 50, eps).privacy_event(), 100)  # the encoder's own declared event
    assert 9.9 < led.epsilon(1e-5) <= 10.0

    def plan(sigma):
        return [(PoissonSampledEvent(0.05, GaussianEvent(sigma)), 100)]

    sigma = calibrate_noise_multiplier(2.0, 1e-5, plan, "add_or_remove_one", tol=1e-2)
    led = PrivacyLedger("add_or_remove_one")
    led.record(*plan(sigma)[0])
    assert led.epsilon(1e-5) <= 2.0
    led2 = PrivacyLedger("add_or_remove_one")
    led2.record(*plan(sigma / 1.02)[0])
    assert led2.epsilon(1e-5) > 2.0


def test_cli_plan_json_and_errors(capsys):
    assert main(["privacy", "plan", "--ldp-epsilon", "3", "--rounds", "100", "--delta", "1e-5", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert {"per_message", "basic", "advanced", "pld"} <= set(rep) and rep["pld"] == pytest.approx(300, abs=0.1)
    assert main(["privacy", "plan", "--ldp-epsilon", "3", "--rounds", "100", "--sampling-rate", "0.1", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert "threat_model" in rep["identified"] and "threat_model" in rep["amplified"]
    with pytest.raises(SystemExit) as exc:  # an argument error: argparse exits 2, one line naming the option
        main(["privacy", "plan", "--ldp-epsilon", "0", "--rounds", "10"])
    assert exc.value.code == 2 and "--ldp-epsilon" in capsys.readouterr().err


def test_cli_replay(tmp_path, capsys):
    led = PrivacyLedger()
    led.record(make_encoder("sstq-ma", 30, 1.5).privacy_event(), 40)
    path = tmp_path / "run.jsonl"
    led.write_transcript(path, delta=1e-5)
    assert main(["privacy", "replay", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["matches_recorded"] and out["epsilon"] == led.epsilon(1e-5)
    lines = path.read_text().splitlines()
    summary = json.loads(lines[-1])
    summary["epsilon"] = 1.0  # a tampered report no longer matches the events
    path.write_text("\n".join([*lines[:-1], json.dumps(summary)]) + "\n")
    assert main(["privacy", "replay", str(path)]) == 1
    assert "MISMATCH" in capsys.readouterr().out
