"""The order of every DP generative run, owned by one template (:func:`run_pipeline`); a pipeline supplies its
:class:`Steps` and cannot reorder them.

1. The output folder is checked (:func:`prepare_out`) and the run's clock started (:func:`start_run`).
2. The private data set is counted (:func:`workload_data`): the steps see its declared size only
   (:class:`Declared`; the size of the data set is public under both neighbouring relations).
3. ``steps.plan(ctx)``: public data, public models and the calibration, from the config and the declared size;
   the run's events come back as a :class:`RunPlan`.  ``ctx.private`` refuses here.
4. The data set's ledger is charged with the plan's private events (:func:`dataset_ledger`): a run over
   ``dataset_budget_epsilon`` is refused (``BudgetExceededError``) before any private computation.
5. The private data opens: ``steps.compute(ctx, plan)`` reaches the records only through ``ctx.private``
   (:class:`PrivateData`), whose one :meth:`PrivateData.clients` call starts the run's
   :class:`~sstq_fl.gen.runner.DPRunner` with its ledger declared to the plan first (under the ``(ε, δ)``
   budget).  ``ctx.folder`` refuses here.
6. The transcript is written (replayable) and the run appended to the data set's ledger
   (:meth:`~sstq_fl.gen.runner.DPRunner.finish`); the ledger is complete, so nothing more can be released.
7. The folder opens: ``steps.outputs(ctx, plan, result, privacy)`` writes the samples and the private
   diagnostics and returns the metrics, which the template writes to ``metrics.json`` atomically, last.

A step that reaches for what its place does not give it yet gets an :class:`OrderError`.  The pipelines import
neither the private data loaders nor the client runner's entry point (``tests/test_architecture.py`` checks), so
this module is their only way to the records.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..config.generative import PipelineConfig
from ..data.mnist import PrivateSplit, load_private_split
from ..data.workload import WorkloadData
from ..io import clear_out, refuse_other_kind
from ..privacy.dataset_ledger import DatasetLedger
from ..privacy.errors import Budget
from ..privacy.events import PrivacyEvent, PublicDataEvent
from ..progress import PhaseClock
from .outputs import RUN_FILES, write_metrics
from .runner import ClientPool, DPRunner, deterministic_kernels, run_workload

C = TypeVar("C", bound=PipelineConfig)
S = TypeVar("S")
R = TypeVar("R")
T = TypeVar("T")
Plan = Sequence[tuple[PrivacyEvent, int]]


class OrderError(RuntimeError):
    """A pipeline step reached for what its place in the run's order does not give it yet."""


# ----------------------------------------------------------------------------- the output folder
def prepare_out(out: Path, force: bool = False) -> bool:
    """Make ``out`` ready for one run; whether this call created it.

    A folder that already holds a run's files (:data:`~sstq_fl.gen.outputs.RUN_FILES`) is refused (one line)
    unless ``force``, which removes them first (:func:`sstq_fl.io.clear_out`)."""
    refuse_other_kind(out, "generation", also=("run",))  # a generative run stopped before its samples: no samples.png
    clear_out([out / n for n in RUN_FILES if (out / n).exists()], out, force,
              "choose another folder, or --force to replace them")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    return created


