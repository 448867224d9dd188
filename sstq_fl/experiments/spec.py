"""Experiment files: a TOML file whose keys are ``sstq-fl run``'s long option names, any of them a list.

::

    # e3_eps.toml
    task = "fmnist"
    clients = 100
    rounds = 100
    encoder = ["sstq-flat:b=2", "sstq-flat:b=4", "privunit-mrc"]
    epsilon = [0.5, 1, 3]
    seed = [0, 1, 2]

    [task_params]          # passed to the task: NAME(**task_params)
    records = 2000

    [experiment]           # optional: a title for tables and plots
    title = "bits against accuracy"

The grid is the product of the list-valued keys, in the file's order (:meth:`Experiment.cells`).
Keys are the options of :class:`~sstq_fl.fl.config.RunConfig` as written on the command line
(``sampling-rate``; ``sampling_rate`` is accepted too, but not both for one option).  Every value is
checked when the file is read, its type and its range (seeds ≥ 0, sizes within the array limit,
rounds within the accountant's limit): an unknown key or a bad value is a one-line ``ValueError``
naming the file, its line and the key; a file nested deeper than :data:`MAX_DEPTH` is refused.  A
cell's cross-field checks (e.g. ``diagnostics`` needs reproducible randomness) name the cell's
values; :func:`~sstq_fl.experiments.preflight.preflight` checks each cell's task parameters and
budget before a sweep writes anything.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..fl.config import RunConfig
from ..options import ABSENT, base_type, declared, expected, flag_of, in_range

TABLES = ("task_params", "experiment")
EXPERIMENT_KEYS = ("title", "description")
MAX_DEPTH = 32
"""The deepest nesting of tables and lists an experiment file may hold."""


@dataclass(frozen=True)
class Cell:
    """One point of a grid: its folder name, the grid values that pick it (field names) and its config."""

    name: str
    values: dict[str, Any]
    cfg: RunConfig


@dataclass(frozen=True)
class Experiment:
    """A parsed experiment: where it came from, its digest, fixed values and grid axes (field names)."""

    path: str | None
    sha256: str
    title: str
    fixed: dict[str, Any]
    axes: dict[str, list[Any]] = field(default_factory=dict)
    task_params: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def provenance(self) -> dict[str, Any]:
        """What every result of this experiment records about it: the file, its sha256 and title."""
        return {"file": self.path, "sha256": self.sha256, "title": self.title}

    def cells(self, **overrides: Any) -> list[Cell]:
        """The grid's cells (product of the axes, the first axis slowest), each config checked;
        ``overrides`` (command-line options) replace fixed values and axes alike (a list: an axis)."""
        axes = {k: v for k, v in self.axes.items() if k not in overrides}
        axes.update({k: v for k, v in overrides.items() if isinstance(v, list)})
        fixed = {k: v for k, v in overrides.items() if not isinstance(v, list)}
        base = {**self.fixed, **task_params_value(self.task_params, self.path), **fixed}
        cells: list[Cell] = []
        names: set[str] = set()
        for combo in itertools.product(*axes.values()) if axes else [()]:
            values = dict(zip(axes, combo))
            cfg = _config(base, values, self.path)
            check_encoder(cfg.encoder, self.path)
            name = unique(cell_name(values), names)
            cells.append(Cell(name, values, cfg))
        return cells


def task_params_value(params: dict[str, Any], path: str | None = None) -> dict[str, Any]:
    """The ``task_params`` field's value for a ``[task_params]`` table (canonical JSON; none: no field);
    a value JSON cannot hold (a TOML date) is a one-line error naming the file."""
    try:
        return {"task_params": json.dumps(params, sort_keys=True)} if params else {}
    except TypeError as exc:
        raise ValueError(f"{path or 'experiment'}: [task_params] holds a value that is not a number, string, "
                         f"boolean, list or table: {exc}") from None


def _config(base: dict[str, Any], values: dict[str, Any], path: str | None) -> RunConfig:
    """The cell's config; a cross-field error names the file and the cell's values."""
    try:
        return RunConfig(**{**base, **values})
    except (ValueError, TypeError) as exc:
        where = ", ".join(f"{k}={v}" for k, v in values.items()) or "its values"
        raise ValueError(f"{path or 'experiment'}: the cell {where}: {exc}") from None


def check_encoder(spec: str, path: str | None) -> None:
    """Refuse (one line naming the file) an encoder spec with an unknown name or parameter, before any cell runs."""
    from ..encoders.base import ENCODERS, parse_spec, resolve_params

    try:
        name, params = parse_spec(spec)
        resolve_params(name, ENCODERS[name].params, params)
    except (ValueError, KeyError) as exc:
        raise ValueError(f"{path or 'experiment'}: encoder {spec!r}: {str(exc).strip(chr(34))}") from None


def cell_name(values: dict[str, Any]) -> str:
    """A cell's folder name from its grid values: ``encoder-sstq-flat_b-4__epsilon-3__seed-0``."""
    if not values:
        return "run"
    parts = [f"{key_name(k)}-{_slug(v)}" for k, v in values.items()]
    return "__".join(parts)[:200]


