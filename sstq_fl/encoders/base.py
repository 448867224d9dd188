"""The encoder interface, the registry, and spec strings.

An encoder follows the DPQuery split (tensorflow-privacy): client-side :meth:`Encoder.encode`
depends only on its arguments (each client's input and its own seed), the server side
accumulates mergeable sums (:class:`Accumulator`) and finishes once per round, and every
encoder declares the privacy event of one message.

Encoders are looked up by a spec string, ``name[:key=value,...]`` (for example
``sstq-flat:b=4,codebook=optimized``); run-level public parameters (dimension, ε, radius,
public seed, device) are given separately.  Third-party packages add encoders through the
entry-point group ``sstq_fl.encoders`` (see README).
"""

from __future__ import annotations

import json
import math
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import rng
from ..lazy import lazy_module
from ..privacy.events import NonPrivateEvent, PrivacyEvent, PureDpEvent
from ..registry import PluginWarning as PluginWarning
from ..registry import Registry
from ..stages import stage
from . import formula

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")

ENTRY_POINT_GROUP = "sstq_fl.encoders"
MIN_EPSILON = 1e-12
"""The smallest per-message ε an encoder accepts (a subnormal ε is charged as a PLD of 0)."""
MAX_EPSILON = 30.0
"""The largest per-message ε an encoder accepts unless it declares another ``max_epsilon``.

The encoders draw their coins as 53-bit uniforms (:func:`sstq_fl.rng.uniform`), so a probability is
realised only to within ``2⁻⁵³``.  Flat ``M``-ary randomized response flips with probability
``(M−1)/(e^ε+M−1)``: at ε = 30 that is at least ``9.4·10⁻¹⁴``, realised to a relative ``1.2·10⁻³``
(the realised ratio stays below ``e^{30.0012}``); from ε ≈ 37.4 + ln(M−1) the keep probability rounds
to 1 and an output has probability 0 for some input, which is ε = ∞, whatever the label says.  It is
PrivUnit's cap too (:data:`sstq_fl.encoders.privunit.MAX_EPSILON`), where its cap coin stops being
resolved."""


@dataclass(frozen=True)
class Param:
    """A declared encoder parameter: its type, default, meaning and allowed values.

    ``low`` / ``high``: the closed range a numeric value must lie in (``None``: unbounded on that side;
    a float must be finite either way); ``above``: an open lower bound (``value > above``)."""

    type: type
    default: Any
    doc: str
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    above: float | None = None

    def out_of_range(self, val: Any) -> str | None:
        """Why the cast ``val`` is outside the declared range (``None``: it is inside)."""
        if self.type is float and not math.isfinite(val):
            return "a finite number"
        low_ok = val > self.above if self.above is not None else self.low is None or val >= self.low
        if low_ok and (self.high is None or val <= self.high):
            return None
        lo = f"> {self.above:g}" if self.above is not None else f">= {self.low:g}" if self.low is not None else ""
        return " and ".join(filter(None, (lo, f"<= {self.high:g}" if self.high is not None else "")))


@dataclass(frozen=True)
class Field:
    """One wire field: ``count`` entries of ``bits`` bits (``kind='uint'``) or float32.

    ``limit`` is the exclusive upper bound of a valid unsigned value (default ``2**bits``).
    """

    name: str
    bits: int
    count: int = 1
    kind: str = "uint"
    limit: int | None = None

    @property
    def total_bits(self) -> int:
        return self.bits * self.count


@dataclass
class Messages:
    """A batch of encoded messages: per field a ``[n, count]`` tensor (int64 or float32)."""

    fields: dict[str, torch.Tensor]
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return next(iter(self.fields.values())).shape[0]

    def select(self, rows: torch.Tensor | list[int]) -> Messages:
        idx = torch.as_tensor(rows, dtype=torch.int64)
        return Messages({k: v[idx.to(v.device)] for k, v in self.fields.items()}, {})


