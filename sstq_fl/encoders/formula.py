"""Checkable bit formulas: arithmetic over an encoder's named public quantities, evaluated without ``eval``.

An encoder's ``bits_formula`` is a Python expression such as ``ceil(log2(N)) + b`` or
``k * (ceil(log2(N)) + 1) if coin == 'private' else k``.  :func:`evaluate` walks its syntax tree
(:mod:`ast`) and accepts only numbers, strings, the names the encoder publishes
(:meth:`~sstq_fl.encoders.base.Encoder.bits_quantities`), ``+ - * / // % **``, unary ``-``,
comparisons, ``and``/``or``/``not``, ``a if c else b`` and the functions in :data:`FUNCTIONS`;
anything else (attributes, subscripts, calls of other names, lambdas, ...) is a ``ValueError``.
:func:`render` gives the human-readable form shown by ``sstq-fl encoders`` beside the formula (``⌈log2 N⌉ + b``);
:func:`from_display` translates that form back, so that a formula copied from the listing is refused with the
expression to write instead (:data:`GRAMMAR` says what a formula may use).
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "ceil": math.ceil, "floor": math.floor, "log2": math.log2, "max": max, "min": min, "abs": abs,
}
"""The functions a bit formula may call."""

GRAMMAR = ("a bits formula is a Python expression of numbers, 'strings' and the encoder's names (d, its parameters) "
           "with + - * / // % **, comparisons, and/or/not, A if C else B and ceil floor log2 max min abs")
"""What a bits formula may use, in one line (part of every refusal of a formula)."""

_DISPLAY = ((r"[·×]", " * "), (r"−", "-"), (r"≠", " != "), (r"≤", " <= "), (r"≥", " >= "), (r"\^", " ** "),
            (r"\bmod\b", " % "), (r"⌈", "ceil("), (r"⌊", "floor("), (r"[⌉⌋]", ")"), (r"\|([^|]+)\|", r"abs(\1)"),
            (r"\blog2\s+([A-Za-z_]\w*|\d+(?:\.\d+)?)", r"log2(\1)"), (r"\blog2\s+\(", "log2("),
            (r",\s*else\b", " else"), (r"(?<![<>!=])=(?!=)", " == "))
"""The displayed form's notation (:func:`render`) and the expression syntax each piece stands for."""

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_SYMBOLS = {ast.Add: "+", ast.Sub: "−", ast.Mult: "·", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "mod", ast.Pow: "^"}


@lru_cache(maxsize=256)
def parse(expr: str) -> ast.expr:
    """The syntax tree of ``expr``; a one-line ``ValueError`` if it is not a permitted formula."""
    if not isinstance(expr, str) or not expr.strip():
        raise ValueError(f"a bits formula must be a non-empty expression, got {expr!r}")
    try:
        tree = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(_refusal(expr, f"is not an expression ({_syntax(exc)})")) from None
    for node in ast.walk(tree):
        _check_node(node, expr)
    return tree


def _syntax(exc: SyntaxError) -> str:
    """Python's message without its guesses (``Perhaps you forgot a comma?`` misleads here), with the column."""
    msg = exc.msg.split(". Perhaps")[0].split("; perhaps")[0]
    return f"{msg} at column {exc.offset}" if exc.offset else msg


def _refusal(expr: str, problem: str) -> str:
    """``bits formula EXPR PROBLEM; write it as bits_formula = "FIXED"; GRAMMAR`` (the fix where one is found)."""
    fixed = from_display(expr)
    fix = f'; write it as bits_formula = "{fixed}"' if fixed is not None and fixed != expr.strip() else ""
    return f"bits formula {expr!r} {problem}{fix}; {GRAMMAR}"


def from_display(text: str) -> str | None:
    """The expression a displayed formula stands for (``k·(⌈log2 d⌉ + 1)`` → ``k * (ceil(log2(d)) + 1)``), in
    :func:`ast.unparse`'s spelling; None when the translation is not a permitted formula either."""
    out = text.strip()
    for pattern, repl in _DISPLAY:
        out = re.sub(pattern, repl, out)
    try:
        tree = ast.parse(" ".join(out.split()), mode="eval").body
        for node in ast.walk(tree):
            _check_node(node, text)
    except (SyntaxError, ValueError):
        return None
    return ast.unparse(tree)


