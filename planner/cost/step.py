"""Step time and the Estimate (DESIGN 4.6): every term for many meshes at once.

  slot   = forward+backward of one micro-batch on the slowest stage, with its exposed TP, EP
           and CP communication (3x the forward; full recompute adds a forward)
  step   = (m + bubble slots) * slot + exposed PP p2p + exposed DP/ZeRO + optimizer step
The same ``evaluate`` serves ``plan estimate`` (one row) and the search (many rows).

Overlap, first order and stated as such: DP gradient reduction (ZeRO 0-2) overlaps the backward
of the last micro-batch except the last of the stage's layer buckets; the ZeRO-1/2 parameter
all-gather overlaps the next forward the same way; ZeRO-3's per-micro-batch gathers overlap all
compute; the CP ring overlaps the attention core. TP and EP collectives and PP sends are exposed
(Megatron-LM's defaults without --tp-comm-overlap).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost import comm
from planner.cost.compute import CAUSAL_ATTENTION_FRACTION, stage_forward_s
from planner.cost.flops import attention_dims, model_flops_per_token, recompute_flops_per_token
from planner.cost.memory import StageMemory, kv_heads_per_rank, peak_memory, rank_params
from planner.cost.pipeline import (
    bubble_fraction,
    bubble_slots,
    layers_on_worst_stage,
    moe_layers_on_worst_stage,
    num_microbatches,
)
from planner.mesh import INTERLEAVED, RECOMPUTE_FULL, RECOMPUTES, MeshArrays
from planner.schemas.hardware import ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec

ADAM_BYTES_PER_PARAM_STEP = 24.0
"""Adam reads and writes the fp32 master weight, m and v: 3 x 4 bytes x 2 (read + write); the
gradient read and the 16-bit weight write are added from the job's dtypes."""


@dataclass(frozen=True)
class Columns:
    """Every figure of an Estimate, as columns over meshes (SI units)."""

    step_time_s: np.ndarray
    num_microbatches: np.ndarray
    bubble_fraction: np.ndarray
    memory: StageMemory
    time: dict[str, np.ndarray]
    comm_bytes: dict[str, np.ndarray]
    links: dict[str, comm.GroupLink]
    model_flops_per_step: float
    hardware_flops_per_step: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    fits: np.ndarray


