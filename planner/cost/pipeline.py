"""Pipeline parallelism: layers per stage, micro-batches in flight, bubble (ARCHITECTURE 8.7).

Bubble fractions, p stages, m micro-batches, v virtual stages per rank:
  GPipe and 1F1B:     (p-1)/(m+p-1)          Huang et al. 2019; Narayanan et al. 2021 section 2.2.1
  interleaved 1F1B:   (p-1)/(v*m+p-1)        Narayanan et al. 2021 section 2.2.2
  ZB-H1:              (p-1)/(3m+p-1)         Qi et al. 2024, 'Zero Bubble Pipeline Parallelism',
                      section 3: with the backward split into input-gradient B and weight-gradient
                      W and T_F = T_B = T_W, ZB-H1's bubble is (p-1)(T_F+T_B-T_W) = a third of
                      1F1B's (p-1)(T_F+T_B+T_W), at 1F1B's activation memory.
  DualPipe:           (p-2)/(3m+p-2)         DeepSeek-V3 (arXiv:2412.19437) Table 2 and the
                      deepseek-ai/DualPipe README give (p/2-1)(F&B+B-3W), B the full backward and
                      F&B a forward and a backward overlapped: with F = W, B = 2F and F&B = F + B
                      that is (p/2-1) x 2F = p-2 stage-forwards, whatever m (the README's schedule
                      figure, 8 ranks and 20 micro-batches, shows 66 units per rank, 6 idle).
  DualPipeV:          (p-1)/(3m+p-1)         the same count on dualpipev.py (p ranks of two
                      half-stages, m >= 2p): p-1 stage-forwards, ZB-H1's bubble; what it adds is
                      the forward/backward pairing that hides expert all-to-alls.
Expressed as idle slots of one micro-batch's forward+backward: p-1, (p-1)/v, (p-1)/3, (p-2)/3 and
(p-1)/3.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.cost.flops import (
    attention_score_flops_per_token_fwd,
    dense_layer_matmul_params,
    moe_layer_active_matmul_params,
    mtp_block_counts,
    mtp_layer_is_moe,
    mtp_layers,
    mtp_projection_params,
)
from planner.cost.layout import format_layout
from planner.mesh import DUALPIPE, DUALPIPE_V, SCHEDULES, MeshArrays
from planner.schedules import per_schedule, per_schedule_constant
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec


def batch_unit(mesh: MeshArrays, interleaved_rule: bool = True) -> np.ndarray:
    """Sequences a global batch must be a multiple of: d * b, times p for interleaved 1F1B where
    ``interleaved_rule`` holds (a stack whose interleaved schedule needs the micro-batch count
    divisible by p: ``needs_pp_multiple``)."""
    unit = mesh.dp * mesh.micro_batch_size
    times_pp = per_schedule_constant(mesh.schedule, lambda s: s.batch_times_pp) > 0
    return np.where(interleaved_rule & times_pp, unit * mesh.pp, unit)


def needs_pp_multiple(job: JobSpec) -> bool:
    """Whether the job's stack interleaves only over a multiple of p micro-batches: one without a
    micro-batch group size (``Stack.interleaved_group_size``; Megatron-Core has one)."""
    return not job.software.interleaved_group_size


def mesh_batch_size(job: JobSpec, mesh: MeshArrays, interleaved_rule: bool = True) -> np.ndarray:
    """The global batch each mesh runs: the asked B when the mesh's unit divides it, else the
    next multiple, ceil(B / unit) * unit, and on a stack with interleaving groups at least pp
    micro-batches' worth (``schedules.microbatch_group_size``). The feasibility rules bound the
    growth by the job's ``max_batch_growth`` (none by default), so unless growth is allowed this is B."""
    multiple = needs_pp_multiple(job)
    batch = round_up(job.batch_size, batch_unit(mesh, interleaved_rule and multiple))
    if interleaved_rule and not multiple:  # Megatron-Core's groups need at least pp micro-batches
        interleaved = per_schedule_constant(mesh.schedule, lambda s: s.batch_times_pp) > 0
        batch = np.where(interleaved, np.maximum(batch, mesh.dp * mesh.micro_batch_size * mesh.pp), batch)
    return np.where(mesh.batch_size > 0, mesh.batch_size, batch)


