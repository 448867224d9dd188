"""Options declared once: a configuration is a typed dataclass whose fields carry their help text,
choices or range and, where they differ from the field's name, their CLI flag, run-config key and the
words the CLI takes for their values, and whether the CLI requires them.

From that one declaration come the command-line options (:func:`add_arguments`, :func:`from_args`),
the Flower run-config reader (:func:`from_run_config`), the ``[tool.flwr.app.config]`` defaults
(:func:`run_config_defaults`, checked against ``pyproject.toml`` by a test) and the options
reference page (:func:`options_markdown`).  A new option is one field:

```python
@dataclass(frozen=True)
class MyConfig(Options):
    rounds: int = option(100, help="training rounds", low=1)
```

TOML has no null: an optional field (``int | None``) is read from the run config with its
``unset`` marker (``0``, ``""`` or ``-1``) standing for ``None``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass
from typing import Any

_META = "sstq_fl.option"


class _Absent:
    """The marker of an option without a run-config ``unset`` value."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class Option:
    """One option's declaration (stored in its dataclass field's metadata)."""

    help: str
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    strict_low: bool = False
    strict_high: bool = False
    flag: str | None = None
    key: str | None = None
    unset: Any = ABSENT
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    finite: bool = False
    required: bool = False
    words: tuple[tuple[str, Any], ...] | None = None

    def word(self, value: Any) -> Any:
        """How the CLI (and the run config) spell ``value``: its word, or the value itself."""
        return next((w for w, v in self.words or () if v == value), value)

    def value(self, word: Any) -> Any:
        """The value a CLI or run-config word stands for (any other value as it is)."""
        return next((v for w, v in self.words or () if w == word), word)


def option(default: Any = MISSING, *, help: str, choices: Sequence[Any] | None = None, low: float | None = None,
           high: float | None = None, strict_low: bool = False, strict_high: bool = False, flag: str | None = None,
           key: str | None = None, unset: Any = ABSENT, default_factory: Any = MISSING, metavar: str | None = None,
           parse: Callable[[str], Any] | None = None, finite: bool = False, required: bool = False,
           words: Mapping[str, Any] | None = None) -> Any:
    """A dataclass field declared as an option.

    ``choices``: the allowed values; ``low``/``high``: the range (``strict_low``: ``> low``; ``strict_high``:
    ``< high``; ``finite``: neither ``inf`` nor ``nan``);
    ``flag``: the CLI flag if not ``--field-name`` (``""``: not on the CLI); ``key``: the run-config
    key if not ``field-name`` (``""``: not in the run config); ``unset``: the run-config marker
    for ``None``; ``parse``: ``str → value`` for the CLI and string run-config values; ``required``: the CLI
    requires it (the default holds for the run config and the API); ``words``: ``{word: value}``, the words
    the CLI and the run config take for the values (the choices), e.g. ``{"none": ""}``."""
    meta = {_META: Option(help, tuple(choices) if choices is not None else None, low, high, strict_low, strict_high,
                          flag, key, unset, metavar, parse, finite, required,
                          tuple(words.items()) if words is not None else None)}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def same_option(cls: Any, name: str, **changes: Any) -> Any:
    """A field declared as ``cls``'s option ``name`` (default, help, range, flag, key), for a config that holds
    the same option; ``changes`` replaces parts of the declaration (e.g. ``help``)."""
    f, opt = next((f, opt) for f, opt in declared(cls) if f.name == name)
    meta = {_META: dataclasses.replace(opt, **changes)}
    if f.default_factory is not MISSING:
        return dataclasses.field(default_factory=f.default_factory, metadata=meta)
    return dataclasses.field(default=f.default, metadata=meta)


def declared(cls: Any) -> Iterator[tuple[dataclasses.Field[Any], Option]]:
    """The fields of ``cls`` (a dataclass or instance) declared with :func:`option`, in order."""
    for f in dataclasses.fields(cls):
        if _META in f.metadata:
            yield f, f.metadata[_META]


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    """The resolved type hints of a config class (computed once per class)."""
    return typing.get_type_hints(cls)


def base_type(cls: Any, f: dataclasses.Field[Any]) -> tuple[Any, bool]:
    """``(type, optional)`` of a field: ``int | None`` → ``(int, True)``."""
    hint = _hints(cls)[f.name]
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return hint, False


def in_range(value: Any, opt: Option) -> bool:
    """Whether a number lies in the option's range (``nan`` never does; ``inf`` not where it must be finite)."""
    if opt.finite and not math.isfinite(value):
        return False
    if opt.low is not None and not (value > opt.low if opt.strict_low else value >= opt.low):
        return False
    return opt.high is None or (value < opt.high if opt.strict_high else value <= opt.high)


