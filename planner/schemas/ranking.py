"""Ranking: what ``plan`` returns, the best meshes first, with the search's bookkeeping."""

from __future__ import annotations

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from planner.schemas.base import GIB_BYTES, Frozen
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


class MarginPick(Frozen):
    """Set where the winner's predicted peak leaves less of the GPU's memory free than the planner's
    count has fallen short of measured peaks (``margin``, cost.memory.MEMORY_UNDERCOUNT, a share of
    the peak): the mesh the search ranks first with that share kept free (``search.margin_pick``),
    and how much longer it takes per asked batch (``slower``, a share); ``mesh`` is None where no
    mesh keeps the margin, and ``leanest_bytes`` then says how close the leanest comes."""

    margin: PositiveFloat
    capacity_bytes: PositiveFloat
    winner_memory_bytes: PositiveFloat
    mesh: str | None
    step_time_s: PositiveFloat | None
    memory_per_gpu_bytes: PositiveFloat | None
    slower: float | None
    leanest_bytes: PositiveFloat

    def describe(self) -> str:
        need, capacity = self.winner_memory_bytes / GIB_BYTES, self.capacity_bytes / GIB_BYTES
        head = (
            f"memory margin: #1 needs {need:.1f} of {capacity:.1f} GiB; "
            f"the planner's count has fallen up to {self.margin:.1%} short of measured peaks"
        )
        if self.mesh is None:
            return (
                f"{head}, and no feasible mesh keeps that margin (the leanest needs "
                f"{self.leanest_bytes / GIB_BYTES:.1f} GiB, every recompute and ZeRO choice tried): "
                "it needs more GPUs"
            )
        return (
            f"{head}; the fastest mesh that keeps that margin is {self.mesh} ({self.step_time_s:.3f} s, "
            f"{(self.memory_per_gpu_bytes or 0.0) / GIB_BYTES:.1f} GiB), {self.slower:.1%} slower per batch: "
            f"--memory-headroom {self.margin:g} ranks only such meshes"
        )


class FewerGpus(Frozen):
    """The best mesh on ``gpus`` of the cluster's GPUs, where it trains faster than any mesh on all
    of them: ``saving`` is the share of the time per asked batch it saves."""

    gpus: PositiveInt
    mesh: str
    step_time_s: PositiveFloat
    tokens_per_s: PositiveFloat
    tokens_per_s_per_gpu: PositiveFloat
    saving: PositiveFloat

    def describe(self, num_gpus: int, batch: int) -> str:
        why = f" ({batch} sequences per step split evenly over {self.gpus} GPUs, not over {num_gpus})"
        return (
            f"fewer GPUs: on {self.gpus} of these {num_gpus} GPUs the best mesh, {self.mesh}, trains "
            f"{self.tokens_per_s:,.0f} tokens/s, {self.saving:.0%} less time per step than any mesh on all "
            f"{num_gpus}{why if batch % num_gpus and not batch % self.gpus else ''}: --gpus {self.gpus}"
        )


class Ranking(Frozen):
    """Ranked candidates: ``evaluated`` meshes enumerated over every pass of the search (the
    selective pass with cheap recompute modules too) with the partial-recompute and offload variants
    it adds, ``pruned`` per failed rule over the same passes (the first rule each mesh breaks,
    including ``memory`` for meshes that do not fit), ``feasible`` the rest: evaluated - pruned.
    ``explanation``: what dominates the winner's step, and where each runner-up loses;
    ``margin_pick``: where the winner may run out of memory, the fastest mesh that may not (see
    MarginPick); ``fewer_gpus``: a smaller share of the cluster that trains faster (``planner.fewer_gpus``), where
    the search looked for one and found it."""

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
    margin_pick: MarginPick | None = None
    fewer_gpus: FewerGpus | None = None
