"""The alpha-beta sweep: each collective at a fixed message over groups of 2..N ranks, and at
the full world over a range of messages, predicted with ``planner.cost.comm`` on the replay
profile. It shows why scaling is not linear: a ring all-reduce costs 2(n-1)/n * M/BW +
2(n-1)*alpha, so the bandwidth term saturates while the latency term keeps growing with n, and
a group that leaves the fast domain drops to the slower tier.
"""

from __future__ import annotations

import re

import numpy as np

from planner.cost import comm
from planner.errors import PlannerError
from planner.schemas.hardware import ClusterSpec
from planner.validate.schemas import COLLECTIVE_OPS, MAX_MESSAGE_BYTES, TermSpec
from planner.validate.terms import collective_term

SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str, flag: str) -> int:
    """'64KiB', '1MiB', '4MB', '1024' -> bytes; a one-line error naming ``flag`` otherwise."""
    match = _SIZE.match(text)
    unit = match[2].lower() if match else ""
    size = float(match[1]) * SIZE_UNITS[unit] if match is not None and unit in SIZE_UNITS else 0.0
    if not 0 < size <= MAX_MESSAGE_BYTES:
        raise PlannerError(
            f"{flag}: '{text}' is not a size; allowed: a positive number up to 1 TiB with an optional unit "
            f"({', '.join(u for u in ('B', 'KiB', 'MiB', 'GiB', 'KB', 'MB', 'GB'))})"
        )
    return max(int(size), 1)


def parse_sizes(text: str, flag: str) -> list[int]:
    """'64KiB,1MiB' -> bytes each; an empty list is a one-line error naming ``flag``."""
    sizes = [parse_size(part, flag) for part in text.split(",") if part.strip()]
    if not sizes:
        raise PlannerError(f"{flag}: give at least one message size, e.g. 64KiB,1MiB")
    return sizes


def parse_ops(text: str) -> list[str]:
    """'all-reduce,send-recv' or 'all' -> op names; a one-line error for an unknown op."""
    allowed = [op.replace("_", "-") for op in COLLECTIVE_OPS]
    if text.strip() == "all":
        return list(COLLECTIVE_OPS)
    ops = [part.strip() for part in text.split(",") if part.strip()]
    if not ops:
        raise PlannerError(f"--ops: give at least one collective; allowed: all, {', '.join(allowed)}")
    for op in ops:
        if op == "all":
            raise PlannerError(f"--ops: 'all' stands alone (it sweeps {', '.join(allowed)}); got '{text.strip()}'")
        if op not in allowed:
            raise PlannerError(f"--ops: unknown collective '{op}'; allowed: all, {', '.join(allowed)}")
        if ops.count(op) > 1:
            raise PlannerError(f"--ops: '{op}' given {ops.count(op)} times; give each collective once")
    return [op.replace("-", "_") for op in ops]


def sweep_terms(
    ops: list[str], sizes_bytes: list[int], fixed_bytes: int, world_size: int, cluster: ClusterSpec
) -> tuple[list[TermSpec], list[str]]:
    """The sweep's terms and each one's series ('world': groups of the first 2..N ranks at
    ``fixed_bytes``; 'size': all N ranks at each of ``sizes_bytes``)."""
    if world_size < 2:
        raise PlannerError(f"--local-ranks: the sweep needs at least 2 ranks, got {world_size}")
    terms: list[TermSpec] = []
    series: list[str] = []
    for op in ops:
        plan = [("world", w, fixed_bytes) for w in range(2, world_size + 1)]
        plan += [("size", world_size, size) for size in sizes_bytes]
        for label, group, size in plan:
            link = comm.group_link(cluster, np.array([group]), np.array([1]))
            term = collective_term(f"{op}.n{group}.{size}B", op, f"first:{group}", link, group, float(size), 1.0, None)
            if term is not None:
                terms.append(term)
                series.append(label)
    return terms, series
