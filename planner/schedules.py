"""Pipeline schedules as data: one entry per schedule of ``schemas.parallel.Schedule``, holding
the numbers the step, the memory and the traffic price it by. A new schedule is one entry here
(with its name in the Schedule literal, its rules in ``planner.constraints`` and, if it is to be
drawn from its own order, a program in ``cost.simulate``).

Each entry gives, as functions of numpy columns p (pipeline ranks), v (model chunks per rank,
the mesh's virtual stages) and m (micro-batches per step):

  bubble_slots     idle time of a step in slots (one micro-batch's forward and backward on a rank)
  first_in_flight  micro-batches' worth of activations the first stage holds at its peak
  last_in_flight   the same on the last stage
  chunks_per_rank  model chunks a rank runs per micro-batch (PP sends scale with it)

and as constants: ``async_sends`` (the steady state's sends may run behind the next chunk's
compute where the stack overlaps them, ``Stack.p2p_overlap``), ``parameter_copies`` (model
states a rank keeps), ``head_share`` (the share of micro-batches whose LM head and loss the
head's rank runs) and ``batch_times_pp`` (the global batch must also be a multiple of p:
Megatron's interleaving needs p | m). Sources are in each entry's ``source``;
``tests/test_simulate.py`` checks the bubble and in-flight figures against the event simulation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

Columns = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class ScheduleShape:
    bubble_slots: Columns
    first_in_flight: Columns
    last_in_flight: Columns
    chunks_per_rank: Columns
    parameter_copies: float
    head_share: float
    batch_times_pp: bool
    source: str
    async_sends: bool = False


def _one(p: np.ndarray, v: np.ndarray, m: np.ndarray) -> np.ndarray:
    return np.ones_like(p, dtype=float)


def _stages_or_m(p: np.ndarray, v: np.ndarray, m: np.ndarray) -> np.ndarray:
    return np.minimum(p, m).astype(float)


ONE_F_ONE_B = ScheduleShape(
    bubble_slots=lambda p, v, m: p - 1.0,
    first_in_flight=_stages_or_m,
    last_in_flight=_one,
    chunks_per_rank=_one,
    parameter_copies=1.0,
    head_share=1.0,
    batch_times_pp=False,
    source="Narayanan et al. 2021 section 2.2.1: (p-1)/(m+p-1) idle; stage i holds p-i micro-batches",
)


SCHEDULE_SHAPES: dict[str, ScheduleShape] = {
    "gpipe": ScheduleShape(
        bubble_slots=lambda p, v, m: p - 1.0,
        first_in_flight=lambda p, v, m: m.astype(float),
        last_in_flight=lambda p, v, m: m.astype(float),
        chunks_per_rank=_one,
        parameter_copies=1.0,
        head_share=1.0,
        batch_times_pp=False,
        source="Huang et al. 2019 (GPipe), figure 2: every forward, then every backward",
    ),
    "1f1b": ONE_F_ONE_B,
    "interleaved-1f1b": ScheduleShape(
        bubble_slots=lambda p, v, m: (p - 1.0) / v,
        first_in_flight=lambda p, v, m: np.minimum(p * (1.0 + (p - 1.0) / (p * v)), m),
        last_in_flight=lambda p, v, m: ((v - 1) * p + 1.0) / v,
        chunks_per_rank=lambda p, v, m: v.astype(float),
        parameter_copies=1.0,
        head_share=1.0,
        batch_times_pp=True,
        source=(
            "Narayanan et al. 2021 section 2.2.2 (bubble / v); Korthikanti et al. 2022 section 4.2.3 (first "
            "stage p(1 + (p-1)/(pv))); Megatron-LM forward_backward_pipelining_with_interleaving (warm-up "
            "(v-1)p + 1 chunks before the last stage's first backward; m divisible by p); async sends: "
            "Megatron-LM arguments.py keeps overlap_p2p_comm only for the interleaved schedule"
        ),
        async_sends=True,
    ),
    "zb-h1": replace(
        ONE_F_ONE_B,
        bubble_slots=lambda p, v, m: (p - 1.0) / 3.0,
        source="Qi et al. 2024 (Zero Bubble), ZB-H1: 1F1B's memory, a third of its bubble (F = B = W)",
    ),
    "dualpipe": ScheduleShape(
        bubble_slots=lambda p, v, m: np.maximum(p - 2.0, 0.0) / 3.0,
        first_in_flight=lambda p, v, m: p + 1.0,
        last_in_flight=lambda p, v, m: p + 1.0,
        chunks_per_rank=_one,
        parameter_copies=2.0,
        head_share=0.5,
        batch_times_pp=False,
        source=(
            "deepseek-ai/DualPipe README and dualpipe.py: (p/2-1)(F&B + B - 3W) idle = p-2 stage-forwards, "
            "PP + 1 micro-batches of activations and 2x parameters per rank; each end rank ends one "
            "direction's micro-batches"
        ),
    ),
    "dualpipev": ScheduleShape(
        bubble_slots=lambda p, v, m: (p - 1.0) / 3.0,
        first_in_flight=lambda p, v, m: p + 0.5,
        last_in_flight=lambda p, v, m: p + 0.5,
        chunks_per_rank=lambda p, v, m: np.full_like(p, 2.0, dtype=float),
        parameter_copies=1.0,
        head_share=1.0,
        batch_times_pp=False,
        source=(
            "deepseek-ai/DualPipe dualpipev.py: p-1 stage-forwards idle, PP + 1 half-stages of activations, "
            "one copy of the parameters, two half-stages a rank"
        ),
    ),
}
"""One entry per schedule, in the order of ``schemas.parallel.Schedule`` (the mesh's codes)."""


def per_schedule(
    schedule: np.ndarray, p: np.ndarray, v: np.ndarray, m: np.ndarray, pick: Callable[[ScheduleShape], Columns]
) -> np.ndarray:
    """Per mesh, ``pick(shape)(p, v, m)`` of the mesh's schedule (``schedule``: codes into
    ``SCHEDULE_SHAPES`` in declaration order)."""
    p, v, m = (np.asarray(x, dtype=float) for x in (p, v, m))
    out = np.zeros(np.broadcast(schedule, p, v, m).shape)
    for code, shape in enumerate(SCHEDULE_SHAPES.values()):
        on = schedule == code
        if np.any(on):
            out = np.where(on, pick(shape)(p, v, m), out)
    return out


def per_schedule_constant(schedule: np.ndarray, pick: Callable[[ScheduleShape], float]) -> np.ndarray:
    """Per mesh, a constant of its schedule's entry (``parameter_copies``, ``head_share``, ...)."""
    values = np.array([pick(shape) for shape in SCHEDULE_SHAPES.values()], dtype=float)
    return values[np.asarray(schedule)]
