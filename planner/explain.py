"""Why the winner wins: the terms that dominate its step, and where each runner-up loses.

Pure functions of Estimates; the search attaches the sentences to its Ranking and the CLI only
prints them.
"""

from __future__ import annotations

from planner.cost.memory import MEMORY_UNDERCOUNT, undercount_safe_bytes
from planner.cost.pipeline import layers_per_chunk
from planner.cost.routing import moe_load_factor
from planner.figures import ordinal
from planner.figures import rate as rate_text
from planner.figures import seconds as seconds_text
from planner.mesh import MeshArrays
from planner.schemas.base import GIB_BYTES
from planner.schemas.estimate import Estimate
from planner.schemas.model import ModelSpec


def dominant_terms(est: Estimate, count: int = 3) -> str:
    """'compute 74%, tp_comm 22%, bubble 3%': the largest shares of the step."""
    terms = sorted(est.time_breakdown_s.model_dump().items(), key=lambda kv: -kv[1])[:count]
    return ", ".join(f"{name} {seconds / est.step_time_s:.0%}" for name, seconds in terms if seconds > 0)


def where_it_loses(winner: Estimate, other: Estimate) -> str:
    """The time term that costs ``other`` most relative to the winner, and the memory trade; where
    that term alone is more than the whole difference, the terms that lose (up to two) and what
    the mesh gains back (up to two: 'layer_overhead +3.31 s, ep_comm +689 ms, offset by compute
    -3.54 s'), and the other terms' sum where it is 0.5% of the difference or more, so the figures
    add up to it; times in prose (``figures.seconds``)."""
    mine, theirs = winner.time_breakdown_s.model_dump(), other.time_breakdown_s.model_dump()
    delta = {k: theirs[k] - mine.get(k, 0.0) for k in theirs}
    term = max(delta, key=lambda k: delta[k])
    extra = delta[term]
    behind = other.step_time_s - winner.step_time_s
    memory = (other.memory_per_gpu_bytes - winner.memory_per_gpu_bytes) / GIB_BYTES
    trade = f"; uses {abs(memory):.1f} GiB {'less' if memory < 0 else 'more'} per GPU" if abs(memory) >= 0.05 else ""
    if behind <= 1e-9 * winner.step_time_s:
        return f"ties the winner's step time{trade}"
    if extra <= behind * (1.0 + 1e-6):
        return f"{seconds_text(behind)} slower, most of it {term} (+{seconds_text(extra)}){trade}"
    losses = sorted((k for k in delta if delta[k] > 0), key=lambda k: -delta[k])[:2]
    gains = sorted((k for k in delta if delta[k] < 0), key=lambda k: delta[k])[:2]
    rest = behind - sum(delta[k] for k in losses + gains)  # the terms not named, so the sentence adds up
    lost = ", ".join(f"{k} +{seconds_text(delta[k])}" for k in losses)
    gained = " and ".join(f"{k} {seconds_text(delta[k])}" for k in gains)
    others = f", other terms {'+' if rest > 0 else ''}{seconds_text(rest)}" if abs(rest) >= 0.005 * behind else ""
    return f"{seconds_text(behind)} slower: {lost}, offset by {gained}{others}{trade}"


def versus_best(best: Estimate, est: Estimate) -> str:
    """How a given mesh (``plan estimate --compare-best``) compares with the search's best for the
    same job: what it loses on (``where_it_loses``) or, faster but not fitting, what it would need."""
    rate = f"{rate_text(best.tokens_per_s_per_gpu)} tokens/s per GPU"
    head = f"the search's best for this job is {best.config.parallel.short()} ({rate}{tight_clause(best)})"
    if not est.fits:
        need = est.memory_per_gpu_bytes / GIB_BYTES
        usable = est.memory_usable_bytes / GIB_BYTES
        verdict = f"this mesh needs {need:.1f} of {usable:.1f} GiB per GPU and does not run"
        if est.step_time_s < best.step_time_s:
            return f"{head}; {verdict} (it would be {seconds_text(best.step_time_s - est.step_time_s)} faster)"
        return f"{head}; {verdict}, and would be {where_it_loses(best, est)}"
    return f"{head}; this mesh: {where_it_loses(best, est)}"


def tight_clause(est: Estimate) -> str:
    """', tight on memory: 75.1 of 79.7 GiB' where a mesh's predicted peak is within the memory
    count's worst measured under-count of the GPU's capacity (``cost.memory.MEMORY_UNDERCOUNT``,
    the figure ``pricing.advice`` warns at), '' otherwise."""
    capacity = est.memory_usable_bytes / (1.0 - est.config.job.memory_headroom)
    if est.memory_per_gpu_bytes <= undercount_safe_bytes(capacity):
        return ""
    return (
        f", tight on memory: {est.memory_per_gpu_bytes / GIB_BYTES:.1f} of {capacity / GIB_BYTES:.1f} GiB, "
        f"so --memory-headroom {MEMORY_UNDERCOUNT:g} may pick another"
    )


