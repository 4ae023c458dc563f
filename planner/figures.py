"""How the planner's figures read in text (tables, explanations, warnings): one place, so that
the same rate reads the same everywhere."""

from __future__ import annotations

RATE_SIGNIFICANT_BELOW = 100.0
"""Rates below this are shown to three significant figures instead of as whole numbers, so that a
slow device (a CPU profile's 0.33 tokens/s per core) does not read as 0. A display choice."""


def rate(value: float) -> str:
    """A throughput for the tables: '1,214' at 100 and above, '0.328' or '42.7' below."""
    if abs(value) >= RATE_SIGNIFICANT_BELOW:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def ordinal(n: int) -> str:
    """1 -> '1st', 2 -> '2nd', 3 -> '3rd', 11 -> '11th', 22 -> '22nd'."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