def expected(base: Any, opt: Option) -> str:
    """What an option's value must be, in words: ``a positive integer``, ``a number ≥ 0 and ≤ 1``."""
    if base is int and opt.low == 1 and opt.high is None and not opt.strict_low:
        return "a positive integer"
    finite = "finite " if opt.finite and base is not int else ""
    if opt.low == 0 and opt.strict_low and opt.high is None:
        return f"a {finite}positive " + ("integer" if base is int else "number")
    what = "an integer" if base is int else f"a {finite}number"
    bounds = ([f"{'>' if opt.strict_low else '≥'} {opt.low:g}"] if opt.low is not None else []) + \
        ([f"{'<' if opt.strict_high else '≤'} {opt.high:g}"] if opt.high is not None else [])
    return " and ".join([what + (" " + bounds[0] if bounds else ""), *bounds[1:]])


def check(obj: Any) -> None:
    """Refuse (one-line ``ValueError``) an option value outside its choices or range."""
    for f, opt in declared(obj):
        value = getattr(obj, f.name)
        if value is None:
            continue
        name = f.name.replace("_", "-")
        if opt.choices is not None and value not in opt.choices:
            allowed = ", ".join(str(opt.word(c)) for c in opt.choices)
            raise ValueError(f"{name} must be one of {allowed}, got {opt.word(value)!r}")
        if (opt.low is not None or opt.high is not None or opt.finite) and not in_range(value, opt):
            raise ValueError(f"{name} must be {expected(base_type(type(obj), f)[0], opt)}, got {value}")


class Options:
    """Base of the configuration dataclasses: ``__post_init__`` checks every declared option."""

    def __post_init__(self) -> None:
        check(self)


# ----------------------------------------------------------------------------- command line
def flag_of(f: dataclasses.Field[Any], opt: Option) -> str:
    """The CLI flag of a field (``""``: none)."""
    return ("--" + f.name.replace("_", "-")) if opt.flag is None else opt.flag


def _cli_type(base: Any, opt: Option, int_ranges: bool) -> Callable[[str], Any]:
    """The argparse ``type`` of an option: its parser, else the field's scalar type; with ``int_ranges`` an
    integer's range is checked here (an argument error naming what was expected), else by the config."""
    if opt.parse is not None:
        return opt.parse
    if base not in (int, float):
        return str

    def parse(text: str) -> Any:
        try:
            value = base(text)
        except ValueError:
            value = None
        if value is None or (int_ranges and base is int and not in_range(value, opt)):  # floats: by the config
            raise argparse.ArgumentTypeError(f"expected {expected(base, opt)}, got {text!r}")
        return value

    parse.__name__ = base.__name__
    return parse


def add_arguments(parser: argparse.ArgumentParser | Any, cls: Any, *, skip: Sequence[str] = (),
                  only: Sequence[str] | None = None, defaults: dict[str, Any] | None = None,
                  required: Sequence[str] = (), int_ranges: bool = True) -> None:
    """Add an argparse option for each declared field of ``cls`` that has a flag, is in ``only`` (when
    given) and not in ``skip``.  ``defaults`` overrides field defaults on this command; ``required``
    fields (and those declared ``required``) have no default; an option declared with ``words`` takes
    them as its choices (:func:`from_args` reads them back as values); ``int_ranges=False`` leaves integer
    ranges to the config's check (a one-line error from the command rather than an argparse usage error)."""
    defaults = defaults or {}
    for f, opt in declared(cls):
        flag = flag_of(f, opt)
        if f.name in skip or not flag or (only is not None and f.name not in only):
            continue
        base, _ = base_type(cls, f)
        kw: dict[str, Any] = {"dest": f.name, "help": opt.help}
        if f.name in required or opt.required:
            kw["required"] = True
        else:
            kw["default"] = opt.word(defaults.get(f.name, _default(f)))
        if opt.words is not None:
            parser.add_argument(flag, choices=[w for w, _ in opt.words], metavar=opt.metavar, **kw)
            continue
        if base is bool and opt.parse is None:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)  # --x, --no-x: overrides a file
            continue
        kw["type"] = _cli_type(base, opt, int_ranges)
        if opt.choices is not None and opt.parse is None:
            kw["choices"] = list(opt.choices)
        if opt.metavar:
            kw["metavar"] = opt.metavar
        parser.add_argument(flag, **kw)


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def from_args(cls: Any, ns: argparse.Namespace, **overrides: Any) -> Any:
    """An instance of ``cls`` from the parsed namespace (declared fields present in it, words read as their
    values) and ``overrides``."""
    kw = {f.name: opt.value(getattr(ns, f.name)) for f, opt in declared(cls) if hasattr(ns, f.name)}
    kw.update(overrides)
    return cls(**kw)


