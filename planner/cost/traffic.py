"""What each parallel dimension sends, and how long it takes (ARCHITECTURE 8.5).

Volumes (bytes of 16-bit activations unless stated), priced with ``planner.cost.comm``:
  TP   per layer and micro-batch, 2 all-reduces of b*s/c*h forward and 2 backward (with SP the
       same volume as reduce-scatter + all-gather; Korthikanti et al. 2022 section 4.2.2; under
       fp8 the all-gathers may move quantised tensors, ``tp_all_gather_bytes``), and with SP the
       inputs' all-gathers again backward where the stack keeps only their shards
       (``tp_input_regathers``, hidden behind the input-gradient GEMM); full recompute repeats the
       forward pair. MoE layers keep attention's pair, plus the MoE block's own where the stack's
       plan gathers one (``moe_block_tp_collectives``: Megatron-Core's shared experts, torchtitan's
       block boundary); expert-TP adds one all-reduce pair over the routed tokens inside the
       expert-TP group.
  EP   per MoE layer, dispatch and combine forward, and again backward, by the job's dispatcher
       (``ep_dispatch``): all-to-alls of the routed tokens (b*s/(c*t) * top_k * h; ARCHITECTURE 8.5,
       Megatron-Core's alltoall dispatcher), an all-gather of the group's tokens and its
       reduce-scatter (allgather), or all-to-alls carrying each token once per rank it reaches
       (flex: DeepEP/HybridEP).
  CP   per layer, (c-1) ring steps of the rank's K and V blocks forward and 2(c-1) backward
       (Liu et al. 2023, 'Ring Attention'; Megatron-Core context parallelism), overlapped with
       the attention core: only the excess is exposed.
  PP   per micro-batch and boundary, b*s/c*h forward and the same backward, divided by t: each
       TP rank sends its 1/t slice and the receivers all-gather it over NVLink (Narayanan et
       al. 2021 section 4.1, scatter/gather, on by default in Megatron-LM; with SP the tensor
       is already split), on the critical path once per slot.
  DP   the rank's gradients: all-reduce (ZeRO-0) or reduce-scatter + all-gather of the updated
       16-bit weights (ZeRO-1, Megatron-LM's distributed optimizer, which accumulates the full
       gradients over the micro-batches and reduces once); ZeRO-2 keeps only its gradient shard,
       so it reduce-scatters every micro-batch's gradients (DeepSpeed stage 2 reduces in every
       micro-step's backward; FSDP SHARD_GRAD_OP and Megatron-FSDP optim_grads reduce-scatter each
       backward unless gradient sync is switched off, which keeps the unsharded gradients the
       memory count does not hold); ZeRO-3 gathers weights in forward and backward and
       reduce-scatters gradients for every micro-batch (FSDP). Under a pipeline runtime that
       switches FSDP's gradient sync off until the step's end (torch.distributed.pipelining,
       ``mesh.pipeline_holds_fsdp_state``) the stage holds ZeRO-1's state and reduce-scatters
       once, after its last backward, exposed; ZeRO-3 still gathers for every backward.
TP overlap: the stack's hidden fraction of the TP time when the job overlaps TP (see
``tp_per_microbatch``).
ZeRO-3 collectives run per layer, each paying the ring latency. Overlap, a first-order model
stated as such: ZeRO-0/1 gradient reduction overlaps the last micro-batch's backward, ZeRO-2's
each micro-batch's own, except the last of the stage's layer buckets, the parameter all-gather
the next forward likewise; ZeRO-3 traffic overlaps all compute but one layer's worth. With
overlap_grad_reduce off (Megatron-LM before --overlap-grad-reduce, 2023) all of it is exposed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cost import comm
from planner.cost.flops import attention_dims
from planner.cost.memory import RankParams, fp8_parameter_gather_bytes, fp8_parameters, kv_heads_per_rank
from planner.cost.recompute import recomputes_dispatch
from planner.cost.routing import moe_load_factor
from planner.mesh import RECOMPUTE_SELECTIVE, MeshArrays, pipeline_holds_fsdp_state
from planner.schedules import per_schedule_constant
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec


@dataclass(frozen=True)
class Traffic:
    """Exposed seconds, seconds hidden behind compute, and bytes sent per GPU (columns), per
    micro-batch or per step as named."""

    time_s: np.ndarray
    bytes_sent: np.ndarray
    hidden_s: np.ndarray | float = 0.0

    @classmethod
    def overlapped(
        cls, time_s: np.ndarray, bytes_sent: np.ndarray, fraction: np.ndarray | float, budget_s: np.ndarray | float
    ) -> Traffic:
        """Collectives of ``time_s`` of which ``fraction`` runs behind compute, never more than the
        ``budget_s`` of compute there is to hide behind; the rest stays exposed."""
        hidden = np.minimum(time_s * fraction, np.maximum(budget_s, 0.0))
        return cls(time_s - hidden, bytes_sent, hidden)


@dataclass(frozen=True)
class Collective:
    """One kind of collective the rank a step waits for runs (columns over meshes): ``calls`` of
    ``op`` on ``message_bytes`` over ``group`` (a ``comm.mesh_links`` key), per micro-batch or per
    step. Each group's list (``tp_collectives``, ``ep_collectives``, ``cp_collectives``,
    ``pp_collectives``, ``dp_collectives``) is spelled once: the step prices it (``serial_s``)
    and the validator replays it (``step_collectives``, validate/terms.py)."""

    name: str
    op: str  # all_reduce, reduce_scatter, all_gather, all_to_all, send_recv, ring_exchange
    group: str
    message_bytes: np.ndarray
    calls: np.ndarray
    per_microbatch: bool = True
    fanout: comm.Fanout | None = None  # a dispatch that crosses domains once per domain its tokens reach


PRICE = {
    "all_reduce": comm.all_reduce_s,
    "reduce_scatter": comm.reduce_scatter_s,
    "all_gather": comm.all_gather_s,
    "all_to_all": comm.all_to_all_s,
    "send_recv": comm.send_recv_s,
    "ring_exchange": comm.send_recv_s,  # one step of the ring: each rank sends one block one hop
}
"""The cost of one call of each collective (``planner.cost.comm``)."""


def call_s(collective: Collective, links: dict[str, comm.GroupLink]) -> np.ndarray:
    """Seconds of one call (zero where nothing is sent: a dense model's expert-DP buffer). A
    dispatch with a ``fanout`` (DeepEP/HybridEP) crosses domains once per domain its tokens reach
    (``comm.all_to_all_s``); the validator replays it as the plain all-to-all of the same bytes,
    the collective torch.distributed has."""
    message, link = collective.message_bytes, links[collective.group]
    if collective.fanout is None:
        seconds = PRICE[collective.op](message, link)
    else:  # only a flex dispatch, an all-to-all, carries one
        seconds = comm.all_to_all_s(message, link, collective.fanout)
    return np.where(message > 0, seconds, 0.0)


def serial_s(collectives: list[Collective], links: dict[str, comm.GroupLink]) -> np.ndarray:
    """Seconds of every call of ``collectives``, one after another (before any overlap)."""
    return sum((c.calls * call_s(c, links) for c in collectives), np.zeros(()))


def bytes_sent(collective: Collective, links: dict[str, comm.GroupLink]) -> np.ndarray:
    """Bytes one rank sends in one call: a ring all-reduce 2(n-1)/n of the buffer, the other ring
    collectives and an all-to-all (n-1)/n, a point-to-point send the message."""
    if collective.op in ("send_recv", "ring_exchange"):
        return np.asarray(collective.message_bytes, dtype=float)
    n = links[collective.group].size
    if collective.op == "all_reduce":
        return comm.all_reduce_bytes_sent(collective.message_bytes, n)
    return comm.all_gather_bytes_sent(collective.message_bytes, n)


def tp_message_bytes(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """One TP collective's buffer: the rank's b*s/c tokens x h activations."""
    return mesh.tokens_per_rank(job.seq_len) * model.hidden_size * job.activation_bytes_per_element


FP8_TP_GATHER_BYTES_PER_ELEMENT: dict[tuple[str, str], float] = {
    ("tensor", "input"): 1.0,
    ("tensor", "grad_output"): 1.0,
    ("row", "input"): 1.0,
    ("row", "grad_output"): 1.0,
    ("block", "input"): 1.0 + 1.0 / 32.0,
    ("block", "grad_output"): 2.0 * (1.0 + 1.0 / 32.0),
}
"""Bytes per element of a quantised SP all-gather, by scaling and what it gathers (a linear's
input, forward or again for its weight gradient; a row-parallel linear's output gradient,
backward), as Transformer Engine 2.6-2.10 sends them (transformer_engine/pytorch/distributed.py
``_all_gather_fp8`` / ``_all_gather_mxfp8``; module/linear.py and base.py
``grad_output_preprocess``): per-tensor scaling gathers the row-wise fp8 data alone (1 byte; the
scale is shared, its amax reduced over the TP group, and a transpose is made locally where the
GEMM needs one); MXFP8 cannot transpose a row-scaled tensor, so it gathers each copy a GEMM needs
with its E8M0 scale per 32 elements: the input's row-wise copy forward and its column-wise copy for
wgrad (1 + 1/32 each), and the output gradient's row-wise and column-wise copies together in one
coalesced call (2 x (1 + 1/32), no smaller than 16 bits). torchao's Float8 TP styles gather
tensor-wise float8 (1 byte) both ways. No shipped stack gathers row-wise scaled tensors; a stack
that says it does moves 1 byte per element, its fp32 scale per row of h elements left out
(under 0.1% at h >= 4096)."""


def tp_all_gather_bytes(model: ModelSpec, job: JobSpec, mesh: MeshArrays, gathers: str = "input") -> np.ndarray:
    """One TP all-gather under SP of ``gathers`` ('input': a column-parallel linear's input,
    forward or again for its weight gradient; 'grad_output': a row-parallel linear's output
    gradient, backward): quantised where the job trains in fp8 with a scaling its stack gathers so
    (``Stack.fp8_all_gather_scalings``), at ``FP8_TP_GATHER_BYTES_PER_ELEMENT``, else the 16-bit
    buffer. The reduce-scatters stay 16-bit (their inputs are GEMM outputs)."""
    message = tp_message_bytes(model, job, mesh)
    if job.dtype == "fp8" and job.fp8_scaling in job.software.fp8_all_gather_scalings:
        per_element = FP8_TP_GATHER_BYTES_PER_ELEMENT[(job.fp8_scaling, gathers)]
        return message / job.activation_bytes_per_element * per_element
    return message


def tp_collectives_per_microbatch(
    model: ModelSpec, job: JobSpec, mesh: MeshArrays, layers: np.ndarray, moe_layers: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(forward TP collectives, backward TP collectives, expert-TP all-reduces) of one micro-batch
    through the stage's layers: 2 forward and 2 backward per dense layer (attention's and the
    MLP's), attention's 1 and 1 in a MoE layer, and the expert-TP pair; a hybrid model's layers
    one per attention, Mamba-2 or MLP block and none in a MoE block
    (``LayerKind.row_parallel_outputs``); full recompute repeats the forward ones (for the share of
    layers it recomputes)."""
    share = mesh.recomputed_share(layers)
    per_pass = tp_linear_inputs(model, job, layers, moe_layers)
    return per_pass * (1.0 + share), per_pass, moe_layers * (2.0 + share)


def moe_block_tp_collectives(model: ModelSpec, job: JobSpec) -> float:
    """TP collectives per MoE FFN and direction beyond its experts' (``Stack.tp_module_plan``):
    Megatron-Core's shared experts are TE column- and row-parallel linears with their own gather
    and reduce-scatter (SharedExpertMLP), one pair where the model has them; torchtitan gathers the
    MoE block's input and reduce-scatters its output at the module boundary (apply_moe_ep_tp's
    PrepareModuleInputOutput), one pair for every MoE FFN."""
    if job.software.tp_module_plan == "torchtitan":
        return 1.0
    return 1.0 if model.shared_expert_width else 0.0


def tp_linear_inputs(model: ModelSpec, job: JobSpec, layers: np.ndarray, moe_layers: np.ndarray) -> np.ndarray:
    """Blocks with a column-parallel input and a row-parallel output through the stage's layers,
    each one TP collective per direction (``LayerKind.row_parallel_outputs`` of each kind, and the
    MoE FFN's own, ``moe_block_tp_collectives``)."""
    dense, moe = model.layer_kind(moe=False), model.layer_kind(moe=True)
    return (layers - moe_layers) * dense.row_parallel_outputs + moe_layers * (
        moe.row_parallel_outputs + moe_block_tp_collectives(model, job)
    )


def routed_message_bytes(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """The busiest rank's routed tokens (its 1/t of the tokens, top-k copies, x the job's MoE load
    factor: padded capacity buffers under token drop, the load imbalance of dropless routing, which
    the all-to-all waits for) x h (the latent under LatentMoE, ``routed_width_share``): the alltoall
    dispatcher's dispatch/combine buffer, which the expert-TP group then gathers."""
    return routed_token_bytes(model, job, mesh) * (model.num_experts_per_tok or 0) * moe_load_factor(job, mesh, model)


def routed_token_bytes(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """A rank's 1/t of the micro-batch's tokens at the width the dispatch carries (``routed_width_share``)."""
    return tp_message_bytes(model, job, mesh) / mesh.tp * routed_width_share(model)


def routed_width_share(model: ModelSpec) -> float:
    """Width of a routed token over h: 1, or latent / h under LatentMoE, whose dispatch carries the
    projected latent (fc1_latent_proj before it, fc2_latent_proj after the combine)."""
    return model.expert_input_size / model.hidden_size


@dataclass(frozen=True)
class Dispatch:
    """How one MoE layer's tokens cross the expert-parallel group in one direction: the collective
    (``comm`` prices ``op`` with ``message_bytes``; an all-gather's combine is the reduce-scatter of
    the same buffer, priced alike) and the message it moves."""

    op: str  # "all_to_all" or "all_gather"
    message_bytes: np.ndarray
    fanout: comm.Fanout | None = None  # flex: see comm.all_to_all_s


def ranks_reached(model: ModelSpec, ep: np.ndarray) -> np.ndarray:
    """Expected number of the ep ranks that hold at least one of a token's top-k experts
    (``comm.holders_reached``, E/ep experts per rank); one rank when ep = 1."""
    return comm.holders_reached(float(model.num_experts_total), int(model.num_experts_per_tok or 0), ep)


def ep_dispatch(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> Dispatch:
    """The job's dispatcher (``JobSpec.moe_dispatcher``) as one collective per direction and layer.

    - alltoall (Megatron-Core MoEAlltoAllTokenDispatcher): every top-k copy of the rank's tokens,
      x the job's MoE load factor (``routed_message_bytes``).
    - allgather (MoEAllGatherTokenDispatcher, Megatron's default): each rank gathers the hidden
      states of all ep ranks and keeps the tokens its experts take; the combine reduce-scatters
      the outputs back: an all-gather of ep x the rank's tokens x h.
    - flex (MoEFlexTokenDispatcher over DeepEP or HybridEP): a token goes once to each rank that
      holds one of its experts (``ranks_reached``), x the load factor, and crosses the slow tier
      once per node reached, forwarded over NVLink there (``comm.all_to_all_s`` with the model's
      ``comm.Fanout``, its group-limited routing included). DeepEP measures 153-158 GB/s
      intranode on H800 (NVLink ~160) and 43-58 GB/s RDMA at EP 16-64 (deepseek-ai/DeepEP
      README), within a few percent of the links, so no separate efficiency is applied. (Until
      2026-12 the NIC was priced once per rank reached, an upper bound: DeepSeek-V3 at EP 64 over
      8 nodes sends 3.2 copies of a token over InfiniBand, 4.6 without its 4-of-8 group limit,
      not 6.7.) The SMs its kernels take matter only when the dispatch overlaps compute, where
      the stack's ``overlap_slowdown`` prices them."""
    local = routed_token_bytes(model, job, mesh)
    if job.moe_dispatcher == "allgather":
        return Dispatch("all_gather", local * mesh.ep)
    if job.moe_dispatcher == "flex":
        # each token to every etp rank of each expert rank it reaches (``expert_tp_collectives``)
        fanout = comm.Fanout(float(model.num_experts_total), int(model.num_experts_per_tok or 0), *model.routing_groups)
        reached = ranks_reached(model, mesh.ep) * mesh.expert_tp
        return Dispatch("all_to_all", local * reached * moe_load_factor(job, mesh, model), fanout)
    return Dispatch("all_to_all", routed_message_bytes(model, job, mesh))


def ep_all_to_alls_per_microbatch(
    job: JobSpec, mesh: MeshArrays, layers: np.ndarray, moe_layers: np.ndarray
) -> np.ndarray:
    """Dispatch and combine collectives (``ep_dispatch``), forward and backward (and the
    recomputed forward's: full recompute, or selective recompute of the 'moe' module,
    ``cost.recompute``) per MoE layer of a stage of ``layers``."""
    again = np.where((mesh.recompute == RECOMPUTE_SELECTIVE) & recomputes_dispatch(job), 1.0, 0.0)
    return moe_layers * (4.0 + 2.0 * (mesh.recomputed_share(layers) + again))


def ep_forward_per_moe_layer_s(
    job: JobSpec, mesh: MeshArrays, layers: np.ndarray, moe_layers: np.ndarray, ep: Traffic
) -> np.ndarray:
    """Dispatch and combine time of one MoE layer's forward, exposed or hidden behind compute: two
    of the ``ep_all_to_alls_per_microbatch`` collectives whose time ``ep`` (the micro-batch's
    ``ep_per_microbatch``) holds; 0 where the stage has no MoE layer or ep is 1."""
    count = ep_all_to_alls_per_microbatch(job, mesh, layers, moe_layers)
    return np.where(count > 0, 2.0 * (ep.time_s + ep.hidden_s) / np.maximum(count, 1.0), 0.0)


def cp_block_bytes(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """One CP ring step: the rank's K and V blocks (its kv heads, d_qk + d_v per head)."""
    d_qk, d_v = attention_dims(model)
    block = mesh.tokens_per_rank(job.seq_len) * kv_heads_per_rank(model, mesh.tp.astype(float)) * (d_qk + d_v)
    return block * job.activation_bytes_per_element


def cp_ring_steps_per_microbatch(mesh: MeshArrays, layers: np.ndarray) -> np.ndarray:
    """(c-1) ring steps per layer forward, 2(c-1) backward, and the recomputed forward's."""
    return layers * (mesh.cp - 1) * mesh.forward_passes(layers)


def pp_message_bytes(job: JobSpec, mesh: MeshArrays, hidden: int) -> np.ndarray:
    """One stage-boundary send: the b*s/c x h activations, 1/t of them per TP rank."""
    return mesh.tokens_per_rank(job.seq_len) * hidden * job.activation_bytes_per_element / mesh.tp


def pp_sends_per_step(mesh: MeshArrays, m: np.ndarray) -> np.ndarray:
    """Sends on the critical path per step: 2 per slot (v*m + p - 1 slots interleaved, 2m + p - 1
    for DualPipeV's two half-stages, m + p - 1 otherwise: ``MeshArrays.chunks_per_rank``)."""
    return 2.0 * (mesh.chunks_per_rank * m + mesh.pp - 1)


def dp_buffers_bytes(
    job: JobSpec, mesh: MeshArrays, params: RankParams, moe: bool = False, architecture: str | None = None
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """((dense, expert) gradient bytes, (dense, expert) weight bytes) of the rank's parameters:
    what DP reduces and ZeRO gathers. Where the linear weights are fp8 parameters
    (``memory.fp8_parameters``: Megatron's --fp8-param-gather) they are gathered at
    ``memory.fp8_parameter_gather_bytes`` per element (per-tensor fp8 data, 1 byte; MXFP8 in bf16);
    the rest in 16 bits."""
    w = job.weight_bytes_per_param
    grads = (params.dense * job.gradient_bytes_per_param, params.expert * job.gradient_bytes_per_param)
    on = fp8_parameters(job, mesh, moe)
    linear_w = np.where(on, fp8_parameter_gather_bytes(job, architecture), w)
    dense = (params.dense - params.dense_linear) * w + params.dense_linear * linear_w
    return grads, (dense, params.expert * linear_w)


def tp_input_regathers(
    model: ModelSpec, job: JobSpec, mesh: MeshArrays, layers: np.ndarray, moe_layers: np.ndarray
) -> np.ndarray:
    """SP all-gathers of the column-parallel linears' inputs run again in backward, for their weight
    gradients: the attention input's and the MLP input's per dense layer, the attention input's per
    MoE layer. Always where the stack keeps only the rank's shard of the input
    (``Stack.sp_regathers_input``: Megatron's and Transformer Engine's linears gather it again in
    backward, overlapped with the input-gradient GEMM); under torchtitan's per-op selective AC,
    whose save list keeps matmul, attention and reduce-scatter outputs but not all-gathers
    (stacks/torchtitan.yaml); zero otherwise and without SP."""
    op_sac = job.software.selective_recompute == "alternate_matmuls"
    again = job.software.sp_regathers_input | ((mesh.recompute == RECOMPUTE_SELECTIVE) & op_sac)
    on = again & mesh.sequence_parallel & (mesh.tp > 1)
    return np.where(on, tp_linear_inputs(model, job, layers, moe_layers), 0.0)


def tp_collectives(
    model: ModelSpec, job: JobSpec, mesh: MeshArrays, layers: np.ndarray, moe_layers: np.ndarray
) -> list[Collective]:
    """TP and expert-TP collectives of one micro-batch through the stage's layers
    (``tp_collectives_per_microbatch``): all-reduces, or with SP a reduce-scatter and an
    all-gather each (forward the linear inputs', backward the output gradients'), plus the inputs'
    all-gathers backward runs again (``tp_input_regathers``)."""
    message = tp_message_bytes(model, job, mesh)
    forward, backward, expert_count = tp_collectives_per_microbatch(model, job, mesh, layers, moe_layers)
    sp = mesh.sequence_parallel.astype(float)
    again = tp_input_regathers(model, job, mesh, layers, moe_layers)
    regathered = again if job.software.sp_regathers_input else np.zeros_like(again)
    # the column-parallel inputs' side (forward gathers, backward input-gradient reductions) at its width
    width, wgrad_width = tp_input_width_shares(model, job, layers, moe_layers)
    inputs = tp_all_gather_bytes(model, job, mesh, "input")
    grads = tp_all_gather_bytes(model, job, mesh, "grad_output")
    return [
        Collective("tp.all_reduce", "all_reduce", "tp", message, forward * (1.0 - sp)),
        Collective("tp.all_reduce_grad", "all_reduce", "tp", message * width, backward * (1.0 - sp)),
        Collective("tp.reduce_scatter", "reduce_scatter", "tp", message, forward * sp),
        Collective("tp.reduce_scatter_grad", "reduce_scatter", "tp", message * width, backward * sp),
        Collective("tp.all_gather", "all_gather", "tp", inputs * width, forward * sp + again - regathered),
        Collective("tp.all_gather_grad", "all_gather", "tp", grads, backward * sp),
        Collective(WGRAD_INPUT_GATHER, "all_gather", "tp", inputs * wgrad_width, regathered),
        *expert_tp_collectives(model, job, mesh, expert_count),
    ]


def tp_input_width_shares(
    model: ModelSpec, job: JobSpec, layers: np.ndarray, moe_layers: np.ndarray
) -> tuple[np.ndarray | float, np.ndarray | float]:
    """(the stage's column-parallel input collectives' mean width over h, that of the inputs the
    weight gradients gather again): 1, but under Megatron-Core's MLA the attention's h-wide input is
    not gathered: its down-projections (linear_q_down_proj, linear_kv_down_proj) are duplicated
    linears on the rank's SP shard, and the column-parallel up-projections gather the latents
    (q_lora_rank, or h without one, + kv_lora_rank) with the rope key (qk_rope_head_dim) beside them
    (megatron/core/transformer/multi_latent_attention.py MLASelfAttention.get_query_key_value_tensors,
    gather_from_sequence_parallel_region of q_compressed, kv_compressed and k_pos_emb); the weight
    gradients gather the latents again, not the rope key. DeepSeek-V3 at tp 2: 2,112 of 7,168 per
    attention input where h had been priced, its TP bytes 27% high (a review, 2026-12-08). torchtitan
    gathers the attention module's input whole (``Stack.tp_module_plan``)."""
    if not model.is_mla or job.software.tp_module_plan == "torchtitan":
        return 1.0, 1.0
    h = float(model.hidden_size)
    latents = float(model.q_lora_rank or model.hidden_size) + float(model.kv_lora_rank or 0)
    blocks = np.maximum(tp_linear_inputs(model, job, layers, moe_layers), 1.0)
    attention = np.asarray(layers, dtype=float)  # one attention input per layer

    def share(width: float) -> np.ndarray:
        return 1.0 - attention / blocks * (1.0 - width / h)

    return share(latents + float(model.qk_rope_head_dim or 0)), share(latents)


def expert_tp_collectives(model: ModelSpec, job: JobSpec, mesh: MeshArrays, count: np.ndarray) -> list[Collective]:
    """Expert-TP's gather of the tokens an expert rank holds after the EP dispatch and the
    reduce-scatter of their outputs, once each per direction and MoE layer (``count``): Megatron-Core's
    MoEAlltoAllTokenDispatcher all-gathers the received tokens over the expert-TP group
    (dispatch_postprocess, gather_from_sequence_parallel_region(..., group=self.tp_group)) and
    reduce-scatters the outputs (combine_preprocess), a buffer of etp x the R routed copies
    (``routed_message_bytes``), so each rank sends (etp - 1) R each way; MoEAllGatherTokenDispatcher
    gathers over tp_ep at once, which over ep (``ep_dispatch``) then etp moves the same bytes, etp x
    ep x its tokens here; the flex dispatcher routes each token to its experts' etp ranks itself
    (router_topk = tp_size x topk over tp_ep_group), so none here. Until 2026-12-08 one all-reduce of
    R was priced, 2 (etp - 1) / etp R: etp times too few bytes (Mixtral-8x7B at tp 2, ep 4, etp 2:
    274.9 GB a step where the dispatcher sends 549.8; a review)."""
    if job.moe_dispatcher == "flex":
        return []
    gathered = ep_dispatch(model, job, mesh).message_bytes * mesh.expert_tp  # the tokens dispatched to a rank
    return [
        Collective("etp.all_gather", "all_gather", "etp", gathered, count),
        Collective("etp.reduce_scatter", "reduce_scatter", "etp", gathered, count),
    ]


WGRAD_INPUT_GATHER = "tp.all_gather_wgrad_input"
"""The backward all-gathers of SP inputs a stack keeping only their shards issues for the weight
gradient (``tp_input_regathers``): asynchronous, beside the input-gradient GEMM that needs none of
them (Megatron-Core layers.py: "we rely on CUDA_DEVICE_MAX_CONNECTIONS=1 to ensure that the gather
is scheduled before the input gradient computation"; Transformer Engine's async_op=True gather, or
its userbuffers bulk overlap with dgrad), so they hide behind compute with or without TP overlap."""


def tp_per_microbatch(
    model: ModelSpec,
    job: JobSpec,
    mesh: MeshArrays,
    links: dict[str, comm.GroupLink],
    layers: np.ndarray,
    moe_layers: np.ndarray,
    overlap_budget_s: np.ndarray | float = 0.0,
) -> Traffic:
    """TP (and expert-TP) collectives of one micro-batch through the stage's layers: all-reduces,
    or with SP a reduce-scatter plus an all-gather each (ring collectives: in-network all-reduce
    does not apply to them). With TP overlap (Megatron-Core --tp-comm-overlap, torchtitan async
    TP) the stack's ``tp_overlap_hidden_fraction`` of it runs behind the GEMMs it is split
    against, at most ``overlap_budget_s`` (the micro-batch's compute: a collective longer than
    the GEMM it is pipelined with cannot hide behind it); the rest stays exposed. Only a TP group
    inside the NVLink domain overlaps: Transformer Engine's userbuffers and PyTorch's async TP
    (SymmetricMemory) exchange through peer GPU memory over NVLink, which a group spread over
    nodes does not have. Only with sequence parallelism: the overlap pipelines SP's all-gather and
    reduce-scatter with the GEMMs (Megatron-LM validate_args refuses --tp-comm-overlap without
    --sequence-parallel; torchtitan's async TP fuses SP's all-gather-matmul and
    matmul-reduce-scatter), so a TP mesh without SP keeps its all-reduces exposed. The
    weight-gradient input gathers (``WGRAD_INPUT_GATHER``) hide whole, within the same budget. The
    expert-TP gathers (``expert_tp_collectives``) stay exposed: the MoE dispatcher issues them as
    plain collectives between its permutations and the grouped GEMMs (Megatron-Core
    token_dispatcher.py gather_from_sequence_parallel_region), none of the linears TP overlap
    splits (until 2026-12-08 they took its hidden share as TP's own did)."""
    collectives = tp_collectives(model, job, mesh, layers, moe_layers)
    regathers = [c for c in collectives if c.name == WGRAD_INPUT_GATHER]
    time = serial_s([c for c in collectives if c.name != WGRAD_INPUT_GATHER and c.group != "etp"], links)
    expert_s = serial_s([c for c in collectives if c.group == "etp"], links)
    behind_dgrad = serial_s(regathers, links)
    sent = sum((c.calls * bytes_sent(c, links) for c in collectives), np.zeros(()))
    tp = links["tp"]
    overlaps = ~np.asarray(tp.crosses) & np.asarray(mesh.sequence_parallel, dtype=bool)
    fraction = np.where(overlaps, job.software.tp_overlap_hidden_fraction if job.tp_overlap else 0.0, 0.0)
    total = time + expert_s + behind_dgrad
    hideable = time * fraction + behind_dgrad  # the weight-gradient gathers: WGRAD_INPUT_GATHER
    return Traffic.overlapped(total, sent, hideable / np.maximum(total, 1e-30), overlap_budget_s)


def ep_collectives(
    model: ModelSpec, job: JobSpec, mesh: MeshArrays, layers: np.ndarray, moe_layers: np.ndarray
) -> list[Collective]:
    """Dispatch and combine of one micro-batch through the stage's MoE layers
    (``ep_all_to_alls_per_microbatch``), by the job's dispatcher (``ep_dispatch``): all-to-alls, or
    an all-gather whose combine is the reduce-scatter of the same buffer."""
    dispatch = ep_dispatch(model, job, mesh)
    count = ep_all_to_alls_per_microbatch(job, mesh, layers, moe_layers)
    if dispatch.op == "all_gather":
        return [
            Collective("ep.all_gather", "all_gather", "ep", dispatch.message_bytes, count / 2.0),
            Collective("ep.reduce_scatter", "reduce_scatter", "ep", dispatch.message_bytes, count / 2.0),
        ]
    return [Collective("ep.all_to_all", "all_to_all", "ep", dispatch.message_bytes, count, fanout=dispatch.fanout)]


def ep_per_microbatch(
    model: ModelSpec,
    job: JobSpec,
    mesh: MeshArrays,
    links: dict[str, comm.GroupLink],
    layers: np.ndarray,
    moe_layers: np.ndarray,
    overlap_budget_s: np.ndarray | float = 0.0,
) -> Traffic:
    """Dispatch and combine all-to-alls of one micro-batch through the stage's MoE layers. With
    the job's EP overlap (Megatron --overlap-moe-expert-parallel-comm) the stack's
    ``ep_overlap_hidden_fraction`` of them runs beside another micro-batch's compute, at most
    ``overlap_budget_s`` (the compute left to hide behind); the rest stays exposed."""
    collectives = ep_collectives(model, job, mesh, layers, moe_layers)
    time = serial_s(collectives, links)
    fraction = job.software.ep_overlap_hidden_fraction if job.ep_comm_overlap else 0.0
    sent = sum((c.calls * bytes_sent(c, links) for c in collectives), np.zeros(()))
    return Traffic.overlapped(time, sent, fraction, overlap_budget_s)


def cp_per_microbatch(
    model: ModelSpec,
    job: JobSpec,
    mesh: MeshArrays,
    links: dict[str, comm.GroupLink],
    layers: np.ndarray,
    attention_core_fwd_s: np.ndarray,
) -> Traffic:
    """K/V ring of one micro-batch through the stage's layers; exposed beyond the attention core
    (forward, backward at twice the forward, and the recomputed forward under full recompute)."""
    (ring,) = cp_collectives(model, job, mesh, layers)
    total = serial_s([ring], links)
    exposed = np.maximum(total - layers * mesh.forward_passes(layers) * attention_core_fwd_s, 0.0)
    return Traffic(exposed, ring.calls * ring.message_bytes, total - exposed)


def cp_collectives(model: ModelSpec, job: JobSpec, mesh: MeshArrays, layers: np.ndarray) -> list[Collective]:
    """The K/V ring steps of one micro-batch through the stage's layers (``cp_ring_steps_per_microbatch``),
    in their attention blocks (all of them in a transformer; ``ModelSpec.attention_layer_share``)."""
    block = cp_block_bytes(model, job, mesh)
    steps = cp_ring_steps_per_microbatch(mesh, layers) * model.attention_layer_share
    return [Collective("cp.ring_exchange", "ring_exchange", "cp", block, steps)]


def pp_per_step(
    job: JobSpec,
    mesh: MeshArrays,
    links: dict[str, comm.GroupLink],
    m: np.ndarray,
    hidden: int,
    slot_s: np.ndarray,
) -> Traffic:
    """Activation and gradient sends between stages: 2 per slot on the critical path (v*m + p - 1
    slots of 1/v stage when interleaved, m + p - 1 otherwise), each waited for.

    Where the schedule allows it (``ScheduleShape.async_sends``: interleaved 1F1B) and the stack
    overlaps them (``Stack.p2p_overlap``: Megatron's --overlap-p2p-communication), the 2 v m sends
    of the steady state are posted before a chunk's compute and waited for after it
    (Megatron-Core forward_backward_pipelining_with_interleaving), so each hides behind one chunk
    of one micro-batch (``slot_s`` / v, ``slot_s`` being the rank's time per micro-batch) and only
    what exceeds it stays exposed; the 2 (p - 1) sends of the warm-up and cool-down, where no other
    chunk runs, stay on the critical path (Megatron's ``overlap_p2p_comm_warmup_flush``, off by
    default).

    Bytes: the busiest rank's. A rank sends each micro-batch's activations on from each of its v
    chunks but the model's last, and its gradients back from each but the model's first: 2 v per
    micro-batch on a middle rank, 2 v - 1 on either end (2 v - 2 where the chunks sit in a V,
    ``ScheduleShape.v_shaped``: the end ranks hold the first and last chunks, or the turn's two), so
    at pp 2, two end ranks, that (until 2026-12-08 2 v everywhere: Llama-3-70B at tp 8 pp 2 showed
    2.15 GB where each rank sends 1.07; a review)."""
    (sends,) = pp_collectives(job, mesh, m, hidden)
    staged = mesh.pp > 1
    end_saves = 1.0 + per_schedule_constant(mesh.schedule, lambda s: float(s.v_shaped))
    per_microbatch = 2.0 * mesh.chunks_per_rank - np.where(mesh.pp == 2, end_saves, 0.0)
    bytes_sent = np.where(staged, m * per_microbatch * sends.message_bytes, 0.0)
    send_s = call_s(sends, links)
    asynchronous = per_schedule_constant(mesh.schedule, lambda s: float(s.async_sends)) > 0
    on = staged & asynchronous & job.software.p2p_overlap
    steady = 2.0 * mesh.chunks_per_rank * m
    chunk_s = slot_s / mesh.chunks_per_rank
    overlapped_s = 2.0 * (mesh.pp - 1) * send_s + steady * np.maximum(send_s - chunk_s, 0.0)
    waited_s = np.where(staged, sends.calls * send_s, 0.0)
    return Traffic(
        np.where(on, overlapped_s, waited_s),
        bytes_sent,
        np.where(on, steady * np.minimum(send_s, chunk_s), 0.0),
    )


def pp_collectives(job: JobSpec, mesh: MeshArrays, m: np.ndarray, hidden: int) -> list[Collective]:
    """The sends on the step's critical path (``pp_sends_per_step``); the rank sends 2 m v in all."""
    message = pp_message_bytes(job, mesh, hidden)
    return [Collective("pp.send_recv", "send_recv", "pp", message, pp_sends_per_step(mesh, m), per_microbatch=False)]


def dp_collectives(
    job: JobSpec,
    mesh: MeshArrays,
    params: RankParams,
    m: np.ndarray,
    layers: np.ndarray,
    moe: bool = False,
    architecture: str | None = None,
) -> list[Collective]:
    """Gradient reduction and ZeRO gathers of one step, dense weights over dp*cp (group 'dp'),
    expert weights over expert-DP ('edp'): an all-reduce of the gradients (ZeRO-0), or a
    reduce-scatter of them and an all-gather of the updated weights (ZeRO-1/2; ZeRO-2, holding only
    its gradient shard, reduce-scatters every micro-batch's); ZeRO-3/FSDP runs them layer by layer
    (one FSDP unit per transformer block, as FSDP, torchtitan and llm-foundry wrap), every
    micro-batch, the weights gathered for forward and again for backward. Where a pipeline runtime
    holds the FSDP stage through the step (``mesh.pipeline_holds_fsdp_state``: torch's pipelining)
    the gradients are reduce-scattered once, whole, and ZeRO-2's weights gathered once; ZeRO-3's,
    resharded after every forward, are gathered layer by layer for every backward and for the
    forwards before the first backward (the first stage's warmup of 1F1B, min(m, pp); GPipe's
    m - 1 of them find the weights gathered, an over-count of its gathers by at most pp - 1 of m + pp)."""
    grads, weights = dp_buffers_bytes(job, mesh, params, moe, architecture)
    z = mesh.zero_stage
    held = pipeline_holds_fsdp_state(job, mesh)
    units = np.maximum(layers, 1)
    sharded = np.where(z >= 1, 1.0, 0.0)
    layered = (z >= 3) & ~held  # reduced layer by layer, every micro-batch
    gathers = np.where(held, m + np.minimum(m, mesh.pp), 2.0 * m)  # ZeRO-3's, per layer
    out: list[Collective] = []
    for group, grad, weight in (("dp", grads[0], weights[0]), ("edp", grads[1], weights[1])):
        out += [
            Collective(f"{group}.all_reduce", "all_reduce", group, grad, np.where(z == 0, 1.0, 0.0), False),
            Collective(
                f"{group}.reduce_scatter",
                "reduce_scatter",
                group,
                np.where(layered, grad / units, grad),
                np.where(layered, m * units, np.where((z == 2) & ~held, m, sharded)),
                False,
            ),
            Collective(
                f"{group}.all_gather",
                "all_gather",
                group,
                np.where(z >= 3, weight / units, weight),
                np.where(z >= 3, gathers * units, sharded),
                False,
            ),
        ]
    return out


def dp_link_free_share(
    links: dict[str, comm.GroupLink], compute_s: np.ndarray, hidden_s: dict[str, np.ndarray | float]
) -> np.ndarray:
    """Share of a micro-batch's compute during which DP's links are free for its overlapped traffic:
    the TP, CP, EP and PP traffic hidden behind the same compute (``hidden_s``, per micro-batch)
    runs on a link of the gradient groups too where its group sits on that tier (both on the NICs,
    or both on NVLink), and a link carries one stream's bytes at a time at full bandwidth: two
    streams hidden at once share it, so their hidden seconds add. The gradient collectives of the
    dense (dp) and the expert (edp) groups share one overlap window, so the busier of their tiers
    sets it. Without this, 50 s of ZeRO-3 gathers and 6.5 s of CP ring steps, both across nodes,
    were hidden behind 50 s of compute. A first-order bound: streams on different tiers do not
    compete, NCCL channels are not modelled, and a hidden stream's seconds count its latency too
    (a latency-bound stream is charged as if its link were busy)."""
    free = np.ones(np.shape(compute_s))
    for group in ("dp", "edp"):
        busy = np.zeros(np.shape(compute_s))
        for kind, hidden in hidden_s.items():
            busy = busy + np.where(links[kind].tier == links[group].tier, hidden, 0.0)
        share = np.clip(1.0 - busy / np.maximum(compute_s, 1e-30), 0.0, 1.0)
        free = np.where(links[group].size > 1, np.minimum(free, share), free)
    return free


def dp_per_step(
    job: JobSpec,
    mesh: MeshArrays,
    links: dict[str, comm.GroupLink],
    params: RankParams,
    m: np.ndarray,
    fwd_mb_s: np.ndarray,
    bwd_mb_s: np.ndarray,
    layers: np.ndarray,
    moe: bool = False,
    architecture: str | None = None,
) -> Traffic:
    """Gradient reduction and ZeRO gathers of one step (``dp_collectives``; a MoE model's
    ``moe``, the GPU's ``architecture``), exposed per the module docstring."""
    collectives = dp_collectives(job, mesh, params, m, layers, moe, architecture)
    reduce_s = serial_s([c for c in collectives if c.op != "all_gather"], links)
    gather_s = serial_s([c for c in collectives if c.op == "all_gather"], links)
    z = mesh.zero_stage
    held = pipeline_holds_fsdp_state(job, mesh)
    buckets = np.maximum(layers, 1)
    # ZeRO-2: one per micro-batch, each behind its backward
    reductions = np.where((z == 2) & ~held, np.maximum(m, 1), 1)
    per_reduction = reduce_s / reductions
    first_gather = np.maximum(gather_s - fwd_mb_s, gather_s / buckets)
    exposed_012 = reductions * np.maximum(per_reduction - bwd_mb_s, per_reduction / buckets) + first_gather
    # ZeRO-3/FSDP's are layer by layer, each paying the ring's latency (``dp_collectives``)
    serial = reduce_s + gather_s
    exposed_3 = np.maximum(serial - m * (fwd_mb_s + bwd_mb_s), serial / (m * buckets))
    # a held stage reduces after its last backward (torch's REDUCE_GRAD action), behind nothing; its
    # ZeRO-3 gathers are prefetched layer by layer as FSDP's are
    gathers_3 = np.maximum(gather_s - m * (fwd_mb_s + bwd_mb_s), gather_s / (m * buckets))
    exposed_held = reduce_s + np.where(z >= 3, gathers_3, first_gather)
    sent = sum((c.calls * bytes_sent(c, links) for c in collectives), np.zeros(()))
    overlapped = np.where(held, exposed_held, np.where(z >= 3, exposed_3, exposed_012))
    exposed = np.where(mesh.overlap_grad_reduce, overlapped, serial)
    return Traffic(exposed, sent, serial - exposed)


def step_collectives(
    model: ModelSpec,
    job: JobSpec,
    mesh: MeshArrays,
    m: np.ndarray,
    layers: np.ndarray,
    moe_layers: np.ndarray,
    params: RankParams,
    architecture: str | None = None,
) -> list[Collective]:
    """Every collective of one step on the rank with ``layers`` (``moe_layers`` of them MoE) and
    ``params`` on a GPU of ``architecture``: the lists the step prices, group by group, for the
    validator to replay."""
    return [
        *tp_collectives(model, job, mesh, layers, moe_layers),
        *ep_collectives(model, job, mesh, layers, moe_layers),
        *cp_collectives(model, job, mesh, layers),
        *pp_collectives(job, mesh, m, model.hidden_size),
        *dp_collectives(job, mesh, params, m, layers, model.is_moe, architecture),
    ]
