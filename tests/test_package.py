"""The distribution: one version, only ``sstq_fl`` installed at the top level, the licence files, and
run metadata that names every library a result depends on (the wheel itself is built, installed in a
fresh environment and smoke-run by ``scripts/wheel_smoke.sh`` in CI)."""

import sys
import tomllib
from pathlib import Path

import pytest

import sstq_fl
from sstq_fl.io import library_versions, run_meta

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from check_dist import sdist_problems, wheel_problems  # noqa: E402
from lowest import freeze_changes, lowest_of, lowest_pins  # noqa: E402

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


def test_the_old_versions_stage_installs_each_lower_bound_and_sees_any_change(tmp_path):
    """``scripts/lowest.py`` (wheel_smoke.sh's old-versions stage): the wheel's runtime requirements at their lower
    bounds, markers kept and extras left out; ``pip freeze`` before and after the install may differ by sstq-fl only."""
    import zipfile

    wheel = tmp_path / "x.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("x-0.1.dist-info/METADATA", "Metadata-Version: 2.4\nName: x\nRequires-Dist: numpy<3,>=2.0.2\n"
                   'Requires-Dist: fht-cpu>=1.0.1; platform_machine == "x86_64"\n'
                   'Requires-Dist: opacus>=1.6.0; extra == "opacus"\n')
    assert lowest_pins(str(wheel)) == ["numpy==2.0.2", 'fht-cpu==1.0.1; platform_machine == "x86_64"']
    before = "numpy==2.0.2\nFlwr==1.40.0\n"
    assert freeze_changes(before, before + "sstq-fl @ file:///w/sstq_fl-0.1.0-py3-none-any.whl\n") == []
    assert freeze_changes(before, "numpy==2.4.6\nrich==14.0.0\nsstq_fl==0.1.0\n") == [
        "flwr 1.40.0 -> removed", "numpy 2.0.2 -> 2.4.6", "rich 14.0.0 added"]


def test_every_runtime_dependency_states_the_lower_bound_the_old_versions_stage_installs():
    deps = PYPROJECT["project"]["dependencies"]
    pins = lowest_of(deps)
    assert len(pins) == len(deps) and "numpy==1.26.4" in pins and "flwr==1.38.0" in pins and "torch==2.13.0" in pins
    assert not any(d.startswith(("opacus", "flwr[", "ray")) for d in deps), "Ray and Opacus are extras"
    with pytest.raises(ValueError, match=r"^numpy<3: no single >= lower bound to test$"):
        lowest_of(["numpy<3"])
