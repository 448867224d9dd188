"""The conformance kit's results: one :class:`CheckResult` per check, collected in a :class:`Report`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckResult:
    """One check: its ``name``, whether it ``passed``, a one-line ``detail``; ``skipped`` checks pass."""

    name: str
    passed: bool
    detail: str
    skipped: bool = False

    @property
    def status(self) -> str:
        """``PASS``, ``FAIL`` or ``SKIP``."""
        return "SKIP" if self.skipped else "PASS" if self.passed else "FAIL"

    def line(self) -> str:
        """``STATUS name: detail`` on one line."""
        return f"{self.status} {self.name}: {' '.join(self.detail.split())}"


def passed(name: str, detail: str) -> CheckResult:
    return CheckResult(name, True, detail)


def failed(name: str, detail: str) -> CheckResult:
    return CheckResult(name, False, detail)


def skipped(name: str, detail: str) -> CheckResult:
    return CheckResult(name, True, detail, skipped=True)


class Report(list[CheckResult]):
    """The results of :func:`~sstq_fl.testing.check_encoder`, in the order the checks ran."""

    def __init__(self, spec: str, results: list[CheckResult] | None = None) -> None:
        super().__init__(results or [])
        self.spec = spec

    @property
    def passed(self) -> bool:
        """True when no check failed (skipped checks do not fail)."""
        return all(r.passed for r in self)

    def failures(self) -> list[str]:
        """The names of the failed checks."""
        return [r.name for r in self if not r.passed]

    def get(self, name: str) -> CheckResult:  # type: ignore[override]
        """The result of the check ``name`` (``KeyError`` naming the checks that ran)."""
        for r in self:
            if r.name == name:
                return r
        raise KeyError(f"no check {name!r} in the report; ran: {', '.join(r.name for r in self)}")

    def lines(self) -> list[str]:
        """One line per check."""
        return [r.line() for r in self]

    def __str__(self) -> str:
        return "\n".join(self.lines())
