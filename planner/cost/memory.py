"""Memory per GPU (ARCHITECTURE 8.3): model states with ZeRO, activations, logits, runtime overhead.

Model states (Rajbhandari et al. 2020, 'ZeRO', section 5): per parameter held by a rank, weight
bytes + gradient bytes + optimizer-state bytes (mixed-precision Adam 2 + 2 + 12). Dense weights
are split t*p ways (and the pipeline stage decides which layers a rank holds); expert weights
e*expert_tp*p ways. ZeRO-1 shards optimizer states over the data-parallel group (dp*cp for
dense weights, as Megatron-LM's distributed optimizer does; expert-DP for experts), ZeRO-2
gradients too, ZeRO-3 weights too, plus the gathered working set of two layers (the one in use
and the one prefetched, as FSDP and DeepSpeed ZeRO-3 do).

Activations: bytes that backward keeps, per token and layer, following Korthikanti et al. 2022
('Reducing Activation Recomputation in Large Transformer Models', section 4.1), generalised:
  outside the TP regions (split only by SP): two norm inputs 4h, the attention and MLP inputs
      2h + 2h, dropout masks h + h (with dropout)                         GPT: 10h
  inside (split by t): Q and K for the scores 2(a*d_qk + k_v*d_qk), V 2*k_v*d_v, the output
      projection's input 2*a*d_v, the MLP's 4f (plain: fc1 out, GELU out) or 6f (gated: gate,
      up, product)                                                          GPT: 24h
  attention core, without flash attention: softmax 2as, plus dropout mask and output 3as;
      flash attention keeps only the fp32 log-sum-exp, 4a.                  GPT: 5as
For the GPT block this is s*b*h*(34 + 5as/h) and its TP, SP and selective variants (tests).
Under SP, a stack whose column-parallel linears keep the all-gathered input for the weight gradient
instead of gathering it again (torchtitan's DTensor: ``Stack.sp_regathers_input`` false) keeps the
two norm outputs whole: 4h instead of 4h/t.
Under fp8 with a stack whose linears keep their fp8 input for the weight gradient (Transformer
Engine: ``Stack.fp8_saves_quantized_inputs``), the inputs of the four linears (the two norm outputs
2h + 2h, the output projection's input 2*a*d_v, the MLP's product 2f, and a routed expert's
permuted input 2h) are kept at 1 byte per element instead of 2.
MLA keeps its up-projected Q, K, V as above plus what its two up-projections keep (Megatron-Core
fuses the q and kv latents' norms into them, Transformer Engine's LayerNormLinear, which saves
both the norm's input and its output; ``MLA_LATENT_NORM_INPUT_BYTES``) and the rope key. A MoE
layer's router keeps fp32 score tensors of the experts' width (``ROUTER_SCORE_BYTES_PER_EXPERT``).
Selective recompute frees what its modules free (``cost.recompute``;
the default, Megatron's core_attn, the attention core); full recompute keeps each layer's input (2h,
split by t under SP) plus one layer's activations while it is recomputed; recomputing only the
first r layers of each chunk (``recompute_layers``) keeps the inputs of those and everything of
the others, which are freed before the recomputed ones run again (no buffer on top then). KV
heads fewer than t are replicated (k_v/t rounds up to 1 per rank). CP divides tokens by c.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property

import numpy as np

from planner.cost.flops import (
    attention_dims,
    dense_layer_matmul_params,
    flash_attention_runs,
    moe_layer_active_matmul_params,
    mtp_layers,
    mtp_projection_params,
    routed_matmul_params,
)
from planner.cost.params import largest_dense_layer, mamba_in_proj_width
from planner.cost.pipeline import (
    RankLayers,
    first_rank_leading_dense_layers,
    is_dual,
    layers_with_mtp,
    microbatches_in_flight,
    moe_layers_of,
    rank_layers,
    with_recompute_every,
)
from planner.cost.recompute import freed_parts
from planner.cost.routing import moe_load_factor
from planner.mesh import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE, MeshArrays, pipeline_holds_fsdp_state, shards_nothing
from planner.schedules import per_schedule_constant
from planner.schemas.hardware import MXFP8_ARCHITECTURES, NON_TN_FP8_ARCHITECTURES, ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec

MEMORY_UNDERCOUNT = 0.125
"""The largest share by which a measured peak exceeded the planner's count among the published
runs priced as they state their mesh and recompute (the benchmark's ``most_under_stated_pct``,
-10.6%, rounded up to an eighth): torchao's Llama-3-8B float8 rows on 8 H100
(FSDP 8, per-op SAC), 47.6-47.8 GiB of max_reserved against 42.7 GiB counted (-10.4% to -10.6%;
their torchtitan checkout ran the eager loss, which the row's version string, 'torchtitan 0.0.2',
does not date, so the planner prices the compiled one), of the 25 rows with a measured peak in
modern_runs.yaml (torchtitan's and torchao's tables: torchtitan/FSDP2 on H100, MI300X and
Blackwell), from ``python benchmarks/accuracy.py --runs modern_runs.yaml`` (its ``memory``
section). Until 2026-12-06 it was torchtitan's Llama-3.1 70B at FSDP 32 x TP 8 (71.9 GiB against
62.9, -12.5%), which the loss-parallel figure (``Stack.loss_parallel_loss_bytes_per_logit``) now
counts within 2%. The NVFP4 note's rows at -8% and -14% state no recompute and are priced with
the search's. No Megatron-Core or DeepSpeed run publishes its peak, so for those stacks it is the
other stacks' figure, not a measurement of their own. A measured peak is then up to predicted /
(1 - MEMORY_UNDERCOUNT) (x1.14): ``pricing.advice`` warns when that exceeds the GPU's memory, and a
job's ``memory_headroom`` of this share asks the search for exactly that margin."""


def mxfp8_blocks(job: JobSpec, architecture: str | None) -> bool:
    """Whether the job's block-scaled fp8 runs as MXFP8 (32-element blocks with an E8M0 scale each:
    ``hardware.MXFP8_ARCHITECTURES``, or an unknown GPU, as the Megatron export's ``fp8_recipe``
    takes it) rather than Transformer Engine's Float8BlockScaling (128 x 128 weight tiles, an fp32
    scale each: under 0.03% of a byte per element)."""
    return job.fp8_scaling == "block" and (architecture is None or architecture in MXFP8_ARCHITECTURES)


