"""A third-party package registers an encoder through the entry-point group, untouched repo."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).parent / "plugin_example"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build")
    source = shutil.copytree(PLUGIN, build / "plugin_example")  # setuptools builds in the source tree: a private copy,
    # so that two test workers (or a stale build/ folder) never share one
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(source)], check=True, cwd=build,
                   env={**os.environ, "PIP_NO_CACHE_DIR": "1"})
    assert list(target.glob("sstq_fl_plugin_example-*.dist-info/entry_points.txt"))
    return target


def run_py(code: str, path: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(path)}
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env).stdout


def test_installed_plugin_is_listed_and_usable(plugin_path):
    out = run_py("from sstq_fl.cli import main; main(['encoders', '--json'])", plugin_path)
    names = {r["name"]: r for r in json.loads(out)}
    assert "rr-coordinate" in names and names["rr-coordinate"]["bits"] == "ceil(log2(d)) + 1"
    code = """
import numpy as np, torch
from sstq_fl import wire
from sstq_fl.encoders import make_encoder
enc = make_encoder('rr-coordinate', 16, 2.0, radius=1.0)
x = torch.full((1, 16), 0.25, dtype=torch.float64)
msgs = enc.encode(x.repeat(40000, 1), np.arange(40000))
back = wire.unpack(enc, wire.pack(enc, msgs))
print(enc.payload_bits(), float((enc.aggregate(back) - x[0]).abs().max()), enc.privacy_event().epsilon)
"""
    bits, err, eps = run_py(code, plugin_path).split()
    assert int(bits) == 5 and float(eps) == 2.0
    assert float(err) < 0.15  # unbiased mean of 40k messages (per-coordinate sd ≈ 0.1)


def test_recommend_ranks_an_installed_plugin(plugin_path):
    out = run_py("from sstq_fl.cli import main; main(['encoders', 'recommend', '--dim', '16', '--epsilon', '2', "
                 "'--clients', '10', '--encoders', 'rr-coordinate vqsgd', '--json'])", plugin_path)
    rows = {r["spec"]: r for r in json.loads(out)}
    assert set(rows) == {"rr-coordinate", "vqsgd"} and rows["rr-coordinate"]["bits"] == 5
    assert rows["rr-coordinate"]["mse_mean"] > 0


def test_plugin_absent_without_install():
    out = subprocess.run([sys.executable, "-c", "from sstq_fl.encoders import registry; print(sorted(registry()))"],
                         check=True, capture_output=True, text=True).stdout
    assert "rr-coordinate" not in out


class FakeEntryPoint:
    """Stands in for an ``importlib.metadata.EntryPoint`` of an installed distribution."""

    def __init__(self, name, value, dist, load):
        self.name, self.value, self.group, self._load = name, value, "sstq_fl.encoders", load
        self.dist = type("Dist", (), {"name": dist})()

    def load(self):
        return self._load()


def _raise(exc):
    def load():
        raise exc
    return load


@pytest.fixture
def fake_plugins(monkeypatch):
    """Install fake entry points for the duration of a test, with a fresh copy of the registry."""
    from importlib import metadata

    from sstq_fl.encoders import base

    base.registry()
    state = base.ENCODERS.snapshot()
    base.ENCODERS.reload_plugins()

    def install(*eps):
        def entry_points(group=None, **kw):
            return list(eps) if group == base.ENTRY_POINT_GROUP else []
        monkeypatch.setattr(metadata, "entry_points", entry_points)
    yield install
    base.ENCODERS.restore(state)


def _good_encoder():
    """A fresh, working encoder class (the built-in ``clean`` one, under a new class object)."""
    from sstq_fl.encoders.clean import Clean

    return type("Good", (Clean,), {})


def test_broken_plugins_are_skipped_with_a_warning_naming_them(fake_plugins, capsys):
    from sstq_fl.cli import main
    from sstq_fl.encoders import make_encoder, registry

    good = _good_encoder()
    fake_plugins(FakeEntryPoint("ghost", "ghost_pkg:Missing", "ghost-dist", _raise(ImportError("No module named 'ghost_pkg'"))),
                 FakeEntryPoint("typo", "typo_pkg:Nope", "typo-dist", _raise(AttributeError("no attribute 'Nope'"))),
                 FakeEntryPoint("boom", "boom_pkg:Enc", "boom-dist", _raise(RuntimeError("bad\nimport"))),
                 FakeEntryPoint("not-enc", "odd_pkg:thing", "odd-dist", lambda: 42),
                 FakeEntryPoint("good-one", "good_pkg:Good", "good-dist", lambda: good))
    with pytest.warns(UserWarning) as got:
        reg = registry()
    msgs = [str(w.message) for w in got]
    assert len(msgs) == 4 and all("\n" not in m for m in msgs)
    for name, dist in (("ghost", "ghost-dist"), ("typo", "typo-dist"), ("boom", "boom-dist"), ("not-enc", "odd-dist")):
        assert any(f"'{name}'" in m and dist in m and "skipped" in m for m in msgs), (name, msgs)
    assert reg["good-one"] is good and "ghost" not in reg and "sstq-flat" in reg
    assert make_encoder("sstq-flat", 8, 1.0).dim == 8
    assert main(["encoders", "--json"]) == 0
    assert "sstq-flat" in capsys.readouterr().out


def test_plugin_using_a_builtin_name_is_refused_with_a_warning(fake_plugins):
    from sstq_fl.encoders import registry
    from sstq_fl.encoders.sstq import SSTQFlat

    impostor = _good_encoder()
    fake_plugins(FakeEntryPoint("sstq-flat", "evil_pkg:Impostor", "evil-dist", lambda: impostor))
    with pytest.warns(UserWarning, match=r"'sstq-flat'.*evil-dist.*refused.*already"):
        reg = registry()
    assert reg["sstq-flat"] is SSTQFlat and impostor.name != "sstq-flat"


def test_real_entry_point_to_a_missing_module_is_skipped(fake_plugins):
    from importlib import metadata

    from sstq_fl.encoders import registry

    fake_plugins(metadata.EntryPoint("gone", "sstq_fl_no_such_module_xyz:Enc", "sstq_fl.encoders"))
    with pytest.warns(UserWarning, match=r"'gone'.*sstq_fl_no_such_module_xyz.*skipped"):
        assert "gone" not in registry()


class _Displayed:
    """A plug-in whose ``bits_formula`` is copied from the listing's displayed form (refused at registration)."""

    @staticmethod
    def make():
        from sstq_fl.encoders.sqkr import SQKR

        return type("Displayed", (SQKR,), {"bits_formula": "k·(⌈log2 N⌉ + 1)"})


