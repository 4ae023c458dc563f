"""Capacity planning: how many nodes train a model on a token budget within a deadline, and what
it costs. Each node count is searched in full (``planner.search``); the answer is the smallest
count whose best mesh meets the deadline, with the table of all counts tried, and the smallest
that meets it at the slow end of its error bar too (the count to bet on where finishing late
costs more than a node).

On racks whose fast domain a large job is given a segment of (GB200/GB300 NVL72: 64 of each
72 GPUs, ``fewer_gpus.segment_count``), each count is also searched on the segments alone, and
the row keeps whichever trains faster: 72 GPUs per rack leave a 512-sequence batch no even data
parallelism, so the best mesh on all of them folds the factor 9 into the pipeline."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from operator import attrgetter
from typing import Any

from pydantic import Field

from planner.catalog import load_cluster
from planner.constraints import format_message, format_runs
from planner.errors import PlannerError
from planner.fewer_gpus import best_or_reason, segment_count
from planner.pricing import GROWN_BATCH_NOTE, tight_memory_note
from planner.schemas.base import Frozen
from planner.schemas.hardware import MAX_CLUSTER_GPUS, ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig

SECONDS_PER_DAY = 86400.0


DEADLINE_DAYS = (1.0 / 24.0, 36525.0)
"""The deadlines ``plan capacity`` plans for, days: an hour to a century. Shorter is a benchmark,
not a training run; 1e300 days had printed a 300-digit figure, and 1e-300 searched every node
count for nothing. A judgement."""


def deadline_seconds(days: float, option: str = "--days") -> float:
    """``--days`` in seconds, within ``DEADLINE_DAYS`` (a non-finite number is refused as such); the
    library's argument names itself as ``option`` (``days``)."""
    low, high = DEADLINE_DAYS
    if not (math.isfinite(days) and low <= days <= high):
        raise PlannerError(
            f"{option} must be a number of days from {low:.4g} (an hour) to {high:g} (a century), got {days:g}"
        )
    return days * SECONDS_PER_DAY


def check_one_node(node: ClusterSpec, where: str) -> None:
    """Refuse a cluster of more than one node (or part of one): capacity chooses the node count
    itself, and the library had silently planned from one node of a 'dgx-h100x4'."""
    if node.num_nodes > 1 or node.num_gpus != node.gpus_per_node:
        raise PlannerError(
            f"{where}: plan capacity chooses the node count itself; give one node of the profile "
            f"({node.profile.name}), without a node count, --nodes or --gpus"
        )


