"""Fewer GPUs that train faster: when a cluster's GPU count does not split the job evenly.

A mesh's degrees multiply to the GPU count, and data parallelism must divide the global batch
(in micro-batches), so a count with an odd factor leaves the search only meshes that fold that
factor into pipeline or tensor parallelism. A GB200/GB300 NVL72 rack is the common case: 72 = 8 x 9
GPUs, a 512-sequence batch splits over no 72 data-parallel ranks, and the best 72-GPU mesh of
Llama-3-8B runs pipeline-parallel over 9 stages with an 11% bubble, slower per step than 64 of the
same GPUs in plain data parallelism. Megatron-Bridge's published GB200/GB300 runs likewise use 64,
128 and 256 GPUs of their racks (docs/performance-summary.md, the GPU counts). ``plan`` therefore
also searches a smaller count (``fewer_count``: the 64-GPU segment of each 72-GPU rack that a
scheduler gives a large job, else the largest power of two below the count, since global batches,
hidden sizes and head counts are mostly powers of two: a heuristic, not the only count that can
win) and reports it where it is faster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.catalog import load_cluster
from planner.errors import PlannerError
from planner.figures import rate
from planner.schemas.hardware import ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.ranking import FewerGpus

if TYPE_CHECKING:
    from planner.schemas.estimate import Estimate

MIN_SAVING = 0.02
"""Report fewer GPUs only where they finish the asked batch at least 2% sooner: a judgement call
(below it the difference is inside what the planner resolves between two meshes of one job)."""


def largest_power_of_two_below(n: int) -> int | None:
    """The largest power of two below ``n``; None where ``n`` is one already (or below 2)."""
    if n < 2 or n & (n - 1) == 0:
        return None
    return 1 << (n.bit_length() - 1)


def segment_count(cluster: ClusterSpec) -> int | None:
    """On whole fast domains that a large job gets only a segment of (``Interconnect.job_segment_gpus``:
    64 of each 72-GPU NVL72 rack under Slurm block scheduling, the segments Megatron-Bridge's
    GB200/GB300 runs fill), the segments alone (3 racks -> 192, not 216); else None."""
    intra = cluster.intra_node
    domain = intra.domain_size_gpus or cluster.gpus_per_node
    segment = intra.job_segment_gpus
    if segment is not None and segment < domain and cluster.num_gpus % domain == 0:
        return cluster.num_gpus // domain * segment
    return None


def fewer_count(cluster: ClusterSpec) -> int | None:
    """The GPU count to try beside the cluster's: the domains' segments (``segment_count``), else the
    largest power of two below the count; None where the count is a power of two already."""
    return segment_count(cluster) or largest_power_of_two_below(cluster.num_gpus)


def best_or_reason(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, pins: dict[str, Any] | None) -> Estimate | str:
    """The best mesh on ``cluster`` for the job and pins, or why nothing fits there (the search's
    error); ``fewer_gpus`` and ``capacity`` price other GPU counts with it."""
    from planner.search import search

    try:
        return search(model, cluster, job, pins, top=1).candidates[0]
    except PlannerError as err:
        return str(err)


def best_on_fewer(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, pins: dict[str, Any] | None
) -> tuple[int, Estimate] | None:
    """(``fewer_count``, the best mesh on that many of the cluster's GPUs), or None where the count
    is a power of two already or nothing runs there."""
    count = fewer_count(cluster)
    if count is None:
        return None
    alt = best_or_reason(model, load_cluster(cluster, gpus=count), job, pins)
    return None if isinstance(alt, str) else (count, alt)


def fewer_gpus(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, pins: dict[str, Any], best: Estimate
) -> FewerGpus | None:
    """The best mesh on ``fewer_count`` of the cluster's GPUs for the same job and pins, where it
    finishes the asked batch ``MIN_SAVING`` sooner than ``best`` (the winner on all of them);
    None where the count is a power of two already, nothing fits on fewer, or it is not faster."""
    found = best_on_fewer(model, cluster, job, pins)
    if found is None:
        return None
    count, alt = found
    saving = 1.0 - best.tokens_per_s / alt.tokens_per_s
    if saving < MIN_SAVING:
        return None
    return FewerGpus(
        gpus=count,
        mesh=alt.config.parallel.short(),
        step_time_s=alt.step_time_s,
        tokens_per_s=alt.tokens_per_s,
        tokens_per_s_per_gpu=alt.tokens_per_s_per_gpu,
        saving=saving,
    )


def fewer_gpus_hint(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, pins: dict[str, Any]) -> str:
    """Where no mesh runs on all of the cluster's GPUs, the best on ``fewer_count`` of them, as a
    clause for the error ('; on 64 of the 72 GPUs (--gpus 64): tp1 ... at 10,127 tokens/s per
    GPU'); '' where the count is a power of two already or nothing runs there either. Megatron-LM
    2021's even layer split (constraint 'stack_even_layer_split') leaves Llama-3 70B no mesh on a
    72-GPU rack at a 512-sequence batch, where 64 of its GPUs run one."""
    found = best_on_fewer(model, cluster, job, pins)
    if found is None:
        return ""
    count, alt = found
    return (
        f"; on {count} of the {cluster.num_gpus} GPUs (--gpus {count}): {alt.config.parallel.short()} at "
        f"{rate(alt.tokens_per_s_per_gpu)} tokens/s per GPU"
    )
