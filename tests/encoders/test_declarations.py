"""Encoders must declare ``unbiased``; ``bits_formula`` is a safe, checkable expression."""

import math
import warnings

import pytest

from sstq_fl.encoders import base, formula, make_encoder, registry
from sstq_fl.encoders.vqsgd import VqSGD
from sstq_fl.registry import Registry


class Undeclared(base.Encoder):  # no `unbiased` anywhere
    bits_formula = "1"

    def layout(self):
        return []

    def _encode(self, x, seeds, coins):  # never reached: the class is refused before it can encode
        raise AssertionError("an undeclared encoder was used")

    def decode(self, msgs, coins=None):  # never reached, as above
        raise AssertionError("an undeclared encoder was used")


def test_unbiased_has_no_default():
    assert "unbiased" not in vars(base.Encoder)


def test_registering_an_undeclared_class_is_refused_naming_it():
    reg = Registry("encoder", on_register=lambda name, cls: base.require_declarations(cls))
    with pytest.raises(ValueError, match=r"Undeclared does not declare 'unbiased'") as exc:
        reg.register("undeclared", Undeclared)
    assert "\n" not in str(exc.value) and "undeclared" not in reg


def test_instantiating_an_undeclared_class_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"test_declarations\.Undeclared does not declare 'unbiased'"):
        Undeclared(4, 1.0)


def test_a_declaration_in_a_base_other_than_encoder_counts():
    sub = type("Sub", (VqSGD,), {"__module__": __name__})
    assert sub(4, 1.0).unbiased is True


def test_an_undeclared_plugin_is_skipped_with_a_warning(monkeypatch):
    from importlib import metadata

    registry()
    state = base.ENCODERS.snapshot()
    base.ENCODERS.reload_plugins()
    ep = type("EP", (), {"name": "undeclared", "value": "pkg:Undeclared", "group": base.ENTRY_POINT_GROUP,
                         "dist": type("D", (), {"name": "undeclared-dist", "version": "1.0"})(),
                         "load": staticmethod(lambda: Undeclared)})()
    monkeypatch.setattr(metadata, "entry_points", lambda group=None, **kw: [ep] if group == base.ENTRY_POINT_GROUP else [])
    try:
        with pytest.warns(UserWarning, match=r"'undeclared'.*undeclared-dist.*refused.*does not declare 'unbiased'"):
            assert "undeclared" not in registry()
    finally:
        base.ENCODERS.restore(state)


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_builtin_formula_equals_its_layout(name):
    for spec, d in ((name, 7), (name, 100)):
        enc = make_encoder(spec, d, 2.0)
        assert enc.formula_bits() == enc.payload_bits() == sum(f.total_bits for f in enc.layout())


@pytest.mark.parametrize("spec", ["sqkr:coin=public", "sqkr:k=3", "privunit-mrc:coin=public", "privunit-mrc:seed_bits=0",
                                  "sstq-flat:b=7", "sstq-ma:b=2"])
def test_formulas_follow_the_parameters(spec):
    enc = make_encoder(spec, 13, 3.0)
    assert enc.formula_bits() == enc.payload_bits()


def test_evaluator_arithmetic_and_conditionals():
    q = {"d": 6, "N": 16, "b": 4, "coin": "public", "k": 2}
    assert formula.evaluate("ceil(log2(N)) + b", q) == 8
    assert formula.evaluate("k * (ceil(log2(N)) + 1) if coin == 'private' else k", q) == 2
    assert formula.evaluate("max(1, ceil(log2(2 * d)))", q) == math.ceil(math.log2(12))
    assert formula.names("k * (ceil(log2(N)) + 1) if coin == 'private' else k") == {"k", "N", "coin"}


@pytest.mark.parametrize("expr,words", [("__import__('os').system('true')", "only the functions"),
                                        ("d.__class__", "Attribute is not allowed"), ("[d]", "List is not allowed"),
                                        ("lambda: 1", "Lambda is not allowed"), ("d +", "not an expression"),
                                        ("", "non-empty"), ("ceil(x=d)", "only the functions")])
def test_evaluator_refuses_anything_but_arithmetic(expr, words):
    with pytest.raises(ValueError, match=words):
        formula.evaluate(expr, {"d": 3})


def test_missing_quantity_is_named():
    with pytest.raises(ValueError, match=r"uses \['M'\]"):
        formula.evaluate("M + 1", {"d": 3})


def test_render_is_readable():
    assert formula.render("ceil(log2(N)) + b") == "⌈log2 N⌉ + b"
    assert formula.render("32 * d") == "32·d"
    assert formula.render("k * (ceil(log2(N)) + 1) if coin == 'private' else k") == \
        "k·(⌈log2 N⌉ + 1) if coin = 'private', else k"


def test_a_free_text_formula_is_refused_at_registration():
    bad = type("FreeText", (VqSGD,), {"__module__": __name__, "bits_formula": "ceil(log2 d) + 1"})
    reg = Registry("encoder", on_register=lambda name, cls: base.require_declarations(cls))
    with warnings.catch_warnings(), pytest.raises(ValueError, match=r"FreeText: bits formula .* is not an expression"):
        reg.register("free", bad)


@pytest.mark.parametrize("shown,written", [
    ("k·(⌈log2 d⌉ + 1)", "k * (ceil(log2(d)) + 1)"),
    ("⌈log2 N⌉ + b", "ceil(log2(N)) + b"),
    ("ceil(log2 d) + 1", "ceil(log2(d)) + 1"),
    ("32·d", "32 * d"),
    ("32 + d·(1 + ⌈log2 (s + 1)⌉)", "32 + d * (1 + ceil(log2(s + 1)))"),
    ("k·(⌈log2 N⌉ + 1) if coin = 'private', else k", "k * (ceil(log2(N)) + 1) if coin == 'private' else k"),
    ("|x − 1|^2 mod 3 ≤ ⌊d/2⌋", "abs(x - 1) ** 2 % 3 <= floor(d / 2)"),
])
def test_displayed_formula_translates_to_the_expression(shown, written):
    assert formula.from_display(shown) == written


def test_every_listed_formula_reads_back_as_its_expression():
    """What ``sstq-fl encoders`` shows beside a formula translates back to the same syntax tree."""
    import ast

    for name, cls in registry().items():
        if cls.bits_formula:
            back = formula.from_display(formula.render(cls.bits_formula))
            assert back is not None, name
            assert ast.dump(formula.parse(back)) == ast.dump(formula.parse(cls.bits_formula)), name


@pytest.mark.parametrize("bad,fix", [
    ("k·(⌈log2 d⌉ + 1)", 'write it as bits_formula = "k * (ceil(log2(d)) + 1)"'),
    ("ceil(log2 d) + 1", 'write it as bits_formula = "ceil(log2(d)) + 1"'),
    ("d.bit_length()", None),
    ("lambda: d", None),
])
def test_a_formula_error_teaches_the_grammar(bad, fix):
    with pytest.raises(ValueError) as exc:
        formula.parse(bad)
    msg = str(exc.value)
    assert "\n" not in msg and formula.GRAMMAR in msg and "Perhaps" not in msg
    assert (fix in msg) if fix else ("write it as" not in msg)
