"""The rows an iteration still runs (:class:`Rows`), on the adaptive or the fixed schedule, for the Kashin methods of
:mod:`sstq_fl.encoders.maths.kashin`: one implementation of each method serves both, the schedule a parameter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...lazy import lazy_module

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")


class Rows:
    """The rows an iteration still runs, on one of two schedules.

    Adaptive (``fixed=False``): the working tensors hold only those rows (``ids``, in order) and a row that
    leaves is dropped from them, so the time follows the input.  Fixed (the public schedule): they hold every
    row all along, ``live`` marks those still running, and a row that leaves keeps its value by a mask: no
    early exit and no data-dependent shape, so every input costs the method's cap.  Each row's arithmetic is
    the same on both, so the results are equal (bit for bit where the frame's transforms are row-wise).
    Zero rows never run adaptively; on the fixed schedule they run on zeros."""

    def __init__(self, live: torch.Tensor, fixed: bool) -> None:
        self.fixed, self.live = fixed, live
        self.ids = live if fixed else torch.nonzero(live).flatten()

    @property
    def count(self) -> int:
        """Rows in the working tensors."""
        return int(self.ids.shape[0])

    @property
    def empty(self) -> bool:
        """No row left to run (never, on the fixed schedule)."""
        return not self.fixed and not self.ids.numel()

    def take(self, t: torch.Tensor) -> torch.Tensor:
        """The working rows of a per-row tensor of the whole batch."""
        return t if self.fixed else t[self.ids]

    def running(self, mask: torch.Tensor) -> torch.Tensor:
        """``mask`` (over the working rows) restricted to the rows still running."""
        return self.live & mask if self.fixed else mask

    def assign(self, stat: torch.Tensor, value: torch.Tensor | int) -> torch.Tensor:
        """``stat`` (``[n]``) at the running rows ← ``value`` (per working row, or one number)."""
        if self.fixed:
            return torch.where(self.live, value, stat)
        stat[self.ids] = value
        return stat

    def bump(self, stat: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``stat`` (``[n]`` integer) ``+= 1`` at the running rows (where ``mask``: a :meth:`running` mask)."""
        if self.fixed:
            return stat.add_((self.live if mask is None else mask).long())
        stat[self.ids] += 1 if mask is None else mask.long()
        return stat

    def accumulate(self, out: torch.Tensor, c: torch.Tensor, idx: torch.Tensor | None, m: float) -> torch.Tensor:
        """``out`` at the running rows ``+= clip(c, ±m)`` (at ``idx`` if given)."""
        if not self.fixed:
            add_rows(out, self.ids, c, idx, m)
            return out
        return out.add_(masked(self.live, pick(c, idx).clamp(-m, m), torch.zeros_like(out)))

    def update(self, mask: torch.Tensor | None, value: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        """``other`` (a working tensor) with the rows where ``mask`` (every running row when None) replaced by
        ``value``'s, in place."""
        if self.fixed:
            return masked(self.live if mask is None else mask, value, other)
        if mask is None:
            return value
        other[mask] = value[mask]
        return other

    def retire(self, mask: torch.Tensor, out: torch.Tensor, value: torch.Tensor, idx: torch.Tensor | None,
               conv: torch.Tensor, ok: torch.Tensor, *state: torch.Tensor,
               add: bool = False) -> tuple[torch.Tensor, ...]:
        """The rows where ``mask`` (a :meth:`running` mask) leave: ``out`` gets their ``value`` (at ``idx``;
        added to it with ``add``), ``conv`` their ``ok``; returns ``(out, conv, *state)``, ``state`` (working
        tensors) without them."""
        if self.fixed:
            v = pick(value, idx)
            out = out.add_(masked(mask, v, torch.zeros_like(out))) if add else masked(mask, v, out)
            self.live = self.live & ~mask
            return (out, torch.where(mask, ok, conv), *state)
        if bool(mask.all()):  # the usual end: no row selection (boolean indexing costs more than an iteration)
            if add:
                add_rows(out, self.ids, value, idx, None)
            else:
                out[self.ids] = pick(value, None if idx is None else idx[self.ids])
            conv[self.ids] = ok
            self.ids = self.ids[:0]
            return (out, conv, *(t[:0] for t in state))
        if not bool(mask.any()):
            return (out, conv, *state)
        if add:
            add_rows(out, self.ids[mask], value[mask], idx, None)
        else:
            set_rows(out, self.ids, value, mask, idx)
        conv[self.ids[mask]] = ok[mask]
        keep = ~mask
        self.ids = self.ids[keep]
        return (out, conv, *(t[keep] for t in state))

    def drop(self, mask: torch.Tensor, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The rows where ``mask`` leave without a result; returns ``state`` without them."""
        if self.fixed:
            self.live = self.live & ~mask
            return state
        if not bool(mask.any()):
            return state
        keep = ~mask
        self.ids = self.ids[keep]
        return tuple(t[keep] for t in state)


def unit_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(‖x‖, x/‖x‖)`` per row, zero rows kept as zeros."""
    norms = torch.linalg.vector_norm(x, dim=1)
    return norms, x / torch.where(norms > 0, norms, 1.0)[:, None]


def pick(s: torch.Tensor, idx: torch.Tensor | None) -> torch.Tensor:
    return s if idx is None else s.gather(1, idx)


def masked(mask: torch.Tensor, value: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """``other`` with the rows where ``mask`` holds replaced by ``value``'s, in place (no data-dependent shape)."""
    return torch.where(mask.view(-1, *([1] * (value.dim() - 1))), value, other, out=other)


def add_rows(out: torch.Tensor, rows: torch.Tensor, c: torch.Tensor, idx: torch.Tensor | None, m: float | None) -> None:
    """``out[rows] += clip(c, ±m)`` (no clipping when ``m`` is None), at ``idx`` if given."""
    if idx is not None:
        c = c.gather(1, idx[rows])
    if m is not None:
        c = c.clamp(-m, m)
    if rows.numel() == out.shape[0]:
        out.add_(c)  # rows is the full, sorted range: no scatter needed
    else:
        out.index_add_(0, rows, c)


def set_rows(out: torch.Tensor, rows: torch.Tensor, s: torch.Tensor, leave: torch.Tensor, idx: torch.Tensor | None) -> None:
    """``out[rows[leave]] = s[leave]`` (at ``idx`` if given: gathered before the rows are selected)."""
    if idx is None:
        out[rows[leave]] = s[leave]
    else:
        out[rows[leave]] = s.gather(1, idx[rows])[leave]