def node_counts(max_nodes: int) -> list[int]:
    """Node counts tried: 1, 2, 3, 4, 6, 8, 12, 16, ... (2^k and 1.5 * 2^k) up to ``max_nodes``,
    the sizes clusters are usually carved into, and ``max_nodes`` itself (the nodes a user owns:
    a cap of 1,000 had been searched up to 768 and answered "raise --max-nodes" where 832 meet the
    deadline). Neighbours differ by at most 1.5x, so when time to train falls with the node count
    the answer is at most 1.5x the true minimum before the bisection between them."""
    counts, k = [max_nodes], 1
    while k <= max_nodes:
        counts.append(k)
        if k >= 2 and k * 3 // 2 <= max_nodes:
            counts.append(k * 3 // 2)
        k *= 2
    return sorted(set(counts))


class CapacityRow(Frozen):
    """The best mesh at one node count."""

    nodes: int
    gpus: int = Field(description="GPUs the best mesh uses: the nodes' GPUs, or their segments where faster")
    node_gpus: int = Field(description="GPUs the nodes hold")
    all_gpus_step_time_s: float | None = Field(
        None,
        description="Where the row uses fewer GPUs than the nodes hold: the best step time on all of them "
        "(None where nothing fits there)",
    )
    mesh: str | None = Field(description="Best mesh (None when nothing fits)")
    parallel: ParallelConfig | None = Field(
        None,
        description="The best mesh in full: planner.estimate(model, load_cluster(profile, gpus=gpus), "
        "**parallel.model_dump()) gives its whole Estimate; None when nothing fits",
    )
    step_time_s: float | None
    tokens_per_s: float | None
    mfu: float | None
    time_to_train_s: float | None
    time_to_train_s_interval: tuple[float, float] | None = Field(
        None,
        description="The time to train at the ends of the best mesh's tokens/s interval (the central 80% of "
        "what published runs priced alike measured, ``error_bar.interval``): fast end, slow end; None where "
        "the hardware and stack have no calibrated band",
    )
    cost_to_train_usd: float | None
    meets_deadline: bool = Field(description="The predicted time to train is within the deadline")
    meets_deadline_slow_end: bool = Field(
        False, description="The slow end of the interval is within the deadline too (False without an interval)"
    )
    why_not: str | None = Field(None, description="Why no mesh fits at this count")
    global_batch_size: int | None = Field(
        None,
        description="The global batch in sequences the best mesh runs: the job's, or more where "
        "--max-batch-growth lets it grow to a multiple of dp x micro-batch (None when nothing fits)",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="The best mesh's memory warning, where its peak leaves little margin, and its batch's growth",
    )


class CapacityReport(Frozen):
    model: str
    profile: str
    training_tokens: float
    deadline_s: float
    price_per_gpu_hour_usd: float | None
    rows: list[CapacityRow]
    stack: str
    dtype: str
    answer: CapacityRow | None = Field(description="Fewest nodes that meet the deadline")
    answer_slow_end: CapacityRow | None = Field(
        None,
        description="Fewest nodes that meet it at the slow end of their interval too: the count to bet on "
        "where a late finish costs more than a node",
    )
    cheapest: CapacityRow | None = Field(description="Lowest cost among the counts that meet it")
    moe: bool = Field(description="The model is a MoE (error_bar.LARGEST_CALIBRATED_GPUS reads the kind)")
    unit: str = Field(
        "node",
        description="What the profile's node is: 'rack' where it is a whole NVLink domain of more than 8 GPUs "
        "(GB200/GB300 NVL72: 72 GPUs, 18 compute trays), else 'node'",
    )


def capacity(
    model: ModelSpec,
    node: ClusterSpec,
    job: JobSpec,
    deadline_s: float,
    max_nodes: int,
    pins: dict[str, Any] | None = None,
) -> CapacityReport:
    """Search every node count of ``node_counts(max_nodes)`` for ``job`` (which must carry
    ``training_tokens``) on clusters of ``node``'s profile, then bisect the counts between the
    last that misses the deadline and the first that meets it, so that the answer is the fewest
    nodes that meet it (where more nodes train no slower)."""
    if job.training_tokens is None:
        raise PlannerError("capacity needs --training-tokens (the token budget to train on)")
    if not format_runs(node, job):  # no node count would change the GPU's tensor cores
        raise PlannerError(format_message(node, job))
    deadline_seconds(deadline_s / SECONDS_PER_DAY, "days")  # within DEADLINE_DAYS, as the library gives it
    if max_nodes * node.gpus_per_node > MAX_CLUSTER_GPUS:
        raise PlannerError(
            f"--max-nodes {max_nodes}: {max_nodes} x {node.gpus_per_node} GPUs is more than the "
            f"{MAX_CLUSTER_GPUS:,} GPUs planned at most"
        )

    def row_at(nodes: int) -> CapacityRow:
        gpus = nodes * node.gpus_per_node
        cluster = node.model_copy(update={"name": f"{node.profile.name}x{nodes}", "num_nodes": nodes, "num_gpus": gpus})
        return _row(model, cluster, job, pins, deadline_s)

    rows = _rows_at(node_counts(max_nodes), row_at)
    for meets in (attrgetter("meets_deadline"), attrgetter("meets_deadline_slow_end")):
        rows = _bisected(rows, meets, row_at)
    meeting = [r for r in rows if r.meets_deadline]
    costed = [r for r in meeting if r.cost_to_train_usd is not None]
    return CapacityReport(
        model=model.name,
        profile=node.profile.name,
        training_tokens=job.training_tokens,
        deadline_s=deadline_s,
        price_per_gpu_hour_usd=node.profile.price_per_gpu_hour_usd,
        rows=rows,
        stack=job.software.name,
        dtype=job.dtype,
        answer=meeting[0] if meeting else None,
        answer_slow_end=next((r for r in rows if r.meets_deadline_slow_end), None),
        cheapest=min(costed, key=lambda r: r.cost_to_train_usd or 0.0) if costed else None,
        moe=model.is_moe,
        unit="rack" if node.gpus_per_node > 8 and node.intra_node.domain_size_gpus == node.gpus_per_node else "node",
    )


MAX_ROW_THREADS = 4
"""Node counts of the grid searched at once, in threads (``_rows_at``). numpy releases the GIL in its
array loops, where a search spends its time: on 2 cores 2 threads searched four GB200 counts of
DeepSeek-V3 in 4.6 s against 8.9 s one by one. Each search holds up to about 1 GiB at its peak (a
million meshes' columns and temporaries), so at most 4 at once; a judgement call."""


def _rows_at(counts: list[int], row_at: Callable[[int], CapacityRow], threads: int | None = None) -> list[CapacityRow]:
    """``row_at`` of every count, in order, several at once (``threads``; default as many as the
    machine has cores, at most ``MAX_ROW_THREADS``). The rows are the same whatever the thread
    count: each search is a pure function of its count."""
    if threads is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        threads = min(cores, MAX_ROW_THREADS)
    threads = max(1, min(threads, len(counts)))
    if threads == 1:
        return [row_at(nodes) for nodes in counts]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(row_at, counts))


