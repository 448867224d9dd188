"""``check_encoder``: run every conformance check on one encoder and collect a :class:`Report`.

The checks (one module each): ``bits`` (:mod:`.bits`), ``wire-roundtrip`` and ``wire-rejection``
(:mod:`.wirecheck`), ``batch-invariance`` (:mod:`.batching`), ``epsilon-ldp`` (:mod:`.privacy`),
``unbiased`` and ``mse`` (:mod:`.moments`).  A failing check is a ``FAIL`` line, never an exception; a check
that raises is reported as failed with the exception's first line, and the others still run.  Every draw
uses fixed seeds, so a report is reproducible; each statistical check fails a conforming encoder with
probability at most ``alpha``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ..encoders.base import Encoder, make_encoder
from ..errors import described
from ..progress import progress
from ..registry import UnknownName
from . import batching, bits, moments, privacy, wirecheck
from .report import CheckResult, Report, failed

CHECKS = ("bits", "wire-roundtrip", "wire-rejection", "batch-invariance", "epsilon-ldp", "unbiased", "mse")
"""Every check's name, in the order they run."""


def check_encoder(spec: str | type[Encoder], *, dim: int = 6, epsilon: float = 1.0, radius: float = 1.0,
                  seed: int = 0, trials: int = 20000, audit_trials: int = 20000, alpha: float = 1e-6,
                  checks: Sequence[str] | None = None) -> Report:
    """Check the encoder ``spec`` (a spec string of a registered encoder, or an :class:`Encoder` subclass)
    built for ``dim``, ``epsilon``, ``radius`` and public ``seed``.

    ``trials``: messages per input for ``unbiased``/``mse`` and the output-law fit; ``audit_trials``: messages
    per input and stage of the ε audit; ``alpha``: each statistical check's false-failure probability for a
    conforming encoder; ``checks``: a subset of :data:`CHECKS`.  An unbuildable spec or bad knob is a one-line
    ``ValueError``.
    """
    _validate(dim, epsilon, radius, trials, audit_trials, alpha, checks)
    enc = _build(spec, dim, epsilon, radius, seed)
    other = _other(spec, dim, epsilon, radius, seed)
    draws: list[moments.Draws] = []

    def moment_draws() -> list[moments.Draws]:
        if not draws:
            draws.extend(moments.draw(enc, trials))
        return draws

    budget = privacy.Budget(audit_trials, alpha)
    runners: dict[str, Callable[[], CheckResult]] = {
        "bits": lambda: bits.check_bits(enc),
        "wire-roundtrip": lambda: wirecheck.check_roundtrip(enc),
        "wire-rejection": lambda: wirecheck.check_rejection(enc, other),
        "batch-invariance": lambda: batching.check_batching(enc),
        "epsilon-ldp": lambda: privacy.check_privacy(enc, privacy.Budget(trials, alpha) if _has_law(enc) else budget),
        "unbiased": lambda: moments.check_unbiased(enc, moment_draws(), alpha),
        "mse": lambda: moments.check_mse(enc, moment_draws(), alpha),
    }
    report = Report(enc.spec)
    names = list(checks or CHECKS)
    with progress(len(names), f"{enc.name} conformance checks", key="kit-checks", every=1) as bar:
        for name in names:
            report.append(_run(name, runners[name]))
            bar.advance(1, last=f"{report[-1].status} {name}")
    return report


def _has_law(enc: Encoder) -> bool:
    return callable(getattr(enc, "output_law", None))


def _run(name: str, fn: Callable[[], CheckResult]) -> CheckResult:
    try:
        return fn()
    except Exception as exc:  # a check that cannot complete is a failure of the encoder under test
        return failed(name, f"the check raised {described(exc)}")


def _validate(dim: Any, epsilon: Any, radius: Any, trials: Any, audit_trials: Any, alpha: Any,
              checks: Sequence[str] | None) -> None:
    if not (isinstance(dim, int) and dim >= 1):
        raise ValueError(f"dim must be a positive integer, got {dim!r}")
    for key, val in (("epsilon", epsilon), ("radius", radius)):
        if not (isinstance(val, int | float) and val > 0 and math.isfinite(val)):
            raise ValueError(f"{key} must be a positive finite number, got {val!r}")
    for key, val in (("trials", trials), ("audit_trials", audit_trials)):
        if not (isinstance(val, int) and val >= 100):
            raise ValueError(f"{key} must be an integer ≥ 100, got {val!r}")
    if not (isinstance(alpha, float | int) and 0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    unknown = [c for c in checks or () if c not in CHECKS]
    if unknown:
        raise ValueError(f"unknown check(s) {unknown}; known: {', '.join(CHECKS)}")


def _build(spec: str | type[Encoder], dim: int, epsilon: float, radius: float, seed: int) -> Encoder:
    try:
        if isinstance(spec, type) and issubclass(spec, Encoder):
            return spec(dim, epsilon, radius=radius, seed=seed)
        if not isinstance(spec, str):
            raise ValueError(f"expected an encoder spec string or Encoder subclass, got {type(spec).__name__}")
        return make_encoder(spec, dim, epsilon, radius=radius, seed=seed)
    except UnknownName as exc:  # an unknown name, or a plug-in refused at registration: the message says which
        raise ValueError(f"cannot build encoder {_label(spec)} (d={dim}, ε={epsilon:g}): {exc}") from None
    except Exception as exc:  # any failure to build, third-party constructors included
        raise ValueError(f"cannot build encoder {_label(spec)} (d={dim}, ε={epsilon:g}): {described(exc)}") from None


def _other(spec: str | type[Encoder], dim: int, epsilon: float, radius: float, seed: int) -> Encoder | None:
    """The same encoder under another public seed: its messages are foreign to ours."""
    try:
        return _build(spec, dim, epsilon, radius, seed + 1)
    except ValueError:
        return None


def _label(spec: object) -> str:
    return getattr(spec, "__qualname__", None) or repr(spec)
