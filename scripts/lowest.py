"""The old-versions check of ``scripts/wheel_smoke.sh``: the wheel installs into an environment that already holds
the oldest releases its metadata admits, and changes nothing installed there.

``python scripts/lowest.py pins WHEEL``: one requirement a line, ``name==lower bound`` for each runtime
dependency of the wheel (``Requires-Dist`` without an extra; its environment marker kept), for
``pip install``.  ``python scripts/lowest.py unchanged BEFORE AFTER``: compare two ``pip freeze`` outputs;
exit 1 with one line per package the install upgraded, downgraded or removed, or added although it
was not ``sstq-fl``."""

from __future__ import annotations

import sys
import zipfile
from email.parser import Parser

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def lowest_pins(wheel: str) -> list[str]:
    """:func:`lowest_of` the ``Requires-Dist`` entries of ``wheel``'s metadata."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return lowest_of(Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or [])


def lowest_of(requirements: list[str]) -> list[str]:
    """``name==lower`` (plus the marker) for each requirement outside an extra; a one-line ``ValueError`` for one
    without a single ``>=`` lower bound."""
    out = []
    for r in map(Requirement, requirements):
        if r.marker is not None and "extra" in str(r.marker):
            continue
        lows = [s.version for s in r.specifier if s.operator == ">="]
        if len(lows) != 1:
            raise ValueError(f"{r}: no single >= lower bound to test")
        out.append(f"{r.name}=={lows[0]}" + (f"; {r.marker}" if r.marker else ""))
    return out


def _freeze(text: str) -> dict[str, str]:
    """``pip freeze``'s ``name==version`` and ``name @ url`` lines as {canonical name: version or url}."""
    lines = [line.replace(" @ ", "==", 1) for line in text.splitlines() if "==" in line or " @ " in line]
    return {canonicalize_name(k): v for k, v in (line.split("==", 1) for line in lines)}


def freeze_changes(before: str, after: str) -> list[str]:
    """What installing the wheel changed between two ``pip freeze`` outputs, besides adding ``sstq-fl``."""
    old, new = _freeze(before), _freeze(after)
    out = [f"{k} {v} -> {new.get(k, 'removed')}" for k, v in sorted(old.items()) if new.get(k) != v]
    return out + [f"{k} {v} added" for k, v in sorted(new.items()) if k not in old and k != "sstq-fl"]


def main(argv: list[str]) -> int:
    if argv[:1] == ["pins"] and len(argv) == 2:
        print("\n".join(lowest_pins(argv[1])))
        return 0
    if argv[:1] == ["unchanged"] and len(argv) == 3:
        with open(argv[1]) as b, open(argv[2]) as a:
            problems = freeze_changes(b.read(), a.read())
        print("\n".join(problems) if problems else "the install added sstq-fl and changed nothing else")
        return 1 if problems else 0
    print("usage: lowest.py pins WHEEL | lowest.py unchanged BEFORE AFTER", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