def _check_node(node: ast.AST, expr: str) -> None:
    allowed = (ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd, ast.Not, ast.BoolOp,
               ast.And, ast.Or, ast.Compare, ast.IfExp, ast.Call, *_BINARY, *_COMPARE)
    if not isinstance(node, allowed):
        raise ValueError(f"bits formula {expr!r}: {type(node).__name__} is not allowed; {GRAMMAR}")
    if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS
                                           and not node.keywords):
        raise ValueError(f"bits formula {expr!r}: only the functions {sorted(FUNCTIONS)} may be called; {GRAMMAR}")
    if isinstance(node, ast.Constant) and not isinstance(node.value, int | float | str):
        raise ValueError(f"bits formula {expr!r}: constant {node.value!r} is not a number or string; {GRAMMAR}")


def names(expr: str) -> set[str]:
    """The quantities ``expr`` refers to (function names excluded)."""
    tree = parse(expr)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called}


def evaluate(expr: str, quantities: Mapping[str, Any]) -> Any:
    """The value of ``expr`` given ``quantities``; a one-line ``ValueError`` naming a missing quantity."""
    missing = names(expr) - set(quantities)
    if missing:
        raise ValueError(f"bits formula {expr!r} uses {sorted(missing)}, which the encoder does not publish "
                         f"(it publishes {sorted(quantities)})")
    return _eval(parse(expr), quantities)


def _eval(node: ast.expr, q: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return q[node.id]
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_eval(node.left, q), _eval(node.right, q))
    if isinstance(node, ast.UnaryOp):
        val = _eval(node.operand, q)
        return -val if isinstance(node.op, ast.USub) else (not val) if isinstance(node.op, ast.Not) else +val
    if isinstance(node, ast.BoolOp):
        vals = [_eval(v, q) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Compare):
        left, ok = _eval(node.left, q), True
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = _eval(comp, q)
            ok, left = ok and bool(_COMPARE[type(op)](left, right)), right
        return ok
    if isinstance(node, ast.IfExp):
        return _eval(node.body, q) if _eval(node.test, q) else _eval(node.orelse, q)
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    return FUNCTIONS[node.func.id](*(_eval(a, q) for a in node.args))


def render(expr: str) -> str:
    """Human-readable form: ``ceil(log2(N)) + b`` → ``⌈log2 N⌉ + b``, ``32 * d`` → ``32·d``."""
    return _render(parse(expr))


def _render(node: ast.expr) -> str:
    if isinstance(node, ast.Constant):
        return repr(node.value) if isinstance(node.value, str) else str(node.value)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.BinOp):
        left, right = _wrap(node.left), _wrap(node.right)
        sym = _SYMBOLS[type(node.op)]
        return f"{left}{sym}{right}" if sym in ("·", "^") else f"{left} {sym} {right}"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        args = ", ".join(_render(a) for a in node.args)
        brackets = {"ceil": ("⌈", "⌉"), "floor": ("⌊", "⌋"), "abs": ("|", "|")}.get(node.func.id)
        if brackets:
            return brackets[0] + args + brackets[1]
        return f"log2 {_wrap(node.args[0])}" if node.func.id == "log2" else f"{node.func.id}({args})"
    if isinstance(node, ast.IfExp):
        return f"{_render(node.body)} if {_render(node.test)}, else {_render(node.orelse)}"
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq | ast.NotEq):
        sym = "=" if isinstance(node.ops[0], ast.Eq) else "≠"
        return f"{_render(node.left)} {sym} {_render(node.comparators[0])}"
    return ast.unparse(node)


def _wrap(node: ast.expr) -> str:
    """A sub-expression, in parentheses when it is itself a sum or conditional."""
    text = _render(node)
    loose = isinstance(node, ast.IfExp) or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub))
    return f"({text})" if loose else text
