"""How the planner's figures read in text (tables, explanations, warnings): one place, so that
the same rate reads the same everywhere."""

from __future__ import annotations

import math

RATE_SIGNIFICANT_BELOW = 100.0
"""Rates below this are shown to three significant figures instead of as whole numbers, so that a
slow device (a CPU profile's 0.33 tokens/s per core) does not read as 0. A display choice."""

RATE_POSITIONAL_ABOVE = 1e-6
"""Rates from here to ``RATE_SIGNIFICANT_BELOW`` are written without an exponent (at most eight
decimals); smaller ones with one. A display choice."""


def rate(value: float) -> str:
    """A throughput for the tables: '1,214' at 100 and above, '0.328', '42.7' or '0.0000123' below
    (three significant figures in positional notation), and below ``RATE_POSITIONAL_ABOVE`` in
    an exponent ('1.23e-09'), which a column of hundreds of zeros would not be."""
    if abs(value) >= RATE_SIGNIFICANT_BELOW:
        return f"{value:,.0f}"
    if value == 0 or not math.isfinite(value) or abs(value) < RATE_POSITIONAL_ABOVE:
        return f"{value:.3g}"
    rounded = float(f"{value:.3g}")  # 99.96 -> 100, whose digits then count
    decimals = max(0, 2 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:.{decimals}f}"


def seconds(value: float) -> str:
    """A time in prose: '18.50 s' from a second up, '1.82 ms' or '0.0123 ms' below (three
    significant figures), so that a small model's millisecond of hidden traffic does not read
    '0.00 s'."""
    if abs(value) >= 0.995 or value == 0 or not math.isfinite(value):
        return f"{value:.2f} s"
    return f"{value * 1e3:.3g} ms"


def ordinal(n: int) -> str:
    """1 -> '1st', 2 -> '2nd', 3 -> '3rd', 11 -> '11th', 22 -> '22nd'."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
