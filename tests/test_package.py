"""The distribution: one version, only ``sstq_fl`` installed at the top level, the licence files, and
run metadata that names every library a result depends on (the wheel itself is built, installed in a
fresh environment and smoke-run by ``scripts/wheel_smoke.sh`` in CI)."""

import sys
import tomllib
from pathlib import Path

import sstq_fl
from sstq_fl.io import library_versions, run_meta

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from check_dist import sdist_problems, wheel_problems  # noqa: E402

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_is_sstq_fl_version_and_flower_reads_the_same():
    assert PYPROJECT["project"]["version"] == sstq_fl.__version__
    cff = (ROOT / "CITATION.cff").read_text()
    assert f"\nversion: {sstq_fl.__version__}\n" in cff


def test_only_sstq_fl_is_packaged_and_the_licence_ships():
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == ["sstq_fl*"]
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert "## [Unreleased]" in (ROOT / "CHANGELOG.md").read_text()


def test_the_backends_name_the_installed_apps_not_the_clone_folders():
    eps = PYPROJECT["project"]["entry-points"]["sstq_fl.backends"]
    assert all(v.startswith("sstq_fl.flower.apps.") for v in eps.values()), eps


def test_run_metadata_names_sstq_fl_flower_ray_torch_numpy_and_plugins():
    versions = run_meta()["versions"]
    assert versions["sstq_fl"] == sstq_fl.__version__
    assert {"python", "flwr", "ray", "torch", "numpy", "dp_accounting", "plugins"} <= set(versions)
    assert versions["flwr"] == "1.42.0" and isinstance(versions["plugins"], dict)
    assert library_versions("t", "n")["torch"] == "t"


def test_the_dist_checker_catches_a_top_level_package_and_a_missing_licence(tmp_path):
    import tarfile
    import zipfile

    wheel = tmp_path / "x.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("sstq_fl/__init__.py", "")
        z.writestr("strategies/__init__.py", "")
        z.writestr("sstq_fl-0.1.0.dist-info/METADATA", "")
    problems = wheel_problems(str(wheel))
    assert "wheel installs a top-level 'strategies'" in problems
    assert "wheel lacks the LICENSE file" in problems and "wheel lacks sstq_fl/flower/apps/sstq_server.py" in problems
    sdist = tmp_path / "x.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(ROOT / "pyproject.toml", arcname="sstq_fl-0.1.0/pyproject.toml")
    assert sdist_problems(str(sdist)) == ["sdist lacks LICENSE", "sdist lacks CHANGELOG.md", "sdist lacks CITATION.cff"]


def test_the_metadata_states_ranges_and_constraints_txt_pins_a_version_inside_each():
    """A library states compatible ranges (no ``==``); the exact versions setup, docker and CI install are in
    ``constraints.txt``, each inside its range."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    root = Path(__file__).resolve().parents[1]
    pins = {}
    for line in (root / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    project = PYPROJECT["project"]
    reqs = [Requirement(r) for r in project["dependencies"] + sum(project["optional-dependencies"].values(), [])]
    for r in reqs:
        assert not any(s.operator == "==" for s in r.specifier), f"{r} is pinned in the metadata"
        if canonicalize_name(r.name) != "setuptools":
            assert r.specifier.contains(pins[canonicalize_name(r.name)]), (str(r), pins.get(canonicalize_name(r.name)))
