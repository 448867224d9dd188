"""A subnormal or vanishing per-message ε is refused in one line by the plan and the encoders (it printed PLD 0)."""

from __future__ import annotations

import pytest

from sstq_fl.cli import main
from sstq_fl.encoders import make_encoder
from sstq_fl.privacy.ldp import MIN_EPSILON, ldp_plan_report


@pytest.mark.parametrize("eps", [1e-320, 5e-324, 1e-13])
def test_plan_refuses_below_minimum(eps: float, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["privacy", "plan", "--ldp-epsilon", repr(eps), "--rounds", "10"]) == 2
    err = capsys.readouterr()
    assert err.out == "" and "at least 1e-12" in err.err and len(err.err.strip().splitlines()) == 1


def test_plan_at_minimum_answers() -> None:
    assert ldp_plan_report(MIN_EPSILON, 10, 1e-5)["basic"] == pytest.approx(10 * MIN_EPSILON)


@pytest.mark.parametrize("spec", ["sstq-flat", "sqkr", "vqsgd", "privunit", "sstq-ma"])
def test_encoders_refuse_subnormal_epsilon(spec: str) -> None:
    with pytest.raises(ValueError, match="at least 1e-12"):
        make_encoder(spec, 8, 1e-320)
