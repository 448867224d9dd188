"""Property-based fuzz of the command line (hypothesis): for bad numbers (nan, inf, negative, huge, garbage text,
floats outside an option's range), bad encoder specs (malformed, unknown parameters, huge values) and bad paths
(missing, a file, a folder of another kind), every command exits 2 with exactly one ``sstq-fl`` line on stderr, no
traceback, and its output folder is not created.  In-process (:func:`sstq_fl.cli.main`), about 20 s in all."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .cli_bad_inputs import BAD_SPECS, GARBAGE, LSQ, NUMBER_OPTIONS, PATH_CASES, Folders, outcome, verdict

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
_COUNTER = itertools.count()

# the float options of ``run`` and the predicate of their valid values
VALID = {"--lr": lambda v: 0 < v < math.inf, "--clip": lambda v: 0 < v < math.inf,
         "--epsilon": lambda v: 0 < v < math.inf, "--server-cap": lambda v: 0 < v < math.inf,
         "--sampling-rate": lambda v: 0 < v <= 1, "--alpha": lambda v: 0 < v < math.inf,
         "--lsq-noise": lambda v: 0 <= v < math.inf, "--delta": lambda v: 0 <= v < 1}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return Folders(tmp_path_factory.mktemp("fuzz")).make()


def check(folders: Folders, case: list[str]) -> None:
    """``case`` (its folder names made paths) is refused in one line, exit 2, with nothing written."""
    out = folders.root / f"out{next(_COUNTER)}"
    argv = folders.argv(case, out)
    rc, err = outcome(argv)
    assert verdict(rc, err, out) == "ok", (argv, rc, err[-500:])


def _text_not_a_number() -> st.SearchStrategy[str]:
    """Text that no float or integer parser reads (or reads as a non-finite number)."""
    def bad(s: str) -> bool:
        try:
            return not math.isfinite(float(s))
        except ValueError:
            return True
    return st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12).filter(bad)


@FUZZ
@given(flag=st.sampled_from(sorted(VALID)), data=st.data())
def test_out_of_range_floats_are_refused(folders, flag, data):
    value = data.draw(st.floats(allow_nan=True, allow_infinity=True).filter(lambda v: not VALID[flag](v)))
    check(folders, ["run", *LSQ, flag, repr(value), "--out", "OUT"])


@FUZZ
@given(key=st.sampled_from(sorted(NUMBER_OPTIONS)), value=st.one_of(st.sampled_from(GARBAGE), _text_not_a_number()))
def test_garbage_numbers_are_refused(folders, key, value):
    prefix, _ = NUMBER_OPTIONS[key]
    out = [] if prefix[0] == "privacy" else ["--out", "OUT.json" if prefix[0] == "bench" else "OUT"]
    check(folders, [*prefix, key.strip(), value, *out])


@FUZZ
@given(flag=st.sampled_from(["--rounds", "--clients", "--batch", "--dim", "--n"]),
       value=st.one_of(st.integers(max_value=0), st.integers(min_value=10**12, max_value=10**30)))
def test_non_positive_and_huge_counts_are_refused(folders, flag, value):
    check(folders, ["run", *LSQ, flag, str(value), "--out", "OUT"])


_NAMES = ["sstq-flat", "sstq-ma", "sqkr", "privunit", "privunit-mrc", "vqsgd", "clean"]
_PARAMS = {"b": ["0", "99", "-1", "x", "1e9"], "rho": ["1", "0", "inf", "nan", "1e9", "x"], "zz": ["1"],
           "coin": ["public", "nope"], "frame": ["nope"], "kashin": ["nope"], "codebook": ["nope"], "": ["1"]}


@FUZZ
@given(name=st.sampled_from(_NAMES), key=st.sampled_from(sorted(_PARAMS)), data=st.data())
def test_bad_encoder_specs_are_refused(folders, name, key, data):
    value = data.draw(st.sampled_from(_PARAMS[key]))
    check(folders, ["run", *LSQ, "--encoder", f"{name}:{key}={value}", "--out", "OUT"])


@FUZZ
@given(spec=st.sampled_from(BAD_SPECS), where=st.sampled_from(["run", "compare"]))
def test_the_campaign_specs_are_refused_by_run_and_compare(folders, spec, where):
    if where == "run":
        check(folders, ["run", *LSQ, "--encoder", spec, "--out", "OUT"])
    else:
        check(folders, ["compare", *LSQ, "--encoders", f"clean;{spec}" if spec else ";", "--out", "OUT"])


@FUZZ
@given(case=st.sampled_from(PATH_CASES))
def test_missing_paths_and_folders_of_another_kind_are_refused(folders, case):
    check(folders, case)