def fp8_weight_copies_bytes(job: JobSpec, architecture: str | None) -> float:
    """Bytes per element of a linear weight's fp8 copies kept for a step: the row-wise copy the
    forward GEMM takes, and the copy the backward's input-gradient GEMM takes where it needs another
    (a block-scaled weight's column-wise copy always; a per-tensor or row-scaled transpose unless the
    stack's GEMMs take the non-TN layout the architecture has, ``Stack.fp8_non_tn_gemms``), each with
    MXFP8's scale byte per 32 elements. Transformer Engine keeps both once made (Float8Tensor's
    cached transpose; MXFP8Tensor's and Float8BlockwiseQTensor's row- and column-wise data)."""
    non_tn = job.software.fp8_non_tn_gemms and architecture in NON_TN_FP8_ARCHITECTURES
    second = 0.0 if job.fp8_scaling != "block" and non_tn else 1.0
    scales = 1.0 / 32.0 if mxfp8_blocks(job, architecture) else 0.0
    return (1.0 + second) * (1.0 + scales)


def fp8_parameters(job: JobSpec, mesh: MeshArrays, moe: bool) -> np.ndarray:
    """Meshes whose linear weights are fp8 parameters (columns): fp8 on a stack that keeps them so
    with a sharded optimizer (``Stack.fp8_primary_weights``: Megatron's --fp8-param-gather, which
    validate_args allows only with the distributed optimizer or FSDP) at a ZeRO stage >= 1 with
    something to shard (``mesh.shards_nothing``: such a mesh runs, and is exported as, plain DDP)."""
    on = job.dtype == "fp8" and job.software.fp8_primary_weights
    return on & (mesh.zero_stage >= 1) & ~shards_nothing(moe, mesh)


def fp8_parameter_gather_bytes(job: JobSpec, architecture: str | None) -> float:
    """Bytes per linear weight element the data-parallel parameter all-gather moves where the weights
    are fp8 parameters: their fp8 data (a per-tensor Float8Tensor's, or Float8BlockScaling's
    row-wise copy, the column-wise one made after the gather: Megatron-Core fp8_utils
    post_all_gather_processing), except MXFP8's, gathered in bf16 through the gradient buffer and
    quantised on arrival (Megatron-Core distributed/param_and_grad_buffer.py: "param buffer is not
    mapped to model params for MXFP8 case. The paramaters are cast from bf16 to MXFP8 during copy";
    --reuse-grad-buf-for-mxfp8-param-ag, which the export writes)."""
    return 2.0 if mxfp8_blocks(job, architecture) else 1.0


def undercount_safe_bytes(capacity_bytes: float) -> float:
    """The largest predicted peak that still fits a GPU of ``capacity_bytes`` if the count falls
    ``MEMORY_UNDERCOUNT`` of the measured peak short (a peak 1.14x the count): capacity x
    (1 - MEMORY_UNDERCOUNT). A mesh above it may run out of memory (``pricing.advice``'s
    tight-memory warning, ``search``'s margin pick, ``explain.tight_clause``)."""
    return capacity_bytes * (1.0 - MEMORY_UNDERCOUNT)


def usable_memory_bytes(cluster: ClusterSpec, job: JobSpec) -> float:
    """Memory a mesh's predicted peak may reach on each GPU: the profile's capacity less the job's
    ``memory_headroom`` share (the runtime reserve is part of the peak, its ``overhead``)."""
    return cluster.gpu.hbm_capacity_bytes * (1.0 - job.memory_headroom)


def headroom_clause(job: JobSpec) -> str:
    """' (12.5% kept free by --memory-headroom)' after a usable-memory figure, '' without headroom."""
    return f" ({100 * job.memory_headroom:g}% kept free by --memory-headroom)" if job.memory_headroom else ""


def kv_heads_per_rank(model: ModelSpec, tp: np.ndarray) -> np.ndarray:
    """k_v / t, or 1 when KV heads are replicated because k_v < t."""
    return np.maximum(model.num_kv_heads / tp, 1.0)


def mlp_activation_bytes_per_token(
    model: ModelSpec, width: float | np.ndarray, linear_input_bytes: float = 2.0
) -> float | np.ndarray:
    """What an MLP keeps for backward: gated 4f + the product (fc2's input), plain 2f + the
    activation output (fc2's input); fc2's input at ``linear_input_bytes`` per element: 6f and
    4f in 16 bits."""
    return ((4.0 if model.is_gated_mlp else 2.0) + linear_input_bytes) * width


def mamba_activation_bytes_per_token(model: ModelSpec, linear_input_bytes: float) -> float:
    """Bytes one Mamba-2 mixer keeps for backward per token (before TP), by a count of what
    Megatron-Core's training path saves (megatron/core/ssm/mamba_mixer.py ``_ssm_training``;
    mamba_ssm ssd_combined.py @d757aef ``MambaSplitConv1dScanCombinedFn``, the memory-efficient
    path, runs the convolution and the scan's chunk states again in backward): in_proj's output z,
    x, B, C and dt (16-bit, 2 d_inner + 2 G N + H, the batch-first copy where a micro-batch holds
    several sequences), the scan's ungated output (d_inner), the RMSNorm's input y (d_inner) and its
    output, out_proj's input (``linear_input_bytes`` per element). A count, not a measurement."""
    d_inner = float(model.mamba_inner_size)
    in_proj = 2.0 * mamba_in_proj_width(model)
    return in_proj + 4.0 * d_inner + linear_input_bytes * d_inner


NVFP4_SAVED_BYTES_PER_ELEMENT = 0.5 + 1.0 / 16.0
"""What an NVFP4 linear keeps of its input for the weight gradient: the column-wise E2M1 copy the
wgrad GEMM reads (half a byte) with its E4M3 scale per 16 elements (Transformer Engine's
NVFP4BlockScaling recipe, docs 'NVFP4': 1x16 blocks for activations; the row-wise copy is dropped
after the forward, as for fp8). torchao's NVFP4 linear, which torchtitan runs, keeps its quantised
input too: torchtitan's nvfp4.md measures Llama-3-8B at 110.95 GiB peak under NVFP4 against
174.49 GiB in bf16 and 179.94 GiB under MXFP8, whose torchao linear keeps the 16-bit input."""


