"""The pipeline event simulation against the closed forms it cross-checks (DESIGN 4.6)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cost.pipeline import bubble_fraction, microbatches_in_flight
from planner.cost.simulate import simulate
from planner.errors import PlannerError
from planner.mesh import MeshArrays
from planner.schemas import ParallelConfig


def _closed_form(schedule: str, p: int, m: int, v: int) -> tuple[float, float, float]:
    """(bubble, first-stage in-flight, last-stage in-flight) from pipeline.py."""
    mesh = MeshArrays.from_configs(
        [ParallelConfig(pp=p, schedule=schedule, virtual_stages=v)]  # type: ignore[arg-type]
    )
    ms = np.array([m])
    first = microbatches_in_flight(ms, mesh, first=True)[0]
    last = microbatches_in_flight(ms, mesh, first=False)[0]
    return float(bubble_fraction(ms, mesh)[0]), float(first), float(last)


@pytest.mark.parametrize(("p", "m", "expected"), [(4, 4, 0.4286), (4, 16, 0.1579), (4, 64, 0.0448), (8, 64, 0.0986)])
def test_seed_bubbles_come_out_of_the_simulation(p: int, m: int, expected: float) -> None:
    # The reference bubble table: (p-1)/(m+p-1) for 1F1B.
    assert simulate("1f1b", p, m, 1.0, 2.0).bubble_fraction == pytest.approx(expected, abs=5e-5)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    schedule=st.sampled_from(["gpipe", "1f1b", "interleaved-1f1b"]),
    p=st.integers(2, 8),
    groups=st.integers(1, 6),
    v=st.integers(2, 4),
    backward_ratio=st.sampled_from([2.0, 3.0]),
)
def test_simulation_matches_bubble_and_in_flight_closed_forms(
    schedule: str, p: int, groups: int, v: int, backward_ratio: float
) -> None:
    v = v if schedule == "interleaved-1f1b" else 1
    m = groups * p  # Megatron's interleaving needs p | m; the others take any m
    timeline = simulate(schedule, p, m, 1.0, backward_ratio, v)
    bubble, first, last = _closed_form(schedule, p, m, v)
    assert timeline.bubble_fraction == pytest.approx(bubble, rel=1e-9)
    assert timeline.makespan_s == pytest.approx(m * (1.0 + backward_ratio) / (1.0 - bubble), rel=1e-9)
    assert timeline.peak_in_flight(0) == pytest.approx(first, rel=1e-9)
    assert timeline.peak_in_flight(p - 1) == pytest.approx(last, rel=1e-9)


def test_1f1b_with_fewer_microbatches_than_stages() -> None:
    t = simulate("1f1b", 4, 2, 1.0, 2.0)
    assert t.bubble_fraction == pytest.approx(3 / 5)
    assert t.peak_in_flight(0) == 2  # min(p, m)
    assert len(t.ops) == 4 * 2 * 2


def test_every_op_runs_once_in_dependency_order() -> None:
    t = simulate("interleaved-1f1b", 4, 8, 1.0, 2.0, 2)
    ends = {(op.kind, op.microbatch, op.chunk * 4 + op.rank): op for op in t.ops}
    assert len(ends) == len(t.ops) == 2 * 8 * 2 * 4
    for (kind, mb, stage), op in ends.items():
        if kind == "F" and stage > 0:
            assert op.start_s >= ends[("F", mb, stage - 1)].end_s
        if kind == "B" and stage < 7:
            assert op.start_s >= ends[("B", mb, stage + 1)].end_s


def test_unsimulated_or_impossible_schedules_are_refused() -> None:
    with pytest.raises(PlannerError, match="zb-h1"):
        simulate("zb-h1", 4, 8, 1.0, 2.0)
    with pytest.raises(PlannerError, match="divisible by pp 4"):
        simulate("interleaved-1f1b", 4, 6, 1.0, 2.0, 2)
