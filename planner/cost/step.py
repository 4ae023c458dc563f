"""Step time and the Estimate (DESIGN 4.6): every term for many meshes at once.

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

from dataclasses import dataclass

import numpy as np

from planner.cost import comm, traffic
from planner.cost.compute import (
    attention_core_forward_s,
    layer_overhead_s,
    loss_s,
    optimizer_step_s,
    selective_recompute_forward_s,
    stage_forward_s,
    unfused_softmax_forward_s,
)
from planner.cost.flops import model_flops_per_token, recompute_flops_per_token
from planner.cost.memory import StageMemory, peak_memory, rank_params
from planner.cost.pipeline import (
    bubble_fraction,
    bubble_slots,
    layers_on_worst_stage,
    mesh_batch_size,
    moe_layers_on_worst_stage,
    num_microbatches,
)
from planner.mesh import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE, RECOMPUTES, MeshArrays
from planner.schemas.hardware import ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec


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


def evaluate(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays) -> Columns:
    """Price every mesh of ``mesh`` (assumed feasible by ``planner.constraints``)."""
    batch = mesh_batch_size(job.batch_size, mesh)
    m = num_microbatches(batch, mesh)
    links = comm.mesh_links(cluster, mesh)
    layers = layers_on_worst_stage(model, mesh)
    moe_layers = moe_layers_on_worst_stage(model, layers)

    # Compute of one micro-batch on the slowest stage: forward, backward (2x), a recomputed
    # forward under full recompute or the attention core under selective; the LM head (last
    # stage only) is never recomputed.
    body_fwd, head_fwd = stage_forward_s(model, cluster, job, mesh)
    softmax_fwd = unfused_softmax_forward_s(model, cluster, job, mesh)
    core_fwd = attention_core_forward_s(model, cluster, job, mesh) + softmax_fwd
    recomputed_core = attention_core_forward_s(model, cluster, job, mesh, recompute=True) + softmax_fwd
    selective = (layers - moe_layers) * selective_recompute_forward_s(model, cluster, job, mesh, moe=False)
    if model.is_moe:
        selective = selective + moe_layers * selective_recompute_forward_s(model, cluster, job, mesh, moe=True)
    compute_first = training_s(body_fwd, layers * core_fwd, layers * recomputed_core, mesh, layers, selective)
    # the last stage is the slower (or the only) one: it adds the head and the loss
    compute_mb = compute_first + 3.0 * head_fwd + loss_s(model, cluster, job, mesh)
    fwd_mb = compute_mb / mesh.forward_passes(layers)
    overhead_mb = layer_overhead_s(job, mesh, layers, moe_layers)

    tp = traffic.tp_per_microbatch(model, job, mesh, links, layers, moe_layers, compute_first)
    ep = traffic.ep_per_microbatch(model, job, mesh, links, layers, moe_layers, compute_first - tp.hidden_s)
    cp = traffic.cp_per_microbatch(model, job, mesh, links, layers, core_fwd)
    slowdown = job.software.overlap_slowdown
    slowdown_mb = slowdown * (tp.hidden_s + cp.hidden_s + ep.hidden_s)
    slot = compute_mb + overhead_mb + slowdown_mb + tp.time_s + ep.time_s + cp.time_s

    pp = traffic.pp_per_step(job, mesh, links, m, model.hidden_size)
    params = rank_params(model, mesh, mesh.pp == 1, np.ones(len(mesh), dtype=bool))
    dp = traffic.dp_per_step(job, mesh, links, params, m, fwd_mb, compute_mb - fwd_mb, layers)
    optimizer_time = optimizer_step_s(
        cluster, job, mesh, params.dense, params.expert, links["dp"].size, links["edp"].size
    )

    bubble = bubble_slots(mesh) * slot
    slowdown_dp = slowdown * dp.hidden_s
    step = m * slot + bubble + pp.time_s + dp.time_s + slowdown_dp + optimizer_time

    s = job.seq_len
    tokens = batch * s
    model_flops = model_flops_per_token(model, s) * tokens
    policy = job.software.selective_recompute
    recompute_extra = np.array([recompute_flops_per_token(model, s, r, policy) for r in RECOMPUTES])[mesh.recompute]
    # full recompute of some of each chunk's layers runs that share of the forwards again
    recompute_extra = np.where(
        mesh.recompute == RECOMPUTE_FULL, recompute_extra * mesh.recomputed_share(layers), recompute_extra
    )
    hardware_flops = model_flops + recompute_extra * tokens
    peak_total = step * cluster.num_gpus * cluster.gpu.peak_flops_per_s(job.dtype)
    memory = peak_memory(model, cluster, job, mesh, m)
    return Columns(
        step_time_s=step,
        num_microbatches=m,
        bubble_fraction=bubble_fraction(m, mesh),
        memory=memory,
        time={
            "compute": m * compute_mb,
            "tp_comm": m * tp.time_s,
            "pp_comm": pp.time_s,
            "dp_comm": dp.time_s,
            "cp_comm": m * cp.time_s,
            "ep_comm": m * ep.time_s,
            "bubble": bubble,
            "optimizer": optimizer_time,
            "layer_overhead": m * overhead_mb,
            "overlap_slowdown": m * slowdown_mb + slowdown_dp,
        },
        comm_bytes={
            "tp": m * tp.bytes_sent,
            "pp": pp.bytes_sent,
            "dp": dp.bytes_sent,
            "cp": m * cp.bytes_sent,
            "ep": m * ep.bytes_sent,
        },
        hidden={"dp": np.asarray(dp.hidden_s), "cp": m * cp.hidden_s, "tp": m * tp.hidden_s, "ep": m * ep.hidden_s},
        links=links,
        batch_size=batch,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        mfu=model_flops / peak_total,
        hfu=hardware_flops / peak_total,
        fits=memory.total <= cluster.gpu.hbm_capacity_bytes,
    )
