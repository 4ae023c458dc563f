"""Enumerate meshes for a cluster, prune by the feasibility rules, price them all as numpy
columns, and rank (ARCHITECTURE 8.9).

Searched: tp (divisors of N up to the fast domain), cp (powers of two while s divides by 2c),
pp (divisors of the rest, at most L), dp = N/(tp*cp*pp), ep (divisors of the expert count that
fold into tp*cp*dp), micro-batch 1-16, 1F1B or interleaved 1F1B with v in 2..8 dividing the
stage's layers, ZeRO 0-3, recompute none/selective/full, sequence parallelism on whenever
tp > 1. Pinned knobs are fixed instead. Full recompute is also tried on only the first r layers
of each chunk (Megatron-LM's block method), r the fewest that fit (``partial_recompute``), unless
recompute is pinned (``--recompute full`` means every layer, ``--recompute-layers`` pins r):
memory falls linearly with r, so one more row per full-recompute mesh finds it. GPipe (1F1B's
bubble at m times the activations) and ZB-H1 (whose weight-gradient split has costs the engine
does not price yet) are evaluated only when pinned.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Annotated, Any, get_args, get_origin

import numpy as np

from planner.constraints import RULES, DegreeRows, rule_masks
from planner.cost.memory import (
    MEMORY_UNDERCOUNT,
    OFFLOAD_RESIDENT_LAYERS,
    STAGE_RANKS,
    headroom_clause,
    host_offload_capacity_bytes,
    layer_activations,
    offloaded_host_bytes,
    peak_memory,
    stage_memory,
    undercount_safe_bytes,
    usable_memory_bytes,
)
from planner.cost.pipeline import (
    batch_choices,
    layers_per_chunk,
    mesh_batch_size,
    num_microbatches,
    rank_layers,
    recomputable_layers,
    smallest_chunk_layers,
    with_recompute_every,
)
from planner.cost.recompute import cheap_set_to_try
from planner.cost.step import Columns, evaluate
from planner.errors import PlannerError
from planner.explain import explain
from planner.fewer_gpus import fewer_gpus, fewer_gpus_hint
from planner.mesh import INTERLEAVED, ONE_F_ONE_B, RECOMPUTE_FULL, RECOMPUTES, SCHEDULES, MeshArrays, constant_column
from planner.pricing import estimate_row
from planner.schemas.base import GIB_BYTES, integer_shown, out_of_range_integer
from planner.schemas.hardware import MAX_CLUSTER_GPUS, ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import DEFAULT_ORDER, ParallelConfig, PipelineSplit
from planner.schemas.ranking import MarginPick, ParetoPoint, RankedEstimate, Ranking

MICRO_BATCH_SIZES = (1, 2, 4, 8, 16)
VIRTUAL_STAGES = (2, 3, 4, 5, 6, 8)
MAX_CP = 16
OBJECTIVES = ("time", "cost", "memory")


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order, by trial division up to sqrt(n)."""
    small, large = [], []
    k = 1
    while k * k <= n:
        if n % k == 0:
            small.append(k)
            if k * k != n:
                large.append(n // k)
        k += 1
    return small + large[::-1]


def _degree_tuples(model: ModelSpec, cluster: ClusterSpec, pins: dict[str, Any]) -> list[tuple[int, ...]]:
    """(tp, cp, pp, dp, ep, expert_tp) combinations whose product is the GPU count. EP ranges
    over the divisors of the expert count; the rules prune those that do not fold."""
    n = cluster.num_gpus
    for axis in ("tp", "pp", "dp", "cp"):
        if axis in pins and n % pins[axis]:
            raise PlannerError(f"--{axis} {pins[axis]} does not divide the {n} GPUs of {cluster.name}")
    etp = pins.get("expert_tp", 1)
    if "ep" in pins:
        eps = [pins["ep"]]
    else:
        eps = divisors(model.num_experts_total) if model.is_moe else [1]
    rows = []
    tps = [pins["tp"]] if "tp" in pins else [t for t in divisors(n) if t <= cluster.fast_domain_gpus]
    for tp in tps:
        cps = [pins["cp"]] if "cp" in pins else [c for c in divisors(n // tp) if c <= MAX_CP and c & (c - 1) == 0]
        for cp in (c for c in cps if (n // tp) % c == 0):
            rest = n // (tp * cp)
            pps = [pins["pp"]] if "pp" in pins else [p for p in divisors(rest) if p <= model.num_hidden_layers]
            for pp in (p for p in pps if rest % p == 0):
                dp = rest // pp
                if "dp" not in pins or pins["dp"] == dp:
                    rows += [(tp, cp, pp, dp, e, etp) for e in eps]
    return rows


def _schedules(pins: dict[str, Any]) -> list[tuple[int, int]]:
    """(schedule code, virtual stages) pairs to search, honouring pins of either."""
    if "schedule" in pins:
        interleaved = pins["schedule"] == "interleaved-1f1b"
        vs = [pins["virtual_stages"]] if "virtual_stages" in pins else (list(VIRTUAL_STAGES) if interleaved else [1])
        return [(SCHEDULES.index(pins["schedule"]), v) for v in vs]
    if "virtual_stages" in pins:
        v = pins["virtual_stages"]
        return [(INTERLEAVED, v)] if v > 1 else [(ONE_F_ONE_B, 1)]
    return [(ONE_F_ONE_B, 1)] + [(INTERLEAVED, v) for v in VIRTUAL_STAGES]


def _knob_rows(pins: dict[str, Any]) -> dict[str, np.ndarray]:
    """Cross product of the per-mesh knobs (micro-batch, schedule and v, ZeRO, recompute)."""
    mbs = [pins["micro_batch_size"]] if "micro_batch_size" in pins else list(MICRO_BATCH_SIZES)
    zero = [pins["zero_stage"]] if "zero_stage" in pins else [0, 1, 2, 3]
    if "recompute_layers" in pins:
        rec = [RECOMPUTE_FULL]
    elif "offload_layers" in pins:
        rec = [RECOMPUTES.index("none")]  # Megatron-Core offloads only without recompute
    else:
        rec = [RECOMPUTES.index(pins["recompute"])] if "recompute" in pins else [0, 1, 2]
    combos = np.array(
        [(b, s, v, z, r) for b, (s, v), z, r in itertools.product(mbs, _schedules(pins), zero, rec)], dtype=np.int64
    )
    names = ("micro_batch_size", "schedule", "virtual_stages", "zero_stage", "recompute")
    return {name: combos[:, i] for i, name in enumerate(names)}


def enumerate_meshes(model: ModelSpec, cluster: ClusterSpec, pins: dict[str, Any]) -> MeshArrays:
    """Every candidate mesh (before pruning) as columns: degrees x knobs."""
    product, _ = _mesh_product(model, cluster, pins)
    return product.take(_meaningful_schedule(product, pins))


def _mesh_product(
    model: ModelSpec,
    cluster: ClusterSpec,
    pins: dict[str, Any],
    sequence_parallel: bool = True,
    overlap_grad_reduce: bool = True,
) -> tuple[MeshArrays, int]:
    """Every degree tuple crossed with every knob row, interleaving on one stage included, tuple
    by tuple; and the number of knob rows each tuple is crossed with. ``sequence_parallel``: the
    stack has Megatron's sequence parallelism (``Stack.sequence_parallel``); ``overlap_grad_reduce``:
    the stack overlaps the gradient reduction by default (``Stack.overlap_grad_reduce``: Megatron-LM
    2021's local DDP all-reduces after the backward pass, which the search had priced overlapped
    unless --no-overlap-grad-reduce was given; a review, 2026-12-07)."""
    degrees = np.array(_degree_tuples(model, cluster, pins), dtype=np.int64).reshape(-1, 6)
    knobs = _knob_rows(pins)
    n_deg, n_knob = len(degrees), len(knobs["schedule"])
    cols = {
        name: np.repeat(degrees[:, i], n_knob) for i, name in enumerate(("tp", "cp", "pp", "dp", "ep", "expert_tp"))
    }
    cols.update({name: np.tile(values, n_deg) for name, values in knobs.items()})
    # Sequence parallelism is on wherever tp > 1 and the stack has it, unless pinned (it saves memory
    # at equal volume)
    cols["sequence_parallel"] = (
        np.full(n_deg * n_knob, bool(pins["sequence_parallel"]))
        if "sequence_parallel" in pins
        else (cols["tp"] > 1) & sequence_parallel
    )
    overlap = bool(pins.get("overlap_grad_reduce", overlap_grad_reduce))
    cols["overlap_grad_reduce"] = constant_column(overlap, n_deg * n_knob)
    cols["recompute_layers"] = constant_column(int(pins.get("recompute_layers") or 0), n_deg * n_knob)
    cols["offload_layers"] = constant_column(int(pins.get("offload_layers") or 0), n_deg * n_knob)
    return MeshArrays(**cols, order=pins.get("order", DEFAULT_ORDER)), n_knob


def _meaningful_schedule(mesh: MeshArrays, pins: dict[str, Any]) -> np.ndarray:
    """The rows to keep: with one stage interleaving is meaningless, so those rows are dropped
    rather than counted (unless the schedule or the virtual stages are pinned)."""
    if "schedule" in pins or "virtual_stages" in pins:
        return np.ones(len(mesh), dtype=bool)
    return ~((mesh.schedule == INTERLEAVED) & (mesh.pp < 2))


def _zero_that_matters(model: ModelSpec, job: JobSpec, mesh: MeshArrays, pins: dict[str, Any]) -> np.ndarray:
    """The rows to keep: where a mesh has nothing to shard (dp*cp = 1 and, for a MoE model, expert
    data parallelism 1), every ZeRO stage is the same placement, so only the stage the stack runs
    unasked (``Stack.unasked_zero_stage``) is kept, as ``pinned_mesh`` fills it, rather than rank
    'z0' and 'z3' of one mesh side by side. A pinned stage is kept."""
    if "zero_stage" in pins:
        return np.ones(len(mesh), dtype=bool)
    stack = job.software
    nothing = mesh.dp * mesh.cp == 1
    if model.is_moe:
        nothing &= mesh.expert_dp == 1
    unasked = np.where(mesh.pp > 1, stack.unasked_zero_stage(2), stack.unasked_zero_stage(1))
    return ~nothing | (mesh.zero_stage == unasked)


def partial_recompute(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays) -> MeshArrays:
    """For each mesh that recomputes every layer, the same mesh recomputing only the first r
    layers of each chunk, r the fewest whose memory fits the GPU (none where that is every
    layer, where no r fits, or where the mesh fits without recompute). Memory is linear in r from
    0 to all but one layer of a chunk (each recomputed layer drops the same activations per
    micro-batch in flight); recomputing them all adds the one layer re-materialised on top
    (``memory.stage_activations``), so r = 1 and r = all - 1 fix the line per stage, and r = all
    whether any r fits; the peak is the larger of the first and last stage, so r is the larger of
    their answers, raised to the nearest count the stack's partial recompute runs
    (``Stack.partial_recompute``, ``pipeline.recomputable_layers``); none where the stack has none."""
    rows = np.flatnonzero((mesh.recompute == RECOMPUTE_FULL) & (mesh.recompute_layers == 0))
    if job.software.partial_recompute is None:
        rows = rows[:0]
    if rows.size == 0:
        return mesh.take(rows)
    full = mesh.take(rows)
    ranks = rank_layers(model, job, full)
    per_chunk = ranks.busiest // full.virtual_stages
    one = full.with_recompute_layers(np.ones(len(full), dtype=np.int64))
    # all but one layer of a chunk: the far end of the line (one layer where a chunk has two or fewer)
    most = full.with_recompute_layers(np.maximum(per_chunk - 1, 1).astype(np.int64))
    m = num_microbatches(mesh_batch_size(job, full), full)
    cap = usable_memory_bytes(cluster, job)
    need = np.zeros(len(full))
    fits_all = np.ones(len(full), dtype=bool)
    acts = layer_activations(model, job, full)  # per layer: the same whichever layers a chunk recomputes
    for rank in STAGE_RANKS:
        at_all, at_one, at_most = (
            stage_memory(model, cluster, job, x, m, rank, ranks=ranks, per_layer=acts).total for x in (full, one, most)
        )
        # what one recomputed layer saves: along the line where it has two points, else to r = all
        per_layer = np.where(
            per_chunk > 2,
            (at_one - at_most) / np.maximum(per_chunk - 2, 1),
            (at_one - at_all) / np.maximum(per_chunk - 1, 1),
        )
        fits_all &= at_all <= cap
        # memory at r (1 <= r < all) = at_one - (r - 1) x per_layer: the fewest r within the cap, 0
        # where none is needed (the line's r = 0, at_one + per_layer, fits)
        over = np.where(per_layer > 0, (at_one - cap) / np.where(per_layer > 0, per_layer, 1.0), per_chunk)
        need = np.maximum(need, np.where(at_one + per_layer <= cap, 0.0, 1.0 + np.ceil(np.maximum(over, 0.0))))
    r = need.astype(np.int64)
    keep = fits_all & (r >= 1)  # r < 1: the mesh fits without recompute
    chunk = layers_per_chunk(model.num_hidden_layers, full.pp * full.virtual_stages)
    smallest = smallest_chunk_layers(model, job, full)
    r = np.where(keep, recomputable_layers(job.software.partial_recompute, smallest, r), r)
    # fewer than the busiest chunk's layers (all of them is plain full), and at most a chunk's decoder
    # layers (``recompute_layers_within_chunk``): the busiest rank's count holds the MTP layers, which
    # Megatron's block method does not recompute (multi_token_prediction.py: 'not supported for MTP
    # yet'); a review (2026-12-07) found Nemotron 3 Super on 8 DGX B200 ranked first at r = 89 of its
    # 88 decoder layers, which check_config then refused. Every n-th layer needs n >= 2, r below the
    # smallest chunk's layers (n = 1 recomputes every layer: plain full)
    keep &= (r < per_chunk) & (r <= chunk)
    if job.software.partial_recompute == "every_nth":
        keep &= r < smallest
    return full.with_recompute_layers(r).take(keep)


def activation_offload(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays) -> MeshArrays:
    """For each mesh that recomputes every layer with pp 1, where the stack offloads activations and
    the profile prices the host link, the same mesh without recompute moving the activations of
    the first n layers to host memory instead (``ParallelConfig.offload_layers``), n the fewest
    whose memory fits the GPU (none where no n below the model's layers fits, or where the mesh
    fits without either). Memory is linear in n above ``memory.OFFLOAD_RESIDENT_LAYERS``, so the
    mesh without offloading and with every layer but one offloaded fix it."""
    if not job.software.activation_offloading or cluster.gpu.host_link_bytes_per_s is None:
        return mesh.take(np.zeros(len(mesh), dtype=bool))
    rows = np.flatnonzero((mesh.recompute == RECOMPUTE_FULL) & (mesh.recompute_layers == 0) & (mesh.pp == 1))
    layers = model.num_hidden_layers
    none = replace(mesh.take(rows), recompute=np.zeros(len(rows), dtype=np.int64))
    most = none.with_offload_layers(np.full(len(none), layers - 1, dtype=np.int64))
    m = num_microbatches(mesh_batch_size(job, none), none)
    at_none = peak_memory(model, cluster, job, none, m).total
    at_most = peak_memory(model, cluster, job, most, m).total
    per_layer = (at_none - at_most) / max(layers - 1 - OFFLOAD_RESIDENT_LAYERS, 1)  # what one more saves
    cap = usable_memory_bytes(cluster, job)
    spare = cap - at_none
    need = np.ceil(np.where(per_layer > 0, -spare / np.where(per_layer > 0, per_layer, 1.0), layers))
    n = np.maximum(need.astype(np.int64) + OFFLOAD_RESIDENT_LAYERS, OFFLOAD_RESIDENT_LAYERS + 1)
    chosen = none.with_offload_layers(np.minimum(n, layers - 1))
    host = offloaded_host_bytes(model, job, chosen, layer_activations(model, job, chosen))
    keep = (spare < 0) & (at_most <= cap) & (n < layers) & (host <= host_offload_capacity_bytes(cluster))
    return chosen.take(keep)


def _equivalent_groups(ranked: np.ndarray, times: np.ndarray, memory: np.ndarray, top: int) -> list[list[int]]:
    """The first ``top`` groups of consecutive ranked meshes with the same step time and memory
    (to 1e-9): swaps such as dp 8 x b 2 for dp 4 x cp 2 x b 4 that the model prices identically.
    Each group is shown once, listing the others as equivalents."""
    groups: list[list[int]] = []
    for i in ranked:
        if groups:
            head = groups[-1][0]
            same = abs(times[i] - times[head]) <= 1e-9 * times[head] and abs(memory[i] - memory[head]) <= (
                1e-9 * memory[head]
            )
            if same:
                groups[-1].append(int(i))
                continue
        if len(groups) == top:
            break
        groups.append([int(i)])
    return groups


def pareto_front(times: np.ndarray, memory: np.ndarray) -> np.ndarray:
    """Indices of meshes no other beats on both step time and memory, fastest first."""
    order = np.lexsort((memory, times))
    ranked = memory[order]
    # a mesh is on the front when its memory is below every faster (or equally fast, leaner) one's
    before = np.concatenate(([np.inf], np.minimum.accumulate(ranked)[:-1]))
    return order[ranked < before].astype(np.int64)


def margin_pick(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    pins: dict[str, Any],
    objective: str,
    try_module_sets: bool,
    winner: RankedEstimate,
    leanest_bytes: float,
) -> MarginPick | None:
    """Where the winner's count does not keep the MEMORY_UNDERCOUNT margin
    (``cost.memory.undercount_safe_bytes``), the mesh the same search ranks first with that share
    of memory kept free (``memory_headroom``): the fastest that keeps it, partial recompute re-tuned
    to the smaller memory (the fewest layers that fit it, which the first search's meshes, tuned to
    the whole memory, do not show); its ``mesh`` None where no mesh keeps it (``leanest_bytes``: the
    first search's leanest). None where the winner keeps it, and for a ranking by memory (its
    winner is the leanest)."""
    if objective == "memory" or winner.memory_per_gpu_bytes <= undercount_safe_bytes(cluster.gpu.hbm_capacity_bytes):
        return None
    common = {
        "margin": MEMORY_UNDERCOUNT,
        "capacity_bytes": cluster.gpu.hbm_capacity_bytes,
        "winner_memory_bytes": winner.memory_per_gpu_bytes,
        "leanest_bytes": leanest_bytes,
    }
    kept = job.model_copy(update={"memory_headroom": MEMORY_UNDERCOUNT})
    try:
        best = search(model, cluster, kept, pins, 1, objective, try_module_sets).candidates[0]
    except PlannerError:  # nothing fits in (1 - MEMORY_UNDERCOUNT) of the memory
        return MarginPick(**common, mesh=None, step_time_s=None, memory_per_gpu_bytes=None, slower=None)

    def per_asked_batch(est: RankedEstimate) -> float:
        return est.step_time_s / est.config.job.batch_size

    return MarginPick(
        **common,
        mesh=best.config.parallel.short(),
        step_time_s=best.step_time_s,
        memory_per_gpu_bytes=best.memory_per_gpu_bytes,
        slower=per_asked_batch(best) / per_asked_batch(winner) - 1.0,
    )


def search(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    pins: dict[str, Any] | None = None,
    top: int = 10,
    objective: str = "time",
    try_module_sets: bool = True,
    try_fewer_gpus: bool = False,
    with_margin: bool = False,
) -> Ranking:
    """Rank every feasible mesh by ``objective`` (see ``search_with_points``)."""
    return search_with_points(model, cluster, job, pins, top, objective, try_module_sets, try_fewer_gpus, with_margin)[
        0
    ]


def search_with_points(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    pins: dict[str, Any] | None = None,
    top: int = 10,
    objective: str = "time",
    try_module_sets: bool = True,
    try_fewer_gpus: bool = False,
    with_margin: bool = False,
) -> tuple[Ranking, np.ndarray, np.ndarray]:
    """Rank every feasible mesh by ``objective`` ('time': step time, per asked batch where the job
    lets the batch grow; 'cost': dollars per asked batch, which on one cluster orders as time;
    'memory': memory per GPU). Also returns every feasible mesh's time per asked batch and
    memory per GPU, for the Pareto scatter.

    Where the stack takes a list of modules to recompute and the job names none
    (``recompute.cheap_set_to_try``), selective meshes are also priced running the cheap modules
    again (Megatron --recompute-modules), a candidate then carrying them in its job; callers
    that replay or price one job (the runs fit, the validator) pass ``try_module_sets=False``.
    With ``try_fewer_gpus`` (``plan`` and ``planner.plan``), a time or cost ranking also searches
    a smaller GPU count (``fewer_gpus.fewer_count``: an NVL72 rack's job segments, else the largest
    power of two below) and reports it where it trains faster (``fewer_gpus.fewer_gpus``). With
    ``with_margin`` (the same callers) a winner whose memory does not keep the measured margin gets
    its ``margin_pick``, one more search; the searches inside other work (the runs fit, capacity's
    rows, export, the validator) do without both."""
    if objective not in OBJECTIVES:
        raise PlannerError(f"--objective '{objective}' is not one of {', '.join(OBJECTIVES)}")
    if objective == "cost" and cluster.profile.price_per_gpu_hour_usd is None:
        raise PlannerError(f"--objective cost needs a price: profile {cluster.profile.name} has none; give --price USD")
    pins = pins_from_config_fields(**(pins or {}))
    if "pipeline_layout" in pins:
        raise PlannerError(
            "--pipeline-layout prices one mesh: give it with --tp, --pp and --dp to `plan estimate` or `plan export` "
            "(the search prices its own split, cost.pipeline.rank_layer_split)"
        )
    try:
        passes = [_price_pass(model, cluster, job, pins)]
    except PlannerError as err:
        if not try_fewer_gpus or objective == "memory":
            raise
        raise PlannerError(str(err) + fewer_gpus_hint(model, cluster, job, pins)) from None
    selective_allowed = pins.get("recompute", "selective") == "selective" and "recompute_layers" not in pins
    variant = cheap_set_to_try(model, job) if try_module_sets and selective_allowed else None
    if variant is not None:
        # the same search over selective meshes only, running the cheap modules again as well:
        # they free what the default keeps, so meshes that did not fit may now (recompute.py)
        trial = job.model_copy(update={"recompute_modules": variant})
        try:
            passes.append(_price_pass(model, cluster, trial, {**pins, "recompute": "selective"}))
        except PlannerError:
            pass  # no selective mesh fits even so: the first pass stands alone
    # every feasible mesh of every pass, as (pass, row); ranked together
    owner = np.concatenate([np.full(p.idx.size, k) for k, p in enumerate(passes)])
    rows = np.concatenate([p.idx for p in passes])
    times = np.concatenate([p.time_per_batch[p.idx] for p in passes])
    memory = np.concatenate([p.cols.memory.total[p.idx] for p in passes])
    # On one cluster cost per asked batch is time per batch x GPUs x price: the same order.
    key = memory if objective == "memory" else times
    ranked = np.lexsort((memory, key))
    out: list[RankedEstimate] = []
    for group in _equivalent_groups(ranked, times, memory, top):
        first = passes[owner[group[0]]]
        row = int(rows[group[0]])
        est = estimate_row(first.cols, row, model, cluster, first.job, first.candidates.row(row))
        others = [passes[owner[i]].label(int(rows[i])) for i in group[1:]]
        out.append(RankedEstimate(**dict(est), rank=len(out) + 1, equivalent_meshes=others))
    front = pareto_front(times, memory)
    pareto = [
        ParetoPoint(
            mesh=passes[owner[i]].label(int(rows[i])),
            step_time_s=float(passes[owner[i]].cols.step_time_s[rows[i]]),
            memory_per_gpu_bytes=float(memory[i]),
        )
        for i in front
    ]
    ranking = Ranking(
        model=model.name,
        cluster=cluster.name,
        cluster_description=cluster.describe(),
        num_gpus=cluster.num_gpus,
        job=job,
        objective=objective,
        evaluated=sum(len(p.mesh) + p.variants for p in passes),
        feasible=int(rows.size),
        pruned={k: sum(p.pruned.get(k, 0) for p in passes) for k in dict.fromkeys(k for p in passes for k in p.pruned)},
        candidates=out,
        explanation=explain(list(out), model),
        pareto=pareto,
    )
    if with_margin and out:
        pick = margin_pick(
            model, cluster, job, pins, objective, try_module_sets, out[0], pareto[-1].memory_per_gpu_bytes
        )
        ranking = ranking.model_copy(update={"margin_pick": pick})
    if try_fewer_gpus and objective != "memory" and out:
        found = fewer_gpus(model, cluster, job, pins, out[0])
        ranking = ranking.model_copy(update={"fewer_gpus": found})
    return ranking, times, memory


@dataclass(frozen=True)
class _Pass:
    """One job's search: the meshes enumerated, those priced (``candidates``, ``cols``), the
    indices of those that fit (``idx``) and each priced mesh's time per asked batch."""

    job: JobSpec
    mesh: MeshArrays
    candidates: MeshArrays
    cols: Columns
    idx: np.ndarray
    time_per_batch: np.ndarray
    pruned: dict[str, int]
    variants: int  # partial-recompute and offload meshes added to the enumerated ones

    def label(self, row: int) -> str:
        """The mesh in short, with the modules it recomputes where the job names them."""
        short = self.candidates.row(row).short()
        modules = self.job.recompute_modules
        return short if modules is None else f"{short} modules={','.join(modules)}"


def _price_pass(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, pins: dict[str, Any]) -> _Pass:
    """Enumerate, prune by the hard rules, add partial recompute, price memory then time; raise
    with the diagnosis where nothing fits."""
    # the enumeration without one-stage interleaving and moot ZeRO stages, in one selection
    product, n_knob = _mesh_product(
        model, cluster, pins, job.software.sequence_parallel, job.software.overlap_grad_reduce
    )
    keep = np.flatnonzero(_meaningful_schedule(product, pins) & _zero_that_matters(model, job, product, pins))
    mesh = product.take(keep)
    degrees = DegreeRows(product.take(np.arange(0, len(product), n_knob)), keep // n_knob)
    masks = rule_masks(model, cluster, job, mesh, degrees)
    alive = np.ones(len(mesh), dtype=bool)
    pruned: dict[str, int] = {}
    hard = {r.name for r in RULES if r.hard or (r.name == "tp_within_fast_domain" and "tp" not in pins)}
    for rule in RULES:
        if rule.name not in hard:
            continue
        fail = alive & ~masks[rule.name]
        if fail.any():
            pruned[rule.name] = int(fail.sum())
        alive &= masks[rule.name]
    candidates = mesh.take(alive)
    if "recompute" not in pins:  # a pinned 'full' means every layer, as Megatron's uniform method
        candidates = MeshArrays.concat(candidates, partial_recompute(model, cluster, job, candidates))
        if "offload_layers" not in pins:
            candidates = MeshArrays.concat(candidates, activation_offload(model, cluster, job, candidates))
    origin = None
    if job.max_batch_growth > 0:  # each mesh at the batches worth trying within the growth, the first that fits kept
        candidates, origin = batch_choices(job, candidates)
    variants = len(candidates) - int(alive.sum())
    # Memory first (evaluate prices it the same way): the step is priced only for meshes that fit;
    # where none does, the diagnosis needs their memory alone.
    m = num_microbatches(mesh_batch_size(job, candidates), candidates)
    candidates = with_recompute_every(model, job, candidates)  # derived once for memory and the step
    memory = peak_memory(model, cluster, job, candidates, m)
    fit = memory.total <= usable_memory_bytes(cluster, job)
    if not fit.any():
        raise PlannerError(_nothing_fits(model, cluster, job, mesh, pins, masks, hard, pruned, memory, candidates))
    if not fit.all():
        pruned["memory"] = int((~fit).sum())
        candidates, memory = candidates.take(fit), memory.take(fit)
        origin = None if origin is None else origin[fit]
    cols = evaluate(model, cluster, job, candidates, memory)
    fits = cols.fits
    if (~fits).any():
        pruned["memory"] = pruned.get("memory", 0) + int((~fits).sum())
    idx = np.flatnonzero(fits)
    if idx.size == 0:
        raise PlannerError(_nothing_fits(model, cluster, job, mesh, pins, masks, hard, pruned, cols.memory, candidates))
    # A mesh that grew the batch (max_batch_growth) is ranked by its time per asked batch.
    time_per_batch = cols.step_time_s * job.batch_size / cols.batch_size
    if origin is not None:
        idx = _first_per_origin(idx, origin)
    return _Pass(job, mesh, candidates, cols, idx, time_per_batch, pruned, variants)


def _first_per_origin(idx: np.ndarray, origin: np.ndarray) -> np.ndarray:
    """Of the fitting rows ``idx`` (ascending), the first per mesh of ``origin``: its batch in
    ``cost.pipeline.batch_choices``' order, the next multiple where it fits, else the grouped one."""
    _, first = np.unique(origin[idx], return_index=True)
    return np.sort(idx[first])


def _nothing_fits(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    mesh: MeshArrays,
    pins: dict[str, Any],
    masks: dict[str, np.ndarray],
    hard: set[str],
    pruned: dict[str, int],
    memory: Any,
    candidates: MeshArrays,
) -> str:
    """Why the search came back empty: no mesh to enumerate, a rule every mesh breaks, or the
    memory shortfall of the leanest mesh (``memory``: the peak of each of ``candidates``), with
    the knobs that mesh does not already use."""
    if len(mesh) == 0:
        pinned = {a: pins[a] for a in ("tp", "pp", "dp", "cp") if a in pins}
        product = int(np.prod(list(pinned.values()))) if pinned else 1
        label = "*".join(pinned) or "the degrees"
        return (
            f"no mesh matches the pins: {label} = {product} leaves no way to fill the {cluster.num_gpus} GPUs "
            f"of {cluster.name} (tp up to the {cluster.fast_domain_gpus}-GPU fast domain unless pinned)"
        )
    blockers = [rule for rule in RULES if rule.name in hard and not masks[rule.name].any()]
    if blockers:
        # Every mesh breaks it: the first mesh's message shows how (it may break ParallelConfig's
        # own checks too, so build it without validation).
        # the rule's own words first: most such rules are the job's (a format, a layer count), which no
        # mesh could fix, and had read as a mesh's failure (a review, 2026-12-07)
        example = mesh.row(0, validate=False)
        return f"{blockers[0].message(model, cluster, job, example)} (no candidate mesh passes '{blockers[0].name}')"
    if len(candidates):
        lean = int(np.argmin(memory.total))
        best = float(memory.total[lean])
        cap = usable_memory_bytes(cluster, job) / GIB_BYTES
        leanest = candidates.row(lean, validate=False)
        tries = ["more GPUs"]
        if leanest.zero_stage < 3 and "zero_stage" in pins:
            tries.append("--zero-stage 3")
        if leanest.recompute != "full" and "recompute" in pins:
            tries.append("--recompute full")
        tries.append("a shorter --seq-len")
        return (
            f"no mesh fits in memory: the leanest, {leanest.short()}, needs {best / GIB_BYTES:.1f} GiB per GPU, "
            f"{cap:.1f} GiB available{headroom_clause(job)}; try {', '.join(tries[:-1])} or {tries[-1]}"
        )
    # The rule that alone stops the most meshes binds (--ep-comm-overlap's schedule rule, say),
    # not the one that happens to come first for most of them.
    checked = [rule for rule in RULES if rule.name in hard]
    failures = np.array([~masks[rule.name] for rule in checked])
    alone = failures & (failures.sum(axis=0) == 1)
    if alone.any():
        counts = alone.sum(axis=1)
        k, *rest = [int(i) for i in np.argsort(-counts, kind="stable") if counts[i]][:2]
        example = mesh.row(int(np.flatnonzero(alone[k])[0]), validate=False)
        also = "".join(f" ('{checked[i].name}' alone stops {int(counts[i]):,} others)" for i in rest)
        return (
            f"every candidate mesh breaks a rule; '{checked[k].name}' alone stops {int(counts[k]):,} of them{also}, "
            f"e.g. {example.short()}: {checked[k].message(model, cluster, job, example)}"
        )
    worst = max(pruned, key=pruned.__getitem__)
    return f"every candidate mesh breaks a rule; most often '{worst}' ({pruned[worst]} meshes); relax the pins"


def default_batch_size(seq_len: int, tokens: float = 0.0) -> int:
    """Sequences per step when neither the user nor the model card gives a batch: about 4 Mi tokens
    (Llama 3's initial batch, arXiv:2407.21783 section 3.4.1; ``tokens`` another count), rounded in
    log scale to the nearest 2^k or 3 x 2^k, so that data parallelism over a power of two divides
    it: 4 Mi / 8,196 tokens is 511.75 sequences, which floored to 511 (7 x 73) left no data
    parallelism at all; it is 512 (768 at 6,000 tokens, 699 floored)."""
    raw = max((tokens or DEFAULT_BATCH_TOKENS) / seq_len, 1.0)
    k = math.floor(math.log2(raw))
    choices = [2**k, 3 * 2 ** max(k - 1, 0), 2 ** (k + 1)]
    return min(choices, key=lambda b: (abs(math.log(b / raw)), b))


def default_job(
    model: ModelSpec,
    seq_len: int | None = None,
    global_batch_size: int | None = None,
    global_batch_tokens: int | None = None,
    **extra: Any,
) -> JobSpec:
    """The job when the user gives none: the model card's sequence length and batch (its tokens
    per step at another length, ``card_batch_size``), else s = 4096 (or the model's context, if
    shorter) and a batch of about 4 Mi tokens (``default_batch_size``)."""
    # 0 is refused, not defaulted; a model without a card length (a config.json) takes 4096 or its
    # context, whichever is shorter (GPT-2's 1,024 learned positions)
    fallback = min(DEFAULT_SEQ_LEN, model.max_position_embeddings)
    s = seq_len if seq_len is not None else model.default_seq_len or fallback
    if isinstance(s, float) and s.is_integer():  # a whole float is the int JobSpec's fields take it for
        s = int(s)
    if isinstance(s, bool) or not isinstance(s, int) or s < 1:
        raise PlannerError(f"job: field 'seq_len': expected a whole number >= 1, got {s!r}")
    if global_batch_size is None and global_batch_tokens is None:
        global_batch_size = card_batch_size(model, s)
    data = {"seq_len": s, "global_batch_size": global_batch_size, "global_batch_tokens": global_batch_tokens, **extra}
    from planner.errors import validate_as

    return validate_as(JobSpec, {k: v for k, v in data.items() if v is not None}, "job")


def card_batch_size(model: ModelSpec, seq_len: int) -> int:
    """The model card's batch at ``seq_len``: its sequences at its own length, else as many as keep
    its tokens per step (DeepSeek-V3's 15,360 x 4,096 is 1,920 sequences at 32K and 480 at 128K, the
    batches its long-context extension ran, arXiv:2412.19437 section 4.3; the card's 15,360
    sequences at 128K had been two billion tokens a step), exactly where they divide and else rounded as
    ``default_batch_size`` rounds; without a card batch, ``default_batch_size``."""
    batch, length = model.default_global_batch_size, model.default_seq_len
    if batch is None:
        return default_batch_size(seq_len)
    if length is None or length == seq_len:
        return batch
    tokens = batch * length
    return tokens // seq_len if tokens % seq_len == 0 else default_batch_size(seq_len, tokens)


DEFAULT_SEQ_LEN = 4096
DEFAULT_BATCH_TOKENS = 4 * 1024 * 1024


MAX_MESH_DEGREE = MAX_CLUSTER_GPUS
"""The largest parallel degree, micro-batch, chunk count or recomputed-layer count a pin may
name: no mesh degree exceeds the largest cluster planned (``MAX_CLUSTER_GPUS``), and the other
integer knobs are far below it in any real job; the bound keeps a mistyped value from
overflowing the enumeration's arrays."""


def _pin_value(name: str, value: Any) -> Any:
    """One pin checked against its ParallelConfig field alone (type, range, choices), as the CLI's
    options and ``ParallelConfig`` check it: the library's ``plan(tp='8')`` reads 8,
    ``recompute='some'`` or ``zero_stage=5`` is a one-line error naming the field."""
    from planner.errors import validate_field

    field = ParallelConfig.model_fields[name]
    degree = name in DEGREE_PINS and isinstance(value, int) and not isinstance(value, bool)
    if degree and out_of_range_integer(value) is not None:
        return value  # the caller's range check names the flag and its bound
    if isinstance(value, bool) and field.annotation is not bool:
        expected = getattr(field.annotation, "__name__", str(field.annotation))
        raise PlannerError(f"mesh: field '{name}': expected {expected}, got {value!r}")
    return validate_field(ParallelConfig, name, value, "mesh")  # a flag pinned as 1 or 'yes' refused there


def _whole_number_field(annotation: Any) -> bool:
    """Whether a field holds a whole number: int, PositiveInt (Annotated), or either or None."""
    kinds = (annotation, *get_args(annotation))
    return any(get_args(k)[0] is int if get_origin(k) is Annotated else k is int for k in kinds)


DEGREE_PINS = frozenset(
    name
    for name, field in ParallelConfig.model_fields.items()
    if name != "zero_stage" and _whole_number_field(field.annotation)
)
"""The pins ``pins_from_config_fields`` holds to 1..``MAX_MESH_DEGREE``: the whole-number fields of
a mesh (degrees, micro-batch, virtual stages, recomputed and offloaded layers), the ZeRO stage
aside (0-3, its own field's range)."""


def pinned_mesh(pins: dict[str, Any], num_gpus: int, job: JobSpec) -> ParallelConfig:
    """The one mesh ``pins`` name, as `plan estimate`, ``planner.estimate`` and `plan export` with
    tp, pp and dp read them (``ParallelConfig.with_defaults``: dp from the GPUs left over,
    interleaving from v, SP with tp where the stack has it), the ZeRO stage where unpinned the one ``job``'s stack runs
    when none is asked for (``Stack.default_zero_stage``: Megatron-Core's distributed optimizer,
    torchtitan's FSDP), at most the one it runs with a pipeline (``zero_with_pipeline``: DeepSpeed's
    pipeline engine stays below ZeRO-2). Validated (one-line ``PlannerError``)."""
    from planner.errors import validate_as

    pins = pins_from_config_fields(**pins)
    if "zero_stage" not in pins:
        pins["zero_stage"] = job.software.unasked_zero_stage(pins.get("pp", 1))
    if "sequence_parallel" not in pins and not job.software.sequence_parallel:
        pins["sequence_parallel"] = False  # a stack without it (DeepSpeed) runs TP unsharded
    pins.setdefault("overlap_grad_reduce", job.software.overlap_grad_reduce)  # the stack's, where unpinned
    return validate_as(ParallelConfig, ParallelConfig.with_defaults(pins, num_gpus), "mesh")


def split_pins(pins: dict[str, Any], split: PipelineSplit, model: ModelSpec, job: JobSpec) -> dict[str, Any]:
    """``pins`` with Megatron-LM's split options (``PipelineSplit``) turned into the
    ``pipeline_layout`` they build for ``model`` on the pinned pp and virtual stages
    (``cost.layout.split_layout``), so the estimate prices and the export writes that split."""
    if not split.given:
        return pins
    if "pipeline_layout" in pins:
        raise PlannerError(
            "--pipeline-layout cannot be given with --decoder-first/last-pipeline-num-layers or "
            "--account-for-embedding/loss-in-pipeline-split (Megatron-LM refuses a layout beside them)"
        )
    from planner.cost.flops import mtp_layers
    from planner.cost.layout import split_layout

    layout = split_layout(
        model.num_hidden_layers,
        pins.get("pp", 1),
        pins.get("virtual_stages", 1),
        mtp_layers(model, job),
        split.decoder_first_pipeline_num_layers,
        split.decoder_last_pipeline_num_layers,
        split.account_for_embedding_in_pipeline_split,
        split.account_for_loss_in_pipeline_split,
    )
    return {**pins, "pipeline_layout": layout}


def pins_from_config_fields(**fields: Any) -> dict[str, Any]:
    """Drop unset (None) knobs; validate the rest against ParallelConfig's field types."""
    pins = {k: v for k, v in fields.items() if v is not None}
    unknown = set(pins) - set(ParallelConfig.model_fields)
    if unknown:
        raise PlannerError(f"unknown mesh knob(s) {sorted(unknown)}; allowed: {sorted(ParallelConfig.model_fields)}")
    pins = {name: _pin_value(name, value) for name, value in pins.items()}
    for name, value in pins.items():
        if name not in DEGREE_PINS or not isinstance(value, int) or isinstance(value, bool):
            continue  # the stage has its own range (0-3), checked by its option and schema
        if not 1 <= value <= MAX_MESH_DEGREE:
            flag = "--" + name.replace("_", "-")
            raise PlannerError(f"{flag} {integer_shown(value)}: expected a whole number from 1 to {MAX_MESH_DEGREE:,}")
    if "order" in pins:
        from planner.errors import validate_as

        validate_as(ParallelConfig, {"order": pins["order"]}, "--order")
    if "recompute_layers" in pins:
        layers = pins["recompute_layers"]
        if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
            raise PlannerError(f"--recompute-layers {layers!r}: expected a whole number >= 1")
        if pins.setdefault("recompute", "full") != "full":
            raise PlannerError(f"--recompute-layers needs --recompute full (got '{pins['recompute']}')")
    if "offload_layers" in pins:
        if pins.setdefault("recompute", "none") != "none":
            raise PlannerError(f"--offload-layers needs --recompute none (got '{pins['recompute']}')")
        if pins.setdefault("pp", 1) != 1:
            raise PlannerError(f"--offload-layers needs --pp 1 (got {pins['pp']}): Megatron-Core offloads without PP")
    return pins
