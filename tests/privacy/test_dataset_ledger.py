"""One ledger per private data set: digest, composition across runs, budget refusal, bad files, concurrency."""

import json
import math
import multiprocessing as mp

import numpy as np
import pytest

from sstq_fl.privacy.dataset_ledger import DatasetLedger, dataset_digest, default_path
from sstq_fl.privacy.errors import BudgetExceededError
from sstq_fl.privacy.events import GaussianEvent, NonPrivateEvent, PoissonSampledEvent, PublicDataEvent
from sstq_fl.privacy.ledger import PrivacyLedger

DIGEST = "ab" * 32


def _run(*events, relation: str = "replace_one") -> PrivacyLedger:
    led = PrivacyLedger(relation)
    led.record(PublicDataEvent(), subset="public", note="phi")
    for ev, n in events:
        led.record(ev, n)
    return led


def test_digest_is_stable_and_sees_every_pixel_and_label():
    x, y = np.random.default_rng(0).random((20, 1, 28, 28)).astype(np.float32), np.arange(20) % 10
    d = dataset_digest(x, y)
    assert d == dataset_digest(x.copy(), y.copy()) and len(d) == 64
    x2, y2 = x.copy(), y.copy()
    x2[7, 0, 3, 3] += 1e-3
    y2[4] = 9
    assert len({d, dataset_digest(x2, y), dataset_digest(x, y2), dataset_digest(x[:-1], y[:-1])}) == 4
    with pytest.raises(ValueError, match="do not match"):
        dataset_digest(x, y[:-1])


def test_runs_compose_to_the_pld_of_all_their_events(tmp_path):
    book = DatasetLedger(DIGEST, tmp_path / "d.jsonl")
    a = book.append(_run((GaussianEvent(3.0), 1)), "r1", "dp-mepf", 1e-5, "secure")
    b = book.append(_run((PoissonSampledEvent(0.01, GaussianEvent(1.0)), 100)), "r2", "dp-vqg", 1e-5, "secure")
    direct = PrivacyLedger("replace_one")
    direct.record(GaussianEvent(3.0))
    assert a["dataset_epsilon_cumulative"] == pytest.approx(direct.epsilon(1e-5)) and a["dataset_ledger"]["runs"] == 1
    direct.record(PoissonSampledEvent(0.01, GaussianEvent(1.0)), 100)
    assert b["dataset_epsilon_cumulative"] == pytest.approx(direct.epsilon(1e-5), rel=1e-9)
    assert b["dataset_ledger"] == {"path": str(tmp_path / "d.jsonl"), "digest": DIGEST, "runs": 2,
                                   "relation": "replace_one", "delta": 1e-5, "appended": True}
    lines = [json.loads(s) for s in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["dataset_digest"] == DIGEST
    assert [r["run_id"] for r in lines[1:]] == ["r1", "r2"] and lines[1]["randomness"] == "secure"
    assert lines[1]["events"] == [{"event": GaussianEvent(3.0).to_json(), "count": 1}]  # the public step is not charged
    assert book.cumulative("replace_one", 1e-6) > book.cumulative("replace_one", 1e-5)  # any δ, from the events


def test_the_plan_is_refused_before_spending_when_over_the_data_sets_budget(tmp_path):
    book = DatasetLedger(DIGEST, tmp_path / "d.jsonl")
    book.append(_run((GaussianEvent(4.0), 1)), "r1", "dp-mepf", 1e-5, "secure")
    one = book.cumulative("replace_one", 1e-5)
    after = book.check_plan([(GaussianEvent(4.0), 1)], "replace_one", 1e-5, budget_epsilon=10.0)
    assert one < after < 2 * one
    with pytest.raises(BudgetExceededError, match=r"cumulative epsilon after this run would be .* over its budget"):
        book.check_plan([(GaussianEvent(4.0), 1)], "replace_one", 1e-5, budget_epsilon=one * 1.01)
    assert len(book.read()[1]) == 1  # nothing recorded by a refused plan
    with pytest.raises(ValueError, match="positive"):
        book.check_plan([], "replace_one", 1e-5, budget_epsilon=0.0)


def test_a_non_private_run_makes_it_infinite_and_a_public_run_records_nothing(tmp_path):
    book = DatasetLedger(DIGEST, tmp_path / "d.jsonl")
    pub = book.append(_run(), "p", "dp-mepf", 1e-5, "secure")
    assert pub["dataset_ledger"]["runs"] == 0 and not pub["dataset_ledger"]["appended"] and not book.path.exists()
    book.append(_run((GaussianEvent(2.0), 1)), "r1", "dp-mepf", 1e-5, "secure")
    inf = book.append(_run((NonPrivateEvent("reference"), 1)), "r2", "dp-mepf", 1e-5, "reproducible")
    assert inf["dataset_epsilon_cumulative"] is None and "infinite" in inf["dataset_ledger"]["note"]
    assert math.isinf(book.cumulative("replace_one", 1e-5))
    with pytest.raises(BudgetExceededError):
        book.check_plan([(GaussianEvent(100.0), 1)], "replace_one", 1e-5, budget_epsilon=1e6)


@pytest.mark.parametrize("text, match", [
    ("not json\n", "line 1 is not JSON"),
    ('{"type": "header", "format": "other"}\n', "not a sstq-fl-dataset-ledger v1 header"),
    ('{"type": "header", "format": "sstq-fl-dataset-ledger", "version": 1, "relation": "replace_one", '
     '"dataset_digest": "' + "cd" * 32 + '"}\n', "belongs to data set cdcdcdcdcdcd"),
    ("HEAD\n[1, 2]\n", "line 2 is not a JSON object"),
    ("HEAD\n" + '{"type": "run", "relation": "replace_one", "events": [{"event": {"kind": "warp"}, "count": 1}]}\n',
     "line 2 has an unreadable event"),
    ("HEAD\n" + '{"type": "run", "relation": "replace_one", "events": [{"event": {"kind": "gaussian", '
     '"noise_multiplier": 1.0}, "count": -1}]}\n', "line 2 has an unreadable event"),
    ("HEAD\n" + '{"type": "run", "relation": "add_or_remove_one", "events": []}\n', "line 2 is under 'add_or_remove_one'"),
    ("HEAD\n" + '{"type": "note"}\n', "line 2 is not a run entry"),
])
def test_a_malformed_ledger_is_refused_in_one_line(tmp_path, text, match):
    head = json.dumps({"type": "header", "format": "sstq-fl-dataset-ledger", "version": 1, "relation": "replace_one",
                       "dataset_digest": DIGEST})
    path = tmp_path / "d.jsonl"
    path.write_text(text.replace("HEAD", head))
    book = DatasetLedger(DIGEST, path)
    with pytest.raises(ValueError, match=match) as err:
        book.cumulative("replace_one", 1e-5)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError):
        book.append(_run((GaussianEvent(2.0), 1)), "r", "p", 1e-5, "secure")
    assert path.read_text() == text.replace("HEAD", head)  # untouched


