"""The checks a sweep makes on every cell before it writes anything: task parameters against the task,
the run's privacy plan against its budget, data sizes against the array limit, and no encoder twice.

Each is cheap (no data set is loaded and no encoder built): the plan of a run of ``rounds`` pure
ε-LDP messages per client is composed by the ledger exactly as the trainer will compose it."""

from __future__ import annotations

import inspect
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .spec import Cell


def preflight(cells: list[Cell], path: str | None) -> None:
    """Refuse (one line naming the file and the cell) the first cell whose run would be refused once started."""
    where = path or "experiment"
    seen: dict[tuple[Any, ...], None] = {}
    for cell in cells:
        cfg = cell.cfg
        try:
            _cached(seen, ("task", cfg.task, cfg.task_params), check_task_params, cfg)
            _cached(seen, ("plan", cfg.encoder, cfg.epsilon, cfg.rounds, cfg.budget_epsilon, cfg.delta),
                    check_budget, cfg)
            if cfg.task == "lsq":
                from ..checks import check_array

                check_array(f"the lsq data (n {cfg.n} × dim {cfg.dim})", cfg.n * cfg.dim)
        except ValueError as exc:
            raise ValueError(f"{where}: the cell {cell.name}: {' '.join(str(exc).split())}") from None
    check_distinct_encoders([c.cfg.encoder for c in cells if c.values.get("encoder") is not None], where)


def _cached(seen: dict[tuple[Any, ...], None], key: tuple[Any, ...], check: Any, cfg: Any) -> None:
    """Run ``check(cfg)`` once per ``key``."""
    if key not in seen:
        check(cfg)
        seen[key] = None


def check_task_params(cfg: Any) -> None:
    """Refuse task parameters the task does not take: any for a built-in task, and for a registered or
    user task names its signature cannot bind."""
    from ..config.train import split_task
    from ..fl.tasks import BUILTIN_TASKS, TASKS, resolve

    task, params = cfg.task, json.loads(cfg.task_params or "{}")
    if split_task(task) is None and task not in TASKS.names():
        raise ValueError(f"unknown FL task {task!r}; registered: {', '.join(sorted(TASKS.names()))}")
    if not params:
        return
    if split_task(task) is None and task in BUILTIN_TASKS:
        raise ValueError(f"task {task!r} takes no task params (its options are run options), got {json.dumps(params)}")
    fn = resolve(task) if split_task(task) is not None else TASKS[task]
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    names = list(sig.parameters)
    extra = {"seed": 0} if names[:1] == ["seed"] else {}
    try:
        sig.bind_partial(**extra, **params)
    except TypeError as exc:
        raise ValueError(f"task {task!r} does not take the task params {json.dumps(params)}: {exc}") from None


def check_budget(cfg: Any) -> None:
    """Refuse a run whose planned ε exceeds ``budget_epsilon`` (as the trainer's ledger would)."""
    if cfg.budget_epsilon is None:
        return
    from ..encoders.base import ENCODERS, parse_spec
    from ..privacy import Budget, NonPrivateEvent, PrivacyLedger, PureDpEvent

    name, _ = parse_spec(cfg.encoder)
    event = PureDpEvent(cfg.epsilon) if ENCODERS[name].private else NonPrivateEvent()
    PrivacyLedger("replace_one").start([(event, cfg.rounds)], Budget(cfg.budget_epsilon, cfg.delta))


def normalised_spec(spec: str) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """An encoder spec as its name and resolved parameters (defaults filled in): equal for equal encoders."""
    from ..encoders.base import ENCODERS, parse_spec, resolve_params

    name, params = parse_spec(spec)
    return name, tuple(sorted(resolve_params(name, ENCODERS[name].params, params).items()))


def check_distinct_encoders(specs: list[str], where: str) -> None:
    """Refuse a list of encoder specs in which two name the same encoder and parameters."""
    first: dict[tuple[str, tuple[tuple[str, Any], ...]], str] = {}
    for spec in dict.fromkeys(specs) if where != "--encoders" else specs:
        key = normalised_spec(spec)
        if key in first:
            raise ValueError(f"{where}: encoder {spec!r} is {first[key]!r} again (the same encoder and parameters): "
                             f"give each once")
        first[key] = spec
