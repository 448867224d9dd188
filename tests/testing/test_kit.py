"""The conformance kit passes every built-in encoder and fails each deliberately broken one on its own check."""

import pytest

from sstq_fl.testing import CHECKS, check_encoder

from . import broken

BUILTINS = ["clean", "vqsgd", "sqkr", "sqkr:coin=public", "privunit", "privunit:cap=paper", "privunit-mrc:bits=8",
            "privunit-mrc:bits=6,coin=public", "sstq-flat", "sstq-flat:b=2,codebook=optimized", "sstq-ma",
            "sstq-ma:b=3,scale=paper,decode=identity", "rrsc", "rrsc-fast", "mmrc", "privunitg", "projunit:k=3",
            "projunit:k=3,transform=srht", "qsgd", "signsgd", "randk"]


def test_every_registered_builtin_is_in_the_kit_set():
    from sstq_fl.encoders import registry
    from sstq_fl.encoders.base import ENCODERS

    builtin = {n for n in registry() if ENCODERS.origin(n).kind == "built-in"}
    assert builtin <= {s.split(":")[0] for s in BUILTINS}


@pytest.mark.parametrize("spec", BUILTINS)
def test_every_builtin_passes(spec):
    report = check_encoder(spec, dim=6, epsilon=1.0)
    assert [r.name for r in report] == list(CHECKS)
    assert report.passed, str(report)


@pytest.mark.parametrize("spec", ["vqsgd", "sstq-flat:b=3", "privunit"])
@pytest.mark.parametrize("eps", [0.5, 4.0])
def test_builtins_pass_at_other_epsilons_and_dims(spec, eps):
    report = check_encoder(spec, dim=5, epsilon=eps, radius=0.7, trials=8000, audit_trials=8000)
    assert report.passed, str(report)


@pytest.mark.parametrize("cls", [broken.HonestRR, broken.HonestRRWithLaw])
def test_the_honest_reference_passes(cls):
    report = check_encoder(cls)
    assert report.passed, str(report)
    assert ("exact" in report.get("epsilon-ldp").detail) == (cls is broken.HonestRRWithLaw)


@pytest.mark.parametrize("cls,check,words", [
    (broken.WrongBits, "bits", "bits formula ⌈log2 d⌉ gives 3"),
    (broken.FourEpsilon, "epsilon-ldp", "ε exceeded"),
    (broken.FourEpsilonLyingLaw, "epsilon-ldp", "do not follow the declared law"),
    (broken.Biased, "unbiased", "biased at"),
    (broken.BatchDependent, "batch-invariance", "changed field"),
    (broken.MalformedAccepted, "wire-rejection", "decode raised IndexError"),
])
def test_each_broken_encoder_fails_its_check_and_the_others_report(cls, check, words):
    report = check_encoder(cls)
    assert [r.name for r in report] == list(CHECKS)  # every check still ran and reported
    result = report.get(check)
    assert not result.passed and words in result.detail, str(report)
    assert result.line().startswith(f"FAIL {check}: ") and "\n" not in result.line()
    expected = {check} | ({"mse"} if cls is broken.Biased else set())  # a wrong gain also breaks the declared MSE
    assert set(report.failures()) == expected, str(report)
    assert not report.passed


def test_confidence_is_stated_and_reports_are_reproducible():
    a, b = check_encoder("sqkr", checks=["epsilon-ldp", "unbiased"]), check_encoder("sqkr", checks=["epsilon-ldp", "unbiased"])
    assert a.lines() == b.lines()
    assert "confidence 0.999999" in a.get("epsilon-ldp").detail and "level 1e-06" in a.get("unbiased").detail


def test_non_private_and_biased_encoders_are_skipped_with_a_reason():
    clean = check_encoder("clean", checks=["epsilon-ldp"]).get("epsilon-ldp")
    assert clean.skipped and clean.passed and "not private" in clean.detail
    ma = check_encoder("sstq-ma", checks=["unbiased"]).get("unbiased")
    assert ma.skipped and "biased" in ma.detail


@pytest.mark.parametrize("kwargs,words", [({"dim": 0}, "dim"), ({"epsilon": -1.0}, "epsilon"), ({"alpha": 2.0}, "alpha"),
                                          ({"trials": 5}, "trials"), ({"checks": ["nope"]}, "unknown check")])
def test_bad_knobs_are_one_line_errors(kwargs, words):
    with pytest.raises(ValueError, match=words) as exc:
        check_encoder("vqsgd", **kwargs)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("spec,words", [("no-such-encoder", "unknown encoder 'no-such-encoder'"),
                                        ("vqsgd:b=3", "no parameter"), ("sstq-flat:b=40", "parameter 'b' must be")])
def test_unbuildable_specs_are_one_line_value_errors(spec, words):
    with pytest.raises(ValueError, match=words) as exc:
        check_encoder(spec)
    assert "\n" not in str(exc.value) and "cannot build encoder" in str(exc.value)