def test_a_refused_plugin_is_remembered_and_named_on_look_up(fake_plugins, capsys):
    from sstq_fl.cli import main
    from sstq_fl.encoders import base, make_encoder, registry

    fake_plugins(FakeEntryPoint("displayed", "disp_pkg:Displayed", "disp-dist", _Displayed.make))
    with pytest.warns(UserWarning, match=r"'displayed'.*disp-dist.*refused.*bits formula"):
        assert "displayed" not in registry()
    reason = base.ENCODERS.refused()["displayed"]
    assert "plug-in 'displayed'" in reason and "was refused at registration: " in reason
    assert 'write it as bits_formula = "k * (ceil(log2(N)) + 1)"' in reason
    with pytest.raises(ValueError, match="was refused at registration") as exc:
        make_encoder("displayed", 8, 1.0)
    assert "unknown encoder" not in str(exc.value)
    assert main(["encoders", "check", "displayed"]) == 2
    err = capsys.readouterr().err
    assert "plug-in 'displayed'" in err and "was refused at registration" in err and "unknown encoder" not in err
    assert main(["encoders"]) == 0
    assert reason in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown encoder 'nothing-here'"):
        make_encoder("nothing-here", 8, 1.0)


def test_refused_plugin_from_an_installed_distribution_is_one_line_each(tmp_path):
    """End to end: a distribution on the path whose encoder's formula is the displayed form; ``sstq-fl encoders
    check`` prints one warning line and one error line naming the refusal and the expression to write, no traceback."""
    (tmp_path / "disp_pkg").mkdir()
    (tmp_path / "disp_pkg" / "__init__.py").write_text(
        "from sstq_fl.encoders.vqsgd import VqSGD\n\n\nclass Displayed(VqSGD):\n    bits_formula = '⌈log2 d⌉ + 1'\n")
    info = tmp_path / "disp_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: disp-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[sstq_fl.encoders]\ndisplayed = disp_pkg:Displayed\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).resolve().parents[1])])}
    out = subprocess.run([sys.executable, "-m", "sstq_fl.cli", "encoders", "check", "displayed"], capture_output=True,
                         text=True, env=env)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(lines) == 2, out.stderr
    assert lines[0].startswith("sstq-fl: warning: encoder plug-in 'displayed'") and "disp-pkg" in lines[0]
    assert lines[1].startswith("sstq-fl: error: ") and "was refused at registration" in lines[1]
    assert 'write it as bits_formula = "ceil(log2(d)) + 1"' in lines[1]
