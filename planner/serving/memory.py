"""Memory per GPU of a serving layout and the concurrency its KV cache allows (ARCHITECTURE 9.3).

  weights      the rank's shard: attention, dense MLP and shared experts over tp (whole under
               attention DP), routed experts over tp (= ep x moe_tp), layers over pp, the
               embedding and LM head over tp (vocabulary-parallel) on their stages, at the weight
               format's bytes (embedding and LM head stay 16-bit: ModelOpt's FP8/NVFP4 recipes
               quantise the linear layers of the blocks only)
  activations  the peak of one iteration at the engine's token budget (guess, see
               ``activation_bytes``) and the sampler's fp32 logits of the running batch
  runtime      the engine's runtime reserve (CUDA context, cuBLAS workspaces, CUDA graphs) plus
               NCCL's buffers when the replica spans GPUs (not the profile's training reserve,
               whose allocator-fragmentation share does not apply to a KV cache allocated once)
  KV cache     what the engine's memory fraction leaves (engines/*.yaml memory_fraction_of)
max concurrency = floor(KV per GPU / one sequence's KV per GPU) (x tp under attention DP), capped
by the engine's max batch size per attention rank. A hybrid's sequence also holds the state of each
of its Mamba-2 layers (``sequence_bytes_per_gpu``), the same at any length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.schemas.base import GIB_BYTES
from planner.schemas.hardware import ClusterSpec
from planner.schemas.model import ModelSpec
from planner.serving.engine import EngineProfile
from planner.serving.kv import (
    sequence_kv_bytes_per_gpu,
    sequence_state_bytes_per_gpu,
    shared_page_sequence_bytes_per_gpu,
)
from planner.serving.layout import Layouts
from planner.serving.schemas import MemoryBreakdown

WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5625}
"""Bytes per stored weight: bf16 2, fp8 1 (per-tensor or per-channel scales negligible), fp4
0.5 + one fp8 scale per 16 values = 0.5625 (NVFP4, NVIDIA 'Introducing NVFP4', 2025: 16-element
micro-blocks with an E4M3 scale), what --weights-dtype fp4 quantizes to; an MXFP4 checkpoint served
in its own format is ``MXFP4_WEIGHT_BYTES``."""

MXFP4_WEIGHT_BYTES = 0.53125
"""Bytes per MXFP4 weight: 0.5 + one E8M0 scale byte per 32 values (OCP Microscaling Formats (MX)
Specification v1.0, 2023: block size 32, shared 8-bit exponent scale), gpt-oss's experts
(``ModelSpec.checkpoint_fp4_format``). A review (2026-12-07) found gpt-oss-120b on one H100 priced at
NVFP4's 0.5625: 3.6 GB more weights, a KV room of 63 sequences where about 100 fit."""


def weight_bytes(model: ModelSpec, weights_dtype: str) -> float:
    """Bytes per stored weight of ``model`` served in ``weights_dtype``: an MXFP4 checkpoint's own
    fp4 at its 32-value blocks, else ``WEIGHT_BYTES``."""
    if weights_dtype == "fp4" and model.checkpoint_weights_dtype == "fp4" and model.checkpoint_fp4_format == "mxfp4":
        return MXFP4_WEIGHT_BYTES
    return WEIGHT_BYTES[weights_dtype]


EMBEDDING_BYTES = 2.0
"""Embedding and LM head stay bf16 under ModelOpt FP8/NVFP4 (its default quantisation config
skips ``*lm_head*`` and the embedding is not a linear layer)."""


@dataclass(frozen=True)
class WeightParams:
    """Parameter counts by how they are sharded (whole model)."""

    attention: float
    dense: float  # dense MLPs, shared experts, routers, norms
    experts: float
    embedding: float
    lm_head: float


