"""Checks of counts and durations given by users: one wording everywhere, ``True``/``False`` never taken for 1/0."""

from __future__ import annotations

import math
from typing import Any

from .errors import InvalidMessageError


def is_whole(value: Any, minimum: int = 1) -> bool:
    """Whether ``value`` is an int (not a bool) of at least ``minimum``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def is_number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (not a bool, not NaN, not infinity: NaN compares false with
    everything, so a NaN interval or budget would pass every range check and then never end or never wait)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def check_count(value: Any, what: str, *, minimum: int = 1, allow_none: bool = False) -> None:
    """Raise ValueError naming ``what`` unless ``value`` is a whole number >= ``minimum`` (or None if allowed)."""
    if (value is None and allow_none) or is_whole(value, minimum):
        return
    wanted = "a positive integer" if minimum == 1 else f"an integer of {minimum} or more"
    raise ValueError(f"{what} must be {wanted}{' or None' if allow_none else ''}, got {value!r}")


def check_seconds(value: Any, what: str, *, allow_none: bool = False) -> None:
    """Raise ValueError naming ``what`` unless ``value`` is a positive number of seconds (or None if allowed)."""
    if (value is None and allow_none) or (is_number(value) and value > 0):
        return
    raise ValueError(f"{what} must be a positive, finite number of seconds{' or None' if allow_none else ''}, got "
                     f"{value!r}")


def check_stored_text(value: Any, what: str, most: int, where: str) -> str:
    """``value`` if it is non-empty text of at most ``most`` characters without NUL (what the text column ``where``
    names can store), else InvalidMessageError naming ``what``."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidMessageError(f"{what} must be non-empty text, got {value!r}")
    if len(value) > most:
        raise InvalidMessageError(f"{what} {value[:40]!r}... is {len(value)} characters; {where} holds at most {most}")
    if "\x00" in value:
        raise InvalidMessageError(f"{what} {value!r} contains a NUL character")
    return value
