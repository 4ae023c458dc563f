"""A small event simulation of pipeline schedules: the cross-check of the bubble closed forms
(ARCHITECTURE 8.7) and the timeline that ``--plot`` draws.

Each pipeline rank runs its operations in the order its schedule fixes; an operation starts when
its rank is free and its input is ready (the previous virtual stage's forward, or the next one's
backward). Orders, per rank r of p, m micro-batches, v model chunks:

  GPipe              all forwards, then all backwards (Huang et al. 2019, figure 2)
  1F1B               min(p-r-1, m) warm-up forwards, then one forward one backward, then the
                     remaining backwards (Narayanan et al. 2021, section 2.2.1, figure 4 top)
  interleaved 1F1B   Megatron-Core's order: each chunk in turn over a group of N micro-batches
                     (``schedule_table``; N = p, Megatron's default, where p divides m, else
                     ``schedules.microbatch_group_size``), backwards taking the chunks in
                     reverse; (p-r-1)*2 + (v-1)*N warm-up forwards (Megatron-Core
                     megatron/core/pipeline_parallel/schedules.py,
                     forward_backward_pipelining_with_interleaving; Narayanan et al. 2021
                     section 2.2.2, figure 4 bottom)

With equal stages and no communication the simulated idle share equals (p-1)/(m+p-1) for GPipe
and 1F1B and (p-1)/(v*m+p-1) for interleaved 1F1B at every group size N it runs, the peak
in-flight micro-batches ((v-1)N + 2p - 1)/v on the first rank and ((v-1)N + 1)/v on the last:
tests/test_simulate.py.
DualPipe and DualPipeV run the reference implementation's own program (``simulate_dual``), which
splits some backwards into input and weight gradients (W ops). ZB-H1 is not simulated; its
closed form (pipeline.py) stands alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from planner.errors import PlannerError
from planner.schedules import microbatch_group_size
from planner.schemas.parallel import DUAL_SCHEDULES

Kind = Literal["F", "B", "W"]
SIMULATED_SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", *DUAL_SCHEDULES)


@dataclass(frozen=True)
class Op:
    """One forward, backward (the input gradient only where a W follows) or weight gradient (W)
    of one micro-batch through one model chunk on one rank."""

    rank: int
    kind: Kind
    microbatch: int
    chunk: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Timeline:
    """A simulated step: every operation, the makespan and the idle share of the ranks."""

    ops: list[Op]
    makespan_s: float
    bubble_fraction: float
    virtual_stages: int

    @classmethod
    def of(cls, ops: list[Op], busy_s: float, virtual_stages: int) -> Timeline:
        """The timeline of ``ops``, whose ranks each worked ``busy_s``."""
        makespan = max(op.end_s for op in ops)
        return cls(ops=ops, makespan_s=makespan, bubble_fraction=1.0 - busy_s / makespan, virtual_stages=virtual_stages)

    def peak_in_flight(self, rank: int) -> float:
        """Most micro-batches' worth of activations rank ``rank`` holds at once: a chunk's
        forward stores 1/v of the stage's activations until its backward frees them."""
        events = sorted((op.end_s, op.kind == "B") for op in self.ops if op.rank == rank and op.kind != "W")
        held = peak = 0
        for _, is_backward in events:  # at equal times a backward frees before a forward stores
            held += -1 if is_backward else 1
            peak = max(peak, held)
        return peak / self.virtual_stages


def _order(schedule: str, rank: int, p: int, m: int, v: int) -> list[tuple[Kind, int, int]]:
    """The (kind, micro-batch, chunk) sequence rank ``rank`` runs."""
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in reversed(range(m))]
    if schedule == "1f1b":
        warm = min(p - rank - 1, m)
        order: list[tuple[Kind, int, int]] = [("F", i, 0) for i in range(warm)]
        for i in range(m - warm):
            order += [("F", warm + i, 0), ("B", i, 0)]
        return order + [("B", i, 0) for i in range(m - warm, m)]
    total = m * v
    group = int(microbatch_group_size(np.array(p), np.array(m)))
    table = schedule_table(m, v, group)

    def forward(k: int) -> tuple[Kind, int, int]:
        return ("F", *table[k])

    def backward(k: int) -> tuple[Kind, int, int]:
        return ("B", table[k][0], v - 1 - table[k][1])

    warm = min((p - rank - 1) * 2 + (v - 1) * group, total)
    order = [forward(k) for k in range(warm)]
    for k in range(total - warm):
        order += [forward(warm + k), backward(k)]
    return order + [backward(k) for k in range(total - warm, total)]


def schedule_table(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) of each virtual micro-batch of the interleaved schedule: each chunk
    in turn over ``group`` micro-batches in a row, the last group taking what is left
    (Megatron-Core megatron/core/pipeline_parallel/schedules.py ``get_schedule_table``)."""
    table: list[tuple[int, int]] = []
    for first in range(0, m, group):
        last = m if first + group >= m else first + group
        table += [(mb, chunk) for chunk in range(v) for mb in range(first, last)]
    return table


def simulate(schedule: str, p: int, m: int, forward_s: float, backward_s: float, virtual_stages: int = 1) -> Timeline:
    """Run the schedule with ``forward_s`` / ``backward_s`` per micro-batch per rank (each chunk
    takes 1/v of them) and no communication time."""
    if schedule not in SIMULATED_SCHEDULES:
        raise PlannerError(f"schedule '{schedule}' is not simulated; simulated: {', '.join(SIMULATED_SCHEDULES)}")
    if schedule in DUAL_SCHEDULES:
        from planner.cost.simulate_dual import simulate_dual

        if m < 2 * p or (schedule == "dualpipe" and (p % 2 or m % 2)):
            raise PlannerError(
                f"{schedule} needs micro-batches >= 2 x pp ({m} < {2 * p})"
                if m < 2 * p
                else f"dualpipe needs an even pp and an even number of micro-batches (pp {p}, {m} micro-batches)"
            )
        return simulate_dual(schedule, p, m, forward_s, backward_s)
    v = virtual_stages if schedule == "interleaved-1f1b" else 1
    if schedule == "interleaved-1f1b" and m < p:
        raise PlannerError(f"interleaved-1f1b needs at least pp {p} micro-batches (got {m})")
    f, b = forward_s / v, backward_s / v
    orders = [_order(schedule, r, p, m, v) for r in range(p)]
    done: dict[tuple[Kind, int, int], float] = {}  # (kind, micro-batch, virtual stage) -> end
    free = [0.0] * p
    heads = [0] * p
    ops: list[Op] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(p):
            while heads[r] < len(orders[r]):
                kind, mb, chunk = orders[r][heads[r]]
                stage = chunk * p + r
                if kind == "F":
                    dep = ("F", mb, stage - 1) if stage > 0 else None
                else:
                    dep = ("B", mb, stage + 1) if stage < p * v - 1 else ("F", mb, stage)
                if dep is not None and dep not in done:
                    break
                start = max(free[r], done[dep] if dep is not None else 0.0)
                end = start + (f if kind == "F" else b)
                done[(kind, mb, stage)] = end
                free[r] = end
                ops.append(Op(r, kind, mb, chunk, start, end))
                heads[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"{schedule} order deadlocks for p={p}, m={m}, v={v}")  # a bug, not user input
    return Timeline.of(ops, m * (forward_s + backward_s), v)