def batch_choices(job: JobSpec, mesh: MeshArrays) -> tuple[MeshArrays, np.ndarray]:
    """Each mesh at the global batches worth pricing within the job's growth (``JobSpec.
    max_batch_size``), with the index of the mesh each row came from: the batch
    ``mesh_batch_size`` gives (the next multiple of the mesh's unit) and, where it differs and is
    allowed, the smallest multiple above it whose micro-batch count pp divides (Megatron-Core's
    interleaving groups then hold p micro-batches, the fewest in flight: ``schedules.
    microbatch_group_size``), which the search and ``estimate`` take where the first does not fit:
    growth serves the mesh's divisibility and memory, not speed for its own sake. Llama-3-70B on
    16 DGX H100 at 500 sequences with 5% growth: tp4 pp4 dp8 v8 at 504 (m = 63, groups of 7) needs
    104 GiB, at 512 (m = 64) 76.6 and 2.9% faster per asked batch than the mesh the search had
    ranked first, which it never tried (a review, 2026-12-08)."""
    first = mesh_batch_size(job, mesh)
    per_microbatch = mesh.dp * mesh.micro_batch_size
    grouped = round_up(first // per_microbatch, mesh.pp) * per_microbatch
    also = np.flatnonzero((grouped != first) & (grouped <= job.max_batch_size))
    origin = np.concatenate([np.arange(len(mesh)), also])
    return mesh.take(origin).with_batch_size(np.concatenate([first, grouped[also]])), origin


def round_up(batch_size: int, unit: Any) -> Any:
    """The smallest multiple of ``unit`` (an int or an array) that is >= ``batch_size``."""
    return -(-batch_size // unit) * unit


def num_microbatches(mesh_batch: np.ndarray, mesh: MeshArrays) -> np.ndarray:
    """m = B / (d * b): micro-batches each pipeline processes per step, B the mesh's batch."""
    return mesh_batch // (mesh.dp * mesh.micro_batch_size)


def bubble_slots(mesh: MeshArrays) -> np.ndarray:
    """Idle time of a step in units of one micro-batch's forward+backward on a stage: the
    schedule's entry in ``planner.schedules`` (1F1B and GPipe p-1, interleaved (p-1)/v, ZB-H1 and
    DualPipeV (p-1)/3, DualPipe (p-2)/3)."""
    return per_schedule(mesh.schedule, mesh.pp, mesh.virtual_stages, 0, lambda s: s.bubble_slots)


def bubble_fraction(m: np.ndarray, mesh: MeshArrays) -> np.ndarray:
    """Idle share of the step: bubble / (m + bubble); equals (p-1)/(m+p-1) for 1F1B."""
    slots = bubble_slots(mesh)
    return slots / (m + slots)


def layers_per_chunk(num_layers: int, chunks: Any) -> Any:
    """Layers of the busiest model chunk when ``num_layers`` are split over ``chunks`` = p*v
    chunks: ceil(L / (p*v)) (an int or an array, as ``chunks``)."""
    return -(-num_layers // chunks)


def recomputable_layers(kind: str | None, chunk_layers: Any, wanted: Any) -> Any:
    """The fewest layers of a chunk of ``chunk_layers`` at or above ``wanted`` (>= 1) that a
    stack's partial recompute (``Stack.partial_recompute``) can recompute: any count under
    'block' (Megatron's first r layers); under 'every_nth' floor(c/n) for an integer n
    (torchtitan's selective layer checkpointing wraps every n-th block), which for r is
    c // (c // r), the largest n whose share still reaches r, c the smallest chunk's layers
    (``smallest_chunk_layers``: the n that ``recompute_every`` derives from it); above c, c
    (n = 1, every layer). None: no partial recompute, so the whole chunk. Ints or arrays, as the
    arguments."""
    if kind == "block":
        return wanted
    if kind == "every_nth":
        return chunk_layers // np.maximum(chunk_layers // np.maximum(wanted, 1), 1)
    return chunk_layers


@dataclass(frozen=True)
class RankLayers:
    """Decoder and MTP layers on the busiest pipeline rank other than the last ("body"; none when
    p = 1) and on the last rank (which also runs the LM head and loss, once per MTP layer more),
    columns over meshes. The step prices both ranks and waits for the slower."""

    body: np.ndarray
    body_mtp: np.ndarray
    last: np.ndarray
    last_mtp: np.ndarray
    first: np.ndarray  # the first rank's (with the embedding)
    first_mtp: np.ndarray
    # the ranks between the first and the last that memory prices (0 layers where p <= 2: none),
    # each with the micro-batches its position holds (``microbatches_in_flight``): the busiest of
    # ranks 1..p-2 at the first of them with that count (an explicit layout's at rank 1, the most
    # any of them holds: its counts need not grow towards the last), and rank 1 with its own layers
    # (more in flight; the first rank's own may be lighter, a MoE model's leading dense ones)
    middle: np.ndarray
    middle_mtp: np.ndarray
    middle_index: np.ndarray
    second: np.ndarray
    second_mtp: np.ndarray
    # of the plan's own split, the model's leading dense layers (``leading_dense_count``) rank 1 and
    # the middle rank hold (0 for an explicit layout, whose ranks between are priced as a bound, and
    # for dual schedules): DeepSeek-V3's k = 3 at pp 16, v 2 puts layer 2 on rank 1
    second_dense: np.ndarray
    middle_dense: np.ndarray

    @property
    def busiest(self) -> np.ndarray:
        """Layers (decoder and MTP) on the most loaded rank, head aside: what bounds per-rank
        activation and weight memory."""
        return np.maximum(self.body + self.body_mtp, self.last + self.last_mtp)

    def stage(self, kind: str, pp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(decoder layers, MTP layers, pipeline rank) of one of the ranks memory prices
        (``memory.STAGE_RANKS``: 'first', 'second', 'middle', 'last'); with p = 1 the one rank."""
        decoders, mtp, index = {
            "first": (self.first, self.first_mtp, 0),
            "second": (self.second, self.second_mtp, 1),
            "middle": (self.middle, self.middle_mtp, self.middle_index),
            "last": (self.last, self.last_mtp, pp - 1),
        }[kind]
        alone = pp == 1
        return (
            np.where(alone, self.last, decoders),
            np.where(alone, self.last_mtp, mtp),
            np.where(alone, 0, np.broadcast_to(index, pp.shape)),
        )


def layer_weight_flops(model: ModelSpec, seq_len: int, moe: bool) -> float:
    """Forward FLOPs per token of one decoder layer of a kind (matmuls and attention scores), the
    unit ``last_rank_extra_layers`` counts in."""
    params = moe_layer_active_matmul_params(model) if moe else dense_layer_matmul_params(model)
    return 2.0 * params + attention_score_flops_per_token_fwd(model, seq_len)


def last_rank_extra_layers(model: ModelSpec, job: JobSpec) -> float:
    """What the last rank runs beside its decoder layers, in layers of the model's last kind, by
    forward FLOPs: the LM head once and once more per MTP layer (Megatron-Core's GPTModel
    post-process computes every MTP depth's logits on the loss stage), and the MTP layers (a
    decoder layer and the 2h x h projection each). A FLOP count, as Megatron's
    --account-for-loss-in-pipeline-split counts the loss as one layer by hand; the cross entropy
    (memory-bound) is left out of the weight, and priced in the step."""
    mtp = mtp_layers(model, job)
    layer = layer_weight_flops(model, job.seq_len, mtp_layer_is_moe(model))
    head = 2.0 * model.vocab_size * model.hidden_size
    mtp_layer = layer + 2.0 * mtp_projection_params(model)
    return ((1 + mtp) * head + mtp * mtp_layer) / layer


def balanced_last_layers(num_layers: int, pp: int, virtual_stages: int, extra: float, empty_ends: bool = True) -> int:
    """Decoder layers for the last rank that minimise the slower of the last rank (its layers +
    ``extra``) and the busiest other rank (the rest shared by p-1 ranks, ceil((L-n)/(p-1))), i.e.
    what --decoder-last-pipeline-num-layers or a layout does by hand. Every chunk keeps a decoder
    layer except the first (which may hold only the embedding) and the last (only the loss):
    n >= v-1 and L-n >= (p-1)v-1; without ``empty_ends`` (a hybrid's '|' segments, each a
    MambaStack of its blocks) those two keep one too: n >= v and L-n >= (p-1)v. Ties go to the
    larger n (lighter first stage)."""
    spare = 1 if empty_ends else 0
    low = max(virtual_stages - spare, 0)
    high = num_layers - (pp - 1) * virtual_stages + spare

    def others(n: int) -> int:  # the busiest other rank
        return -(-(num_layers - n) // (pp - 1))

    if high < low:
        return low
    # others(n) does not grow with n and n + extra grows: the slower of the two falls until they
    # cross and rises after, so the best n is the last before the crossing (the lowest others(n))
    # or the first after it, found by bisection (a loop over n took seconds at 10^5 layers).
    if others(low) < low + extra:
        return low
    lo, hi = low, high  # others(lo) >= lo + extra holds; find the last n where it does
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if others(mid) >= mid + extra:
            lo = mid
        else:
            hi = mid - 1
    if lo < high and lo + 1 + extra <= others(lo):
        return lo + 1
    return lo


def split_rank_layers(model: ModelSpec, job: JobSpec, pp: int, virtual_stages: int) -> list[int]:
    """Decoder layers of every pipeline rank of the split the plan runs without a layout
    (``rank_layer_split``): the others' share evenly, the extra ones on the ranks nearest the last
    (``split_stages``), where the stack takes any split; the even split otherwise."""
    if pp == 1:
        return [model.num_hidden_layers]
    if not job.software.pipeline_layouts:
        return stage_layer_counts(model.num_hidden_layers, pp, virtual_stages)
    _, last = rank_layer_split(model, job, pp, virtual_stages)
    return [*_spread(model.num_hidden_layers - last, pp - 1, front=False), last]


def rank_layer_split(model: ModelSpec, job: JobSpec, pp: int, virtual_stages: int) -> tuple[int, int]:
    """(busiest other rank's decoder layers, last rank's decoder layers) of the split the plan
    runs when the job names no layout: with p = 1 (0, L); a stack that takes any split
    (``Stack.pipeline_layouts``) balances the last rank (``balanced_last_layers``; a hybrid model's
    blocks as Megatron-LM core_v0.17.0 takes them, '|' segments of --hybrid-layer-pattern, none
    empty: ``export.megatron.hybrid_layer_pattern``); another runs the even split
    (``stage_layer_counts``: extras in the middle chunks)."""
    layers = model.num_hidden_layers
    if pp == 1:
        return 0, layers
    if job.software.pipeline_layouts:
        extra = last_rank_extra_layers(model, job)
        last = balanced_last_layers(layers, pp, virtual_stages, extra, empty_ends=not model.is_hybrid)
        return -(-(layers - last) // (pp - 1)), last
    counts = stage_layer_counts(layers, pp, virtual_stages)
    return max(counts[:-1]), counts[-1]


def dual_rank_split(num_layers: int, pp: int, schedule: str) -> tuple[int, int]:
    """(busiest rank but the head's, the head's rank) decoder layers under DualPipe or DualPipeV,
    the layers split evenly over their stages (``chunk_layer_counts``: extras in the middle).
    DualPipe: p stages, rank r holding stage r and stage p-1-r (the other direction's); half
    the micro-batches run through each, so a rank's layers per micro-batch are the mean of the
    two, rounded up. DualPipeV: 2p half-stages in a V, rank r holding half-stages
    r and 2p-1-r, so rank 0 holds the first and the last, with the embedding and the LM head
    (deepseek-ai/DualPipe dualpipev.py; torch's ScheduleDualPipeV, 'V' stage placement)."""
    per_rank = dual_rank_layers(num_layers, pp, schedule) or []
    if schedule == "dualpipev":
        return max(per_rank[1:], default=0), per_rank[0]
    return max(per_rank[:-1], default=0), per_rank[-1]


def dual_rank_layers(num_layers: int, pp: int, schedule: str) -> list[int] | None:
    """Decoder layers each rank runs per micro-batch under DualPipe (stages r and p-1-r, half the
    micro-batches each: their mean, rounded up) or DualPipeV (half-stages r and 2p-1-r, both for
    every micro-batch), the layers split evenly (``chunk_layer_counts``); None for other schedules."""
    if schedule == "dualpipev":
        sizes = chunk_layer_counts(num_layers, pp, 2)
        return [sizes[r] + sizes[2 * pp - 1 - r] for r in range(pp)]
    if schedule == "dualpipe":
        sizes = chunk_layer_counts(num_layers, pp, 1)
        return [-(-(sizes[r] + sizes[pp - 1 - r]) // 2) for r in range(pp)]
    return None


def heads_on_last_rank(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """LM heads with their losses the head's rank runs per micro-batch: one and one per MTP layer;
    under DualPipe half as many, its two end ranks each ending the pipeline for one direction's
    micro-batches (its MTP layers are priced on every micro-batch, an upper bound)."""
    return (1.0 + mtp_layers(model, job)) * per_schedule_constant(mesh.schedule, lambda s: s.head_share)


def _spread(count: int, parts: int, front: bool) -> list[int]:
    """``count`` split into ``parts`` near-equal integers, the larger ones first (``front``) or last."""
    base, extra = divmod(count, parts)
    sizes = [base + (1 if i < extra else 0) for i in range(parts)]
    return sizes if front else sizes[::-1]


def split_stages(model: ModelSpec, job: JobSpec, pp: int, virtual_stages: int) -> list[list[str]]:
    """The plan's own split (``rank_layer_split``) as layout stages (``cost.layout``), p*v chunks in
    model order, chunk c on rank c mod p: the other ranks share their layers evenly, the extra
    ones on the ranks nearest the last (rank 0 holds the most micro-batches in flight); inside a
    rank the chunks are even, the first chunk (embedding 'E') or the last (MTP 'm' and loss 'L')
    the lighter; every MTP layer on the last chunk, as Megatron-Core places them by default."""
    if pp == 1 or not job.software.pipeline_layouts:
        sizes = chunk_layer_counts(model.num_hidden_layers, pp, virtual_stages)
    else:
        _, last = rank_layer_split(model, job, pp, virtual_stages)
        per_rank = [*_spread(model.num_hidden_layers - last, pp - 1, front=False), last]
        chunks = [_spread(n, virtual_stages, front=rank == pp - 1) for rank, n in enumerate(per_rank)]
        sizes = [chunks[c % pp][c // pp] for c in range(pp * virtual_stages)]
    stages = [["t"] * n for n in sizes]
    stages[0].insert(0, "E")
    stages[-1] += ["m"] * mtp_layers(model, job) + ["L"]
    return stages


def plan_layout(model: ModelSpec, job: JobSpec, pp: int, virtual_stages: int) -> str | None:
    """The layout string (``cost.layout``) of the plan's own split where the framework must be
    told it: p > 1 and the chunks not all L/(p*v) layers (an even split with every MTP layer on
    the last stage is Megatron-Core's default and needs no layout); None otherwise."""
    if pp == 1:
        return None
    stages = split_stages(model, job, pp, virtual_stages)
    chunks = pp * virtual_stages
    even = model.num_hidden_layers % chunks == 0 and all(
        stage.count("t") == model.num_hidden_layers // chunks for stage in stages
    )
    return None if even else format_layout(stages)


def rank_layers(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> RankLayers:
    """``RankLayers`` of every mesh: its explicit layout's (``MeshArrays.layout_*`` columns), else
    ``rank_layer_split`` with every MTP layer on the last rank (Megatron-Core's default place).
    DualPipe and DualPipeV run the even split (``dual_rank_split``)."""
    keys, inverse = np.unique(mesh.pp * 4096 + mesh.virtual_stages, return_inverse=True)  # v < 4096
    splits = []
    for p_k, v_k in ((int(k) // 4096, int(k) % 4096) for k in keys):
        # every rank's count once: the busiest other and the last (``rank_layer_split``'s) and the first
        counts = split_rank_layers(model, job, p_k, v_k)
        dense = rank_leading_dense(model, job, p_k, v_k)
        # the busiest of ranks 1..p-2 (none where p <= 2) by its MoE layers, then all of them, at the
        # first with that load (the most micro-batches in flight): DeepSeek-V3 at pp 16, v 2 had priced
        # rank 1 (layer 2 dense) as 4 MoE layers, 0.6 GiB above rank 2, the true peak (a review, 2026-12-08)
        loads = [(counts[r] - dense[r], counts[r], -r) for r in range(1, p_k - 1)]
        _, middle_k, minus_at = max(loads, default=(0, 0, 0))
        at = -minus_at
        second_k, second_dense_k, middle_dense_k = (counts[1], dense[1], dense[at]) if p_k > 2 else (0, 0, 0)
        splits.append(
            (max(counts[:-1], default=0), counts[-1], counts[0], middle_k, at, second_k, second_dense_k, middle_dense_k)
        )
    body, last, first, middle, at, second, second_dense, middle_dense = (
        np.array(splits, dtype=np.int64).reshape(-1, 8)[inverse.reshape(-1)].T
    )
    for code in (DUALPIPE, DUALPIPE_V):
        on = mesh.schedule == code
        # a set, not np.unique: without return_index/inverse, np.unique asks np.ma whether the
        # array is masked, and importing numpy.ma costs every `plan` process ~50 ms
        for pp in sorted(set(mesh.pp[on].tolist())):
            rows = on & (mesh.pp == pp)
            body[rows], last[rows] = dual_rank_split(model.num_hidden_layers, pp, SCHEDULES[code])
            first[rows] = body[rows]  # rank 0 holds both ends: priced as the busiest, every rank
            middle[rows] = second[rows] = second_dense[rows] = middle_dense[rows] = 0  # holding the same micro-batches
    explicit = mesh.layout_last >= 0
    mtp = mtp_layers(model, job)
    return RankLayers(
        body=np.where(explicit, mesh.layout_body, body),
        body_mtp=np.where(explicit, mesh.layout_body_mtp, 0),
        last=np.where(explicit, mesh.layout_last, last),
        last_mtp=np.where(explicit, mesh.layout_last_mtp, mtp),
        first=np.where(explicit, mesh.layout_first, first),
        first_mtp=np.where(explicit, mesh.layout_first_mtp, 0),
        middle=np.where(explicit, mesh.layout_middle, middle),
        middle_mtp=np.where(explicit, mesh.layout_middle_mtp, 0),
        middle_index=np.where(explicit, np.minimum(mesh.pp - 2, 1).clip(0), at),
        second=np.where(explicit, mesh.layout_second, second),
        second_mtp=np.where(explicit, mesh.layout_second_mtp, 0),
        second_dense=np.where(explicit, 0, second_dense),
        middle_dense=np.where(explicit, 0, middle_dense),
    )


def rank_leading_dense(model: ModelSpec, job: JobSpec, pp: int, virtual_stages: int) -> list[int]:
    """The model's leading dense layers (``leading_dense_count``) each pipeline rank holds in the
    plan's own split (``split_stages``: chunk c on rank c mod p, in model order)."""
    k = leading_dense_count(model)
    dense = [0] * pp
    start = 0
    for c, stage in enumerate(split_stages(model, job, pp, virtual_stages)):
        n = stage.count("t")
        dense[c % pp] += max(0, min(k, start + n) - start)
        start += n
    return dense


def smallest_chunk_layers(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """Decoder layers of each mesh's smallest model chunk that holds any (a chunk of the embedding
    or the loss alone recomputes nothing whatever n is: counted, it had made n = 1 and refused every
    count, gpt2 at pp 4 under torchtitan): its explicit layout's (``MeshArrays.layout_smallest_chunk``),
    else ``_chunk_layers``'."""
    return _chunk_layers(
        model, job, mesh, lambda counts: min((c for c in counts if c > 0), default=0), mesh.layout_smallest_chunk
    )


def largest_chunk_layers(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """Decoder layers of each mesh's largest model chunk, the most Megatron's block recompute
    (--recompute-num-layers r, the first r of every chunk) can take: its explicit layout's
    (``MeshArrays.layout_largest_chunk``), else ``_chunk_layers``'. Llama-3-70B at pp 2 splits 41 |
    39, so r may be 41 (a smaller chunk recomputes whole); until 2026-12-08 the bound was the even
    split's ceil(80 / 2) = 40, against the layout the plan printed (a review)."""
    return _chunk_layers(model, job, mesh, lambda counts: max(counts, default=0), mesh.layout_largest_chunk)


def _chunk_layers(
    model: ModelSpec, job: JobSpec, mesh: MeshArrays, pick: Callable[[list[int]], int], explicit: np.ndarray
) -> np.ndarray:
    """``pick`` of each mesh's chunks' decoder layers: its explicit layout's where ``explicit`` (a
    ``MeshArrays.layout_*`` column) is >= 0, else DualPipeV's 2p half-stages and DualPipe's p stages
    split evenly (``chunk_layer_counts``), else the plan's own split (``split_stages``); with p = 1
    every layer."""
    dual = np.where(mesh.schedule == DUALPIPE_V, 2, np.where(mesh.schedule == DUALPIPE, 1, 0))
    keys, inverse = np.unique((mesh.pp * 4096 + mesh.virtual_stages) * 4 + dual, return_inverse=True)
    sizes = []
    for key in keys.tolist():
        pp, v, halves = key // 4 // 4096, key // 4 % 4096, key % 4
        counts = (
            chunk_layer_counts(model.num_hidden_layers, pp, halves)
            if halves
            else [stage.count("t") for stage in split_stages(model, job, pp, v)]
        )
        sizes.append(pick(counts))
    split = np.array(sizes, dtype=np.int64)[inverse.reshape(-1)]
    return np.where(explicit >= 0, explicit, split)


def recompute_every(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """The n of a stack that recomputes every n-th layer (``Stack.partial_recompute``
    'every_nth') for each mesh recomputing some layers (``recompute_layers`` r): the largest n
    that still recomputes r layers of the smallest chunk s, s // r (at least 1), so that every
    chunk recomputes at least r (``export.torchtitan.every_nth_layer`` writes it); 0 where the
    stack recomputes the first r of each chunk or the mesh recomputes all or none."""
    r = mesh.recompute_layers
    if job.software.partial_recompute != "every_nth" or not np.any(r > 0):
        return np.zeros(len(mesh), dtype=np.int64)
    rows = np.flatnonzero(r > 0)
    every = np.zeros(len(mesh), dtype=np.int64)
    every[rows] = every_nth_stride(smallest_chunk_layers(model, job, mesh.take(rows)), r[rows])
    return every


def every_nth_stride(smallest: np.ndarray, recomputed: Any) -> np.ndarray:
    """The largest n whose every-n-th layer recomputes ``recomputed`` (r >= 1) layers of a chunk
    of ``smallest``: s // r, at least 1 (every layer)."""
    return np.maximum(np.asarray(smallest) // np.maximum(recomputed, 1), 1)


def with_recompute_every(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> MeshArrays:
    """``mesh`` with the every-n-th stride its stack runs (``recompute_every``), which
    ``MeshArrays.recomputed_share`` reads: a rank then recomputes floor(layers / n) of all its
    layers, as torchtitan's count runs on across its chunks, where the first r of each chunk
    were priced until 2026-12-07 (Qwen3-235B-A22B on two GB200 racks at PP 9: n = 2 recomputes
    5 of the busiest chunk's 11 layers, priced as 3). The cost entry points call it; a mesh it
    leaves alone, or whose stride is derived already (``evaluate`` passes its mesh on to
    ``peak_memory``; ``MeshArrays.with_recompute_layers`` clears a stride), is returned as is."""
    if job.software.partial_recompute != "every_nth" or not np.any(mesh.recompute_layers > 0):
        return mesh
    if np.all((mesh.recompute_every > 0) | (mesh.recompute_layers <= 0)):
        return mesh
    return mesh.with_recompute_every(recompute_every(model, job, mesh))


def is_dual(mesh: MeshArrays) -> np.ndarray:
    """Meshes running DualPipe or DualPipeV."""
    return (mesh.schedule == DUALPIPE) | (mesh.schedule == DUALPIPE_V)


def layers_on_worst_stage(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """Decoder and MTP layers on the most loaded pipeline rank (``RankLayers.busiest``)."""
    return rank_layers(model, job, mesh).busiest


def moe_layers_of(model: ModelSpec, layers: np.ndarray, mtp: np.ndarray | int = 0) -> np.ndarray:
    """MoE layers among a rank's ``layers`` decoder layers, taking the worst case that all are
    MoE when the model has that many (dense-first layers such as DeepSeek's first 3 sit on stage
    0), plus its ``mtp`` MTP layers where those are MoE (``flops.mtp_layer_is_moe``). A hybrid
    model's MoE blocks are spread through its pattern (Nemotron 3 Nano: every other block), so a
    rank holds their share of its layers: exact for the whole model, the mean for a stage."""
    if model.is_hybrid:
        per_mtp = mtp_block_counts(model)[1]
        return np.asarray(layers) * (model.num_moe_layers / model.num_hidden_layers) + np.asarray(mtp) * per_mtp
    return np.minimum(layers, model.num_moe_layers) + (np.asarray(mtp) if mtp_layer_is_moe(model) else 0)


def leading_dense_layers(model: ModelSpec, decoders: np.ndarray, virtual_stages: np.ndarray) -> np.ndarray:
    """Of the first pipeline rank's ``decoders`` layers, the dense ones that lead the model
    (DeepSeek's ``first_k_dense_replace``: layers 0 to k-1 dense, every later one MoE), which its
    first model chunk holds: min(k, decoders / v), the chunk's share floored (a chunk of an even
    split holds at least that many; fewer counted dense is the safe side). ``moe_layers_of`` takes
    every layer of a rank as MoE where the model has that many, which priced DeepSeek-V3's first
    stage of 3 dense layers and 1 MoE layer (with the embedding) at four MoE layers' weights: 14.0
    GiB at tp 1, ep 8, where it holds about 8. 0 for models whose dense layers interleave
    (``decoder_sparse_step``) or hybrids (their MoE blocks spread through the pattern)."""
    k = leading_dense_count(model)
    if k == 0:
        return np.zeros(np.shape(decoders))
    return np.minimum(float(k), np.floor(np.asarray(decoders) / np.asarray(virtual_stages)))


def leading_dense_count(model: ModelSpec) -> int:
    """k of ``leading_dense_layers``: the model's leading dense layers where its MoE layers follow
    them all, else 0."""
    k = model.first_k_dense_replace or 0
    return 0 if model.is_hybrid or not model.is_moe or (model.decoder_sparse_step or 1) != 1 else k


def first_rank_leading_dense_layers(model: ModelSpec, mesh: MeshArrays, decoders: np.ndarray) -> np.ndarray:
    """The model's leading dense layers on the first pipeline rank, holding ``decoders`` layers:
    ``leading_dense_layers`` of the plan's own split; of an explicit layout, those of its first
    chunk, min(k, c0), and of the layers from where its second chunk starts (the chunks of ranks 1
    to p-1 before it), the rest of the first k it can hold. Exact while that second chunk reaches
    past layer k (DeepSeek's k = 3); counting fewer dense layers is the safe side. A layout
    starting 'Et|' holds one: DeepSeek-V3 at pp 16, v 2 had priced its first rank's decoders all
    as MoE, 82.0 GiB where the plan's own split of the same layout counted 78.3 (a review)."""
    own = leading_dense_layers(model, decoders, mesh.virtual_stages)
    k = float(leading_dense_count(model))
    if k == 0 or not np.any(mesh.layout_last >= 0):
        return own
    c0, start = mesh.layout_first_chunk.astype(float), mesh.layout_first_next_start.astype(float)
    # rank 0's layers past its first chunk (none where it has one) begin at ``start`` in the model
    later = np.clip(np.minimum(k - start, np.asarray(decoders, dtype=float) - c0), 0.0, None)
    return np.where(mesh.layout_last >= 0, np.minimum(k, c0) + later, own)


def layers_with_mtp(model: ModelSpec, decoders: np.ndarray, mtp: np.ndarray | int) -> np.ndarray:
    """Layers a rank runs: its decoder layers and its MTP modules' (``flops.mtp_block_counts``: one
    each in a transformer, the blocks of the MTP pattern in a hybrid)."""
    return decoders + np.asarray(mtp) * mtp_block_counts(model)[0]


def microbatches_in_flight(
    m: np.ndarray, mesh: MeshArrays, first: bool = True, rank: np.ndarray | None = None
) -> np.ndarray:
    """Micro-batches' worth of a stage's activations held at its peak (ARCHITECTURE 8.3), on the
    first stage (``first``), the last, or pipeline rank ``rank`` (a column) where given.

    First stage: GPipe keeps all m; 1F1B and ZB-H1 keep min(p, m) (stage i keeps p - i);
    interleaved 1F1B keeps min(((v-1)N + 2p - 1)/v, m) with micro-batch groups of N
    (``schedules.microbatch_group_size``, p where p | m: then p * (1 + (p-1)/(p*v)), Korthikanti
    et al. 2022 section 4.2.3), rank i min(((v-1)N + 2(p-1-i) + 1)/v, m). Last stage: GPipe m,
    1F1B 1, interleaved ((v-1)N + 1)/v: Megatron-Core's warm-up runs (v-1)N + 1 model chunks of
    1/v of the stage each before the first backward.
    DualPipe holds p + 1 and DualPipeV p + 1/2 on every rank (both ends of the pipeline are busy
    on every rank; deepseek-ai/DualPipe README, 'Activation per device': PP + 1 stages, a DualPipeV
    stage being half a rank's layers).
    With p = 1 every schedule is plain gradient accumulation: one micro-batch at a time.
    """
    if rank is None:
        rank = np.zeros(len(mesh)) if first else mesh.pp - 1
    held = per_schedule(mesh.schedule, mesh.pp, mesh.virtual_stages, m, lambda s: s.in_flight, rank)
    return np.where(mesh.pp == 1, 1.0, held)


def chunk_layer_counts(num_layers: int, pp: int, virtual_stages: int) -> list[int]:
    """Transformer layers in each of the p*v model chunks, in model order (chunk c runs on
    pipeline rank c mod p, as in Megatron-LM and torchtitan's looped schedules).

    With L = q*(p*v) + r the r extra layers go to the chunks in the middle, so the first chunk
    (which also runs the embedding) and the last (LM head and loss) get the smaller count: what
    Megatron-LM's --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split
    aim at.
    """
    chunks = pp * virtual_stages
    base, extra = divmod(num_layers, chunks)
    order = sorted(range(chunks), key=lambda c: (c in (0, chunks - 1), abs(c - (chunks - 1) / 2)))
    sizes = [base] * chunks
    for c in order[:extra]:
        sizes[c] += 1
    return sizes


def stage_layer_counts(num_layers: int, pp: int, virtual_stages: int) -> list[int]:
    """Transformer layers on each pipeline rank: the sum of its chunks' ``chunk_layer_counts``.
    The split of stacks that take no layout (``rank_layer_split``)."""
    sizes = chunk_layer_counts(num_layers, pp, virtual_stages)
    return [sum(sizes[c] for c in range(rank, len(sizes), pp)) for rank in range(pp)]