def recompute_chosen(est: Estimate, model: ModelSpec) -> str:
    """'; recomputes ...' when the mesh recomputes only some layers (how many, and why) or names
    the modules selective recompute runs again; torchtitan's every-n-th layer is the n its export
    writes (``export.torchtitan.every_nth_layer``, from the smallest chunk)."""
    cfg = est.config.parallel
    modules = est.config.job.recompute_modules
    if cfg.recompute == "selective" and modules is not None:
        return f"; recomputes {', '.join(modules)} (Megatron --recompute-modules), which frees what they keep"
    if cfg.offload_layers is not None:
        return (
            f"; offloads the activations of {cfg.offload_layers} of its {sum(est.layers_per_stage)} layers to host "
            "memory instead of recomputing (Megatron --cpu-offloading), the fewest that fit"
        )
    if cfg.recompute_layers is None:
        return ""
    per_chunk = layers_per_chunk(sum(est.layers_per_stage), cfg.pp * cfg.virtual_stages)
    if est.config.job.software.partial_recompute == "every_nth":
        from planner.export.torchtitan import every_nth_layer

        n = every_nth_layer(model, est.config.job, cfg)
        busiest = max(est.layers_per_stage)
        every = "every layer" if n == 1 else f"every {ordinal(n)} layer"
        return (
            f"; recomputes the forward of {every} a rank builds, {busiest // n} of the busiest "
            f"rank's {busiest} (at least {cfg.recompute_layers} of each chunk; torchtitan 0.2's selective_ac_option "
            f"{n}; 0.3 has no per-layer option: plan export -f torchtitan-0.2), the fewest that fit"
        )
    return (
        f"; recomputes the forward of the first {cfg.recompute_layers} of each chunk's {per_chunk} layers "
        "(Megatron --recompute-method block), the fewest that fit"
    )


def overlap_assumed(est: Estimate) -> str:
    """What the estimate assumes about overlap, in words: the traffic it hides and what hiding costs."""
    hidden = est.hidden_comm_s
    parts = [
        f"{name.upper()} {seconds_text(spent)}"
        for name, spent in (
            ("tp", hidden.tp),
            ("dp", hidden.dp),
            ("cp", hidden.cp),
            ("ep", hidden.ep),
            ("pp", hidden.pp),
        )
        if spent > 0
    ]
    if not parts:
        return "assumes no communication hidden behind compute"
    job = est.config.job
    return (
        f"assumes {', '.join(parts)} of communication hidden behind compute ({job.stack_name}'s overlap), "
        f"which slows that compute by {seconds_text(est.time_breakdown_s.overlap_slowdown)}"
    )


DISPATCHER_WORDS = {
    "alltoall": "all-to-all dispatcher",
    "allgather": "all-gather dispatcher",
    "flex": "DeepEP (flex) dispatcher",
}


def routing_assumed(est: Estimate, model: ModelSpec) -> str:
    """'; routes ...' for an expert-parallel mesh: the dispatcher and the share of the routed
    tokens its busiest rank was priced with (``cost.traffic.ep_dispatch``, ``cost.routing``)."""
    if est.config.parallel.ep <= 1:
        return ""
    job = est.config.job
    by = f" through the {DISPATCHER_WORDS[job.moe_dispatcher]}"
    if job.moe_capacity_factor is not None:
        return f"; drops MoE tokens beyond capacity factor {job.moe_capacity_factor:g} (padded buffers){by}"
    if job.moe_dropless_imbalance == 1.0:
        return f"; routes MoE tokens force-balanced (every expert-parallel rank gets the mean){by}"
    source = "natural routing" if job.moe_load_imbalance is None else "the given imbalance"
    priced = float(moe_load_factor(job, MeshArrays.from_configs([est.config.parallel]), model)[0])
    if priced < job.moe_dropless_imbalance:  # capped at the most the busiest rank can get
        source = (
            f"the given {job.moe_dropless_imbalance:g}x capped at the most one of {est.config.parallel.ep} ranks can "
            f"get: ep x min(experts per rank, top-k) / top-k"
        )
    return f"; routes MoE tokens dropless, the busiest expert-parallel rank getting {priced:g}x the mean ({source}){by}"


def explain(candidates: list[Estimate], model: ModelSpec) -> list[str]:
    """One sentence for the winner, one per runner-up."""
    if not candidates:
        return []
    winner = candidates[0]
    lines = [
        f"#1 {winner.config.parallel.short()}: step is {dominant_terms(winner)}; {overlap_assumed(winner)}"
        + recompute_chosen(winner, model)
        + routing_assumed(winner, model)
    ]
    for rank, other in enumerate(candidates[1:], start=2):
        lines.append(f"#{rank} {other.config.parallel.short()}: {where_it_loses(winner, other)}")
    return lines
