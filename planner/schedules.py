"""Pipeline schedules as data: one entry per schedule of ``schemas.parallel.Schedule``, holding
the numbers the step, the memory and the traffic price it by. A new schedule is one entry here
(with its name in the Schedule literal, its rules in ``planner.constraints`` and, if it is to be
drawn from its own order, a program in ``cost.simulate``).

Each entry gives, as functions of numpy columns p (pipeline ranks), v (model chunks per rank,
the mesh's virtual stages) and m (micro-batches per step):

  bubble_slots     idle time of a step in slots (one micro-batch's forward and backward on a rank)
  in_flight        micro-batches' worth of activations rank i holds at its peak (a fourth column, i:
                   0 the first stage, p - 1 the last)
  chunks_per_rank  model chunks a rank runs per micro-batch (PP sends scale with it)

and as constants: ``async_sends`` (the steady state's sends may run behind the next chunk's
compute where the stack overlaps them, ``Stack.p2p_overlap``), ``v_shaped`` (rank r holds model
chunks r and 2p-1-r, so the two at the V's turn share rank p-1 and pass nothing over a link),
``parameter_copies`` (model
states a rank keeps), ``head_share`` (the share of micro-batches whose LM head and loss the
head's rank runs) and ``batch_times_pp`` (the global batch must also be a multiple of p where
the stack's interleaving needs p | m: one without a micro-batch group size,
``Stack.interleaved_group_size``). Sources are in each entry's ``source``;
``tests/test_simulate.py`` checks the bubble and every rank's in-flight figure against the event
simulation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

Columns = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
RankColumns = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class ScheduleShape:
    bubble_slots: Columns
    in_flight: RankColumns
    chunks_per_rank: Columns
    parameter_copies: float
    head_share: float
    batch_times_pp: bool
    source: str
    bubble_text: str  # the bubble fraction, bubble_slots / (m + bubble_slots), as the tables' legend writes it
    async_sends: bool = False
    v_shaped: bool = False


def microbatch_group_size(p: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The interleaved schedule's micro-batch group size N (Megatron-Core
    ``microbatch_group_size_per_vp_stage``, ``--microbatch-group-size-per-virtual-pipeline-stage``:
    each model chunk runs N micro-batches in a row): p where p divides m, Megatron's default; else
    the smallest N > p that ``forward_backward_pipelining_with_interleaving`` accepts (p <= N <= m,
    and m mod N either 0 or at least p, lest the last group leave dependency bubbles), the fewest
    micro-batches in flight (the warm-up grows by v-1 chunks per unit of N). m < p: p (refused by
    the rule 'interleaved_microbatches'). The bubble does not depend on N: the event simulation
    of Megatron-Core's schedule table (``cost.simulate``) gives (p-1)/(vm+p-1) for every N it
    accepts (tests/test_simulate.py)."""
    p, m = np.broadcast_arrays(np.asarray(p, dtype=float), np.asarray(m, dtype=float))
    group = p.copy()
    todo = (m > p) & (np.mod(m, p) != 0)
    if not np.any(todo):
        return group
    # each distinct (p, m) once: a search's hundreds of thousands of meshes share a few dozen
    # (one integer key per pair: p < 2**24, the largest pipeline the planner enumerates by far)
    keys, back = np.unique(m[todo].astype(np.int64) * 2**24 + p[todo].astype(np.int64), return_inverse=True)
    lo, count = (keys % 2**24).astype(float), (keys // 2**24).astype(float)
    found = lo.copy()
    left = np.ones(len(lo), dtype=bool)
    n = lo + 1.0
    while np.any(left):  # ends by n = m at the latest, where m mod n = 0
        fits = left & (n <= count) & ((np.mod(count, n) == 0) | (np.mod(count, n) >= lo))
        found = np.where(fits, n, found)
        left &= ~fits
        n = n + 1.0
    group[todo] = found[np.ravel(back)]
    return group


def _one(p: np.ndarray, v: np.ndarray, m: np.ndarray) -> np.ndarray:
    return np.ones_like(p, dtype=float)


def _stages_left_or_m(p: np.ndarray, v: np.ndarray, m: np.ndarray, i: np.ndarray) -> np.ndarray:
    """1F1B's rank i: p - i micro-batches of warm-up and steady state, at most m."""
    return np.minimum(p - i, m).astype(float)


def _interleaved_in_flight(p: np.ndarray, v: np.ndarray, m: np.ndarray, i: np.ndarray) -> np.ndarray:
    """Megatron-Core's interleaved warm-up on rank i, 2(p-i-1) + (v-1)N chunks and the one running,
    each 1/v of the rank's layers, at most m micro-batches."""
    return np.minimum(((v - 1) * microbatch_group_size(p, m) + 2.0 * (p - 1 - i) + 1.0) / v, m)


ONE_F_ONE_B = ScheduleShape(
    bubble_slots=lambda p, v, m: p - 1.0,
    in_flight=_stages_left_or_m,
    chunks_per_rank=_one,
    parameter_copies=1.0,
    head_share=1.0,
    batch_times_pp=False,
    source="Narayanan et al. 2021 section 2.2.1: (p-1)/(m+p-1) idle; stage i holds p-i micro-batches",
    bubble_text="(p-1)/(m+p-1)",
)


SCHEDULE_SHAPES: dict[str, ScheduleShape] = {
    "gpipe": ScheduleShape(
        bubble_slots=lambda p, v, m: p - 1.0,
        in_flight=lambda p, v, m, i: m.astype(float),
        chunks_per_rank=_one,
        parameter_copies=1.0,
        head_share=1.0,
        batch_times_pp=False,
        source="Huang et al. 2019 (GPipe), figure 2: every forward, then every backward",
        bubble_text="(p-1)/(m+p-1)",
    ),
    "1f1b": ONE_F_ONE_B,
    "interleaved-1f1b": ScheduleShape(
        bubble_slots=lambda p, v, m: (p - 1.0) / v,
        in_flight=_interleaved_in_flight,
        chunks_per_rank=lambda p, v, m: v.astype(float),
        parameter_copies=1.0,
        head_share=1.0,
        batch_times_pp=True,
        source=(
            "Narayanan et al. 2021 section 2.2.2 (bubble / v); Korthikanti et al. 2022 section 4.2.3 (first "
            "stage p(1 + (p-1)/(pv))); Megatron-Core forward_backward_pipelining_with_interleaving (warm-up "
            "2(p-r-1) + (v-1)N chunks on rank r, N the micro-batch group size, p by default: first stage "
            "((v-1)N + 2p - 1)/v micro-batches, last ((v-1)N + 1)/v; m divisible by p unless the stack takes a "
            "group size, ``microbatch_group_size``); async sends: Megatron-LM arguments.py keeps "
            "overlap_p2p_comm only for the interleaved schedule"
        ),
        bubble_text="(p-1)/(v m+p-1)",
        async_sends=True,
    ),
    "zb-h1": replace(
        ONE_F_ONE_B,
        bubble_slots=lambda p, v, m: (p - 1.0) / 3.0,
        source="Qi et al. 2024 (Zero Bubble), ZB-H1: 1F1B's memory, a third of its bubble (F = B = W)",
        bubble_text="(p-1)/(3m+p-1)",
    ),
    "dualpipe": ScheduleShape(
        bubble_slots=lambda p, v, m: np.maximum(p - 2.0, 0.0) / 3.0,
        in_flight=lambda p, v, m, i: p + 1.0,
        chunks_per_rank=_one,
        parameter_copies=2.0,
        head_share=0.5,
        batch_times_pp=False,
        source=(
            "deepseek-ai/DualPipe README and dualpipe.py: (p/2-1)(F&B + B - 3W) idle = p-2 stage-forwards, "
            "PP + 1 micro-batches of activations and 2x parameters per rank; each end rank ends one "
            "direction's micro-batches"
        ),
        bubble_text="(p-2)/(3m+p-2)",
    ),
    "dualpipev": ScheduleShape(
        bubble_slots=lambda p, v, m: (p - 1.0) / 3.0,
        in_flight=lambda p, v, m, i: p + 0.5,
        chunks_per_rank=lambda p, v, m: np.full_like(p, 2.0, dtype=float),
        parameter_copies=1.0,
        head_share=1.0,
        batch_times_pp=False,
        source=(
            "deepseek-ai/DualPipe dualpipev.py: p-1 stage-forwards idle, PP + 1 half-stages of activations, "
            "one copy of the parameters, two half-stages a rank"
        ),
        bubble_text="(p-1)/(3m+p-1)",
        v_shaped=True,
    ),
}
"""One entry per schedule, in the order of ``schemas.parallel.Schedule`` (the mesh's codes)."""


def per_schedule(
    schedule: np.ndarray,
    p: np.ndarray,
    v: np.ndarray,
    m: np.ndarray,
    pick: Callable[[ScheduleShape], Callable[..., np.ndarray]],
    rank: np.ndarray | None = None,
) -> np.ndarray:
    """Per mesh, ``pick(shape)(p, v, m)`` of the mesh's schedule (``schedule``: codes into
    ``SCHEDULE_SHAPES`` in declaration order), ``pick(shape)(p, v, m, rank)`` where a pipeline
    ``rank`` is given (``ScheduleShape.in_flight``)."""
    columns = [np.asarray(x, dtype=float) for x in (p, v, m, 0 if rank is None else rank)]
    schedule, p, v, m, i = np.broadcast_arrays(schedule, *columns)
    out = np.zeros(schedule.shape)
    for code, shape in enumerate(SCHEDULE_SHAPES.values()):
        on = schedule == code
        if np.any(on):  # each schedule's formula on its own meshes only
            args = (p[on], v[on], m[on]) if rank is None else (p[on], v[on], m[on], i[on])
            out[on] = np.broadcast_to(pick(shape)(*args), (int(np.count_nonzero(on)),))
    return out


def per_schedule_constant(schedule: np.ndarray, pick: Callable[[ScheduleShape], float]) -> np.ndarray:
    """Per mesh, a constant of its schedule's entry (``parameter_copies``, ``head_share``, ...)."""
    values = np.array([pick(shape) for shape in SCHEDULE_SHAPES.values()], dtype=float)
    return values[np.asarray(schedule)]
