"""One check for every argument and setting given in seconds, so each refuses the same
things with the same words: a bool or a str (``"5"``) is a TypeError; nan (every bound
fails it, so a deadline no clock reaches, or a wait that reads as none) and values past the
bounds are ValueErrors. The bounds differ per use; the reasons are beside each caller."""

from __future__ import annotations

__all__ = ["A_YEAR", "seconds"]

#: the usual upper bound (s): past it a wait is a time_t overflow rather than a wait
A_YEAR = 365 * 86_400.0


def seconds(
    name: str,
    value: object,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float = A_YEAR,
) -> float:
    """``value`` if it is a number of seconds within the bounds (``above`` is exclusive,
    ``at_least`` inclusive; neither: only -inf is refused below), else the error naming
    ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be seconds, got {value!r}")
    if isinstance(value, int) and not -(2**63) <= value < 2**63:  # (no float: an OverflowError)
        raise ValueError(f"{name} must be seconds, got an int of {value.bit_length()} bits")
    low_ok = (
        value > above
        if above is not None
        else value >= at_least
        if at_least is not None
        else value > float("-inf")
    )
    if not (low_ok and value <= at_most):  # nan fails both
        said = []
        if at_least == -A_YEAR and at_most == A_YEAR:
            said.append("within a year either way")
        else:
            if above is not None:
                said.append(f"above {above:g}")
            elif at_least is not None and at_least != float("-inf"):
                said.append(f"at least {at_least:g}")
            if at_most != float("inf"):
                said.append("at most a year" if at_most == A_YEAR else f"at most {at_most:g}")
        bounds = " " + " and ".join(said) if said else ""
        raise ValueError(f"{name} must be seconds{bounds}, got {value}")
    return value