def weight_params(model: ModelSpec) -> WeightParams:
    """The model's parameters grouped by sharding (from ``cost.params.count_parameters``). A
    hybrid's Mamba-2 mixers shard their heads over tp as attention does (vLLM's MambaMixer2), so
    they join ``attention``; its layers hold one norm per block (``norms_per_layer``)."""
    c = model.parameter_counts
    n_moe = model.num_moe_layers
    return WeightParams(
        attention=float(model.blocks_of("*") * c.attention_per_layer + model.blocks_of("M") * c.mamba_per_layer),
        dense=float(
            model.blocks_of("-") * c.dense_mlp_per_layer
            + n_moe * (c.moe_shared_per_layer + c.moe_router_per_layer + c.moe_latent_per_layer)
            + model.num_hidden_layers * c.norms_per_layer
            + c.final_norm
        ),
        experts=float(n_moe * c.moe_experts_per_layer),
        embedding=float(c.embedding),
        lm_head=float(c.lm_head),
    )


def attention_weights_dtype(model: ModelSpec, weights_dtype: str) -> str:
    """The format the attention projections are served in: 16-bit where the checkpoint keeps them so
    (``ModelSpec.checkpoint_16bit_attention``: openai/gpt-oss's config.json quantization_config
    lists ``model.layers.*.self_attn`` in modules_to_not_convert beside mxfp4 experts) and the
    weights are served in that checkpoint's format; else ``weights_dtype``, as a checkpoint
    quantized to another format quantizes them too. Keyed on the format alone: a re-quantization to
    the same format (an NVFP4 gpt-oss from ModelOpt) is priced as the published checkpoint, 16-bit
    attention included, the slower case; the router, also 16-bit in gpt-oss's, stays at the blocks'
    format (13 million parameters, negligible)."""
    if model.checkpoint_16bit_attention and weights_dtype == model.checkpoint_weights_dtype:
        return "bf16"
    return weights_dtype


def block_weight_bytes_per_gpu(model: ModelSpec, lay: Layouts, weights_dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, routed-expert) weight bytes of the transformer blocks one GPU of a stage holds,
    the attention projections in ``attention_weights_dtype``."""
    w = weight_params(model)
    b = weight_bytes(model, weights_dtype)
    b_attention = weight_bytes(model, attention_weights_dtype(model, weights_dtype))
    replicated = np.where(lay.attention_dp, 1.0, 1.0 / lay.tp)
    non_expert = (w.attention * b_attention + w.dense * b) * replicated / lay.pp
    experts = w.experts / lay.tp * b / lay.pp
    return non_expert, experts


def vocab_shares(engine: EngineProfile, lay: Layouts) -> tuple[np.ndarray, np.ndarray]:
    """(embedding, LM head) share one GPU holds: 1/tp (vocab-parallel), except under attention DP,
    where every rank runs the embedding whole (vLLM's DP ranks are engines of TP 1; TensorRT-LLM and
    SGLang replicate it with the attention) and the LM head whole where the engine does not split it
    over the attention-DP group (``EngineProfile.lm_head_tp_under_attention_dp``)."""
    whole = np.asarray(lay.attention_dp, dtype=bool)
    head_whole = whole & (not engine.lm_head_tp_under_attention_dp)
    return np.where(whole, 1.0, 1.0 / lay.tp), np.where(head_whole, 1.0, 1.0 / lay.tp)


def lm_head_matrix_params(model: ModelSpec) -> float:
    """Parameters of the matrix the LM head multiplies by: its own, or tied, the embedding's token
    table (without learned positions)."""
    return float(model.parameter_counts.lm_head or model.vocab_size * model.hidden_size)


def embedding_and_head_bytes_per_gpu(
    model: ModelSpec, engine: EngineProfile, lay: Layouts
) -> tuple[np.ndarray, np.ndarray]:
    """(embedding, untied LM head) bytes one GPU holds, at ``vocab_shares``. A tied head is the
    embedding's matrix and adds nothing."""
    w = weight_params(model)
    embedding_share, head_share = vocab_shares(engine, lay)
    return w.embedding * embedding_share * EMBEDDING_BYTES, w.lm_head * head_share * EMBEDDING_BYTES


