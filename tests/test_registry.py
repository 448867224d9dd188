"""The one registry helper: duplicates refused, look-ups listed, plug-ins loaded or skipped with a warning."""

import warnings
from importlib import metadata

import pytest

from sstq_fl.registry import PluginWarning, Registry, UnknownName


class FakeEntryPoint:
    def __init__(self, name, value, load):
        self.name, self.value, self._load, self.dist = name, value, load, None

    def load(self):
        return self._load()


def test_duplicate_name_is_a_one_line_error_and_same_object_is_idempotent():
    reg: Registry[object] = Registry("widget")

    @reg.register("a")
    def a():
        return 1

    reg.register("a", a)  # the same object again: fine
    with pytest.raises(ValueError, match=r"widget named 'a' is already registered") as e:
        reg.register("a", lambda: 2)
    assert "\n" not in str(e.value)
    assert reg["a"] is a and reg.names() == ["a"] and "a" in reg and len(reg) == 1


def test_unknown_name_lists_registered_and_is_value_and_key_error():
    reg: Registry[int] = Registry("gadget")
    reg.register("x", 1)
    reg.register("y", 2)
    with pytest.raises(UnknownName) as e:
        reg["z"]
    assert isinstance(e.value, ValueError) and isinstance(e.value, KeyError)
    assert str(e.value) == "unknown gadget 'z'; registered: x, y"
    assert reg.get("z") is None and reg.items() == [("x", 1), ("y", 2)]


def test_builtins_are_imported_lazily_on_first_lookup():
    reg: Registry[object] = Registry("thing", builtins=["sstq_fl.no_such_builtin_module_xyz"])
    reg.register("here", object())  # registering never imports the built-ins
    with pytest.raises(ModuleNotFoundError):
        reg.names()


def test_plugins_load_once_and_broken_ones_warn(monkeypatch):
    eps = [FakeEntryPoint("good", "pkg:good", lambda: 5),
           FakeEntryPoint("broken", "pkg:gone", lambda: (_ for _ in ()).throw(ImportError("no pkg"))),
           FakeEntryPoint("wrong", "pkg:s", lambda: "text"),
           FakeEntryPoint("taken", "pkg:t", lambda: 7)]
    calls = []

    def entry_points(group=None):
        calls.append(group)
        return eps if group == "test.group" else []

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    reg: Registry[int] = Registry("number", group="test.group", accepts=lambda o: isinstance(o, int), kind="an int")
    reg.register("taken", 1)
    with pytest.warns(PluginWarning) as got:
        assert reg["good"] == 5
    msgs = sorted(str(w.message) for w in got)
    assert len(msgs) == 3 and all("\n" not in m for m in msgs)
    assert any("'broken'" in m and "skipped: loading it failed (ImportError: no pkg)" in m for m in msgs)
    assert any("'wrong'" in m and "not an int" in m for m in msgs)
    assert any("'taken'" in m and "refused" in m for m in msgs)
    assert reg["taken"] == 1 and "broken" not in reg
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reg.names()  # loaded once: no second round of warnings
    assert calls == ["test.group"]


def test_snapshot_restore_round_trip():
    reg: Registry[int] = Registry("count")
    reg.register("a", 1)
    state = reg.snapshot()
    reg.register("b", 2)
    reg.restore(state)
    assert reg.names() == ["a"]


def test_on_register_sees_each_registration_after_the_duplicate_check():
    seen = []
    reg: Registry[object] = Registry("tag", on_register=lambda name, obj: seen.append((name, obj)))
    a, b = object(), object()
    reg.register("a", a)
    with pytest.raises(ValueError):
        reg.register("a", b)
    assert seen == [("a", a)]