class Encoder(ABC):
    """Base class of every LDP vector encoder.

    Subclasses declare ``name``, ``params``, ``unbiased`` (no default: every registered or
    instantiated class must state it, in its own body or a base other than :class:`Encoder`; it means
    ``E[x̂] = clip(x)`` for every input), ``unbiased_unless_clipped`` (for every input whose Kashin
    coefficients stay within the public bound; clipped coefficients are counted in
    ``Messages.stats['clipped']``), ``bits_formula`` (an arithmetic expression over
    :meth:`bits_quantities`, see :mod:`sstq_fl.encoders.formula`; it must equal :meth:`payload_bits`),
    and implement :meth:`layout`, :meth:`_encode` and :meth:`decode`.  An encoder whose output space is
    small may also define ``output_law(x) -> (Messages, probabilities)``: every possible message, and
    for each input row its exact probability (the conformance kit, :mod:`sstq_fl.testing`, then checks
    ε exactly).  ``width`` names the integer parameter, if any, that trades bits per message for accuracy
    (``b``, ``bits``, ``k``): ``sstq-fl encoders recommend`` and ``bench frontier`` vary it.
    """

    name: ClassVar[str] = ""
    params: ClassVar[dict[str, Param]] = {}
    unbiased: ClassVar[bool]  # E[x̂] = clip(x) for every input; no default (see require_declarations)
    unbiased_unless_clipped: ClassVar[bool] = False  # E[x̂] = clip(x) for every input the encoder does not clip
    private: ClassVar[bool] = True
    max_epsilon: ClassVar[float] = MAX_EPSILON  # the largest ε whose output probabilities float64 realises
    bits_formula: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    width: ClassVar[str | None] = None  # the integer parameter that trades bits for accuracy (recommend, frontier)

    def __init__(self, dim: int, epsilon: float, radius: float = 1.0, seed: int = 0,
                 device: torch.device | str = "cpu", **params: Any):
        require_declarations(type(self))
        if not (isinstance(dim, int | np.integer) and dim >= 1):
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if self.private and not (epsilon >= MIN_EPSILON and math.isfinite(epsilon)):
            raise ValueError(f"epsilon must be finite and at least {MIN_EPSILON:g}, got {epsilon!r}")
        if self.private and epsilon > self.max_epsilon:
            raise ValueError(f"{self.name} supports epsilon <= {self.max_epsilon:g}, got epsilon={epsilon:g} (beyond it "
                             f"float64 coins cannot realise the e^epsilon output ratio)")
        if not (radius > 0 and math.isfinite(radius)):
            raise ValueError(f"radius must be positive and finite, got {radius!r}")
        if int(seed) < 0:
            raise ValueError(f"seed must be non-negative, got {seed}")
        self.dim, self.epsilon, self.radius = int(dim), float(epsilon), float(radius)
        self.seed, self.device = int(seed), torch.device(device)
        self.cfg = resolve_params(self.name, self.params, params)

    # ------------------------------------------------------------------ identity
    @property
    def spec(self) -> str:
        """Canonical spec string (every parameter, sorted)."""
        if not self.cfg:
            return self.name
        return self.name + ":" + ",".join(f"{k}={self.cfg[k]}" for k in sorted(self.cfg))

    def describe(self) -> dict[str, Any]:
        return {"spec": self.spec, "dim": self.dim, "epsilon": self.epsilon if self.private else None,
                "radius": self.radius, "seed": self.seed}

    @property
    def fingerprint(self) -> int:
        """CRC-32 of the public configuration: a message from another configuration is foreign."""
        return zlib.crc32(json.dumps(self.describe(), sort_keys=True).encode())

    def unbiasedness(self) -> dict[str, Any]:
        """What this encoder promises about ``E[x̂] = clip(x)``, for a run's metrics: ``always``,
        ``unless_clipped`` (every input whose coefficients stay within the public level; clipped ones are
        counted) or ``no``."""
        return {"unbiased": "always" if self.unbiased else "unless_clipped" if self.unbiased_unless_clipped else "no"}

    def for_round(self, t: int) -> Encoder:
        """The encoder clients and server use in round ``t`` (``t ≥ 1``): this one, unless an encoder's public
        parameters are drawn afresh each round (a framed encoder's frame, ``draw=round``); engines call it
        for every round's encode and decode."""
        return self

    @property
    def public_coins(self) -> bool:
        """Whether :meth:`encode` and :meth:`decode` need the caller's public per-client ``coins`` (the built-in
        encoders' ``coin=public``; an encoder that needs them by another rule overrides this)."""
        return bool(self.cfg.get("coin") == "public")

    # ------------------------------------------------------------------ declared
    @abstractmethod
    def layout(self) -> list[Field]:
        """The wire fields of one message."""

    def payload_bits(self) -> int:
        """Exact payload bits per message (what the wire format carries)."""
        return sum(f.total_bits for f in self.layout())

    def bits_quantities(self) -> dict[str, Any]:
        """The public quantities :attr:`bits_formula` may name: ``d`` and every parameter (subclasses add more)."""
        return {"d": self.dim, **self.cfg}

    def formula_bits(self) -> int:
        """:attr:`bits_formula` evaluated on :meth:`bits_quantities` (``ValueError`` if it is not an integer)."""
        val = formula.evaluate(self.bits_formula, self.bits_quantities())
        if isinstance(val, bool) or not isinstance(val, int | float) or val != int(val):
            raise ValueError(f"bits formula {self.bits_formula!r} of {self.spec!r} gives {val!r}, not a whole number")
        return int(val)

    def privacy_event(self) -> PrivacyEvent:
        """The privacy event of one message (pure ε-LDP, replace-one)."""
        return PureDpEvent(self.epsilon) if self.private else NonPrivateEvent()

    def mse(self, x: torch.Tensor) -> torch.Tensor | None:
        """Exact expected squared error ``E‖x̂ − clip(x)‖²`` per row, when computable."""
        return None

    # ------------------------------------------------------------------ client
    def encode(self, x: torch.Tensor, seeds: Any, coins: Any = None, constant_time: bool | None = None) -> Messages:
        """Encode each row of ``x`` ``[n, dim]`` with its own seed (``seeds``: ``n`` integers, or secure keys).

        ``coins`` are public per-client seeds, used only by public-coin encoders.  ``constant_time``: run
        every input-dependent loop for its public number of iterations, so the encode time does not
        depend on the input (same messages); default on for secure keys (:func:`sstq_fl.rng.is_keys`),
        off for reproducible seeds.  Encoders without such loops ignore it.
        """
        with stage("clip"):
            x = self.preprocess(x)
        with stage("encode"):
            return self._encode(x, rng.as_seeds(seeds, x.shape[0]), coins)

    def preprocess(self, x: torch.Tensor) -> torch.Tensor:
        """Validate the input and project it onto the public ball of radius ``R``."""
        x = check_input(x, self.dim)
        return clip_to_ball(x.to(self.device), self.radius)

    @abstractmethod
    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages: ...

    # ------------------------------------------------------------------ server
    @abstractmethod
    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        """Per-message estimates ``x̂`` (``[n, dim]``, float64)."""

    def check(self, msgs: Messages) -> None:
        """Encoder-specific validation of decoded wire fields (raise :class:`WireError`)."""

    def accumulator(self) -> Accumulator:
        return Accumulator(self)

    def _contribution(self, msgs: Messages, coins: Any) -> torch.Tensor:
        """Sum of the messages in the accumulation space (default: ``R^d``)."""
        return self.decode(msgs, coins).sum(0)

    def _finish(self, total: torch.Tensor) -> torch.Tensor:
        """Map an accumulated sum to ``R^d`` (e.g. one frame synthesis per round)."""
        return total

    def aggregate(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        """Mean of the decoded messages."""
        acc = self.accumulator()
        with stage("decode"):
            acc.add(msgs, coins)
        with stage("aggregate"):
            return acc.result()


class Accumulator:
    """Mergeable server-side sum of messages; :meth:`result` returns their mean in ``R^d``."""

    def __init__(self, encoder: Encoder):
        self.encoder = encoder
        self.total: torch.Tensor | None = None
        self.count = 0

    def add(self, msgs: Messages, coins: Any = None) -> None:
        part = self.encoder._contribution(msgs, coins)
        self.total = part if self.total is None else self.total + part
        self.count += msgs.n

    def merge(self, other: Accumulator) -> None:
        if other.encoder.fingerprint != self.encoder.fingerprint:
            raise ValueError("cannot merge accumulators of different encoder configurations")
        if other.total is not None:
            self.total = other.total.clone() if self.total is None else self.total + other.total
        self.count += other.count

    def result(self) -> torch.Tensor:
        if self.total is None or self.count == 0:
            raise ValueError("no messages were accumulated")
        return self.encoder._finish(self.total.clone()) / self.count


class WireError(ValueError):
    """A message that is malformed, truncated, out of range or foreign."""


# ---------------------------------------------------------------------- helpers


def check_input(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Reject inputs of the wrong shape or with NaN/Inf entries (naming the rows)."""
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(np.asarray(x))
    if x.dim() == 1:
        x = x[None, :]
    if x.dim() != 2 or x.shape[1] != dim:
        raise ValueError(f"input must have shape [clients, {dim}] (dimension d={dim}), got {tuple(x.shape)}")
    if not x.is_floating_point():
        x = x.double()
    if bool(torch.isfinite(torch.linalg.vector_norm(x, dim=1)).all()):  # one pass, no [n, d] temporary
        return x
    bad = ~torch.isfinite(x).all(dim=1)  # a NaN/inf entry, or only a norm too large for the dtype
    if bool(bad.any()):
        rows = torch.nonzero(bad).flatten()[:10].tolist()
        raise ValueError(f"input contains NaN or infinite values (gradient rows {rows})")
    return x


def ball_scale(x: torch.Tensor, radius: float) -> torch.Tensor:
    """``min(1, R/‖x‖)`` per row (``[n, 1]``): the factor that projects each row onto the ball of radius ``R``."""
    norms = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    return torch.where(norms > radius, radius / norms.clamp_min(1e-300), torch.ones_like(norms))


def clip_to_ball(x: torch.Tensor, radius: float) -> torch.Tensor:
    """``x · min(1, R/‖x‖)`` row by row."""
    return x * ball_scale(x, radius)


def resolve_params(name: str, declared: dict[str, Param], given: dict[str, Any]) -> dict[str, Any]:
    """Cast and validate ``given`` against the declared parameters (defaults filled in)."""
    unknown = set(given) - set(declared)
    if unknown:
        raise ValueError(f"encoder {name!r} has no parameter(s) {sorted(unknown)}; "
                         f"known: {sorted(declared) or 'none'}")
    out: dict[str, Any] = {}
    for key, p in declared.items():
        val = given.get(key, p.default)
        try:
            val = _cast(p.type, val)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"encoder {name!r}: parameter {key!r} must be {p.type.__name__}, got {val!r}") from exc
        if p.choices is not None and val not in p.choices:
            raise ValueError(f"encoder {name!r}: parameter {key!r} must be one of {list(p.choices)}, got {val!r}")
        why = p.out_of_range(val) if p.type in (int, float) else None
        if why is not None:
            raise ValueError(f"encoder {name!r}: parameter {key!r} must be {why}, got {val!r}")
        out[key] = val
    return out


def _cast(typ: type, val: Any) -> Any:
    if typ is bool and isinstance(val, str):
        if val.lower() in ("1", "true", "yes"):
            return True
        if val.lower() in ("0", "false", "no"):
            return False
        raise ValueError(val)
    if typ is int and isinstance(val, float) and not val.is_integer():
        raise ValueError(val)
    return typ(val)


# ---------------------------------------------------------------------- registry

BUILTIN_MODULES = tuple(f"sstq_fl.encoders.{m}" for m in (
    "clean", "privunit", "privunit_mrc", "sqkr", "sstq", "vqsgd", "compression", "privunitg", "projunit", "rrsc", "mmrc"))
"""The modules whose ``@register_encoder`` classes are the built-in encoders (imported on first look-up)."""


def _is_encoder_class(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, Encoder)


def require_declarations(cls: type[Encoder]) -> None:
    """Refuse (one-line ``ValueError`` naming the class) an encoder class that does not declare ``unbiased``
    in its own body or a base other than :class:`Encoder`, or whose ``bits_formula`` is not a formula."""
    declared = [k for k in cls.__mro__ if k is not Encoder and issubclass(k, Encoder) and "unbiased" in vars(k)]
    if not declared:
        raise ValueError(f"encoder class {cls.__module__}.{cls.__qualname__} does not declare 'unbiased' "
                         f"(set unbiased = True or False in its class body)")
    if cls.bits_formula:
        try:
            formula.parse(cls.bits_formula)
        except ValueError as exc:
            raise ValueError(f"encoder class {cls.__module__}.{cls.__qualname__}: {exc}") from None


def _set_name(name: str, cls: type[Encoder]) -> None:
    require_declarations(cls)
    cls.name = name


ENCODERS: Registry[type[Encoder]] = Registry("encoder", builtins=BUILTIN_MODULES, group=ENTRY_POINT_GROUP,
                                             accepts=_is_encoder_class, kind="an Encoder subclass",
                                             on_register=_set_name)
"""Every encoder class by name: the built-ins, then the ``sstq_fl.encoders`` entry points.  A plug-in
that fails to load, is not an :class:`Encoder` subclass or takes a registered name is skipped with a
:class:`~sstq_fl.registry.PluginWarning` naming it, so one broken plug-in never breaks a command."""


def register_encoder(name: str) -> Callable[[type[Encoder]], type[Encoder]]:
    """Class decorator: register an :class:`Encoder` subclass under ``name`` (and set its ``name``)."""
    return ENCODERS.register(name)  # type: ignore[no-any-return]


def registry() -> dict[str, type[Encoder]]:
    """All registered encoders, plug-ins included."""
    return ENCODERS.as_dict()


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``'name:k=v,k2=v2'`` → ``('name', {'k': 'v', 'k2': 'v2'})``.  An empty name, an empty parameter list
    after ``:``, an empty item (``b=4,,``), an empty key or value, or a key given twice is refused naming the spec."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"an encoder spec must be a non-empty string, got {spec!r}")
    name, colon, rest = spec.strip().partition(":")
    if not name.strip():
        raise ValueError(f"encoder spec {spec!r} has no encoder name before ':'")
    params: dict[str, str] = {}
    for part in (p.strip() for p in rest.split(",")) if colon else ():
        key, eq, val = part.partition("=")
        if not part:
            raise ValueError(f"empty parameter in encoder spec {spec!r} (expected name:key=value,...)")
        if not eq or not key.strip() or not val.strip():
            raise ValueError(f"malformed parameter {part!r} in encoder spec {spec!r} (expected key=value)")
        if key.strip() in params:
            raise ValueError(f"duplicate parameter {key.strip()!r} in encoder spec {spec!r} (give each key once)")
        params[key.strip()] = val.strip()
    return name.strip(), params


def make_encoder(spec: str, dim: int, epsilon: float, radius: float = 1.0, seed: int = 0,
                 device: torch.device | str = "cpu") -> Encoder:
    """Build the encoder named by ``spec`` for a run's public parameters."""
    name, params = parse_spec(spec)
    return ENCODERS[name](dim=dim, epsilon=epsilon, radius=radius, seed=seed, device=device, **params)