def run_in(out: str | Path, force: bool, run: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """``run(out)`` in a folder :func:`prepare_out` prepared; a folder this call created is removed again if
    the run fails before writing anything into it."""
    out = Path(out)
    created = prepare_out(out, force)
    try:
        return run(out)
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise


def start_run(cfg: PipelineConfig, pipeline: str) -> tuple[float, PhaseClock]:
    """A run's start time and phase clock, with PyTorch's deterministic kernels chosen in reproducible mode."""
    t0 = time.perf_counter()
    deterministic_kernels(cfg.device, cfg.randomness)
    return t0, PhaseClock(pipeline)


# ----------------------------------------------------------------------------- the private data set
def workload_data(cfg: PipelineConfig) -> WorkloadData:
    """The private records of a run: the MNIST subset's ``priv_train``, ``cfg``'s subset, clients and partition
    (checked: a ``records`` beyond what the data set holds is a one-line error)."""
    data = WorkloadData("mnist-subset", cfg.clients, cfg.partition, cfg.alpha, cfg.seed, cfg.resolved("records"),
                        cfg.data_path)
    _ = data.n_decl  # loads the records now: more records than the data set holds are refused before any computation
    return data


def dataset_ledger(cfg: PipelineConfig, data: WorkloadData, plan: Plan, relation: str) -> DatasetLedger:
    """The private data set's ledger, after checking the run's private events (``plan`` without its public-data
    steps) against ``cfg.dataset_budget_epsilon``: raises ``BudgetExceededError`` (a ValueError) before any
    private computation.  A run that spends nothing still reads the ledger, so a malformed one is refused."""
    book = DatasetLedger(data.digest, cfg.dataset_ledger or None)
    private = [(ev, n) for ev, n in plan if not isinstance(ev, PublicDataEvent)]
    if private:
        book.check_plan(private, relation, cfg.delta, cfg.dataset_budget_epsilon)
    else:
        book.read()
    return book


# ----------------------------------------------------------------------------- what the steps see
@dataclass(frozen=True)
class Declared:
    """The public facts of the private data set: its declared size ``N_decl`` and the number of clients."""

    n_decl: int
    clients: int


@dataclass(frozen=True)
class RunPlan(Generic[S]):
    """What :meth:`Steps.plan` computed from public information: ``events``, every ``(event, count)`` the run will
    record (public-data steps included; the private ones are charged to the data set's ledger); ``state``, the
    steps' own calibration and public models; ``declare``, whether the run's ledger is started with ``events``
    under the ``(ε, δ)`` budget (an unplanned event is then refused); ``engine``, the clients' engine when it is
    not the config's (e.g. a run that reads no private record stays in-process)."""

    events: Plan
    state: S
    declare: bool = True
    engine: str | None = None


class PrivateData:
    """The private side of a run, handed to the steps by the template once the plan is charged: the clients
    (:meth:`clients`, once), the records for the offline evaluation (:attr:`data`, :attr:`split`) and, after
    the clients ran, the :attr:`runner` and the clients left out (:attr:`dropped`)."""

    def __init__(self, data: WorkloadData, cfg: PipelineConfig, pipeline: str, relation: str, plan: RunPlan[Any]):
        self.data, self._cfg, self._pipeline, self._relation, self._plan = data, cfg, pipeline, relation, plan
        self._runner: DPRunner | None = None
        self._split: PrivateSplit | None = None
        self.dropped: list[Any] = []
        self.closed = False  # the transcript is written: nothing more is released

    @property
    def split(self) -> PrivateSplit:
        """The fixed ``priv_train`` / ``priv_test`` split (:func:`~sstq_fl.data.mnist.load_private_split`)."""
        if self._split is None:
            self._split = load_private_split(self._cfg.data_path or None)
        return self._split

    @property
    def runner(self) -> DPRunner:
        """The run's runner and ledger (after :meth:`clients`)."""
        if self._runner is None:
            raise OrderError(f"{self._pipeline}: the clients have not run (PrivateData.clients), so there is no ledger")
        return self._runner

    def clients(self, fn: Callable[[DPRunner], T]) -> T:
        """``fn(runner)`` with the clients, in-process or on Flower: the runner's ledger is started with the plan
        first (when it declares one).  Once per run: every release goes to one ledger."""
        if self.closed:
            raise OrderError(f"{self._pipeline}: the transcript is written; nothing more is released")
        if self._runner is not None:
            raise OrderError(f"{self._pipeline}: the clients run once per run (one ledger)")
        cfg, plan = self._cfg, self._plan

        def on_pool(pool: ClientPool) -> dict[str, Any]:
            run = DPRunner(pool, self._pipeline, self._relation, seed=cfg.seed, randomness=cfg.randomness)
            if plan.declare:
                run.ledger.start(plan.events, Budget(cfg.epsilon, cfg.delta) if cfg.private else None)
            self._runner = run
            return {"result": fn(run), "dropped": list(pool.dropped)}

        out = run_workload(on_pool, self.data, plan.engine or cfg.engine, cfg.device)
        self.dropped = out["dropped"]
        return out["result"]  # type: ignore[no-any-return]


class RunContext(Generic[C]):
    """What every step sees: the config, the phase clock and the declared facts; :attr:`private` from the
    compute step on, :attr:`folder` from the outputs step on (:class:`OrderError` before)."""

    def __init__(self, cfg: C, clock: PhaseClock, declared: Declared, pipeline: str):
        self.cfg, self.clock, self.declared, self._pipeline = cfg, clock, declared, pipeline
        self._private: PrivateData | None = None
        self._folder: Path | None = None

    @property
    def private(self) -> PrivateData:
        if self._private is None:
            raise OrderError(f"{self._pipeline}: the private data opens only after the plan is charged to the data "
                             "set's ledger (the plan sees the declared size alone)")
        return self._private

    @property
    def folder(self) -> Path:
        if self._folder is None:
            raise OrderError(f"{self._pipeline}: the output folder opens only after the transcript is written")
        return self._folder


class Steps(ABC, Generic[C, S, R]):
    """A DP generative pipeline's steps, in the order :func:`run_pipeline` runs them: ``pipeline`` (its name) and
    ``relation`` (its ledger's neighbouring relation) name the run."""

    pipeline: str
    relation: str

    @abstractmethod
    def plan(self, ctx: RunContext[C]) -> RunPlan[S]:
        """Public data, public models and the calibration; the run's events."""

    @abstractmethod
    def compute(self, ctx: RunContext[C], plan: RunPlan[S]) -> R:
        """The private computation, through ``ctx.private.clients``; post-processing that records on the ledger."""

    @abstractmethod
    def outputs(self, ctx: RunContext[C], plan: RunPlan[S], result: R, privacy: dict[str, Any]) -> dict[str, Any]:
        """Samples, evaluation and private diagnostics into ``ctx.folder``; the metrics (``privacy`` is the ledger's
        result: ε, δ, the transcript's binding and the data set's ledger)."""


# ----------------------------------------------------------------------------- the run
def run_pipeline(steps: Steps[C, Any, Any], cfg: C, out: str | Path, force: bool = False) -> dict[str, Any]:
    """Run ``steps`` on ``cfg`` into ``out`` in the template's order; the metrics as written (``metrics.json``).

    ``out`` must not hold another run's files unless ``force`` (:func:`prepare_out`); a folder this call created
    is removed again if the run fails before writing anything into it."""
    return run_in(out, force, lambda folder: _run(steps, cfg, folder))


def _run(steps: Steps[C, Any, Any], cfg: C, folder: Path) -> dict[str, Any]:
    t0, clock = start_run(cfg, steps.pipeline)
    data = workload_data(cfg)
    ctx = RunContext(cfg, clock, Declared(data.n_decl, data.clients), steps.pipeline)
    plan = steps.plan(ctx)
    book = dataset_ledger(cfg, data, plan.events, steps.relation)  # refuses here, before any private computation
    private = ctx._private = PrivateData(data, cfg, steps.pipeline, steps.relation, plan)
    result = steps.compute(ctx, plan)
    privacy = private.runner.finish(folder, cfg.delta, book)  # the transcript and the data set's ledger first
    private.closed, ctx._folder = True, folder
    metrics = steps.outputs(ctx, plan, result, privacy)
    return write_metrics(folder, metrics, t0, clock)