def evaluate(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays) -> Columns:
    """Price every mesh of ``mesh`` (assumed feasible by ``planner.constraints``)."""
    m = num_microbatches(job.batch_size, mesh)
    links = comm.mesh_links(cluster, mesh)
    full = mesh.recompute == RECOMPUTE_FULL
    h, s = model.hidden_size, job.seq_len
    act_bytes = job.activation_bytes_per_element
    tokens = s * mesh.micro_batch_size / mesh.cp
    layers = layers_on_worst_stage(model, mesh)
    moe_layers = moe_layers_on_worst_stage(model, layers)

    # ---- compute per micro-batch on the slowest stage -----------------------------------------
    body_fwd, head_fwd = stage_forward_s(model, cluster, job, mesh)
    passes = np.where(full, 4.0, 3.0)  # forward + backward (2x), + a forward when recomputing
    d_qk, d_v = attention_dims(model)
    core_fwd = (
        layers
        * 2.0
        * tokens
        * s
        * (model.num_attention_heads / mesh.tp)
        * (d_qk + d_v)
        * (CAUSAL_ATTENTION_FRACTION / (cluster.gpu.peak_flops_per_s("bf16") * cluster.gpu.gemm_efficiency))
    )
    selective = np.where(mesh.recompute == RECOMPUTES.index("selective"), core_fwd, 0.0)
    head_train = 3.0 * head_fwd  # the LM head is never recomputed
    compute_first = passes * body_fwd + selective
    compute_last = compute_first + head_train
    compute_mb = np.where(mesh.pp == 1, compute_last, np.maximum(compute_first, compute_last))

    # ---- TP: 2 all-reduces forward, 2 backward per layer (RS+AG under SP: same volume) ------
    tp_msg = tokens * h * act_bytes
    tp_per_layer = np.where(full, 6.0, 4.0)
    dense_layers = layers - moe_layers
    moe_tp = np.where(full, 3.0, 2.0)  # attention's share; experts use EP (and expert TP)
    etp_link = links["etp"]
    n_tp = dense_layers * tp_per_layer + moe_layers * moe_tp
    tp_mb = n_tp * comm.all_reduce_s(tp_msg, links["tp"]) + moe_layers * moe_tp * comm.all_reduce_s(
        tp_msg / mesh.tp * (model.num_experts_per_tok or 0), etp_link
    )
    tp_bytes_mb = n_tp * comm.all_reduce_bytes_sent(tp_msg, mesh.tp)

    # ---- EP: dispatch + combine all-to-all, forward and backward, per MoE layer ---------------
    a2a_msg = tokens / mesh.tp * (model.num_experts_per_tok or 0) * h * act_bytes
    n_a2a = moe_layers * np.where(full, 6.0, 4.0)
    ep_mb = n_a2a * comm.all_to_all_s(a2a_msg, links["ep"])
    ep_bytes_mb = n_a2a * comm.all_gather_bytes_sent(a2a_msg, mesh.ep)

    # ---- CP: ring of K/V blocks, (c-1) steps forward, twice that backward, overlapped ---------
    kv_block = tokens * kv_heads_per_rank(model, mesh.tp.astype(float)) * (d_qk + d_v) * act_bytes
    ring_steps = (mesh.cp - 1) * np.where(full, 4.0, 3.0)
    cp_total = layers * ring_steps * comm.send_recv_s(kv_block, links["cp"])
    core_all = core_fwd * 3.0
    cp_mb = np.maximum(cp_total - core_all, 0.0)
    cp_bytes_mb = layers * ring_steps * kv_block * (mesh.cp > 1)

    slot = compute_mb + tp_mb + ep_mb + cp_mb

    # ---- PP: activations forward and gradients back at each boundary --------------------------
    pp_msg = tokens * h * act_bytes / np.where(mesh.sequence_parallel, mesh.tp, 1)
    sends = np.where(mesh.schedule == INTERLEAVED, mesh.virtual_stages * m, m) + mesh.pp - 1
    pp_time = np.where(mesh.pp > 1, 2.0 * sends * comm.send_recv_s(pp_msg, links["pp"]), 0.0)
    pp_bytes = np.where(mesh.pp > 1, 2.0 * m * mesh.virtual_stages * pp_msg, 0.0)

    # ---- DP / ZeRO ------------------------------------------------------------------------------
    params = rank_params(model, mesh, mesh.pp == 1, np.ones(len(mesh), dtype=bool))
    grad_d = params.dense * job.gradient_bytes_per_param
    grad_e = params.expert * job.gradient_bytes_per_param
    w_d = params.dense * job.weight_bytes_per_param
    w_e = params.expert * job.weight_bytes_per_param
    dp, edp = links["dp"], links["edp"]
    z = mesh.zero_stage
    reduce_time = np.where(
        z == 0,
        comm.all_reduce_s(grad_d, dp) + comm.all_reduce_s(grad_e, edp),
        comm.reduce_scatter_s(grad_d, dp) + comm.reduce_scatter_s(grad_e, edp),
    )
    gather_time = np.where(z >= 1, comm.all_gather_s(w_d, dp) + comm.all_gather_s(w_e, edp), 0.0)
    bwd_mb = compute_mb * np.where(full, 3.0, 2.0) / passes
    fwd_mb = compute_mb / passes
    buckets = np.maximum(layers, 1)
    exposed_02 = np.maximum(reduce_time - bwd_mb, reduce_time / buckets) + np.maximum(
        gather_time - fwd_mb, gather_time / buckets
    )
    zero3_total = m * (2.0 * gather_time + reduce_time)
    exposed_3 = np.maximum(zero3_total - m * compute_mb, zero3_total / (m * buckets))
    dp_time = np.where(z >= 3, exposed_3, exposed_02)
    dpn, edpn = dp.size, edp.size
    reduce_bytes = np.where(
        z == 0,
        comm.all_reduce_bytes_sent(grad_d, dpn) + comm.all_reduce_bytes_sent(grad_e, edpn),
        comm.all_gather_bytes_sent(grad_d, dpn) + comm.all_gather_bytes_sent(grad_e, edpn),
    )
    gather_bytes = comm.all_gather_bytes_sent(w_d, dpn) + comm.all_gather_bytes_sent(w_e, edpn)
    dp_bytes = np.where(
        z >= 3, m * (2.0 * gather_bytes + reduce_bytes), reduce_bytes + np.where(z >= 1, gather_bytes, 0.0)
    )

    # ---- optimizer step (memory-bound) -------------------------------------------------------
    shard_d = np.where(z >= 1, dpn, 1)
    shard_e = np.where(z >= 1, edpn, 1)
    updated = params.dense / shard_d + params.expert / shard_e
    per_param = ADAM_BYTES_PER_PARAM_STEP + job.gradient_bytes_per_param + job.weight_bytes_per_param
    optimizer_time = updated * per_param / cluster.gpu.hbm_bandwidth_bytes_per_s

    bubble = bubble_slots(mesh) * slot
    step = (m + bubble_slots(mesh)) * slot + pp_time + dp_time + optimizer_time

    model_flops = model_flops_per_token(model, s) * job.tokens_per_step
    recompute_extra = np.array([recompute_flops_per_token(model, s, r) for r in RECOMPUTES])[mesh.recompute]
    hardware_flops = model_flops + recompute_extra * job.tokens_per_step
    peak_total = step * cluster.num_gpus * cluster.gpu.peak_flops_per_s(job.dtype)
    memory = peak_memory(model, cluster, job, mesh, m)
    return Columns(
        step_time_s=step,
        num_microbatches=m,
        bubble_fraction=bubble_fraction(m, mesh),
        memory=memory,
        time={
            "compute": m * compute_mb,
            "tp_comm": m * tp_mb,
            "pp_comm": pp_time,
            "dp_comm": dp_time,
            "cp_comm": m * cp_mb,
            "ep_comm": m * ep_mb,
            "bubble": bubble,
            "optimizer": optimizer_time,
        },
        comm_bytes={
            "tp": m * tp_bytes_mb,
            "pp": pp_bytes,
            "dp": dp_bytes,
            "cp": m * cp_bytes_mb,
            "ep": m * ep_bytes_mb,
        },
        links=links,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        mfu=model_flops / peak_total,
        hfu=hardware_flops / peak_total,
        fits=memory.total <= cluster.gpu.hbm_capacity_bytes,
    )