def linear_input_bytes_per_element(job: JobSpec) -> float:
    """Bytes per element a linear layer keeps of its input for the weight gradient: 1 under fp8
    when the stack keeps the quantised input (Transformer Engine, see Stack.fp8_saves_quantized_
    inputs), ``NVFP4_SAVED_BYTES_PER_ELEMENT`` under fp4 on every stack, else 2."""
    if job.dtype == "fp4":
        return NVFP4_SAVED_BYTES_PER_ELEMENT
    return 1.0 if job.dtype == "fp8" and job.software.fp8_saves_quantized_inputs else 2.0


@dataclass(frozen=True)
class ActivationParts:
    """What one layer keeps for backward per token of the micro-batch (before CP) on one rank, by
    part (columns over meshes); ``cost.recompute.MODULES`` names the parts each selective-recompute
    module frees."""

    norm_inputs: np.ndarray  # the two norms' inputs, 4h (split by SP)
    norm_outputs: np.ndarray  # the two norms' outputs, the QKV and MLP linears' inputs (split by SP
    # where the stack gathers them again in backward, Stack.sp_regathers_input)
    dropout: np.ndarray  # dropout masks h + h (split by SP)
    qkv: np.ndarray  # Q and K for the scores, V (MLA: the up-projected ones)
    mla_latents: np.ndarray  # MLA: the q and kv latents the up-projections' fused norms read, the rope key
    mla_normed: np.ndarray  # MLA: those norms' outputs, the up-projections' GEMM inputs
    attn_proj_input: np.ndarray  # the output projection's input
    core: np.ndarray  # the attention core's state (flash: the log-sum-exp)
    dense_mlp: np.ndarray  # a dense layer's MLP
    router: np.ndarray  # MoE: the router's fp32 scores
    routed_input: np.ndarray  # MoE: each routed token's permuted input at its experts
    routed_activation: np.ndarray  # MoE: the inputs of the experts' activation (gate and up)
    routed_product: np.ndarray  # MoE: the activation output, the second expert linear's input
    routed_clamped: np.ndarray  # MoE: the clamped gate and up a clamp outside the fused activation adds
    shared: np.ndarray  # MoE: the shared experts' MLP
    mamba: np.ndarray  # hybrid models: a Mamba-2 mixer's (``mamba_activation_bytes_per_token``)
    latent: np.ndarray  # LatentMoE: fc2_latent_proj's input, the combined latent

    def total(self, freed: frozenset[str] | set[str] = frozenset()) -> np.ndarray:
        return sum((getattr(self, f.name) for f in fields(self) if f.name not in freed), np.zeros(()))


MLA_LATENT_NORM_INPUT_BYTES = 2.0
"""Bytes per latent element the q and kv latents' norms keep of their 16-bit input, beside their
output (``ActivationParts.mla_normed``, at the linear-input width, 1 byte under a quantising
fp8 stack). Megatron-Core's MLA spec (gpt_layer_specs.py, 0.16) builds linear_q_up_proj and
linear_kv_up_proj as TELayerNormColumnParallelLinear with q_layernorm and kv_layernorm the
identity, and Transformer Engine's LayerNormLinear forward (layernorm_linear.py, 2.9:
``prepare_for_saving(inputmat, ..., ln_out, mu, rsigma)``) saves the norm's input and output
both. Recomputing mla_up_proj checkpoints the up-projections from the latents: it frees the
outputs and keeps the inputs (``recompute.MODULES``). DeepSeek-V3: 4 kB per token and layer at
t = 1, 0.8% of its MoE layer's 483 kB; counted since 2026-12-07."""

ROUTER_SCORE_BYTES_PER_EXPERT = 8.0
"""Bytes per token and routed expert a MoE router keeps for backward: two fp32 score tensors of
the experts' width, the routing's (Megatron-Core moe_utils.py ``topk_routing_with_score_function``:
the sigmoid of DeepSeek-V3's logits, or the softmax before top-k; a softmax after top-k keeps only
k) and the load-balancing loss's (``compute_routing_scores_for_aux_loss``: a softmax or sigmoid over
all experts, fp32), over the tokens of one TP rank under Megatron-Core (MoE with TP runs with
SP) and over all of them under torchtitan (its TP plan replicates the router: ``NoParallel``
gate, deepseek_v3 and llama4 parallelize.py); the router's input is the norm output counted
already. A count from the code, not a measurement: it leaves out the permutation's index map
(Transformer Engine's fused permute keeps an int32 map of the experts' width, unfused Megatron
a bool mask) and a post-top-k softmax model's smaller routing scores. Qwen3-30B-A3B: 1 kB per
token and MoE layer, 0.9% of 115 kB; counted since 2026-12-07."""


