"""Capacity planning: how many nodes train a model on a token budget within a deadline, and what
it costs. Each node count is searched in full (``planner.search``); the answer is the smallest
count whose best mesh meets the deadline, with the table of all counts tried."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from planner.errors import PlannerError
from planner.schemas.base import Frozen
from planner.schemas.hardware import MAX_CLUSTER_GPUS, ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.search import search

SECONDS_PER_DAY = 86400.0


def node_counts(max_nodes: int) -> list[int]:
    """Node counts tried: 1, 2, 3, 4, 6, 8, 12, 16, ... (2^k and 1.5 * 2^k) up to ``max_nodes``,
    the sizes clusters are usually carved into. Neighbours differ by at most 1.5x, so when time
    to train falls with the node count the answer is at most 1.5x the true minimum."""
    counts, k = [], 1
    while k <= max_nodes:
        counts.append(k)
        if k >= 2 and k * 3 // 2 <= max_nodes:
            counts.append(k * 3 // 2)
        k *= 2
    return sorted(set(counts))


class CapacityRow(Frozen):
    """The best mesh at one node count."""

    nodes: int
    gpus: int
    mesh: str | None = Field(description="Best mesh (None when nothing fits)")
    step_time_s: float | None
    tokens_per_s: float | None
    mfu: float | None
    time_to_train_s: float | None
    cost_to_train_usd: float | None
    meets_deadline: bool
    why_not: str | None = Field(None, description="Why no mesh fits at this count")


class CapacityReport(Frozen):
    model: str
    profile: str
    training_tokens: float
    deadline_s: float
    price_per_gpu_hour_usd: float | None
    rows: list[CapacityRow]
    answer: CapacityRow | None = Field(description="Fewest nodes that meet the deadline")
    cheapest: CapacityRow | None = Field(description="Lowest cost among the counts that meet it")


def capacity(
    model: ModelSpec,
    node: ClusterSpec,
    job: JobSpec,
    deadline_s: float,
    max_nodes: int,
    pins: dict[str, Any] | None = None,
) -> CapacityReport:
    """Search every node count of ``node_counts(max_nodes)`` for ``job`` (which must carry
    ``training_tokens``) on clusters of ``node``'s profile."""
    if job.training_tokens is None:
        raise PlannerError("capacity needs --training-tokens (the token budget to train on)")
    if deadline_s <= 0:
        raise PlannerError(f"--days must be > 0, got {deadline_s / SECONDS_PER_DAY:g}")
    if max_nodes * node.gpus_per_node > MAX_CLUSTER_GPUS:
        raise PlannerError(
            f"--max-nodes {max_nodes}: {max_nodes} x {node.gpus_per_node} GPUs is more than the "
            f"{MAX_CLUSTER_GPUS:,} GPUs planned at most"
        )
    rows: list[CapacityRow] = []
    for nodes in node_counts(max_nodes):
        gpus = nodes * node.gpus_per_node
        cluster = node.model_copy(update={"name": f"{node.profile.name}x{nodes}", "num_nodes": nodes, "num_gpus": gpus})
        try:
            best = search(model, cluster, job, pins, top=1).candidates[0]
        except PlannerError as err:
            rows.append(
                CapacityRow(
                    nodes=nodes,
                    gpus=gpus,
                    mesh=None,
                    step_time_s=None,
                    tokens_per_s=None,
                    mfu=None,
                    time_to_train_s=None,
                    cost_to_train_usd=None,
                    meets_deadline=False,
                    why_not=str(err),
                )
            )
            continue
        days = best.time_to_train_s
        assert days is not None  # the job has a token budget
        rows.append(
            CapacityRow(
                nodes=nodes,
                gpus=gpus,
                mesh=best.config.parallel.short(),
                step_time_s=best.step_time_s,
                tokens_per_s=best.tokens_per_s,
                mfu=best.mfu,
                time_to_train_s=days,
                cost_to_train_usd=best.cost_to_train_usd,
                meets_deadline=days <= deadline_s,
            )
        )
    meeting = [r for r in rows if r.meets_deadline]
    costed = [r for r in meeting if r.cost_to_train_usd is not None]
    return CapacityReport(
        model=model.name,
        profile=node.profile.name,
        training_tokens=job.training_tokens,
        deadline_s=deadline_s,
        price_per_gpu_hour_usd=node.profile.price_per_gpu_hour_usd,
        rows=rows,
        answer=meeting[0] if meeting else None,
        cheapest=min(costed, key=lambda r: r.cost_to_train_usd or 0.0) if costed else None,
    )
