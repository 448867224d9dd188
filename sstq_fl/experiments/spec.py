"""Experiment files: a TOML file whose keys are ``sstq-fl run``'s long option names, any of them a list.

```toml
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
interval = "t95"       # optional: the interval over seeds, t95 (default), se or none
```

The grid is the product of the list-valued keys, in the file's order (:meth:`Experiment.cells`).
Keys are the options of :class:`~sstq_fl.config.train.RunConfig` as written on the command line
(``sampling-rate``; ``sampling_rate`` is accepted too, but not both for one option).  Every value is
checked when the file is read, its type and its range (seeds ≥ 0, sizes within the array limit,
rounds within the accountant's limit): an unknown key or a bad value is a one-line ``ValueError``
naming the file, its line and the key; a file nested deeper than :data:`~.toml_input.MAX_DEPTH` is refused.  A
cell's cross-field checks (e.g. ``diagnostics`` needs reproducible randomness) name the cell's
values; :func:`~sstq_fl.experiments.preflight.preflight` checks each cell's task parameters and
budget before a sweep writes anything.

Explicit cells and exclusions:

```toml
encoder = ["clean", "sqkr"]
trust = ["server", "curator"]
seed = [0, 1]

[[cell]]                 # the top-level values are every cell's defaults
trust = "server"         # clean and sqkr, each seed

[[cell]]
name = "central DP"      # optional: the cell's label in tables and legends
trust = "curator"
central-epsilon = [2.0, 8.0]   # a list inside a cell: a product within the cell

[[exclude]]              # a partial assignment: a cell matching all its keys is dropped
trust = "curator"
encoder = "sqkr"
```

With ``[[cell]]`` tables the grid is the union of the cells, each its table merged over the file's
top-level values (the cell's keys win) and expanded as the product of its lists; the top-level
product alone is not run (an empty ``[[cell]]`` is exactly that product).  Without them the grid is
the top-level product.  ``[[exclude]]`` tables drop the cells that match every one of their keys (a
list: any of its values), matched on the cell's values with the run's defaults filled in, before
any cell is checked: an exclusion that matches no cell, and two cells of the same run, are one-line
errors.  A cell's folder name comes from its own values (the cell's keys, then the file's lists it
does not set), so a resumed sweep finds it again however the tables are ordered or named.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.declare import ABSENT, base_type, declared, expected, flag_of, in_range
from ..config.intervals import IntervalOptions
from ..config.train import RunConfig
from .toml_input import parse_toml

TABLES = ("task_params", "experiment")
ARRAYS = ("cell", "exclude")
"""The arrays of tables of an experiment file: ``[[cell]]`` and ``[[exclude]]``."""
FIGURE_KEYS = tuple(f.name for f, _ in declared(IntervalOptions))
"""The ``[experiment]`` keys that set how results are summarised (:class:`~sstq_fl.config.intervals.IntervalOptions`)."""
EXPERIMENT_KEYS = ("title", "description", *FIGURE_KEYS)
"""The deepest nesting of tables and lists an experiment file may hold."""


@dataclass(frozen=True)
class Cell:
    """One point of a grid: its folder name, the grid values that pick it (field names), its config, and its
    ``[[cell]]`` table's ``name`` (``label``; empty when the table gives none or the file has no tables)."""

    name: str
    values: dict[str, Any]
    cfg: RunConfig
    label: str = ""


@dataclass(frozen=True)
class CellTable:
    """One ``[[cell]]`` table: its number (from 1), its ``name`` (or empty), its values (field names, in the file's
    order; a list: an axis within the cell) and where it is (``path:line`` of its header)."""

    index: int
    name: str
    values: dict[str, Any]
    where: str

    def title(self) -> str:
        """``[[cell]] 2 ('central DP')``: how errors name the table."""
        return f"[[cell]] {self.index}" + (f" ({self.name!r})" if self.name else "")

    def record(self) -> dict[str, Any]:
        """The table as ``sweep.json`` and ``results.json`` record it (file keys)."""
        return {**({"name": self.name} if self.name else {}), **{key_name(k): v for k, v in self.values.items()}}


