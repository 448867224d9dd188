"""Check built distributions: the wheel installs no top-level name but ``sstq_fl`` (and its
dist-info), carries the licence, and holds the installed Flower apps; the sdist holds the licence,
the changelog and the citation file.  ``python scripts/check_dist.py WHEEL SDIST``; exit 1 with
one line per problem."""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import PurePosixPath


def wheel_problems(path: str) -> list[str]:
    names = zipfile.ZipFile(path).namelist()
    tops = {PurePosixPath(n).parts[0] for n in names}
    out = [f"wheel installs a top-level {t!r}" for t in sorted(tops)
           if t != "sstq_fl" and not (t.startswith("sstq_fl-") and t.endswith(".dist-info"))]
    for needed in ("sstq_fl/flower/apps/sstq_server.py", "sstq_fl/flower/apps/sstq_client.py", "sstq_fl/py.typed"):
        if needed not in names:
            out.append(f"wheel lacks {needed}")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        out.append("wheel lacks the LICENSE file")
    return out


def sdist_problems(path: str) -> list[str]:
    with tarfile.open(path) as tar:
        names = {PurePosixPath(n).name for n in tar.getnames()}
    return [f"sdist lacks {f}" for f in ("LICENSE", "CHANGELOG.md", "CITATION.cff", "pyproject.toml") if f not in names]


def main(argv: list[str]) -> int:
    wheels = [a for a in argv if a.endswith(".whl")]
    sdists = [a for a in argv if a.endswith(".tar.gz")]
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"expected one wheel and one sdist, got {argv}")
        return 2
    problems = wheel_problems(wheels[0]) + sdist_problems(sdists[0])
    for p in problems:
        print(p)
    if not problems:
        print(f"dist ok: {wheels[0].rsplit('/', 1)[-1]} installs only sstq_fl; sdist has LICENSE, CHANGELOG.md, CITATION.cff")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