def activation_parts(model: ModelSpec, job: JobSpec, mesh: MeshArrays, moe: bool) -> ActivationParts:
    """Bytes kept for backward per token of the micro-batch (before CP) for one layer on one rank,
    by part, with no recompute. See the module docstring. ``moe`` prices a MoE layer: its MLP part
    is top-k routed experts (each keeping its permuted input 2h and MLP activations at width
    f_e/expert_tp) plus shared experts, over the tokens of one TP rank (MoE with TP runs with
    sequence parallelism)."""
    h, a, s = model.hidden_size, model.num_attention_heads, job.seq_len
    t = mesh.tp.astype(float)
    d_qk, d_v = attention_dims(model)
    kind = model.layer_kind(moe)
    lin = linear_input_bytes_per_element(job)
    sp = np.where(mesh.sequence_parallel, 1.0 / t, 1.0)
    # the QKV and first MLP linears' inputs: the rank's SP shard where the stack gathers it again in
    # backward (Megatron, TE), else the all-gathered input autograd saved (torchtitan's DTensor)
    linear_inputs = sp if job.software.sp_regathers_input else 1.0
    kv = kv_heads_per_rank(model, t)
    zero = np.zeros(len(mesh))
    latent_width = (model.q_lora_rank or 0) + (model.kv_lora_rank or 0) if model.is_mla else 0
    rope_key = 2.0 * (model.qk_rope_head_dim or 0) if model.is_mla else 0.0
    attention = kind.attention  # per layer: one in a transformer, a share of a hybrid's dense kind
    parts = {
        "norm_inputs": 2.0 * kind.blocks * h * sp,
        "norm_outputs": lin * kind.blocks * h * linear_inputs,
        "dropout": kind.blocks * h * sp * (1.0 if job.dropout else 0.0),
        "qkv": attention * (2.0 * a * d_qk / t + 2.0 * kv * d_qk + 2.0 * kv * d_v),
        # the latents run on the rank's SP shard, as the layer's norms do (Megatron-Core
        # multi_latent_attention.py: q_compressed [s / TP, b, q_lora_rank] from the duplicated down
        # projection); the up-projections gather them again in backward where the stack does so
        "mla_latents": attention * (MLA_LATENT_NORM_INPUT_BYTES * latent_width * linear_inputs + rope_key),
        "mla_normed": attention * lin * latent_width * linear_inputs,
        "attn_proj_input": attention * lin * a * d_v / t,
        "core": attention
        * np.where(
            flash_attention_runs(model, job), 4.0 * a / t, (2.0 + 3.0 * (1.0 if job.dropout else 0.0)) * a * s / t
        ),
        "dense_mlp": zero,
        "router": zero,
        "routed_input": zero,
        "routed_activation": zero,
        "routed_product": zero,
        "routed_clamped": zero,
        "shared": zero,
        "mamba": zero + kind.mamba * mamba_activation_bytes_per_token(model, lin) / t,
        "latent": zero,
    }
    if moe:
        # Each routed token is processed by all expert_tp ranks of its expert: they each keep
        # the full permuted input (2h) and 1/expert_tp of the expert's MLP activations; the
        # busiest rank holds the job's MoE load factor x the even share.
        routed = (model.num_experts_per_tok or 0) * moe_load_factor(job, mesh, model) * mesh.expert_tp / t
        width = model.expert_intermediate_size / mesh.expert_tp
        parts["routed_input"] = routed * lin * model.expert_input_size
        # Megatron-Core routes the rank's SP shard (MoE with TP runs with SP); torchtitan's TP plan
        # replicates the router's input and computation on every TP rank (NoParallel gate), the
        # DTensor input the stack's linears also keep whole (``Stack.sp_regathers_input``)
        routed_tokens = 1.0 / t if job.software.sp_regathers_input else 1.0
        parts["router"] = zero + ROUTER_SCORE_BYTES_PER_EXPERT * model.num_experts_total * routed_tokens
        if model.moe_latent_size:  # fc1_latent_proj's input is the norm output counted above
            parts["latent"] = zero + lin * model.moe_latent_size / t
        parts["routed_activation"] = routed * (4.0 if model.is_gated_mlp else 2.0) * width
        parts["routed_product"] = routed * lin * width
        # A SwiGLU clamp run outside the fused activation (``compute.expert_epilogue_bytes``) feeds
        # it a clamped copy of gate and up, which the activation keeps beside the unclamped
        # ones the clamps keep for their masks; recomputing moe_act discards it with the output.
        if model.swiglu_limit is not None and job.software.glu_clamp_bytes_per_element:
            parts["routed_clamped"] = routed * 4.0 * width
        parts["shared"] = mlp_activation_bytes_per_token(model, model.shared_expert_width, lin) / t + zero
    else:
        parts["dense_mlp"] = kind.mlp * mlp_activation_bytes_per_token(model, model.intermediate_size, lin) / t
    return ActivationParts(**{k: np.broadcast_to(np.asarray(v, dtype=float), (len(mesh),)) for k, v in parts.items()})


def activation_bytes_per_token_layer(model: ModelSpec, job: JobSpec, mesh: MeshArrays, moe: bool) -> np.ndarray:
    """Bytes kept for backward per token of the micro-batch (before CP) for one layer on one rank,
    as the mesh's recompute keeps them: everything without recompute; under selective recompute
    all but the parts its modules free (``cost.recompute``; the default, Megatron's core_attn,
    frees the attention core), or under torchtitan's per-op SAC what its policy saves
    (``op_sac_kept_bytes_per_token``); under full recompute the layer's input (2h, split by t
    under SP)."""
    parts = activation_parts(model, job, mesh, moe)
    layer_input = np.where(mesh.sequence_parallel, 2.0 * model.hidden_size / mesh.tp, 2.0 * model.hidden_size)
    selective = parts.total(freed_parts(job))
    if op_sac_applies(model, job, moe):
        selective = op_sac_kept_bytes_per_token(model, mesh, parts, layer_input)
    kept = np.where(mesh.recompute == RECOMPUTE_SELECTIVE, selective, parts.total())
    return np.where(mesh.recompute == RECOMPUTE_FULL, layer_input, kept)


def op_sac_applies(model: ModelSpec, job: JobSpec, moe: bool) -> bool:
    """Whether ``op_sac_kept_bytes_per_token`` prices this layer's selective recompute: the stack
    runs torchtitan's per-op SAC and the layer is a dense one with standard attention. Its MoE
    layers (the router's matmul shifts the count; grouped_mm is not on the save list) and MLA
    (five projections) keep ``activation_parts``' full count: an upper bound, not a reading."""
    return job.software.selective_recompute == "alternate_matmuls" and not moe and not model.is_mla