def head_weight_bytes_per_gpu(model: ModelSpec, engine: EngineProfile, lay: Layouts) -> np.ndarray:
    """Embedding + LM head bytes on the busiest stage: both when pp = 1, the larger otherwise."""
    embedding, head = embedding_and_head_bytes_per_gpu(model, engine, lay)
    return np.where(lay.pp > 1, np.maximum(embedding, head), embedding + head)


def lm_head_read_bytes_per_gpu(model: ModelSpec, engine: EngineProfile, lay: Layouts) -> np.ndarray:
    """Bytes of the matrix the LM head multiplies by (``lm_head_matrix_params``), which every decode
    round reads on the last stage, at the share the GPU holds: the untied head's, or the embedding's
    a tied head shares (a tied model's logits had been priced as reading no weights)."""
    embedding_share, head_share = vocab_shares(engine, lay)
    share = head_share if model.parameter_counts.lm_head else embedding_share
    return lm_head_matrix_params(model) * share * EMBEDDING_BYTES


NCCL_BUFFERS_GIB = 0.5
"""Guess: NCCL channel buffers of a serving replica's one or two communicators (TP, PP), far less
than training's several communicators with NVLS buffers."""

ACTIVATION_WIDTH_FACTOR = 2.0
"""Guess: live activation values per token in an iteration's peak, in units of (h + 2 f_local):
input, residual, the attention output and the MLP's gate/up outputs; vLLM measures this peak
with a dummy forward at max_num_batched_tokens (gpu_worker.determine_available_memory)."""


def activation_bytes(model: ModelSpec, engine: EngineProfile, lay: Layouts) -> np.ndarray:
    """Peak activation memory of one iteration at the engine's token budget (guess, see
    ACTIVATION_WIDTH_FACTOR)."""
    f = max(model.intermediate_size, (model.num_experts_per_tok or 1) * model.expert_intermediate_size)
    width = model.hidden_size + 2.0 * f / lay.tp
    tokens = engine.max_num_batched_tokens
    return ACTIVATION_WIDTH_FACTOR * tokens * width * 2.0 / lay.pp


def logits_bytes(model: ModelSpec, lay: Layouts, batch: np.ndarray) -> np.ndarray:
    """fp32 logits of one token per running sequence (the sampler's buffer), vocabulary over tp."""
    return batch * model.vocab_size / lay.tp * 4.0


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory (bytes, columns) and the concurrency the KV cache allows per replica."""

    weights_bytes: np.ndarray
    activations_bytes: np.ndarray
    runtime_bytes: np.ndarray
    kv_cache_bytes: np.ndarray
    sequence_kv_bytes: np.ndarray  # one sequence's KV (and Mamba-2 state) per GPU at the reserved context
    max_concurrency: np.ndarray  # sequences per replica

    @property
    def total_bytes(self) -> np.ndarray:
        return self.weights_bytes + self.activations_bytes + self.runtime_bytes + np.maximum(self.kv_cache_bytes, 0)

    @property
    def fits(self) -> np.ndarray:
        return self.max_concurrency >= 1

    def breakdown(self, i: int) -> MemoryBreakdown:
        """Layout ``i``'s memory per GPU by kind, as a candidate reports it."""
        return MemoryBreakdown(
            weights=float(self.weights_bytes[i]),
            kv_cache=float(max(self.kv_cache_bytes[i], 0.0)),
            activations=float(self.activations_bytes[i]),
            runtime=float(self.runtime_bytes[i]),
        )


