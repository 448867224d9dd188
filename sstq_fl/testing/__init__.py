"""The encoder conformance kit: check that an encoder — built-in or plug-in — does what it declares.

``check_encoder(spec, dim=..., epsilon=...)`` returns a :class:`Report` of per-check results (declared
bits against the layout, the bit formula and the wire; wire round trip and rejection; batch invariance;
ε-LDP, exactly or by an audited lower bound; unbiasedness; the declared MSE).  A plug-in's own tests can
assert ``check_encoder("my-encoder").passed``; ``sstq-fl encoders check SPEC`` prints the same report.
"""

from .kit import CHECKS, check_encoder
from .report import CheckResult, Report

__all__ = ["CHECKS", "CheckResult", "Report", "check_encoder"]