def op_sac_kept_bytes_per_token(
    model: ModelSpec, mesh: MeshArrays, parts: ActivationParts, layer_input: np.ndarray
) -> np.ndarray:
    """Bytes per token one dense layer keeps for backward under torchtitan's per-op selective
    activation checkpointing (``--activation_checkpoint.mode selective``, option 'op').

    Its policy (torchtitan llama3 parallelize.py ``_apply_ac_to_transformer_block``,
    ``_custom_policy``; stacks/torchtitan.yaml) saves the outputs of the ops on its save list
    (mm, the SDPA kernels, reduce_scatter, max) "except every second mm", counting matmuls in a
    ``meta`` dict that ``selective_checkpointing_context_fn`` creates afresh for every forward of
    the block, and recomputes everything else from the checkpoint's input. torchtitan's Llama
    block calls its matmuls in the order wq, wk, wv, wo, w1, w3, w2 (model.py: ``self.wq(x),
    self.wk(x), self.wv(x)``; ``self.w2(F.silu(self.w1(x)) * self.w3(x))``), so the 1st, 3rd, 5th
    and 7th are kept: Q (2 a d/t), V (2 k_v d), the gate (2f/t) and the down projection's output
    (2h: a row-parallel matmul's local output is full width); a plain MLP (fc1, fc2 at the 5th and
    6th) keeps fc1's. Also kept: the block input (2h, split by t under SP), the SDPA output and
    its log-sum-exp (``parts.attn_proj_input``, ``parts.core``), and under SP the two
    reduce-scatter outputs (2h/t each). Llama-2-70B at t = 1: 8h + 2 k_v d + 2f + 4a = 125 kB per
    token against 275 kB without recompute. torchao's Float8Linear rows keep the same (torchtitan's
    Dec 2024 H100 table: 76.8 GiB with float8 against 77.0 without)."""
    h = float(model.hidden_size)
    t = mesh.tp.astype(float)
    d_qk, d_v = attention_dims(model)
    kv = kv_heads_per_rank(model, t)
    width = model.intermediate_size / t
    first_mlp = 2.0 * width  # w1 (gate) or fc1: the 5th matmul either way
    down = 2.0 * h if model.is_gated_mlp else 0.0  # w2 is the 7th matmul only in the gated MLP
    scattered = np.where(mesh.sequence_parallel & (mesh.tp > 1), 2.0 * 2.0 * h / t, 0.0)
    q = 2.0 * model.num_attention_heads * d_qk / t
    v = 2.0 * kv * d_v
    return layer_input + q + v + first_mlp + down + parts.attn_proj_input + parts.core + scattered


def korthikanti_bytes_per_layer(
    seq_len: int, micro_batch: int, hidden: int, heads: int, tp: int, sequence_parallel: bool, recompute: str
) -> float:
    """Korthikanti et al. 2022, Table 2, for reference: activation bytes per GPT layer.

    none: sbh(34 + 5as/h); TP: sbh(10 + 24/t + 5as/(ht)); TP+SP: sbh(34 + 5as/h)/t;
    selective drops the 5as/h term; full recompute keeps 2sbh (the layer input).
    """
    s, b, h, a, t = seq_len, micro_batch, hidden, heads, tp
    if recompute == "full":
        return 2.0 * s * b * h
    core = 0.0 if recompute == "selective" else 5.0 * a * s / h
    if sequence_parallel:
        return s * b * h * (34.0 + core) / t
    return s * b * h * (10.0 + 24.0 / t + core / t)