def sequence_bytes_per_gpu(
    model: ModelSpec, engine: EngineProfile, lay: Layouts, kv_dtype: str, ssm_state_dtype: str, context: np.ndarray
) -> np.ndarray:
    """Cache bytes one sequence of ``context`` tokens holds per GPU: its KV pages, and a hybrid's
    Mamba-2 state, in the engine's block pool (``kv.shared_page_sequence_bytes_per_gpu``) or beside
    it (``kv.sequence_state_bytes_per_gpu``) as ``EngineProfile.mamba_state`` says."""
    if model.blocks_of("M") and engine.mamba_state == "shared_pages":
        return shared_page_sequence_bytes_per_gpu(
            model, kv_dtype, ssm_state_dtype, context, engine.kv_block_tokens, lay.tp, lay.pp, lay.attention_dp
        )
    kv = sequence_kv_bytes_per_gpu(
        model, kv_dtype, context, engine.kv_block_tokens, lay.tp, lay.pp, lay.attention_dp, engine.chunked_kv
    )
    return kv + sequence_state_bytes_per_gpu(model, ssm_state_dtype, lay.tp, lay.pp, lay.attention_dp)


def reserved_context(engine: EngineProfile, input_len: float, output_len: float) -> float:
    """Tokens a running sequence holds KV for, on average over the running set: prompt + all
    output when the engine reserves at admission ('full'); prompt + half the output when it
    allocates as tokens are generated ('on_demand': sequences are spread evenly over their
    decode, Little's law)."""
    return input_len + (output_len if engine.kv_reservation == "full" else output_len / 2.0)


def plan_memory(
    model: ModelSpec,
    cluster: ClusterSpec,
    engine: EngineProfile,
    lay: Layouts,
    weights_dtype: str,
    kv_dtype: str,
    context_tokens: float,
    ssm_state_dtype: str = "bf16",
) -> MemoryPlan:
    """Memory per GPU and max concurrency per replica for sequences holding ``context_tokens``
    (and, in a hybrid, each Mamba-2 layer's state in ``ssm_state_dtype``)."""
    non_expert, experts = block_weight_bytes_per_gpu(model, lay, weights_dtype)
    weights = non_expert + experts + head_weight_bytes_per_gpu(model, engine, lay)
    runtime = (engine.runtime_reserve_gib + np.where(lay.gpus_per_replica > 1, NCCL_BUFFERS_GIB, 0.0)) * GIB_BYTES
    capacity = cluster.gpu.hbm_capacity_bytes
    context = np.full(len(lay), context_tokens)
    seq = sequence_bytes_per_gpu(model, engine, lay, kv_dtype, ssm_state_dtype, context)

    def kv_room(acts: np.ndarray) -> np.ndarray:
        used = weights + acts + runtime
        fraction = engine.memory_fraction(lay.tp)
        if engine.memory_fraction_of == "free":
            return fraction * (capacity - used)
        if engine.memory_fraction_of == "static":
            # SGLang: the KV pool is what is free after loading the weights less (1 - f) of what was free
            # at start (model_runner profile_max_num_token: rest_memory = available_gpu_memory -
            # total_gpu_memory * (1 - mem_fraction_static)), so f x (HBM - runtime) - weights, the
            # activations (and CUDA graphs, captured later) in the rest; the runtime is taken as in use
            # at start (a review, 2026-12-07: 70B TP8 on an H100 had taken its activations out of the
            # pool too, 45.6 GiB of KV where 46.5 fit)
            return fraction * (capacity - runtime) - weights
        return fraction * capacity - used

    # the logits buffer holds the batch the KV cache allows (capped by the engine): one pass of
    # the fixed point, sized from the room left without it
    acts = activation_bytes(model, engine, lay)
    first = np.minimum(np.floor(np.maximum(kv_room(acts), 0.0) / seq), engine.max_batch_size)
    acts = acts + logits_bytes(model, lay, first)
    kv = kv_room(acts)
    # the engine's max batch is each attention-DP rank's where each schedules apart (vLLM, TensorRT-LLM),
    # else the replica's (SGLang divides its max_running_requests over the DP ranks)
    fits = np.floor(np.maximum(kv, 0.0) / seq)
    ranks = np.where(lay.attention_dp, lay.tp, 1.0)
    if engine.scheduler_per_attention_dp_rank:
        concurrency = np.minimum(fits, engine.max_batch_size) * ranks
    else:
        concurrency = np.minimum(fits * ranks, engine.max_batch_size)
    return MemoryPlan(weights, acts, runtime, kv, seq, concurrency)
