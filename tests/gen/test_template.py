"""The run template owns the privacy order: plan (public only) → the data set's ledger charged → the private data
opened, with the run's ledger declared → the transcript → the outputs, metrics.json last."""

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from sstq_fl.cli import main as cli
from sstq_fl.config.generative import PipelineConfig
from sstq_fl.data.workload import WorkloadData
from sstq_fl.gen import template
from sstq_fl.gen.template import OrderError, RunPlan, Steps, run_pipeline
from sstq_fl.io import atomic_write_json
from sstq_fl.privacy.errors import BudgetExceededError, PlanExceededError
from sstq_fl.privacy.events import GaussianEvent, PublicDataEvent

DATA = WorkloadData(dataset="synthetic", clients=2, records=200, seed=0)
SIGMA = 4.0


def record_writes(monkeypatch, folder: Path) -> list[tuple[str, bool]]:
    """Every file placed in ``folder`` (the package writes files atomically, by ``os.replace``), in order, with
    whether ``transcript.jsonl`` was already there."""
    seen: list[tuple[str, bool]] = []
    real = os.replace

    def spy(src, dst, *a, **k):
        dst = Path(dst)
        if dst.parent.resolve() == Path(folder).resolve():
            seen.append((dst.name, (dst.parent / "transcript.jsonl").exists()))
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", spy)
    return seen


def published_in_order(writes: list[tuple[str, bool]]) -> bool:
    """Whether :func:`record_writes` saw the transcript first, every output after it and ``metrics.json`` last."""
    names = [name for name, _ in writes]
    return names[0] == "transcript.jsonl" and names[-1] == "metrics.json" and all(had for _, had in writes[1:])


class Toy(Steps):
    """One Gaussian release of the clients' class sums; ``misstep`` names what a step tries out of order."""

    pipeline, relation = "toy", "replace_one"

    def __init__(self, misstep: str = "", sigma: float = SIGMA):
        self.misstep, self.sigma = misstep, sigma

    def plan(self, ctx):
        if self.misstep == "plan-reads-private":
            ctx.private.data.client_records(0)
        return RunPlan([(GaussianEvent(SIGMA), 1), (PublicDataEvent(), 1)], {"n": ctx.declared.n_decl})

    def compute(self, ctx, plan):
        if self.misstep == "compute-writes":
            atomic_write_json(ctx.folder / "samples.json", {})
        rel = ctx.private.clients(lambda run: run.additive_release("sums", "stats.class_sums", {}, {}, 2.0,
                                                                   self.sigma))
        ctx.private.runner.charge_public("post", "post-processing of the release")
        if self.misstep == "clients-twice":
            ctx.private.clients(lambda run: None)
        return rel

    def outputs(self, ctx, plan, rel, privacy):
        if self.misstep == "outputs-releases":
            ctx.private.clients(lambda run: None)
        atomic_write_json(ctx.folder / "samples.json", {"counts": rel["counts"].tolist()})
        return {**privacy, "records": plan.state["n"], "dropped": ctx.private.dropped}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    monkeypatch.setattr(template, "workload_data", lambda cfg: DATA)
    cfg = PipelineConfig(epsilon=2.5, clients=2, randomness="reproducible", cache_dir=str(tmp_path / "cache"),
                         dataset_ledger=str(tmp_path / "ledger.jsonl"))
    return cfg, tmp_path / "run", tmp_path / "ledger.jsonl"


def test_the_transcript_is_written_before_any_output_and_metrics_last(toy, monkeypatch):
    cfg, out, ledger = toy
    writes = record_writes(monkeypatch, out)
    m = run_pipeline(Toy(), cfg, out)
    assert [name for name, _ in writes] == ["transcript.jsonl", "samples.json", "metrics.json"]
    assert published_in_order(writes) and not published_in_order(writes[1:])
    assert m["records"] == 200 and m["dataset_ledger"]["runs"] == 1 and ledger.exists() and m["dropped"] == []
    lines = [json.loads(s) for s in (out / "transcript.jsonl").read_text().splitlines()]
    assert lines[0]["plan"] and lines[0]["budget"] == {"epsilon": 2.5, "delta": 1e-5}  # declared before the clients
    assert json.loads((out / "metrics.json").read_text())["epsilon"] == m["epsilon"]
    assert cli(["privacy", "replay", str(out / "transcript.jsonl")]) == 0


@pytest.mark.parametrize(("misstep", "needle"), [
    ("plan-reads-private", "private data opens only after the plan is charged"),
    ("compute-writes", "output folder opens only after the transcript"),
    ("clients-twice", "the clients run once per run"),
])
def test_a_step_out_of_order_is_refused_and_nothing_is_published(toy, misstep, needle):
    cfg, out, ledger = toy
    with pytest.raises(OrderError, match=needle):
        run_pipeline(Toy(misstep), cfg, out)
    assert not out.exists() and not ledger.exists()  # no transcript, no output, nothing appended


def test_outputs_cannot_release_after_the_transcript(toy):
    cfg, out, ledger = toy
    with pytest.raises(OrderError, match="the transcript is written; nothing more is released"):
        run_pipeline(Toy("outputs-releases"), cfg, out)
    assert sorted(p.name for p in out.iterdir()) == ["transcript.jsonl"] and ledger.exists()


def test_over_budget_the_data_set_ledger_refuses_before_the_private_data_opens(toy, monkeypatch):
    cfg, out, ledger = toy
    monkeypatch.setattr(Toy, "compute", lambda self, ctx, plan: pytest.fail("touched private data"))
    over = replace(cfg, dataset_budget_epsilon=0.5)
    with pytest.raises(BudgetExceededError, match="over its budget 0.5"):
        run_pipeline(Toy(), over, out)
    assert not out.exists() and not ledger.exists()


def test_the_run_ledger_is_declared_before_the_clients_run(toy):
    """A release the plan did not declare (another σ) is refused by the run's ledger, so no transcript is written."""
    cfg, out, _ = toy
    with pytest.raises(PlanExceededError):
        run_pipeline(Toy(sigma=3.0), cfg, out)
    assert not out.exists()