@dataclass(frozen=True)
class StageMemory:
    """Bytes per GPU on one pipeline stage, by kind (columns)."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    logits: np.ndarray
    overhead: np.ndarray
    # the pipeline rank these bytes are (0 the first), -1 where they bound an explicit layout's ranks
    # between the first and the last; not a kind of memory (``total`` leaves it out)
    rank: np.ndarray

    @cached_property
    def total(self) -> np.ndarray:
        return self.weights + self.gradients + self.optimizer + self.activations + self.logits + self.overhead

    def take(self, rows: np.ndarray) -> StageMemory:
        """The meshes ``rows`` (indices or a boolean mask) of these columns."""
        return StageMemory(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})


@dataclass(frozen=True)
class RankParams:
    """Parameters one rank of the worst stage holds, split by how they are sharded (columns), and
    of the dense ones those that are linear layers' weights (what fp8 quantises; every expert
    parameter is one, their biases aside)."""

    dense: np.ndarray  # sharded over dp*cp by ZeRO
    expert: np.ndarray  # sharded over expert-DP by ZeRO
    largest_layer: np.ndarray  # ZeRO-3 gathers this much per layer in use
    dense_linear: np.ndarray  # of ``dense``: the layers' linear weights


def rank_params(
    model: ModelSpec,
    mesh: MeshArrays,
    layers: np.ndarray,
    moe_layers: np.ndarray,
    mtp: np.ndarray | int,
    embedding: np.ndarray,
    head: np.ndarray,
) -> RankParams:
    """Parameters on one rank holding ``layers`` layers (``moe_layers`` of them MoE, ``mtp`` of them
    MTP layers, which add their 2h x h projection), with the embedding where ``embedding`` (first
    stage) and the LM head where ``head`` (last stage); both vocab-parallel, split t ways. DualPipe
    ranks hold two stages' parameters, stage i and stage p-1-i (deepseek-ai/DualPipe README,
    'Parameter per device 2x'): twice the weights, gradients, optimizer states and gradient
    reduction."""
    c = model.parameter_counts
    t = mesh.tp.astype(float)
    dense_layers = layers - moe_layers
    moe_non_expert = c.moe_layer - c.moe_experts_per_layer  # attention (not in a hybrid's), norms, shared, router
    dense = (dense_layers * c.dense_layer + moe_layers * moe_non_expert) / t
    # the linears of those layers: a MoE layer's attention, shared experts and LatentMoE's two latent
    # projections, not its fp32 router nor the routed experts (counted in ``expert``)
    latent = 2 * model.hidden_size * model.moe_latent_size if model.moe_latent_size else 0
    router = model.hidden_size * (model.num_experts_total if model.is_moe else 0)
    moe_linear = moe_layer_active_matmul_params(model) - (routed_matmul_params(model) - latent) - router
    linear = (dense_layers * dense_layer_matmul_params(model) + moe_layers * moe_linear) / t
    # Tied embeddings: with p > 1 the last stage keeps its own copy of the embedding matrix as
    # the LM head (Megatron-LM's shared embedding, synchronised by an all-reduce).
    head_params = c.lm_head if c.lm_head else np.where(mesh.pp > 1, c.embedding, 0)
    dense = dense + np.where(embedding, c.embedding / t, 0.0) + np.where(head, head_params / t + c.final_norm, 0.0)
    dense = dense + np.asarray(mtp) * mtp_projection_params(model) / t
    # A rank that runs MTP layers builds the embedding too, to embed the shifted tokens each MTP depth
    # reads (Megatron-Core GPTModel: `if self.pre_process or self.mtp_process: self.embedding = ...`):
    # a copy on the last stage where the first holds the original, beside an untied LM head (a tied
    # model's last stage already holds the embedding as its head)
    mtp_embedding = (np.asarray(mtp) > 0) & ~np.asarray(embedding) & ~(np.asarray(head) & (not c.lm_head))
    dense = dense + np.where(mtp_embedding, c.embedding / t, 0.0)
    experts_on_rank = c.moe_experts_per_layer / (mesh.ep * mesh.expert_tp)
    expert = moe_layers * experts_on_rank
    largest = np.maximum(
        largest_dense_layer(model) / t, np.where(moe_layers > 0, moe_non_expert / t + experts_on_rank, 0.0)
    )
    copies = per_schedule_constant(mesh.schedule, lambda s: s.parameter_copies)  # DualPipe keeps two
    return RankParams(dense=dense * copies, expert=expert * copies, largest_layer=largest, dense_linear=linear * copies)


def step_params(model: ModelSpec, mesh: MeshArrays, ranks: RankLayers) -> RankParams:
    """Per mesh and kind, the largest of the last rank's parameters (layers, MTP layers, LM head),
    the busiest other rank's and the first rank's with the embedding: what the slowest gradient
    reduction and optimizer step of the step's ranks handle. (Until 2026-12-08 the busiest other
    rank was taken with the embedding, a rank the plan's own split does not have: Llama-3-70B at tp
    8, pp 4, cp 2 reduced 21 layers and the embedding, 7.13 GB a step, where rank 0's 20 and the
    embedding are 6.81; a review.)"""
    on_every = np.ones(len(mesh), dtype=bool)
    staged = mesh.pp > 1

    def on_rank(decoders: np.ndarray, mtp: np.ndarray, embedding: np.ndarray, head: np.ndarray) -> RankParams:
        layers, moe = layers_with_mtp(model, decoders, mtp), moe_layers_of(model, decoders, mtp)
        return rank_params(model, mesh, layers, moe, mtp, embedding, head)

    last = on_rank(ranks.last, ranks.last_mtp, ~staged, on_every)
    body = on_rank(ranks.body, ranks.body_mtp, ~on_every, ~on_every)
    first = on_rank(ranks.first, ranks.first_mtp, staged, ~on_every)
    return RankParams(
        **{
            name: np.maximum(np.maximum(getattr(last, name), getattr(body, name)), getattr(first, name))
            for name in ("dense", "expert", "largest_layer", "dense_linear")
        }
    )


def linear_weight_bytes_per_param(
    job: JobSpec, mesh: MeshArrays, architecture: str | None, moe: bool = False
) -> np.ndarray:
    """Bytes a linear layer's weight holds per parameter at rest (columns): the 16-bit copy in
    16-bit training; under fp8, only its fp8 copies where they are the parameters
    (``fp8_parameters``), else the 16-bit copy plus the fp8 copies where the stack caches them for
    the step (``Stack.fp8_weight_cache``: Transformer Engine), else the 16-bit copy alone (torchao
    casts per use). ``fp8_weight_copies_bytes`` counts the copies."""
    w = np.full(len(mesh), job.weight_bytes_per_param)
    if job.dtype != "fp8":
        return w
    fp8 = fp8_weight_copies_bytes(job, architecture)
    cached = w + fp8 if job.software.fp8_weight_cache else w
    return np.where(fp8_parameters(job, mesh, moe), fp8, cached)


def model_state_bytes(
    job: JobSpec, mesh: MeshArrays, params: RankParams, architecture: str | None = None, moe: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, gradients, optimizer) bytes per GPU under the mesh's ZeRO stage. The optimizer's
    bytes hold the full-precision master copy; the weights are the copy the model computes with,
    which FSDP stacks keep only for the gathered layers under ZeRO-3
    (``Stack.sharded_weights_are_master``): 16-bit, its linears' under fp8 as
    ``linear_weight_bytes_per_param`` says (on a GPU of ``architecture``). Where a pipeline runtime
    holds the FSDP stage whole through the step (``mesh.pipeline_holds_fsdp_state``), weights and
    gradients are the whole stage's, the gradients in their reduce format."""
    dpc = (mesh.dp * mesh.cp).astype(float)
    edp = mesh.expert_dp.astype(float)
    z = mesh.zero_stage
    # a pipeline runtime that holds an FSDP stage whole through the step leaves it ZeRO-1's state
    held = pipeline_holds_fsdp_state(job, mesh)

    def shard(stage: int) -> tuple[np.ndarray, np.ndarray]:
        on = (z >= stage) & ~held if stage >= 2 else z >= stage
        return np.where(on, dpc, 1.0), np.where(on, edp, 1.0)

    w_d, w_e = shard(3)
    g_d, g_e = shard(2)
    o_d, o_e = shard(1)
    w = job.weight_bytes_per_param
    linear_w = linear_weight_bytes_per_param(job, mesh, architecture, moe)
    # the gathered working set and the own shard, their linear weights at linear_w (a gathered layer
    # is taken as all linear: its norms and biases are a rounding error)
    gathered = np.where((z >= 3) & ~held, 2.0 * params.largest_layer, 0.0) * linear_w
    own = (params.dense - params.dense_linear) / w_d * w + (params.dense_linear / w_d + params.expert / w_e) * linear_w
    # FSDP's shard is the optimizer's master copy (Stack.sharded_weights_are_master): only the
    # gathered working set is kept for compute
    own = np.where((z >= 3) & ~held & job.software.sharded_weights_are_master, 0.0, own)
    weights = own + gathered
    grads = (params.dense / g_d + params.expert / g_e) * job.gradient_bytes_per_param
    optimizer = (params.dense / o_d + params.expert / o_e) * job.optimizer_bytes_beside_weights_per_param
    return weights, grads, optimizer


