"""Ranking: what ``plan`` returns, the best meshes first, with the search's bookkeeping."""

from __future__ import annotations

from pydantic import Field, NonNegativeInt, PositiveInt

from planner.schemas.base import Frozen
from planner.schemas.estimate import Estimate
from planner.schemas.job import JobSpec


class RankedEstimate(Estimate):
    """An Estimate with its 1-based place in the ranking, and the meshes the model prices
    identically (same step time and memory), listed rather than ranked separately."""

    rank: PositiveInt
    equivalent_meshes: list[str] = Field(default_factory=list)


class ParetoPoint(Frozen):
    """A mesh no other feasible mesh beats on both memory and step time."""

    mesh: str
    step_time_s: float
    memory_per_gpu_bytes: float


class Ranking(Frozen):
    """Ranked candidates: ``evaluated`` meshes enumerated, ``pruned`` per failed rule (the first
    rule each mesh breaks, including ``memory`` for meshes that do not fit), ``feasible`` the rest.
    ``explanation``: what dominates the winner's step, and where each runner-up loses."""

    model: str
    cluster: str
    cluster_description: str
    num_gpus: PositiveInt
    job: JobSpec
    objective: str
    evaluated: NonNegativeInt
    feasible: NonNegativeInt
    pruned: dict[str, NonNegativeInt]
    candidates: list[RankedEstimate]
    pareto: list[ParetoPoint]
    explanation: list[str]