def _bisected(
    rows: list[CapacityRow], meets: Callable[[CapacityRow], bool], row_at: Callable[[int], CapacityRow]
) -> list[CapacityRow]:
    """``rows`` with the counts the grid skipped between the last that misses and the first that
    meets (by ``meets``) searched too, so the first that meets is the fewest nodes that do."""
    first = next((i for i, r in enumerate(rows) if meets(r)), 0)
    if first == 0:
        return rows
    by_nodes = {r.nodes: r for r in rows}
    miss, hit = rows[first - 1].nodes, rows[first].nodes
    while hit - miss > 1:
        mid = (miss + hit) // 2
        by_nodes[mid] = by_nodes.get(mid) or row_at(mid)
        miss, hit = (miss, mid) if meets(by_nodes[mid]) else (mid, hit)
    return sorted(by_nodes.values(), key=lambda r: r.nodes)


def _row(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, pins: dict[str, Any] | None, deadline_s: float
) -> CapacityRow:
    """One node count: the best mesh on all its GPUs or, where that is faster, on their segments."""
    best = best_or_reason(model, cluster, job, pins)
    used, all_gpus_step_s = cluster.num_gpus, None
    segment = segment_count(cluster)
    if segment is not None:
        alt = best_or_reason(model, load_cluster(cluster, gpus=segment), job, pins)
        if not isinstance(alt, str) and (isinstance(best, str) or alt.step_time_s <= best.step_time_s):
            all_gpus_step_s = None if isinstance(best, str) else best.step_time_s
            best, used = alt, segment
    if isinstance(best, str):
        return CapacityRow(
            nodes=cluster.num_nodes,
            gpus=cluster.num_gpus,
            node_gpus=cluster.num_gpus,
            mesh=None,
            step_time_s=None,
            tokens_per_s=None,
            mfu=None,
            time_to_train_s=None,
            cost_to_train_usd=None,
            meets_deadline=False,
            why_not=best,
        )
    train_s = best.time_to_train_s
    assert train_s is not None  # the job has a token budget
    band = best.tokens_per_s_per_gpu_interval
    span = None
    if band is not None and band[0] > 0:  # time scales as 1 / throughput: the high end trains fastest
        span = (train_s * best.tokens_per_s_per_gpu / band[1], train_s * best.tokens_per_s_per_gpu / band[0])
    return CapacityRow(
        nodes=cluster.num_nodes,
        gpus=used,
        node_gpus=cluster.num_gpus,
        all_gpus_step_time_s=all_gpus_step_s,
        mesh=best.config.parallel.short(),
        parallel=best.config.parallel,
        step_time_s=best.step_time_s,
        tokens_per_s=best.tokens_per_s,
        mfu=best.mfu,
        time_to_train_s=train_s,
        time_to_train_s_interval=span,
        cost_to_train_usd=best.cost_to_train_usd,
        meets_deadline=train_s <= deadline_s,
        meets_deadline_slow_end=span is not None and span[1] <= deadline_s,
        global_batch_size=best.config.job.batch_size,
        warnings=[
            *filter(None, [tight_memory_note(best.memory_per_gpu_bytes, cluster)]),
            *(w for w in best.warnings if w.startswith(GROWN_BATCH_NOTE)),
        ],
    )