def ep_overlap_extra_in_flight(job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """Stage-equivalents of activations EP overlap adds: Megatron's interleaved schedule warms up
    one more micro-batch chunk (megatron/core/pipeline_parallel/schedules.py:
    "if args.overlap_moe_expert_parallel_comm: num_warmup_microbatches = num_warmup_microbatches + 1"),
    1/v of a stage; without a pipeline the next micro-batch's forward runs beside this one's
    backward, one more micro-batch."""
    on = job.ep_comm_overlap & (mesh.ep > 1)
    return np.where(on, np.where(mesh.pp == 1, 1.0, 1.0 / mesh.virtual_stages), 0.0)


@dataclass(frozen=True)
class StageActivations:
    """A stage's activation bytes for one micro-batch through its layers, and what re-materialising
    a layer during backward adds to the peak under full recompute (columns)."""

    per_microbatch: np.ndarray
    recompute_buffer: np.ndarray


STAGE_RANKS = ("first", "second", "middle", "last")
"""The pipeline ranks ``peak_memory`` prices, each with the micro-batches its position holds
(``microbatches_in_flight``): the first (the embedding, the most in flight), rank 1 (its own
layers: where the first's are lighter, a MoE model's leading dense ones, it may hold more with one
micro-batch fewer), the busiest of ranks 1..p-2 (``RankLayers.middle``: at the first rank with
that many layers, an explicit layout's at rank 1), and the last (the LM head and loss); where
p <= 2 the two between hold nothing. The plan's own split and the even one give ranks 1..p-2 two
counts at most, so these bound every rank. Until 2026-12-07 the busiest other but the last was
priced with the first's micro-batches, an upper bound 2-6% over on pipelined meshes, whose extra
layers sit on the ranks nearest the last (a review against Megatron's 1F1B, where rank i holds
p - i: 70B at pp 8 +4.7%, DeepSeek-V3 at pp 16 +5.8%)."""


def stage_layers(
    model: ModelSpec, job: JobSpec, mesh: MeshArrays, rank: str, ranks: RankLayers | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(layers, MoE layers, MTP layers) on one of ``STAGE_RANKS``; p = 1: the one rank."""
    ranks = rank_layers(model, job, mesh) if ranks is None else ranks
    on_last = (mesh.pp == 1) | (rank == "last")
    first = rank == "first"
    decoders, mtp, _ = ranks.stage(rank, mesh.pp)
    moe = moe_layers_of(model, decoders, mtp)
    if first:  # the model's leading dense layers are the first rank's (DualPipe's rank 0 is priced as the busiest)
        leading = first_rank_leading_dense_layers(model, mesh, decoders)
        moe = np.where(on_last | is_dual(mesh), moe, moe - leading)
    elif rank in ("second", "middle"):  # those the plan's own split puts past rank 0's first chunk
        leading = ranks.second_dense if rank == "second" else ranks.middle_dense
        moe = np.where(on_last, moe, moe - leading)
    return layers_with_mtp(model, decoders, mtp), moe, mtp


@dataclass(frozen=True)
class LayerActivations:
    """Activation bytes per token of one dense and one MoE layer, as the mesh's recompute keeps
    them and as no recompute does (columns; ``activation_bytes_per_token_layer``), computed once
    and summed per stage by ``stage_activations``."""

    kept_dense: np.ndarray
    kept_moe: np.ndarray
    all_dense: np.ndarray
    all_moe: np.ndarray


def layer_activations(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> LayerActivations:
    """``LayerActivations`` of the mesh."""
    no_recompute = replace(mesh, recompute=np.zeros_like(mesh.recompute))
    kept_dense = activation_bytes_per_token_layer(model, job, mesh, False)  # full: the layer input
    all_dense = activation_bytes_per_token_layer(model, job, no_recompute, False)
    if not model.is_moe:
        return LayerActivations(kept_dense, kept_dense, all_dense, all_dense)
    return LayerActivations(
        kept_dense,
        activation_bytes_per_token_layer(model, job, mesh, True),
        all_dense,
        activation_bytes_per_token_layer(model, job, no_recompute, True),
    )


def stage_activations(
    model: ModelSpec,
    job: JobSpec,
    mesh: MeshArrays,
    layers: np.ndarray,
    moe_layers: np.ndarray,
    per_layer: LayerActivations | None = None,
) -> StageActivations:
    """``StageActivations`` of a stage's ``layers`` (``moe_layers`` of them MoE). Under full
    recompute of some layers (recompute_layers) the others keep everything."""
    per_layer = layer_activations(model, job, mesh) if per_layer is None else per_layer
    tokens = mesh.tokens_per_rank(job.seq_len)
    share = mesh.recomputed_share(layers)
    full = mesh.recompute == RECOMPUTE_FULL

    def kept(as_set: np.ndarray, everything: np.ndarray) -> np.ndarray:
        return np.where(full, share * as_set + (1.0 - share) * everything, as_set)

    dense, moe = kept(per_layer.kept_dense, per_layer.all_dense), kept(per_layer.kept_moe, per_layer.all_moe)
    # one layer re-materialised at a time during backward; recomputing only the first r layers of each
    # chunk, the chunk's other layers, which keep everything, have been freed by then for that
    # micro-batch, so the buffer adds to the peak only where fewer than one layer a chunk keeps
    # everything (a review, 2026-12-07: recomputing the first layer had come out above no recompute,
    # one layer's input more, for Llama-3 8B on GH200)
    kept_whole = np.maximum(np.asarray(layers, dtype=float) / mesh.virtual_stages, 1.0) * (1.0 - share)
    # every n-th layer (torchtitan) may wrap a chunk's last: backward re-materialises it first, while
    # every other layer still holds what it saved, so the buffer adds on top (a review, 2026-12-07:
    # 2.1 GiB left out of Llama-3 8B's 67.1 at full:16); priced so, an upper bound where it does not
    buffer = np.where(full, np.where(mesh.recompute_every > 0, 1.0, np.maximum(1.0 - kept_whole, 0.0)), 0.0)
    return StageActivations(
        per_microbatch=tokens * ((layers - moe_layers) * dense + moe_layers * moe) * offload_kept_share(mesh, layers),
        recompute_buffer=tokens * (per_layer.all_moe if model.is_moe else per_layer.all_dense) * buffer,
    )


OFFLOAD_RESIDENT_LAYERS = 2
"""Offloaded layers whose activations are on the GPU at once: Transformer Engine's offload handler
(``get_cpu_offload_context``, Megatron-Core's cpu_offloading with its default double buffering)
reloads the next group into a second buffer while backward runs the current one."""


HOST_MEMORY_RESERVE = 0.25
"""Share of a GPU's host memory offloaded activations may not fill: the operating system, the data
loader's workers and pinned buffers, and checkpoint staging (Megatron's asynchronous save copies
the model and optimizer state to host memory) live there too. A judgement call, not a
measurement."""


def host_offload_capacity_bytes(cluster: ClusterSpec) -> float:
    """Host memory one GPU's offloaded activations may fill: the profile's ``host_memory_gib`` less
    HOST_MEMORY_RESERVE; 0 where the profile states none (no offloading planned there)."""
    host = cluster.gpu.host_memory_bytes
    return 0.0 if host is None else host * (1.0 - HOST_MEMORY_RESERVE)


def offloaded_host_bytes(model: ModelSpec, job: JobSpec, mesh: MeshArrays, per_layer: LayerActivations) -> np.ndarray:
    """Host memory each mesh's offloaded activations fill per GPU: ``mesh.offload_layers`` layers
    of one micro-batch's saved activations (offloading runs with pp 1 and no recompute, so one
    micro-batch is in flight: its forward, then its backward), each layer the model's mean of its
    dense and MoE layers (``per_layer``: ``layer_activations`` of the mesh); 0 without offloading."""
    layers, moe = model.num_hidden_layers, model.num_moe_layers
    mean = ((layers - moe) * per_layer.all_dense + moe * per_layer.all_moe) / layers
    offloaded = np.minimum(mesh.offload_layers, layers)
    return np.where(offloaded > 0, mesh.tokens_per_rank(job.seq_len) * mean * offloaded, 0.0)


def offload_kept_share(mesh: MeshArrays, layers: np.ndarray) -> np.ndarray:
    """Share of a stage's activations that stays on the GPU when ``mesh.offload_layers`` of its
    ``layers`` go to host memory (``ParallelConfig.offload_layers``, pp 1): the others, plus
    ``OFFLOAD_RESIDENT_LAYERS`` of the offloaded in the reload buffers; 1 without offloading."""
    offloaded = np.minimum(mesh.offload_layers, layers)
    resident = np.minimum(offloaded, OFFLOAD_RESIDENT_LAYERS)
    return np.where(offloaded > 0, (layers - offloaded + resident) / np.maximum(layers, 1), 1.0)


def stage_memory(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    mesh: MeshArrays,
    m: np.ndarray,
    rank: str,
    ranks: RankLayers | None = None,
    per_layer: LayerActivations | None = None,
) -> StageMemory:
    """Memory of one of ``STAGE_RANKS``: the first stage (embedding, the most micro-batches in
    flight), rank 1, the busiest of ranks 1..p-2 (each with the micro-batches its rank holds),
    or the last stage (LM head, the loss's peak once per head: the stack's ``loss_bytes_per_logit``,
    counted from its loss code, eager or compiled; one micro-batch in flight unless GPipe), each
    with its own layers (``stage_layers``). With p = 1 all are one rank; under DualPipe and DualPipeV rank 0
    holds the first and the last stage, so both carry the embedding, the LM head and the logits."""
    ranks = rank_layers(model, job, mesh) if ranks is None else ranks
    both_ends = (mesh.pp == 1) | is_dual(mesh)
    position = ranks.stage(rank, mesh.pp)[2]
    on_first, on_last = both_ends | (rank == "first"), both_ends | (rank == "last")
    layers, moe_layers, mtp = stage_layers(model, job, mesh, rank, ranks)
    params = rank_params(model, mesh, layers, moe_layers, mtp, on_first, on_last)
    weights, grads, optimizer = model_state_bytes(job, mesh, params, cluster.gpu.architecture, model.is_moe)
    tokens = mesh.tokens_per_rank(job.seq_len)
    acts = stage_activations(model, job, mesh, layers, moe_layers, per_layer)
    # the EP overlap's extra warm-up chunk, within the step's micro-batches (Megatron-Core caps the
    # warm-up at all of them: 'are_all_microbatches_in_warmup')
    in_flight = np.minimum(
        microbatches_in_flight(m, mesh, rank=position) + ep_overlap_extra_in_flight(job, mesh),
        np.maximum(m, 1),
    )
    # Full recompute re-materialises one layer at a time during backward.
    activations = acts.per_microbatch * in_flight + acts.recompute_buffer
    heads = 1 + mtp_layers(model, job)
    logits = np.where(
        on_last, heads * tokens * model.vocab_size / mesh.tp * job.software.loss_bytes(job.loss_compiled, mesh.tp), 0.0
    )
    bound = (rank == "middle") & (mesh.layout_last >= 0) & (mesh.pp > 1)  # a layout's bound over its ranks between
    where = np.where(bound, -1, position)
    return StageMemory(
        weights=weights,
        gradients=grads,
        optimizer=optimizer,
        activations=activations,
        logits=logits,
        overhead=np.full(len(mesh), cluster.gpu.reserved_memory_bytes),
        rank=where.astype(np.int64),
    )


def peak_memory(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    mesh: MeshArrays,
    m: np.ndarray,
    ranks: RankLayers | None = None,
) -> StageMemory:
    """The most loaded GPU: per mesh, whichever of ``STAGE_RANKS`` needs most (the first rank with
    its own layers and the embedding; the busiest other rank had been priced with the embedding
    too, a GPU no pipeline has: Llama-3-70B at pp 4, v 8, split [20, 20, 21, 19], had counted 21
    layers and the embedding). A stack that recomputes every n-th layer is priced at its n
    (``pipeline.with_recompute_every``)."""
    mesh = with_recompute_every(model, job, mesh)
    ranks = rank_layers(model, job, mesh) if ranks is None else ranks
    per_layer = layer_activations(model, job, mesh)
    worst: StageMemory | None = None
    for rank in STAGE_RANKS:
        stage = stage_memory(model, cluster, job, mesh, m, rank, ranks=ranks, per_layer=per_layer)
        if worst is None:
            worst = stage
            continue
        worse = stage.total > worst.total
        worst = StageMemory(
            **{k: np.where(worse, getattr(stage, k), getattr(worst, k)) for k in StageMemory.__dataclass_fields__}
        )
    assert worst is not None
    return worst