@dataclass(frozen=True)
class Exclusion:
    """One ``[[exclude]]`` table: its number (from 1), the values of each of its keys (field names; a cell
    matches when its value of every key is one of them) and where it is (``path:line`` of its header)."""

    index: int
    values: dict[str, list[Any]]
    where: str

    def describe(self) -> str:
        """``trust=curator, encoder=sqkr``."""
        return ", ".join(f"{key_name(k)}={_shown(v[0]) if len(v) == 1 else '[' + ', '.join(map(_shown, v)) + ']'}"
                         for k, v in self.values.items())

    def matches(self, resolved: dict[str, Any]) -> bool:
        """Whether a cell whose values (defaults filled in) are ``resolved`` matches every key."""
        return all(any(_same(k, resolved.get(k), v) for v in vals) for k, vals in self.values.items())

    def record(self) -> dict[str, Any]:
        return {key_name(k): v[0] if len(v) == 1 else v for k, v in self.values.items()}


def _shown(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _same(name: str, a: Any, b: Any) -> bool:
    """Whether a cell's value ``a`` of field ``name`` is the exclusion's ``b`` (encoder specs: the same encoder
    and parameters, defaults filled in)."""
    if a == b:
        return True
    if name == "encoder" and isinstance(a, str) and isinstance(b, str):
        key = _spec_key(b)
        return key is not None and _spec_key(a) == key
    return False


@functools.lru_cache(maxsize=1024)
def _spec_key(spec: str) -> Any:
    from .preflight import normalised_spec

    try:
        return normalised_spec(spec)
    except (ValueError, KeyError):
        return None


@functools.cache
def run_defaults() -> dict[str, Any]:
    """Each :class:`~sstq_fl.config.train.RunConfig` field's default (what a cell that does not set it runs with)."""
    return {f.name: f.default for f in dataclasses.fields(RunConfig) if f.default is not dataclasses.MISSING}


@dataclass(frozen=True)
class Experiment:
    """A parsed experiment: where it came from, its digest, fixed values and grid axes (field names), and its
    ``[[cell]]`` and ``[[exclude]]`` tables."""

    path: str | None
    sha256: str
    title: str
    fixed: dict[str, Any]
    axes: dict[str, list[Any]] = field(default_factory=dict)
    task_params: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    cell_tables: tuple[CellTable, ...] = ()
    exclusions: tuple[Exclusion, ...] = ()
    interval: str | None = None

    def provenance(self) -> dict[str, Any]:
        """What every result of this experiment records about it: the file, its sha256 and title."""
        return {"file": self.path, "sha256": self.sha256, "title": self.title}

    def grid_record(self) -> dict[str, Any]:
        """The file's ``[[cell]]`` and ``[[exclude]]`` tables as results record them (nothing when it has none)."""
        return {**({"cell_tables": [t.record() for t in self.cell_tables]} if self.cell_tables else {}),
                **({"exclude": [e.record() for e in self.exclusions]} if self.exclusions else {})}

    def shapes(self, overrides: dict[str, Any] | None = None) -> list[tuple[CellTable | None, dict[str, list[Any]]]]:
        """Each cell table's axes with ``overrides`` applied: the table's values (a single value: a one-value
        axis), then the file's lists it does not set; without tables, the file's lists (one shape)."""
        overrides = overrides or {}
        out: list[tuple[CellTable | None, dict[str, list[Any]]]] = []
        for table in self.cell_tables or (None,):
            own = {k: v if isinstance(v, list) else [v] for k, v in (table.values if table else {}).items()}
            axes = {k: v for k, v in {**own, **{k: v for k, v in self.axes.items() if k not in own}}.items()
                    if k not in overrides}
            axes.update({k: v for k, v in overrides.items() if isinstance(v, list)})
            out.append((table, axes))
        return out

    def grid_size(self, overrides: dict[str, Any] | None = None) -> int:
        """How many cells the grid has before its exclusions (none is built)."""
        return sum(math.prod(len(v) for v in axes.values()) for _, axes in self.shapes(overrides))

    def cells(self, **overrides: Any) -> list[Cell]:
        """The grid's cells (each table's product, the first axis slowest; tables in the file's order), its
        exclusions dropped, each config checked; ``overrides`` (command-line options) replace fixed values,
        axes and the tables' values alike (a list: an axis).  An exclusion that matches nothing, or two cells
        of one run, are refused in one line, unless only the overrides make them so (then the repeated run is
        run once)."""
        fixed = {k: v for k, v in overrides.items() if not isinstance(v, list)}
        base = {**self.fixed, **task_params_value(self.task_params, self.path), **fixed}
        picked, problem = self._pick(overrides, base)
        if problem and overrides:
            problem = self._pick({}, {**self.fixed, **task_params_value(self.task_params, self.path)})[1]
        if problem:
            raise ValueError(problem)
        cells: list[Cell] = []
        names: set[str] = set()
        for table, values in picked:
            cfg = _config(base, values, table.where if table else self.path, table.title() if table else "")
            check_encoder(cfg.encoder, self.path)
            cells.append(Cell(unique(cell_name(values), names), values, cfg, table.name if table else ""))
        return cells

    def _candidates(self, overrides: dict[str, Any]) -> Iterator[tuple[CellTable | None, dict[str, Any]]]:
        for table, axes in self.shapes(overrides):
            for combo in itertools.product(*axes.values()) if axes else [()]:
                yield table, dict(zip(axes, combo))

    def _pick(self, overrides: dict[str, Any], base: dict[str, Any]
              ) -> tuple[list[tuple[CellTable | None, dict[str, Any]]], str]:
        """The cells the exclusions leave, each run once, and the first problem (an exclusion that matched
        nothing, else a run given twice; empty when none)."""
        hits = [0] * len(self.exclusions)
        kept: list[tuple[CellTable | None, dict[str, Any]]] = []
        seen: dict[str, tuple[CellTable | None, dict[str, Any]]] = {}
        twice = ""
        for table, values in self._candidates(overrides):
            resolved = {**run_defaults(), **base, **values}
            matched = [i for i, e in enumerate(self.exclusions) if e.matches(resolved)]
            for i in matched:
                hits[i] += 1
            if matched:
                continue
            key = json.dumps(resolved, sort_keys=True, default=str)
            if key in seen:
                twice = twice or self._twice(seen[key], (table, values))
                continue
            seen[key] = (table, values)
            kept.append((table, values))
        unmatched = next((e for e, n in zip(self.exclusions, hits) if not n), None)
        if unmatched is not None:
            return kept, (f"{unmatched.where}: [[exclude]] {unmatched.index} ({unmatched.describe()}) matches no cell "
                          f"of the grid: check its keys and values (an exclusion that drops nothing is refused)")
        return kept, twice

    def _twice(self, first: tuple[CellTable | None, dict[str, Any]], again: tuple[CellTable | None, dict[str, Any]]
               ) -> str:
        def named(c: tuple[CellTable | None, dict[str, Any]]) -> str:
            return (f"{c[0].title()}'s " if c[0] else "") + "cell " + (_values_text(c[1]) or "of the file's values")

        where = again[0].where if again[0] else self.path or "experiment"
        return f"{where}: the {named(again)} is the same run as the {named(first)}: give each run once"


def _values_text(values: dict[str, Any]) -> str:
    return ", ".join(f"{key_name(k)}={_shown(v)}" for k, v in values.items())


def task_params_value(params: dict[str, Any], path: str | None = None) -> dict[str, Any]:
    """The ``task_params`` field's value for a ``[task_params]`` table (canonical JSON; none: no field);
    a value JSON cannot hold (a TOML date) is a one-line error naming the file."""
    try:
        return {"task_params": json.dumps(params, sort_keys=True)} if params else {}
    except TypeError as exc:
        raise ValueError(f"{path or 'experiment'}: [task_params] holds a value that is not a number, string, "
                         f"boolean, list or table: {exc}") from None


def _config(base: dict[str, Any], values: dict[str, Any], path: str | None, table: str = "") -> RunConfig:
    """The cell's config; a cross-field error names the file (the table's line), the table and the cell's values."""
    try:
        return RunConfig(**{**base, **values})
    except (ValueError, TypeError) as exc:
        where = ", ".join(f"{k}={v}" for k, v in values.items()) or "its values"
        raise ValueError(f"{path or 'experiment'}: {table + ': ' if table else ''}the cell {where}: {exc}") from None


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
    tables, exclusions = _cell_tables(doc, lines, path), _exclusions(doc, lines, path)
    return Experiment(path, hashlib.sha256(raw).hexdigest(), title, fixed, axes, params, meta.get("description", ""),
                      tables, exclusions, meta.get("interval"))


def _meta(meta: dict[str, Any], lines: list[str], path: str) -> dict[str, str]:
    """The ``[experiment]`` table, checked: known keys only, each a string, :data:`FIGURE_KEYS` among their choices."""
    for k, v in meta.items():
        where = _where(path, lines, k, "experiment")
        if k not in EXPERIMENT_KEYS:
            raise ValueError(f"{where}: unknown key {k!r} in [experiment] (known: {', '.join(EXPERIMENT_KEYS)})")
        if not isinstance(v, str):
            raise ValueError(f"{where}: [experiment] {k} must be a string, got {short(v)}")
    for k in (k for k in FIGURE_KEYS if k in meta):
        try:
            IntervalOptions(**{k: meta[k]})
        except ValueError as exc:
            raise ValueError(f"{_where(path, lines, k, 'experiment')}: [experiment] {exc}") from None
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
    values = _options({k: v for k, v in doc.items() if k not in TABLES + ARRAYS}, lambda k: _where(path, lines, k))
    return ({k: v for k, v in values.items() if not isinstance(v, list)},
            {k: v for k, v in values.items() if isinstance(v, list)})


def _options(items: dict[str, Any], where_of: Callable[[str], str], lists: str = "axis") -> dict[str, Any]:
    """Run options (file keys → values) as field names → checked values (a list: each value checked; ``lists``
    ``"axis"`` refuses a value listed twice), in order; errors name ``where_of(key)``."""
    keys, fields = run_keys(), {f.name: (f, opt) for f, opt in declared(RunConfig)}
    out: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for key, value in items.items():
        name = keys.get(key) or keys.get(key.replace("_", "-"))
        where = where_of(key)
        if name is None:
            raise ValueError(f"{where}: unknown key {key!r} (the options of sstq-fl run, e.g. "
                             f"{', '.join(list(keys)[:6])}, ...; see sstq-fl options)")
        if name in seen:
            raise ValueError(f"{where}: {seen[name]!r} and {key!r} are one option ({key_name(name)}): give it once")
        seen[name] = key
        if isinstance(value, list):
            if not value:
                raise ValueError(f"{where}: {key} is an empty list (give at least one value)")
            out[name] = [check_value(name, *fields[name], v, where) for v in value]
            twice = next((v for i, v in enumerate(out[name]) if v in out[name][:i]), None)
            if twice is not None:
                what = "each cell would run twice" if lists == "axis" else "give each value once"
                raise ValueError(f"{where}: {key} lists {short(twice)} twice ({what})")
        else:
            out[name] = check_value(name, *fields[name], value, where)
    return out


def _array(doc: dict[str, Any], name: str, lines: list[str], path: str) -> list[dict[str, Any]]:
    """The file's ``[[name]]`` tables (none: an empty list); anything else under ``name`` is refused."""
    value = doc.get(name, [])
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ValueError(f"{_where(path, lines, name)}: {name} must be an array of tables ([[{name}]] headers)")
    return value


def _cell_tables(doc: dict[str, Any], lines: list[str], path: str) -> tuple[CellTable, ...]:
    """The ``[[cell]]`` tables, checked: ``name`` (a non-empty string) and run options (a list: an axis)."""
    out = []
    for i, table in enumerate(_array(doc, "cell", lines, path)):
        title = f"[[cell]] {i + 1}"

        def where_of(key: str, i: int = i, title: str = title) -> str:
            return f"{_where_in(path, lines, 'cell', i, key)}: {title}"

        name = table.get("name", "")
        if not isinstance(name, str) or ("name" in table and not name.strip()):
            raise ValueError(f"{where_of('name')}: name must be a non-empty string, got {short(name)}")
        _no_tables(table, where_of, "cell")
        values = _options({k: v for k, v in table.items() if k != "name"}, where_of)
        out.append(CellTable(i + 1, name.strip(), values, _where_in(path, lines, "cell", i)))
    return tuple(out)


def _exclusions(doc: dict[str, Any], lines: list[str], path: str) -> tuple[Exclusion, ...]:
    """The ``[[exclude]]`` tables, checked: run options only, at least one (a list: any of its values)."""
    out = []
    for i, table in enumerate(_array(doc, "exclude", lines, path)):
        def where_of(key: str, i: int = i) -> str:
            return f"{_where_in(path, lines, 'exclude', i, key)}: [[exclude]] {i + 1}"

        if not table:
            raise ValueError(f"{_where_in(path, lines, 'exclude', i)}: [[exclude]] {i + 1} is empty (it would drop "
                             f"every cell): give the keys and values of the cells to drop")
        _no_tables(table, where_of, "exclude")
        values = _options(table, where_of, lists="any")
        out.append(Exclusion(i + 1, {k: v if isinstance(v, list) else [v] for k, v in values.items()},
                             _where_in(path, lines, "exclude", i)))
    return tuple(out)


def _no_tables(table: dict[str, Any], where_of: Callable[[str], str], array: str) -> None:
    key = next((k for k, v in table.items() if isinstance(v, dict)), None)
    if key is not None:
        raise ValueError(f"{where_of(key)}: {key} is a table: a [[{array}]] holds run options"
                         f"{' and a name' if array == 'cell' else ''} only ([task_params] is the file's)")


def _where_in(path: str, lines: list[str], array: str, index: int, key: str | None = None) -> str:
    """``path:line`` of ``key`` in the ``index``-th (from 0) ``[[array]]`` table, else of its header; ``path`` (or
    the array's own line) when the tables are not written as headers."""
    header = re.compile(r"^\s*\[\[\s*" + re.escape(array) + r"\s*\]\]")
    starts = [i for i, line in enumerate(lines, 1) if header.match(line)]
    if index >= len(starts):
        return _where(path, lines, array)
    start = starts[index]
    if key is not None:
        pattern = re.compile(r'^\s*["\']?' + re.escape(key) + r'["\']?\s*=')
        for i in range(start, len(lines)):
            if re.match(r"^\s*\[", lines[i]):
                break
            if pattern.match(lines[i]):
                return f"{path}:{i + 1}"
    return f"{path}:{start}"


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
    if exp.cell_tables or exp.exclusions:
        raise ValueError(f"{exp.path}: its [[cell]] or [[exclude]] tables make a grid: one run takes one value per key "
                         f"(run the grid with sstq-fl sweep {exp.path} --out DIR)")
    bad = [k for k in exp.axes if k not in allow_lists]
    if bad:
        raise ValueError(f"{exp.path}: {key_name(bad[0])} is a list: one run takes one value per key "
                         f"(run the grid with sstq-fl sweep {exp.path} --out DIR)")
    return {**task_params_value(exp.task_params, exp.path), **exp.fixed, **exp.axes}