def _slug(v: Any) -> str:
    text = f"{v:g}" if isinstance(v, float) else str(v)
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", text.replace(":", "_").replace("=", "-")).strip("_") or "_"


def unique(name: str, taken: set[str]) -> str:
    """``name``, or ``name-2``, ``name-3``, ... when taken; the result is added to ``taken``."""
    out, k = name, 2
    while out in taken:
        out, k = f"{name}-{k}", k + 1
    taken.add(out)
    return out


# ----------------------------------------------------------------------------- reading a file
def run_keys() -> dict[str, str]:
    """``{key: field name}`` of an experiment file: each RunConfig option's long flag without ``--``."""
    out = {}
    for f, opt in declared(RunConfig):
        flag = flag_of(f, opt)
        if flag.startswith("--"):
            out[flag[2:]] = f.name
    return out


def key_name(field_name: str) -> str:
    """The file key of a field: ``sampling_rate`` → ``sampling-rate``."""
    return field_name.replace("_", "-")


def load_experiment(path: str | Path) -> Experiment:
    """Read and check an experiment file (one-line ``ValueError`` naming the file, line and key)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read experiment file {p}: {exc.strerror or exc}") from None
    return parse_experiment(raw, str(p))


def parse_experiment(raw: bytes, path: str = "experiment.toml") -> Experiment:
    """An :class:`Experiment` from the TOML text ``raw`` (``path`` names it in errors and results)."""
    doc = parse_toml(raw, path)
    lines = raw.decode("utf-8").splitlines()
    fixed, axes = _run_values(doc, lines, path)
    params = _table(doc, "task_params", lines, path)
    task_params_value(params, path)
    meta = _meta(_table(doc, "experiment", lines, path), lines, path)
    title = meta.get("title") or Path(path).name
    return Experiment(path, hashlib.sha256(raw).hexdigest(), title, fixed, axes, params, meta.get("description", ""))


def parse_toml(raw: bytes, path: str) -> dict[str, Any]:
    """The TOML document ``raw``; one line naming ``path`` when it is not UTF-8 TOML or is nested deeper
    than :data:`MAX_DEPTH` (the parser's own recursion included)."""
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deep (at most {MAX_DEPTH} levels of tables and lists)") from None
    if depth(doc) > MAX_DEPTH:
        raise ValueError(f"{path}: nested too deep (at most {MAX_DEPTH} levels of tables and lists)")
    return doc


def depth(value: Any) -> int:
    """How deeply ``value`` nests dicts and lists (a scalar: 0), found without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d + 1)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def _meta(meta: dict[str, Any], lines: list[str], path: str) -> dict[str, str]:
    """The ``[experiment]`` table, checked: known keys only, each a string."""
    for k, v in meta.items():
        where = _where(path, lines, k, "experiment")
        if k not in EXPERIMENT_KEYS:
            raise ValueError(f"{where}: unknown key {k!r} in [experiment] (known: {', '.join(EXPERIMENT_KEYS)})")
        if not isinstance(v, str):
            raise ValueError(f"{where}: [experiment] {k} must be a string, got {short(v)}")
    return meta


def short(value: Any) -> str:
    """``repr(value)``, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _table(doc: dict[str, Any], name: str, lines: list[str], path: str) -> dict[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise ValueError(f"{_where(path, lines, name)}: {name} must be a table ([{name}])")
    return dict(value)


def _run_values(doc: dict[str, Any], lines: list[str], path: str) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The file's run options, checked: fixed values and list-valued axes (by field name)."""
    keys, fields = run_keys(), {f.name: (f, opt) for f, opt in declared(RunConfig)}
    fixed: dict[str, Any] = {}
    axes: dict[str, list[Any]] = {}
    seen: dict[str, str] = {}
    for key, value in doc.items():
        if key in TABLES:
            continue
        name = keys.get(key) or keys.get(key.replace("_", "-"))
        where = _where(path, lines, key)
        if name is None:
            raise ValueError(f"{where}: unknown key {key!r} (the options of sstq-fl run, e.g. "
                             f"{', '.join(list(keys)[:6])}, ...; see sstq-fl options)")
        if name in seen:
            raise ValueError(f"{where}: {seen[name]!r} and {key!r} are one option ({key_name(name)}): give it once")
        seen[name] = key
        if isinstance(value, list):
            if not value:
                raise ValueError(f"{where}: {key} is an empty list (give at least one value)")
            axes[name] = [check_value(name, *fields[name], v, where) for v in value]
            twice = next((v for i, v in enumerate(axes[name]) if v in axes[name][:i]), None)
            if twice is not None:
                raise ValueError(f"{where}: {key} lists {short(twice)} twice (each cell would run twice)")
        else:
            fixed[name] = check_value(name, *fields[name], value, where)
    return fixed, axes


def check_value(name: str, f: Any, opt: Any, value: Any, where: str) -> Any:
    """One file value as the field's value: its type, choices and range (one line naming ``where``)."""
    base, optional = base_type(RunConfig, f)
    key = key_name(name)
    if optional and opt.unset is not ABSENT and value == opt.unset and type(value) is type(opt.unset):
        return None  # the run config's marker for unset (TOML has no null)
    if isinstance(value, str) and opt.parse is not None:
        value = opt.parse(value)
    ok = (isinstance(value, bool) if base is bool else
          isinstance(value, int) and not isinstance(value, bool) if base is int else
          isinstance(value, int | float) and not isinstance(value, bool) if base is float else
          isinstance(value, str))
    if not ok:
        what = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(base, str(base))
        raise ValueError(f"{where}: {key} must be {what}, got {short(value)}")
    value = float(value) if base is float else value
    if opt.choices is not None and value not in opt.choices:
        raise ValueError(f"{where}: {key} must be one of {', '.join(map(str, opt.choices))}, got {short(value)}")
    if base in (int, float) and (opt.low is not None or opt.high is not None or opt.finite) and not in_range(value, opt):
        raise ValueError(f"{where}: {key} must be {expected(base, opt)}, got {short(value)}")
    if base is int:
        bounded(name, value, where)
    return value


MAX_SEED = 2**63 - 1
"""The largest run seed (a signed 64-bit integer)."""


def bounded(name: str, value: int, where: str) -> None:
    """Refuse an integer option no run can use: a seed outside ``[0, 2**63)``, rounds beyond the
    accountant's limit, or a size (clients, dimension, samples, batch, ...) beyond the array limit."""
    from ..checks import check_array
    from ..privacy.errors import MAX_EVENTS

    key = key_name(name)
    if name == "seed":
        if not 0 <= value <= MAX_SEED:
            raise ValueError(f"{where}: seed must be an integer in [0, 2**63), got {short(value)}")
    elif name == "rounds" and value > MAX_EVENTS:
        raise ValueError(f"{where}: rounds must be at most {MAX_EVENTS} (the accountant's limit), got {short(value)}")
    else:
        try:
            check_array(f"{key} = {short(value)}", value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None


def _where(path: str, lines: list[str], key: str, table: str = "") -> str:
    """``path:line`` of ``key``'s assignment (in ``[table]`` when given); ``path`` alone when not found."""
    current = ""
    pattern = re.compile(r'^\s*["\']?' + re.escape(key) + r'["\']?\s*=')
    for i, line in enumerate(lines, 1):
        header = re.match(r"^\s*\[([^\]]+)\]", line)
        if header:
            current = header.group(1).strip()
        elif current == table and pattern.match(line):
            return f"{path}:{i}"
        if current == "" and not table and re.match(r"^\s*\[" + re.escape(key) + r"\]", line):
            return f"{path}:{i}"
    return path


def single_values(exp: Experiment, allow_lists: tuple[str, ...] = ()) -> dict[str, Any]:
    """The file's values for one run (``run --config``, ``compare --config``): list values are refused
    except for the fields in ``allow_lists`` (returned as lists)."""
    bad = [k for k in exp.axes if k not in allow_lists]
    if bad:
        raise ValueError(f"{exp.path}: {key_name(bad[0])} is a list: one run takes one value per key "
                         f"(run the grid with sstq-fl sweep {exp.path} --out DIR)")
    return {**task_params_value(exp.task_params, exp.path), **exp.fixed, **exp.axes}
