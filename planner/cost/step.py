"""Step time and the Estimate (ARCHITECTURE 8.7): every term for many meshes at once.

  slot   = forward+backward of one micro-batch on the slowest stage (3x the forward; full
           recompute adds a forward), the loss, the stack's per-layer overhead, its exposed TP,
           EP and CP communication, and the slowdown of compute while TP/CP traffic overlaps it
  step   = (m + bubble slots) * slot + exposed PP p2p + exposed DP/ZeRO + the slowdown of
           compute while DP/ZeRO traffic overlaps it + optimizer step
Overlap is not free: compute that runs beside a collective slows by the stack's
``overlap_slowdown`` for as long as the collective runs (NCCL kernels take SMs and HBM
bandwidth; the stack's source gives the measurement).
The same ``evaluate`` serves ``plan estimate`` (one row) and the search (many rows).

Compute terms come from ``cost.compute``, communication volumes and their overlap from
``cost.traffic``, memory from ``cost.memory``. EP collectives and PP sends are exposed; TP
collectives are exposed unless the job overlaps them (the stack's default or
``tp_comm_overlap``); DP/ZeRO and the CP ring overlap compute as ``cost.traffic`` states.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from planner.cost import comm, traffic
from planner.cost.compute import (
    attention_core_forward_s,
    dropless_sync_exposed_s,
    layer_forward_s,
    layer_overhead_s,
    lm_head_forward_s,
    loss_s,
    mtp_projection_forward_s,
    optimizer_step_s,
    selective_recompute_forward_s,
    unfused_softmax_forward_s,
)
from planner.cost.flops import model_flops_per_token, mtp_layers, recompute_flops_per_token
from planner.cost.memory import (
    LayerActivations,
    StageMemory,
    host_offload_capacity_bytes,
    layer_activations,
    offloaded_host_bytes,
    peak_memory,
    step_params,
    usable_memory_bytes,
)
from planner.cost.pipeline import (
    RankLayers,
    bubble_fraction,
    bubble_slots,
    heads_on_last_rank,
    layers_with_mtp,
    mesh_batch_size,
    moe_layers_of,
    num_microbatches,
    rank_layers,
    with_recompute_every,
)
from planner.cost.recompute import selected
from planner.mesh import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE, RECOMPUTES, MeshArrays
from planner.schemas.hardware import ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig


def training_s(
    forward_s: np.ndarray,
    core_forward_s: np.ndarray,
    recomputed_core_s: np.ndarray,
    mesh: MeshArrays,
    layers: np.ndarray | int,
    selective_s: np.ndarray,
) -> np.ndarray:
    """Forward, backward and recompute of layers whose forward takes ``forward_s``, of which the
    attention core ``core_forward_s`` (as priced in the forward: with flash kernels it carries 3.5/3
    of its forward FLOPs, ``compute.attention_core_forward_s``) and ``recomputed_core_s`` is that
    core run once more: ``mesh.forward_passes(layers)`` x the forward, plus ``selective_s`` under
    selective recompute (what the stack's policy runs again, ``compute.selective_recompute_forward_s``);
    under full recompute the extra forward runs the core once, not
    3.5/3 times (flash backward 2.5 + forward 1 + recomputed forward 1 = 4.5 core forwards), for
    the share of the ``layers`` it recomputes. Serves the step (a stage's layers) and the
    validator's layer shard (one layer) alike."""
    selective = np.where(mesh.recompute == RECOMPUTE_SELECTIVE, selective_s, 0.0)
    full_excess = mesh.recomputed_share(layers) * (core_forward_s - recomputed_core_s)
    return mesh.forward_passes(layers) * forward_s + selective - full_excess


@dataclass(frozen=True)
class Columns:
    """Every figure of an Estimate, as columns over meshes (SI units)."""

    step_time_s: np.ndarray
    num_microbatches: np.ndarray
    bubble_fraction: np.ndarray
    memory: StageMemory
    host_offload_bytes: np.ndarray  # per GPU, in host memory (memory.offloaded_host_bytes)
    time: dict[str, np.ndarray]
    comm_bytes: dict[str, np.ndarray]
    hidden: dict[str, np.ndarray]
    links: dict[str, comm.GroupLink]
    batch_size: np.ndarray
    model_flops_per_step: np.ndarray
    hardware_flops_per_step: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    fits: np.ndarray
    ranks: RankLayers
    last_is_slowest: np.ndarray  # bool: the step waits for the last rank (else the busiest other)


@dataclass(frozen=True)
class LayerCosts:
    """What one micro-batch costs per layer of each kind and per LM head on one rank (seconds,
    columns), computed once per mesh and summed per rank by ``rank_slot``."""

    dense_fwd: np.ndarray
    moe_fwd: np.ndarray
    core_fwd: np.ndarray  # attention core as priced in the forward, unfused softmax included, per layer
    # (a hybrid model's: over all its blocks, ``ModelSpec.attention_layer_share``)
    recomputed_core: np.ndarray  # the core run once more
    selective_dense: np.ndarray
    selective_moe: np.ndarray
    head_fwd: np.ndarray
    loss: np.ndarray
    mtp_projection_fwd: np.ndarray

    def blend(self, other: LayerCosts, share: np.ndarray) -> LayerCosts:
        """Per-layer costs of a rank whose layers are ``share`` of ``other``'s kind and the rest of
        this one's (the heads and the MTP projection stay this one's)."""
        mixed = {
            f: (1.0 - share) * getattr(self, f) + share * getattr(other, f)
            for f in ("dense_fwd", "moe_fwd", "core_fwd", "recomputed_core", "selective_dense", "selective_moe")
        }
        return dataclasses.replace(self, **mixed)


def bf16_layer_costs(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays, ranks: RankLayers, costs: LayerCosts
) -> tuple[LayerCosts, LayerCosts]:
    """The last and the body rank's per-layer costs with ``job.bf16_last_layers`` layers in bf16:
    the model's last layers, counted back from the last chunk. Chunk c of the p*v sits on rank
    c mod p, so going back from the end each lap of p chunks holds one chunk of every rank, the
    last rank's first and then rank p-2's, the body rank priced here (the busiest of the others
    in layers; the tail reaches it first). Chunks are taken as each rank's layers over v. A
    rank's share of bf16 layers blends its per-layer costs, its MTP layers counted with its
    decoder layers and kept in the job's format. DualPipe is refused by the rule of the same name
    (``constraints``): its two directions put the tail on two ranks at once."""
    n = job.bf16_last_layers
    if not n or not job.low_precision:
        return costs, costs
    high = layer_costs(model, cluster, job.in_bf16(), mesh)
    v = mesh.virtual_stages
    chunk_last, chunk_body = ranks.last / v, ranks.body / v
    lap = chunk_last + (mesh.pp - 1) * chunk_body
    laps = np.floor(n / lap)
    rest = n - laps * lap
    on_last = np.minimum(laps * chunk_last + np.minimum(rest, chunk_last), ranks.last)
    on_body = np.minimum(laps * chunk_body + np.clip(rest - chunk_last, 0.0, chunk_body), ranks.body)
    last = costs.blend(high, on_last / np.maximum(layers_with_mtp(model, ranks.last, ranks.last_mtp), 1))
    body = costs.blend(high, on_body / np.maximum(layers_with_mtp(model, ranks.body, ranks.body_mtp), 1))
    return last, body


LAYER_COST_COLUMNS = ("tp", "cp", "ep", "expert_tp", "micro_batch_size", "sequence_parallel")
"""The mesh columns a layer's cost reads (``cost.compute``): a search's thousands of meshes share a
few hundred combinations of them, so ``layer_costs`` prices each combination once."""


def layer_costs(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays) -> LayerCosts:
    """``LayerCosts`` from ``cost.compute``, priced once per distinct ``LAYER_COST_COLUMNS`` row."""
    key = np.zeros(len(mesh), dtype=np.int64)
    for column in LAYER_COST_COLUMNS:  # mixed-radix code of the row's values (a few per column)
        values, codes = np.unique(getattr(mesh, column), return_inverse=True)
        key = key * len(values) + codes.reshape(-1)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if len(first) == len(mesh):
        return _layer_costs(model, cluster, job, mesh)
    costs = _layer_costs(model, cluster, job, mesh.take(first))
    rows = inverse.reshape(-1)
    fields = LayerCosts.__dataclass_fields__
    return LayerCosts(**{f: np.broadcast_to(getattr(costs, f), len(first))[rows] for f in fields})


def _layer_costs(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays) -> LayerCosts:
    softmax_fwd = unfused_softmax_forward_s(model, cluster, job, mesh)
    dense = layer_forward_s(model, cluster, job, mesh, moe=False)
    moe = layer_forward_s(model, cluster, job, mesh, moe=True) if model.is_moe else dense
    sel_dense = selective_recompute_forward_s(model, cluster, job, mesh, moe=False)
    attention = model.attention_layer_share  # the core per layer, over a hybrid model's blocks
    return LayerCosts(
        dense_fwd=dense,
        moe_fwd=moe,
        core_fwd=attention * (attention_core_forward_s(model, cluster, job, mesh) + softmax_fwd),
        recomputed_core=attention * (attention_core_forward_s(model, cluster, job, mesh, recompute=True) + softmax_fwd),
        selective_dense=sel_dense,
        selective_moe=selective_recompute_forward_s(model, cluster, job, mesh, moe=True) if model.is_moe else sel_dense,
        head_fwd=lm_head_forward_s(model, cluster, job, mesh),
        loss=loss_s(model, cluster, job, mesh),
        mtp_projection_fwd=mtp_projection_forward_s(model, cluster, job, mesh),
    )


@dataclass(frozen=True)
class RankSlot:
    """One micro-batch's forward+backward on one pipeline rank and what it is made of (columns)."""

    layers: np.ndarray
    compute_first: np.ndarray  # the layers' compute, before the heads
    compute: np.ndarray  # with the heads and losses
    overhead: np.ndarray
    tp: traffic.Traffic
    ep: traffic.Traffic
    cp: traffic.Traffic
    slowdown: np.ndarray
    offload: np.ndarray

    @property
    def total_s(self) -> np.ndarray:
        return (
            self.compute
            + self.overhead
            + self.slowdown
            + self.offload
            + self.tp.time_s
            + self.ep.time_s
            + self.cp.time_s
        )


def rank_slot(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    mesh: MeshArrays,
    links: dict[str, comm.GroupLink],
    costs: LayerCosts,
    decoders: np.ndarray,
    mtp: np.ndarray,
    heads: np.ndarray | float,
    activations: LayerActivations | None = None,
) -> RankSlot:
    """The slot of a rank holding ``decoders`` decoder and ``mtp`` MTP layers and running ``heads``
    LM heads with their losses: forward, backward (2x), a recomputed forward under full recompute
    or what selective recompute runs again (the heads are never recomputed); the stack's
    per-layer overhead; exposed TP, EP and CP traffic and the slowdown of compute beside the
    hidden part. An MTP layer is a decoder layer of the model's last kind plus its 2h x h
    projection (a hybrid's MTP module: the blocks of its MTP pattern, ``pipeline.layers_with_mtp``)."""
    layers = layers_with_mtp(model, decoders, mtp)
    moe_layers = moe_layers_of(model, decoders, mtp)
    body_fwd = (layers - moe_layers) * costs.dense_fwd + moe_layers * costs.moe_fwd + mtp * costs.mtp_projection_fwd
    selective = (layers - moe_layers) * costs.selective_dense + moe_layers * costs.selective_moe
    compute_first = training_s(
        body_fwd, layers * costs.core_fwd, layers * costs.recomputed_core, mesh, layers, selective
    )
    compute = compute_first + heads * (3.0 * costs.head_fwd + costs.loss)
    tp = traffic.tp_per_microbatch(model, job, mesh, links, layers, moe_layers, compute_first)
    ep = traffic.ep_per_microbatch(model, job, mesh, links, layers, moe_layers, compute_first - tp.hidden_s)
    cp = traffic.cp_per_microbatch(model, job, mesh, links, layers, costs.core_fwd)
    return RankSlot(
        layers=layers,
        compute_first=compute_first,
        compute=compute,
        overhead=layer_overhead_s(model, job, mesh, layers, moe_layers)
        + dropless_sync_exposed_s(
            model,
            job,
            mesh,
            layers,
            moe_layers,
            costs.moe_fwd
            + blocks_between_moe(model) * costs.dense_fwd
            + traffic.ep_forward_per_moe_layer_s(job, mesh, layers, moe_layers, ep),
        ),
        tp=tp,
        ep=ep,
        cp=cp,
        slowdown=job.software.overlap_slowdown * (tp.hidden_s + cp.hidden_s + ep.hidden_s),
        offload=offload_exposed_s(cluster, job, mesh, layers, moe_layers, compute_first, activations),
    )


def blocks_between_moe(model: ModelSpec) -> float:
    """Layers of the dense kind the GPU runs between one MoE layer and the next beyond the MoE
    layer itself, for ``compute.dropless_sync_exposed_s``'s span: none in a transformer, whose MoE
    layer holds the next attention; a hybrid model's other blocks per MoE block (Nemotron 3 Nano:
    29 / 23), which its MoE blocks leave out."""
    if not model.is_hybrid or not model.num_moe_layers:
        return 0.0
    return model.num_dense_layers / model.num_moe_layers


def offload_exposed_s(
    cluster: ClusterSpec,
    job: JobSpec,
    mesh: MeshArrays,
    layers: np.ndarray,
    moe_layers: np.ndarray,
    compute_first: np.ndarray,
    activations: LayerActivations | None,
) -> np.ndarray:
    """Host transfers of activation offloading left exposed per micro-batch
    (``ParallelConfig.offload_layers``). Transformer Engine's offload handler copies a layer's
    activations to host memory on a side stream while forward runs the next layer, and reloads
    them while backward runs the layer after (Megatron-Core cpu_offloading, double buffered), so
    each offloaded layer exposes what its copy takes beyond one layer's forward on the way out and
    one layer's backward (twice the forward) on the way back. The copy moves the layer's saved
    activations (``memory.layer_activations`` without recompute) at the profile's
    ``host_link_gb_per_s``; a layer's forward is the rank's compute per forward pass over its
    layers; ``activations`` are the mesh's ``memory.layer_activations``, computed once per step
    (``offload_activations``). Zero without offloading."""
    offloaded = np.minimum(mesh.offload_layers, layers)
    link = cluster.gpu.host_link_bytes_per_s
    if link is None or activations is None or not np.any(offloaded > 0):
        return np.zeros(len(mesh))
    per_layer = activations
    tokens = mesh.tokens_per_rank(job.seq_len)
    saved = (layers - moe_layers) * per_layer.all_dense + moe_layers * per_layer.all_moe
    copy_s = tokens * saved / np.maximum(layers, 1) / link
    forward_s = compute_first / mesh.forward_passes(layers) / np.maximum(layers, 1)
    exposed = np.maximum(copy_s - forward_s, 0.0) + np.maximum(copy_s - 2.0 * forward_s, 0.0)
    return np.where(offloaded > 0, offloaded * exposed, 0.0)


def offload_activations(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> LayerActivations | None:
    """The per-layer activations ``offload_exposed_s`` copies, where some mesh offloads; else None."""
    return layer_activations(model, job, mesh) if np.any(mesh.offload_layers > 0) else None


def pick_rank(pick: np.ndarray, a: RankSlot, b: RankSlot) -> RankSlot:
    """Per mesh, ``a`` where ``pick`` else ``b``."""

    def w(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.where(pick, x, y)

    def wt(x: traffic.Traffic, y: traffic.Traffic) -> traffic.Traffic:
        return traffic.Traffic(w(x.time_s, y.time_s), w(x.bytes_sent, y.bytes_sent), w(x.hidden_s, y.hidden_s))

    return RankSlot(
        layers=w(a.layers, b.layers),
        compute_first=w(a.compute_first, b.compute_first),
        compute=w(a.compute, b.compute),
        overhead=w(a.overhead, b.overhead),
        tp=wt(a.tp, b.tp),
        ep=wt(a.ep, b.ep),
        cp=wt(a.cp, b.cp),
        slowdown=w(a.slowdown, b.slowdown),
        offload=w(a.offload, b.offload),
    )


def evaluate(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays, memory: StageMemory | None = None
) -> Columns:
    """Price every mesh of ``mesh`` (assumed feasible by ``planner.constraints``); ``memory`` is
    their ``peak_memory`` where the caller has it already (the search prices memory first). A
    stack that recomputes every n-th layer is priced at its n (``pipeline.with_recompute_every``)."""
    mesh = with_recompute_every(model, job, mesh)
    batch = mesh_batch_size(job, mesh)
    m = num_microbatches(batch, mesh)
    links = comm.mesh_links(cluster, mesh)
    ranks = rank_layers(model, job, mesh)
    last_costs, body_costs = bf16_layer_costs(model, cluster, job, mesh, ranks, layer_costs(model, cluster, job, mesh))
    heads = heads_on_last_rank(model, job, mesh)
    offloaded = offload_activations(model, job, mesh)
    last = rank_slot(model, cluster, job, mesh, links, last_costs, ranks.last, ranks.last_mtp, heads, offloaded)
    body = rank_slot(model, cluster, job, mesh, links, body_costs, ranks.body, ranks.body_mtp, 0, offloaded)
    last_is_slowest = last.total_s >= body.total_s  # the pipeline runs at the slower rank's pace
    worst = pick_rank(last_is_slowest, last, body)
    slot = worst.total_s
    layers = worst.layers
    fwd_mb = worst.compute / mesh.forward_passes(layers)

    pp = traffic.pp_per_step(job, mesh, links, m, model.hidden_size, slot)
    params = step_params(model, mesh, ranks)
    # TP, CP, EP and PP traffic hidden on DP's links leaves DP that much less compute to hide behind
    hidden = {"tp": worst.tp.hidden_s, "cp": worst.cp.hidden_s, "ep": worst.ep.hidden_s, "pp": pp.hidden_s / m}
    free = traffic.dp_link_free_share(links, worst.compute, hidden)
    dp = traffic.dp_per_step(
        job,
        mesh,
        links,
        params,
        m,
        fwd_mb * free,
        (worst.compute - fwd_mb) * free,
        layers,
        model.is_moe,
        cluster.gpu.architecture,
    )
    optimizer_time = optimizer_step_s(
        cluster, job, mesh, params.dense, params.expert, links["dp"].size, links["edp"].size
    )

    bubble = bubble_slots(mesh) * slot
    slowdown = job.software.overlap_slowdown
    slowdown_step = slowdown * (dp.hidden_s + pp.hidden_s)
    step = m * slot + bubble + pp.time_s + dp.time_s + slowdown_step + optimizer_time

    s = job.seq_len
    tokens = batch * s
    # MFU and HFU in the stack's own count of causal attention, as its logs would read
    causal = job.software.causal_model_flops
    model_flops = model_flops_per_token(model, s, mtp_layers(model, job), causal) * tokens
    policy = job.software.selective_recompute
    modules = selected(job)
    recompute_extra = np.array([recompute_flops_per_token(model, s, r, policy, modules, causal) for r in RECOMPUTES])[
        mesh.recompute
    ]
    # full recompute of some of each chunk's layers runs that share of the forwards again
    recompute_extra = np.where(
        mesh.recompute == RECOMPUTE_FULL, recompute_extra * mesh.recomputed_share(layers), recompute_extra
    )
    hardware_flops = model_flops + recompute_extra * tokens
    peak_total = step * cluster.num_gpus * cluster.gpu.peak_flops_per_s(job.dtype)
    memory = peak_memory(model, cluster, job, mesh, m, ranks) if memory is None else memory
    host_bytes = np.zeros(len(mesh)) if offloaded is None else offloaded_host_bytes(model, job, mesh, offloaded)
    return Columns(
        step_time_s=step,
        num_microbatches=m,
        bubble_fraction=bubble_fraction(m, mesh),
        memory=memory,
        host_offload_bytes=host_bytes,
        time={
            "compute": m * worst.compute,
            "tp_comm": m * worst.tp.time_s,
            "pp_comm": pp.time_s,
            "dp_comm": dp.time_s,
            "cp_comm": m * worst.cp.time_s,
            "ep_comm": m * worst.ep.time_s,
            "bubble": bubble,
            "optimizer": optimizer_time,
            "layer_overhead": m * worst.overhead,
            "overlap_slowdown": m * worst.slowdown + slowdown_step,
            "offload": m * worst.offload,
        },
        # the busiest rank's bytes, not the pace-setting one's: a last stage of one layer and the LM
        # head sets the pace at micro-batch 2 and sends a fifteenth of its neighbours' all-to-all (a review)
        comm_bytes={
            "tp": m * np.maximum(last.tp.bytes_sent, body.tp.bytes_sent),
            "pp": pp.bytes_sent,
            "dp": dp.bytes_sent,
            "cp": m * np.maximum(last.cp.bytes_sent, body.cp.bytes_sent),
            "ep": m * np.maximum(last.ep.bytes_sent, body.ep.bytes_sent),
        },
        hidden={
            "dp": np.asarray(dp.hidden_s),
            "pp": np.asarray(pp.hidden_s),
            "cp": m * worst.cp.hidden_s,
            "tp": m * worst.tp.hidden_s,
            "ep": m * worst.ep.hidden_s,
        },
        links=links,
        batch_size=batch,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        mfu=model_flops / peak_total,
        hfu=hardware_flops / peak_total,
        fits=(memory.total <= usable_memory_bytes(cluster, job)) & (host_bytes <= host_offload_capacity_bytes(cluster)),
        ranks=ranks,
        last_is_slowest=last_is_slowest,
    )


class RankLoad(NamedTuple):
    """What one pipeline rank runs per micro-batch: decoder layers, MTP layers, LM heads with
    their losses, and the layers it runs in all (``pipeline.layers_with_mtp``: a hybrid's MTP
    module counts the blocks of its pattern), as the step prices them."""

    decoders: int
    mtp: int
    heads: float
    layers: int


def slowest_rank(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, config: ParallelConfig) -> RankLoad:
    """The ``RankLoad`` of the rank whose slot sets the step of one mesh: what the validator
    replays."""
    mesh = MeshArrays.from_configs([config])
    cols = evaluate(model, cluster, job, mesh)
    r = cols.ranks
    last = bool(cols.last_is_slowest[0])
    decoders, mtp = (r.last, r.last_mtp) if last else (r.body, r.body_mtp)
    heads = float(heads_on_last_rank(model, job, mesh)[0]) if last else 0.0
    layers = int(layers_with_mtp(model, decoders, mtp)[0])
    return RankLoad(int(decoders[0]), int(mtp[0]), heads, layers)
