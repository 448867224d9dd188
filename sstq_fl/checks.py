"""Up-front checks of inputs that no option declaration states: an array's size against a stated memory
limit, a torch device's spelling and presence, a Ray address that answers, and an optional dependency that is
installed.  Each refusal is a one-line ``ValueError`` raised before anything is allocated, started or written."""

from __future__ import annotations

import importlib.util
import os
import re
import socket

MAX_ARRAY_BYTES_ENV = "SSTQ_FL_MAX_ARRAY_BYTES"
DEFAULT_MAX_ARRAY_BYTES = 1 << 34
"""The largest single array (16 GiB) a command allocates unless ``$SSTQ_FL_MAX_ARRAY_BYTES`` says otherwise."""
RAY_PROBE_TIMEOUT_S = 5.0
OPTIONAL = {"ray": ("Ray", "simulation"), "opacus": ("Opacus", "opacus")}
"""The optional dependencies by module: their name and the sstq-fl extra that installs them."""


def require(module: str, what: str) -> None:
    """Refuse ``what`` in one line when the optional dependency ``module`` (a key of :data:`OPTIONAL`) is not
    installed, naming the extra that installs it (the core installs without Ray or Opacus)."""
    if importlib.util.find_spec(module) is None:
        name, extra = OPTIONAL[module]
        raise ValueError(f"{what} needs {name}: pip install 'sstq-fl[{extra}]'")


def max_array_bytes() -> int:
    """The memory limit of one array: ``$SSTQ_FL_MAX_ARRAY_BYTES`` (bytes) if set, else 16 GiB."""
    text = os.environ.get(MAX_ARRAY_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_ARRAY_BYTES
    try:
        return max(1, int(text))
    except ValueError:
        raise ValueError(f"${MAX_ARRAY_BYTES_ENV} must be a number of bytes, got {text!r}") from None


def check_array(what: str, elements: int, itemsize: int = 8) -> None:
    """Refuse ``what`` (``elements`` entries of ``itemsize`` bytes) when it exceeds :func:`max_array_bytes`."""
    limit = max_array_bytes()
    if elements * itemsize > limit:
        raise ValueError(f"{what} would need {_size(elements * itemsize)}, beyond the {_size(limit)} limit of one "
                         f"array (${MAX_ARRAY_BYTES_ENV} raises it)")


def _size(n: float) -> str:
    """Bytes in words: ``64 GiB``, ``2.8 PiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} PiB"  # pragma: no cover (the loop returns)


_DEVICE = re.compile(r"(cpu|cuda)(?::(\d+))?")


def torch_device(text: str, present: bool = True) -> str:
    """``text`` as a torch device: ``cpu``, ``cuda`` or ``cuda:N``; with ``present``, one that exists here (N
    below the CUDA device count).  Anything else is a one-line ``ValueError``."""
    m = _DEVICE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"device must be cpu, cuda or cuda:N, got {text!r}")
    if m.group(1) == "cpu":
        if m.group(2) is not None:
            raise ValueError(f"device must be cpu, cuda or cuda:N, got {text!r}")
        return "cpu"
    if not present:
        return text.strip()
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(m.group(2) or 0)
    if index >= count:
        have = "no CUDA device here" if count == 0 else f"{count} CUDA device{'s' if count > 1 else ''} here"
        raise ValueError(f"device {text!r} is not available ({have}); use --device cpu")
    return text.strip()


def ray_endpoint(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a Ray address ``host:port`` or ``ray://host:port``; None for ``auto`` / ``local``
    (Ray resolves those itself); a one-line ``ValueError`` for anything else."""
    text = address.strip()
    if text in ("auto", "local"):
        return None
    host, sep, port = text.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--ray-address must be host:port (or auto), got {address!r}")
    return host.strip("[]"), int(port)


def probe_ray(address: str, timeout: float = RAY_PROBE_TIMEOUT_S) -> None:
    """Refuse a Ray address where nothing accepts a connection within ``timeout`` seconds (before Ray is
    started: ``ray.init`` itself retries for minutes)."""
    end = ray_endpoint(address)
    if end is None:
        return
    try:
        socket.create_connection(end, timeout=timeout).close()
    except OSError as exc:
        raise ValueError(f"--ray-address {address}: nothing answers there within {timeout:g} s "
                         f"({exc.strerror or type(exc).__name__})") from None
