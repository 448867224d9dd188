"""One ledger per private data set: digest, composition across runs, budget refusal, bad files, concurrency."""

import json
import math
import multiprocessing as mp

import numpy as np
import pytest

from sstq_fl.privacy.dataset_ledger import DatasetLedger, dataset_digest, default_path
from sstq_fl.privacy.errors import BudgetExceededError
from sstq_fl.privacy.events import GaussianEvent, NonPrivateEvent, PoissonSampledEvent, PublicDataEvent, PureDpEvent
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
    assert {k: b["dataset_ledger"][k] for k in ("path", "digest", "runs", "relation", "delta", "appended")} == {
        "path": str(tmp_path / "d.jsonl"), "digest": DIGEST, "runs": 2, "relation": "replace_one", "delta": 1e-5,
        "appended": True}
    assert b["dataset_ledger"]["epsilon_replace_one"] == b["dataset_epsilon_cumulative"]
    assert "epsilon_add_or_remove_one" not in b["dataset_ledger"] and "not available" in b["dataset_ledger"][
        "add_or_remove_one"]
    assert [(e["run_id"], e["method"]) for e in b["dataset_ledger"]["entries"]] == [("r1", "recorded"), ("r2", "recorded")]
    lines = [json.loads(s) for s in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["dataset_digest"] == DIGEST
    assert lines[0]["version"] == 1 and lines[0]["relation"] == "replace_one"  # one relation: older readers read it
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
    ('{"type": "header", "format": "other"}\n', "not a sstq-fl-dataset-ledger v1 or v2 header"),
    ('{"type": "header", "format": "sstq-fl-dataset-ledger", "version": 3, "dataset_digest": "' + "ab" * 32 + '"}\n',
     "not a sstq-fl-dataset-ledger v1 or v2 header"),
    ('{"type": "header", "format": "sstq-fl-dataset-ledger", "version": 1, "dataset_digest": "' + "ab" * 32 + '"}\n',
     "not a sstq-fl-dataset-ledger v1 or v2 header"),  # version 1 names its relation
    ('{"type": "header", "format": "sstq-fl-dataset-ledger", "version": 2, "dataset_digest": "' + "cd" * 32 + '"}\n',
     "belongs to data set cdcdcdcdcdcd"),
    ('{"type": "header", "format": "sstq-fl-dataset-ledger", "version": 2, "dataset_digest": "' + "ab" * 32 + '"}\n'
     '{"type": "run", "relation": "swap", "events": []}\n', "line 2 is under 'swap', not one of"),
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


def test_bad_arguments(tmp_path):
    book = DatasetLedger(DIGEST, tmp_path / "d.jsonl")
    with pytest.raises(ValueError, match="relation must be one of"):
        book.check_plan([(GaussianEvent(2.0), 1)], "swap", 1e-5, None)
    with pytest.raises(ValueError, match="64 lowercase hex"):
        DatasetLedger("nothex")
    assert book.cumulative("add_or_remove_one", 1e-5) == 0.0 and book.combined(1e-5) is None


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


# ----------------------------------------------------------------------------- runs under both relations
AR = "add_or_remove_one"
MEPF = [(GaussianEvent(4.0), 1)]  # a replace-one release
STRAIGHT = [(GaussianEvent(6.0), 2), (PoissonSampledEvent(0.05, GaussianEvent(1.5)), 50)]  # moments + DP-SGD


def _replace_one(*plans) -> float:
    """The independent figure: every event of every plan accounted under replace-one on one PLD."""
    led = PrivacyLedger("replace_one")
    for ev, n in (x for plan in plans for x in plan):
        led.record(ev, n)
    return led.epsilon(1e-5)


def test_a_replace_one_and_an_add_remove_run_compose_under_replace_one(tmp_path):
    book = DatasetLedger(DIGEST, tmp_path / "d.jsonl")
    book.append(_run(*MEPF), "r1", "dp-mepf", 1e-5, "secure")
    out = book.append(_run(*STRAIGHT, relation=AR), "r2", "straightdp", 1e-5, "secure")
    assert out["dataset_epsilon_cumulative"] == pytest.approx(_replace_one(MEPF, STRAIGHT), rel=1e-9)
    d = out["dataset_ledger"]
    assert d["relation"] == "replace_one" and d["runs"] == 2 and "not available" in d["add_or_remove_one"]
    assert [(e["run_id"], e["relation"], e["method"]) for e in d["entries"]] == [
        ("r1", "replace_one", "recorded"), ("r2", AR, "exact")]
    lines = [json.loads(s) for s in book.path.read_text().splitlines()]
    assert lines[0]["version"] == 2 and "relation" not in lines[0] and [r["relation"] for r in lines[1:]] == [
        "replace_one", AR]
    assert book.read()[0] == "replace_one"
    assert book.cumulative(AR, 1e-5) == pytest.approx(out["dataset_epsilon_cumulative"], rel=1e-12)


def test_an_add_remove_ledger_reports_both_relations_and_the_order_of_runs_does_not_matter(tmp_path):
    book = DatasetLedger(DIGEST, tmp_path / "d.jsonl")
    first = book.append(_run(*STRAIGHT, relation=AR), "r1", "straightdp", 1e-5, "secure")["dataset_ledger"]
    ar = PrivacyLedger(AR)
    for ev, n in STRAIGHT:
        ar.record(ev, n)
    assert first["relation"] == AR and first["epsilon_add_or_remove_one"] == pytest.approx(ar.epsilon(1e-5))
    assert first["epsilon_replace_one"] == pytest.approx(_replace_one(STRAIGHT), rel=1e-9)
    assert first["epsilon_replace_one"] > first["epsilon_add_or_remove_one"] and first["entries"][0]["method"] == "exact"
    assert json.loads(book.path.read_text().splitlines()[0])["version"] == 1  # still one relation
    after = book.append(_run(*MEPF), "r2", "dp-mepf", 1e-5, "secure")
    assert after["dataset_epsilon_cumulative"] == pytest.approx(_replace_one(MEPF, STRAIGHT), rel=1e-9)


def test_the_budget_is_checked_against_the_converted_total(tmp_path):
    book = DatasetLedger(DIGEST, tmp_path / "d.jsonl")
    book.append(_run(*MEPF), "r1", "dp-mepf", 1e-5, "secure")
    plan = [(GaussianEvent(4.0), 1)]
    converted = book.check_plan(plan, AR, 1e-5, None)
    assert converted == pytest.approx(book.check_plan(plan, "replace_one", 1e-5, None), rel=1e-12)  # exact
    budget = 0.99 * converted
    assert _replace_one(MEPF, [(GaussianEvent(8.0), 1)]) < budget  # its add/remove PLD (shift 1/4) would pass
    with pytest.raises(BudgetExceededError, match=r"would be .* \(replace_one\) at delta=1e-05, over its budget"):
        book.check_plan(plan, AR, 1e-5, budget)


def test_an_add_remove_run_without_a_replace_one_pld_is_stated_by_group_privacy(tmp_path):
    book = DatasetLedger(DIGEST, tmp_path / "d.jsonl")
    book.append(_run(*MEPF), "r1", "dp-mepf", 1e-5, "secure")
    out = book.append(_run((PureDpEvent(0.5, AR), 1), relation=AR), "r2", "x", 1e-5, "secure")
    assert out["dataset_ledger"]["entries"][1]["method"] == "group privacy (k = 2)"
    assert out["dataset_epsilon_cumulative"] == pytest.approx(_replace_one(MEPF, [(PureDpEvent(1.0), 1)]), rel=1e-12)


OLD = ('{"dataset_digest": "' + DIGEST + '", "format": "sstq-fl-dataset-ledger", "relation": "add_or_remove_one", '
       '"type": "header", "version": 1}\n'
       '{"delta": 1e-05, "epsilon": 2.9, "events": [{"count": 2, "event": {"kind": "gaussian", "noise_multiplier": 3.0}}], '
       '"pipeline": "straightdp", "randomness": "secure", "relation": "add_or_remove_one", "run_id": "old", '
       '"time_utc": "2026-11-30T10:00:00Z", "type": "run"}\n')


def test_a_ledger_written_before_still_reads_and_becomes_version_2_once_mixed(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(OLD)
    book = DatasetLedger(DIGEST, path)
    relation, runs = book.read()
    ar = PrivacyLedger(AR)
    ar.record(GaussianEvent(3.0), 2)
    assert relation == AR and [r["run_id"] for r in runs] == ["old"]
    assert book.cumulative(AR, 1e-5) == pytest.approx(ar.epsilon(1e-5), rel=1e-12)
    book.append(_run(*MEPF), "new", "dp-mepf", 1e-5, "secure")
    lines = [json.loads(s) for s in path.read_text().splitlines()]
    assert lines[0]["version"] == 2 and lines[1] == json.loads(OLD.splitlines()[1])  # the old run line verbatim
    assert book.cumulative("replace_one", 1e-5) == pytest.approx(_replace_one([(GaussianEvent(3.0), 2)], MEPF), rel=1e-9)
