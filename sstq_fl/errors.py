"""An exception as the one line a user sees (the project's errors are one line, never a traceback)."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message ("" when it has none)."""
    return (str(exc).strip().splitlines() or [""])[0]


def described(exc: BaseException) -> str:
    """``Type: first line of the message``, for an exception from code the user does not see (theirs, a library's)."""
    return f"{type(exc).__name__}: {first_line(exc)}"


def user_code(where: str, fn: object, *args: object) -> object:
    """``fn(*args)``, with any ``Exception`` or ``SystemExit`` from the user's code turned into a one-line
    ``ValueError`` ``"<where> raised Type: message"`` (``KeyboardInterrupt`` passes through)."""
    try:
        return fn(*args)  # type: ignore[operator]
    except (Exception, SystemExit) as exc:
        if isinstance(exc, ValueError) and str(exc).startswith("task "):
            raise
        raise ValueError(f"{where} raised {described(exc) if str(exc) else type(exc).__name__}") from None