def test_one_relation_per_data_set_and_bad_arguments(tmp_path):
    book = DatasetLedger(DIGEST, tmp_path / "d.jsonl")
    book.append(_run((GaussianEvent(2.0), 1)), "r1", "dp-mepf", 1e-5, "secure")
    with pytest.raises(ValueError, match="is under replace_one; a add_or_remove_one run cannot"):
        book.append(_run((GaussianEvent(2.0), 1), relation="add_or_remove_one"), "r2", "x", 1e-5, "secure")
    with pytest.raises(ValueError, match="cannot be composed"):
        book.check_plan([(GaussianEvent(2.0), 1)], "add_or_remove_one", 1e-5, None)
    with pytest.raises(ValueError, match="64 lowercase hex"):
        DatasetLedger("nothex")


def test_the_default_location_is_under_the_users_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_path(DIGEST) == tmp_path / ".cache" / "sstq-fl" / "ledgers" / f"{DIGEST}.jsonl"
    assert DatasetLedger(DIGEST).path == default_path(DIGEST)


def _append_many(path: str, k: int) -> None:
    book = DatasetLedger(DIGEST, path)
    for i in range(3):
        book.append(_run((GaussianEvent(5.0), 1)), f"{k}-{i}", "p", 1e-5, "secure")


def test_concurrent_appends_lose_nothing(tmp_path):
    path = str(tmp_path / "d.jsonl")
    procs = [mp.get_context("spawn").Process(target=_append_many, args=(path, k)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs)
    _, runs = DatasetLedger(DIGEST, path).read()
    assert sorted(r["run_id"] for r in runs) == sorted(f"{k}-{i}" for k in range(3) for i in range(3))


def test_a_run_listing_one_line_per_step_is_validated_once_per_distinct_event(tmp_path, monkeypatch):
    """A DP-SGD run writes one event line per step (each step's transcript meta differs); reading the data set's
    ledger validated every line by building its PLD, 1,200 builds for four 300-step runs (over six minutes)."""
    led = PrivacyLedger("replace_one")
    for step in range(300):
        led.record(PoissonSampledEvent(0.032, GaussianEvent(0.8)), meta={"round": step})
    book = DatasetLedger(DIGEST, tmp_path / "d.jsonl")
    book.append(led, "r1", "dp-vqg", 1e-5, "secure")
    assert len(json.loads((tmp_path / "d.jsonl").read_text().splitlines()[1])["events"]) == 300
    built: list[int] = []
    real = PrivacyLedger.record
    monkeypatch.setattr(PrivacyLedger, "record", lambda self, *a, **k: (built.append(1), real(self, *a, **k))[1])
    book.read()
    assert len(built) == 1
    assert book.cumulative("replace_one", 1e-5) == pytest.approx(led.epsilon(1e-5), rel=1e-9)