# ----------------------------------------------------------------------------- Flower run config
def key_of(f: dataclasses.Field[Any], opt: Option) -> str:
    """The run-config key of a field (``""``: not in the run config)."""
    return f.name.replace("_", "-") if opt.key is None else opt.key


def run_config_keys(cls: Any, prefix: str = "") -> dict[str, str]:
    """``{run-config key: field name}``: ``prefix`` + each declared field's key."""
    return {prefix + key: f.name for f, opt in declared(cls) if (key := key_of(f, opt))}


def from_run_config(cls: Any, rc: dict[str, Any], prefix: str = "",
                    ignore: Callable[[str], bool] = lambda key: False, **overrides: Any) -> Any:
    """An instance of ``cls`` from a Flower run config: its keys (see :func:`run_config_keys`), TOML's
    ``unset`` markers read as ``None``, an option's words as their values, string values through the option's
    ``parse``.  A key that starts with ``prefix`` (every key, without a prefix) and is neither known nor
    ``ignore``-d is refused."""
    keys = run_config_keys(cls, prefix)
    fields = {f.name: (f, opt) for f, opt in declared(cls)}
    kw: dict[str, Any] = {}
    for key, value in rc.items():
        if key in keys:
            kw[keys[key]] = _from_toml(cls, *fields[keys[key]], value)
        elif key.startswith(prefix) and not ignore(key):
            known = sorted(k for k in keys if k.startswith(prefix))
            raise ValueError(f"unknown key {key!r} in the Flower run config (known: {', '.join(known)})")
    kw.update(overrides)
    return cls(**kw)


def _from_toml(cls: Any, f: dataclasses.Field[Any], opt: Option, value: Any) -> Any:
    """One run-config value as the field's value."""
    if opt.unset is not ABSENT and value == opt.unset and type(value) is type(opt.unset):
        return None
    if opt.words is not None:
        return opt.value(value)
    if isinstance(value, str) and opt.parse is not None:
        return opt.parse(value)
    base, _ = base_type(cls, f)
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def run_config_defaults(cls: Any, prefix: str = "") -> dict[str, Any]:
    """``{run-config key: TOML default}`` of ``cls`` (``None`` written as the field's ``unset`` marker)."""
    return {prefix + key: _toml_default(f, opt) for f, opt in declared(cls) if (key := key_of(f, opt))}


def _toml_default(f: dataclasses.Field[Any], opt: Option) -> Any:
    """A field's default as the run config writes it: its word, its ``unset`` marker, a tuple as ``"1,2"``."""
    value = opt.word(_default(f))
    if value is None:
        return None if opt.unset is ABSENT else opt.unset
    return ",".join(map(str, value)) if isinstance(value, tuple) else value


# ----------------------------------------------------------------------------- reference page
def _range_text(opt: Option) -> str:
    if opt.choices is not None:
        return " \\| ".join(f"`{_cli_text(opt.word(c))}`" for c in opt.choices)
    parts = ["finite"] if opt.finite else []
    if opt.low is not None:
        parts.append(f"{'>' if opt.strict_low else '≥'} {opt.low:g}")
    if opt.high is not None:
        parts.append(f"{'<' if opt.strict_high else '≤'} {opt.high:g}")
    return ", ".join(parts)


def _cli_text(value: Any) -> str:
    """A value as the command line writes it (a tuple: ``1,2``)."""
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _default_text(f: dataclasses.Field[Any], opt: Option) -> str:
    """The page's default cell: the CLI's word for the default, ``required`` (with the run config's default)."""
    default = _default(f)
    shown = "unset" if default is None else f"`{_cli_text(opt.word(default))}`"
    return f"required (run config: {shown})" if opt.required else shown


def options_markdown(cls: Any, title: str, prefix: str = "") -> str:
    """A markdown table of ``cls``'s options: CLI flag, run-config key, type, default, allowed values, help."""
    lines = [f"## {title}", "", f"`{cls.__module__}.{cls.__qualname__}`", "",
             "| CLI flag | run-config key | type | default | allowed | help |", "|---|---|---|---|---|---|"]
    for f, opt in declared(cls):
        base, optional = base_type(cls, f)
        typ = getattr(base, "__name__", str(base)) + (" or unset" if optional else "")
        key = key_of(f, opt)
        flag = flag_of(f, opt)
        cells = [f"`{flag}`" if flag else "–", f"`{prefix}{key}`" if key else "–", typ, _default_text(f, opt),
                 _range_text(opt),
                 opt.help.replace(" (default: %(default)s)", "").replace("%%", "%").replace("|", "\\|")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
