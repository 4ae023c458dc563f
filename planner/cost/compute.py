"""Compute time of one micro-batch on one pipeline stage (ARCHITECTURE 8.4).

Each GEMM is priced with a roofline (Williams, Waterman and Patterson 2009, 'Roofline: An
Insightful Visual Performance Model'): time = max(2*M*N*K / achievable rate, bytes moved /
achieved HBM bandwidth), bytes = (M*K + K*N + M*N) elements. The achievable rate is peak x the
GPU's measured GEMM efficiency (a curve over GEMM size where the profile has one) x the wave
utilization of this output shape on the GPU's SMs, so small and skinny GEMMs (large t, small
b*s) run below peak. Backward runs two GEMMs per forward GEMM (input and weight gradients) of
the same FLOPs, priced the same. Checked against measured GEMMs in tests/test_compute.py.

Attention: flash kernels at the profile's measured attention efficiency (causal half, the
FlashAttention FLOP accounting); unfused attention (Megatron before 2023) as two batched GEMMs on
the roofline plus the softmax/dropout traffic. Element-wise work (norms, residual adds,
activation functions, RoPE) is memory-bound at the measured streaming bandwidth; its traffic is
a first-order count of the tensors each op reads and writes, not a measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.cost.flops import (
    attended_keys,
    attention_dims,
    attention_kernel_for,
    chunked_keys,
    flash_attention_runs,
    mamba_scan_flops_per_token_fwd,
)
from planner.cost.memory import kv_heads_per_rank
from planner.cost.params import mamba_in_proj_width
from planner.cost.recompute import recomputed_gemms, recomputed_ops, recomputes_core
from planner.cost.routing import moe_load_factor
from planner.mesh import RECOMPUTE_SELECTIVE, MeshArrays
from planner.schemas.hardware import BYTES_PER_ELEMENT, FLASH_FWD_BWD_FLOPS, GPU, NON_TN_FP8_ARCHITECTURES, ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec

CAUSAL_ATTENTION_FRACTION = 0.5
"""Causal flash attention computes the lower triangle of the s x s score matrix: half the square."""


FLASH_REFERENCE_TOKENS = 16384
"""Sequence length at which the profiles' flash-attention efficiencies are read: the longest the
FlashAttention-2/3 papers benchmark (their figures rise with length and level off there)."""

FLASH_HALF_RATE_TOKENS = 512
"""Sequence length (per kernel call) at which a flash kernel runs at half its long-sequence rate:
estimate from the shape of the FlashAttention-2 paper's A100 curves (Dao 2023, Figures 4-5:
forward+backward throughput climbs from about half its 16K figure at 512 tokens to within a
few percent of it by 4-8K), the per-call setup and the half-empty causal diagonal tiles being
amortised over more tiles as the sequence grows. Not a measurement of any one kernel."""


def flash_length_factor(tokens: np.ndarray) -> np.ndarray:
    """A flash kernel's rate at ``tokens`` per call relative to its rate at
    ``FLASH_REFERENCE_TOKENS``: s/(s + s_half), normalised at the reference length."""
    ramp = tokens / (tokens + FLASH_HALF_RATE_TOKENS)
    return ramp / (FLASH_REFERENCE_TOKENS / (FLASH_REFERENCE_TOKENS + FLASH_HALF_RATE_TOKENS))


GEMM_TILE = (256, 128)
"""Output tile (rows x columns) of the GEMM kernels priced here: the largest and most efficient
of the typical cuBLAS tiles (NVIDIA, 'Matrix Multiplication Background User's Guide',
DU-09799-001, section 2.3). cuBLAS picks smaller tiles for small outputs, so the quantization
below is an upper bound on the waste there; hipBLASLt on MI300X is priced the same way."""


def wave_utilization(
    m_rows: np.ndarray, n: np.ndarray, compute_units: int | None, concurrent: np.ndarray | float = 1.0
) -> np.ndarray:
    """Share of the SMs' tile slots a GEMM's output fills (ibid., section 3: tile and wave
    quantization): M*N / (waves * units * tile area), waves = ceil(ceil(M/256)*ceil(N/128) / units).
    A 2048 x 4608 output on A100's 108 SMs is 288 tiles, 3 waves of 108: 89% utilized.
    ``concurrent`` equal GEMMs running at once on separate streams fill the waves together (their
    tiles counted jointly): a MoE layer's local experts under Transformer Engine's grouped linear
    (``Stack.grouped_gemm_streams``). 4 experts of 256 x 1536 on a B200's 148 SMs are 48 tiles in
    one wave (32%), where one alone fills 12 of them (8%)."""
    if compute_units is None:
        return np.ones_like(np.asarray(m_rows, dtype=float))
    rows, cols = GEMM_TILE
    tiles = concurrent * np.ceil(m_rows / rows) * np.ceil(n / cols)
    waves = np.maximum(np.ceil(tiles / compute_units), 1.0)
    return (concurrent * m_rows * n) / (waves * compute_units * rows * cols)


def gemm_s(
    m_rows: np.ndarray,
    n: np.ndarray,
    k: np.ndarray,
    gpu: GPU,
    peak_flops_per_s: float,
    bytes_per_element: float,
    efficiency_scale: float = 1.0,
    concurrent: np.ndarray | float = 1.0,
) -> np.ndarray:
    """Roofline time of an (M x K) @ (K x N) GEMM: the larger of its FLOPs at the achievable rate
    (the GPU's size-dependent efficiency times ``efficiency_scale``, for the format and sustained
    clocks, times this shape's wave utilization with ``concurrent`` such GEMMs sharing the SMs)
    and its operand traffic at the achieved HBM bandwidth; the time is each GEMM's share of the
    concurrent group's."""
    flops = 2.0 * m_rows * n * k
    traffic = (m_rows * k + k * n + m_rows * n) * bytes_per_element
    efficiency = gpu.gemm_efficiency_at(flops) * efficiency_scale
    rate = peak_flops_per_s * efficiency * wave_utilization(m_rows, n, gpu.compute_units, concurrent)
    return np.maximum(flops / rate, traffic / gpu.achieved_hbm_bytes_per_s)


def gemm_on(cluster: ClusterSpec, job: JobSpec) -> Callable[..., np.ndarray]:
    """``gemm_s`` bound to the cluster's GPU and the job's matmul format, at the clocks a training
    run sustains (``GPU.sustained``): g(M, N, K) -> seconds."""
    gpu = cluster.gpu
    peak, elem = gpu.peak_flops_per_s(job.dtype), BYTES_PER_ELEMENT[job.dtype]
    scale = gpu.gemm_efficiency_ratio(job.dtype, job.fp8_scaling) * gpu.sustained

    def g(
        m_rows: np.ndarray, n: np.ndarray | float, k: np.ndarray | float, concurrent: np.ndarray | float = 1.0
    ) -> np.ndarray:
        return gemm_s(np.asarray(m_rows), np.asarray(n), np.asarray(k), gpu, peak, elem, scale, concurrent)

    return g


def attention_core_forward_s(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays, recompute: bool = False
) -> np.ndarray:
    """Forward QK^T and AV of one layer on one rank: 2 * (b*s/c) queries * s keys * (a/t) heads *
    (d_qk + d_v) FLOPs at the GEMM efficiency and the 16-bit rate (attention runs in 16-bit even
    in fp8 training). CP rings in the other ranks' keys.

    Flash attention (Dao et al. 2022) skips the masked half of the causal square and keeps the
    scores on chip. Without it (Megatron-LM before 2023) the full square is computed and then
    masked, as two batched GEMMs per head whose s x s score matrix goes through HBM; with
    K = d_head they are memory-bound on the roofline (2048 x 2048 x 128: 114 FLOP per byte,
    below A100's ridge of 153), so they are priced at max(FLOPs, bytes) like any GEMM.
    ``recompute`` prices the forward pass alone (what selective recompute runs again). The
    unfused path computes the whole square whatever the mask, sliding windows included.
    """
    d_qk, d_v = attention_dims(model)
    gpu = cluster.gpu
    queries = mesh.tokens_per_rank(job.seq_len)
    keys = job.seq_len
    heads = model.num_attention_heads / mesh.tp
    flops = 2.0 * queries * keys * heads * (d_qk + d_v)
    if flash_attention_runs(model, job):
        # Flash kernels are benchmarked as forward + backward = 3.5x the forward FLOPs (backward
        # 2.5x: it recomputes the scores) at the efficiency of the stack's kernel (FlashAttention-2
        # or the GPU's best fused kernel) as the stack runs it (its fitted attention scale), at
        # sustained clocks and at the length of one call (CP splits it); the step multiplies every layer's
        # forward time by 3, so the forward carries 3.5/3 of its FLOP time.
        # A sliding-window layer (``model.sliding_window``) attends ``attended_keys`` per query
        # instead of the causal half, at the rate of a call as long as its window (each query
        # tile meets a window's worth of keys); the layer's time is the average over its kinds.
        # The figure is read at head dim 128; the exponentials make smaller heads slower per FLOP
        # and larger ones (MLA's 192) faster (``GPU.attention_efficiency_at``).
        efficiency = (
            gpu.attention_efficiency_at(attention_kernel_for(model, job), d_qk, d_v, forward_only=recompute)
            * gpu.sustained
            * job.software.attention_scale
        )
        rate = gpu.peak_flops_per_s("bf16") * efficiency
        share = 1.0 if recompute else FLASH_FWD_BWD_FLOPS / 3.0
        full = flops * CAUSAL_ATTENTION_FRACTION / (rate * flash_length_factor(job.seq_len / mesh.cp))
        sliding = model.num_sliding_layers / model.num_hidden_layers
        chunked = model.num_chunked_layers / model.num_hidden_layers
        if not sliding and not chunked:
            return full * share
        window = float(model.sliding_window or job.seq_len)
        windowed = flops * attended_keys(job.seq_len, model.sliding_window) / keys
        windowed = windowed / (rate * flash_length_factor(np.minimum(window, job.seq_len / mesh.cp)))
        # a chunked layer (Llama 4) runs the causal mask within each chunk, one call per chunk: the
        # causal layer's time times its share of the keys, at the rate of a chunk-long call (CP > 1
        # over more than one chunk is refused, constraints 'chunked_attention_cp')
        chunk = float(model.attention_chunk_size or job.seq_len)
        in_chunks = chunked_keys(job.seq_len, int(chunk)) / attended_keys(job.seq_len, None)
        chunk_rate = rate * flash_length_factor(np.minimum(chunk, job.seq_len / mesh.cp))
        chunk_time = flops * CAUSAL_ATTENTION_FRACTION * in_chunks / chunk_rate
        return ((1.0 - sliding - chunked) * full + sliding * windowed + chunked * chunk_time) * share
    rate = gpu.peak_flops_per_s("bf16") * gpu.gemm_efficiency * gpu.sustained
    # Per head, scores (q x s) from Q (q x d_qk) and K (s x d_qk); output (q x d_v) from the
    # scores and V (s x d_v): 2-byte elements, batched over the micro-batch's sequences.
    sequences = mesh.micro_batch_size
    q = queries / sequences
    elements = sequences * heads * ((q * d_qk + keys * d_qk + q * keys) + (q * keys + keys * d_v + q * d_v))
    return np.maximum(flops / rate, 2.0 * elements / gpu.achieved_hbm_bytes_per_s)


SINK_BYTES_PER_SCORE = {"unfused": 5.0, "local": 33.0}
"""HBM bytes per score that attention sinks add to the unfused softmax's 4, forward, by the path
that runs them: 'local' where the stack's ``sink_attention`` says so, else 'unfused' (a stack that
runs sinks fused falls back to it when the job turns flash attention off). 'unfused', Transformer
Engine 2.9's UnfusedDotProductAttention
(attention/dot_product_attention/backends.py): it concatenates the sink column to the bf16 scores
(``torch.cat``: read 2 + write 2) and masks them with an explicit boolean mask padded by one
column (``F.pad(attention_mask, (0, 1))``, attn_mask_type 'arbitrary': read 1) before its softmax,
then drops the column as a view: 5. 'local', Megatron-Core 0.15's own DotProductAttention: its
FusedScaleMaskSoftmax takes the fused kernel only without an offset, so with sinks it runs
``forward_torch_softmax`` (core/fusions/fused_softmax.py) in fp32: cast up (read 2, write 4),
the causal mask (``attention_mask_func``'s in-place masked_fill: 4 + 1 + 4; no scaling pass, the
scale is in the score GEMM unless query-key layer scaling is on), ``SoftmaxOne``'s concatenation
(4 + 4) and softmax (4 + 4), cast down (4 + 2): 37 in all, 33 beyond the fused softmax's 4.
Counts of the tensors touched, not measurements; backward is priced as twice the forward, as for
every layer term."""


def unfused_softmax_forward_s(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """Without a fused attention kernel the (a/t) score matrices of s keys per token go through
    HBM between the two GEMMs: softmax reads and writes them (2 + 2 bytes), dropout writes a mask
    (1) and reads and writes the probabilities again (2 + 2): 9 bytes per score with dropout, 4
    without (Megatron-LM's fused scale-mask-softmax is one read and one write). Attention sinks
    add ``SINK_BYTES_PER_SCORE`` of the stack's path. Zero with flash attention. Selective
    recompute runs this again with the attention core."""
    if flash_attention_runs(model, job):
        return np.zeros(len(mesh))
    # Megatron's own attention where the stack runs sinks there; else Transformer Engine's unfused
    # path, which also serves a stack that runs them fused when the job turns flash attention off
    path = "local" if job.software.sink_attention == "local" else "unfused"
    sinks = SINK_BYTES_PER_SCORE[path] if model.attention_sinks else 0.0
    per_score = (9.0 if job.dropout else 4.0) + sinks
    scores = mesh.tokens_per_rank(job.seq_len) * (model.num_attention_heads / mesh.tp) * job.seq_len
    return scores * per_score / cluster.gpu.achieved_hbm_bytes_per_s


@dataclass(frozen=True)
class Gemm:
    """One GEMM of a layer: (M x K) @ (K x N) per rank and micro-batch, run ``count`` times per
    forward pass (columns of the mesh, or scalars)."""

    name: str
    m_rows: np.ndarray
    n: np.ndarray
    k: np.ndarray
    count: np.ndarray | float = 1.0
    concurrent: np.ndarray | float = 1.0  # of the ``count``, how many run at once (sharing the SMs)


def layer_gemms(model: ModelSpec, job: JobSpec, mesh: MeshArrays, moe: bool) -> list[Gemm]:
    """The GEMMs of one layer's forward on one rank for one micro-batch, Megatron-LM's
    column/row-parallel split (Shoeybi et al. 2019, section 3): QKV (or MLA's low-rank
    projections), attention output, and the MLP; MoE layers run the router, E/e local experts
    (each on its share of the routed tokens on the busiest expert-parallel rank,
    ``routing.moe_load_factor`` x the even share; ``concurrent``: as many at once as the stack's
    grouped linear runs, ``Stack.grouped_gemm_streams``, all of them for one grouped kernel) and
    the shared experts. A hybrid model's layer holds its kind's blocks (``ModelSpec.layer_kind``),
    each block's GEMMs counted by its share; a Mamba-2 mixer runs in_proj column-parallel (z, x, B,
    C, dt split by heads and groups over t) and out_proj row-parallel (Megatron-Core MambaMixer)."""
    h = model.hidden_size
    t = mesh.tp.astype(float)
    kind = model.layer_kind(moe)
    tokens = mesh.tokens_per_rank(job.seq_len)
    mats_in = 2.0 if model.is_gated_mlp else 1.0
    out: list[Gemm] = []
    if kind.attention:
        out += attention_gemms(model, mesh, tokens, kind.attention, mla_down_tokens(job, mesh, tokens))
    if kind.mamba:
        d_inner = float(model.mamba_inner_size)
        out.append(Gemm("mamba.in_proj", tokens, mamba_in_proj_width(model) / t, np.asarray(float(h)), kind.mamba))
        out.append(Gemm("mamba.out_proj", tokens, np.asarray(float(h)), d_inner / t, kind.mamba))
    if kind.mlp:
        f = model.intermediate_size
        out.append(Gemm("mlp.in", tokens, mats_in * f / t, np.asarray(float(h)), kind.mlp))
        out.append(Gemm("mlp.out", tokens, np.asarray(float(h)), f / t, kind.mlp))
    if not moe:
        return out
    experts, top_k = model.num_experts_total, model.num_experts_per_tok or 0
    # the busiest expert-parallel rank's share: even routing x the job's load factor (the
    # capacity factor under token drop, the load imbalance of dropless routing)
    routed_rows = tokens / t * top_k * mesh.ep * mesh.expert_tp / experts * moe_load_factor(job, mesh, model)
    width = model.expert_intermediate_size / mesh.expert_tp
    local_experts = experts / mesh.ep
    d = np.asarray(float(model.expert_input_size))  # the latent under LatentMoE
    out.append(Gemm("moe.router", tokens / t, np.asarray(float(experts)), np.asarray(float(h))))
    if model.moe_latent_size:  # fc1_latent_proj before the dispatch, fc2_latent_proj after the combine
        out.append(Gemm("moe.latent_down", tokens / t, d, np.asarray(float(h))))
        out.append(Gemm("moe.latent_up", tokens / t, np.asarray(float(h)), d))
    streams = job.software.grouped_gemm_streams
    together = local_experts if streams is None else np.minimum(local_experts, float(streams))
    out.append(Gemm("moe.expert_in", routed_rows, mats_in * width, d, local_experts, together))
    out.append(Gemm("moe.expert_out", routed_rows, d, width, local_experts, together))
    shared = model.shared_expert_width
    if shared:
        out.append(Gemm("moe.shared_in", tokens, mats_in * shared / t, np.asarray(float(h))))
        out.append(Gemm("moe.shared_out", tokens, np.asarray(float(h)), shared / t))
    return out


def mla_down_tokens(job: JobSpec, mesh: MeshArrays, tokens: np.ndarray) -> np.ndarray:
    """Tokens MLA's down-projections run on per rank: Megatron-Core's duplicated q_a and kv_a take the
    rank's sequence shard under sequence parallelism (1/t of the tokens) and the whole sequence
    without it; torchtitan's take the gathered attention input (``Stack.tp_module_plan``)."""
    if job.software.tp_module_plan == "torchtitan":
        return tokens
    return np.where(mesh.sequence_parallel, tokens / mesh.tp, tokens)


def attention_gemms(
    model: ModelSpec, mesh: MeshArrays, tokens: np.ndarray, count: float, down_tokens: np.ndarray | None = None
) -> list[Gemm]:
    """The attention block's GEMMs (``layer_gemms``), each run ``count`` times per layer; MLA's
    down-projections on ``down_tokens`` (``mla_down_tokens``; default ``tokens``)."""
    down = tokens if down_tokens is None else down_tokens
    h, a = model.hidden_size, model.num_attention_heads
    t = mesh.tp.astype(float)
    d_qk, d_v = attention_dims(model)
    kv = kv_heads_per_rank(model, t)
    out: list[Gemm] = []
    if model.is_mla:
        # DeepSeek MLA (Megatron-Core MLASelfAttention): the down-projections q_a (h -> r_q) and
        # kv_a (h -> r_kv + d_rope) are replicated on every TP rank; the up-projections q_b and
        # kv_b are column-parallel over heads.
        r_q, r_kv = model.q_lora_rank, model.kv_lora_rank or 0
        d_nope, d_rope = model.qk_nope_head_dim or 0, model.qk_rope_head_dim or 0
        if r_q:
            out += [Gemm("attn.q_a", down, np.asarray(float(r_q)), np.asarray(float(h)), count)]
            out += [Gemm("attn.q_b", tokens, a * d_qk / t, np.asarray(float(r_q)), count)]
        else:
            out.append(Gemm("attn.q", tokens, a * d_qk / t, np.asarray(float(h)), count))
        out.append(Gemm("attn.kv_a", down, np.asarray(float(r_kv + d_rope)), np.asarray(float(h)), count))
        out.append(Gemm("attn.kv_b", tokens, a * (d_nope + d_v) / t, np.asarray(float(r_kv)), count))
    else:
        out.append(Gemm("attn.qkv", tokens, a * d_qk / t + kv * (d_qk + d_v), np.asarray(float(h)), count))
    out.append(Gemm("attn.out", tokens, np.asarray(float(h)), a * d_v / t, count))
    return out


def lm_head_gemm(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> Gemm:
    """The vocab-parallel LM head: tokens x (V/t) x h per rank and micro-batch."""
    tokens = mesh.tokens_per_rank(job.seq_len)
    return Gemm("lm_head", tokens, model.vocab_size / mesh.tp, np.asarray(float(model.hidden_size)))


@dataclass(frozen=True)
class LayerForward:
    """One layer's forward on one rank for one micro-batch, by kind of work (seconds, columns)."""

    gemm_s: np.ndarray
    residual_gemm_s: np.ndarray  # the part of gemm_s in ``RESIDUAL_OUTPUT_GEMMS``
    core_s: np.ndarray  # the attention core (flash: carrying 3.5/3 of its forward FLOP time)
    scan_s: np.ndarray  # Mamba-2's SSD scan, carrying its backward (hybrid models; zero otherwise)
    elementwise_s: np.ndarray
    casts_s: np.ndarray
    softmax_s: np.ndarray  # unfused softmax/dropout traffic (zero with flash attention)
    gemms: dict[str, np.ndarray]  # gemm_s by ``layer_gemms`` name
    elementwise: dict[str, np.ndarray]  # elementwise_s by op: norms, residual, *_activation, rope, permute,
    # expert_bias, mamba_conv, mamba_gate, mamba_layout

    @property
    def total_s(self) -> np.ndarray:
        return self.gemm_s + self.core_s + self.scan_s + self.elementwise_s + self.casts_s + self.softmax_s


def token_reorders(model: ModelSpec, mesh: MeshArrays) -> np.ndarray:
    """Copies of the routed tokens each direction of a MoE layer makes: dispatch permutes them by
    destination and combine restores the order (1 each); where an expert-parallel rank holds more
    than one expert, the tokens an all-to-all brings arrive ordered by source rank and are sorted
    into expert order after it, and back before the combine's (2 each). Megatron-Core
    MoEAlltoAllTokenDispatcher (token_dispatcher.py, 0.15): "if self.num_local_experts > 1: ...
    sort_chunks_by_idxs(global_input_tokens, self.num_global_tokens_per_local_expert.ravel(),
    self.sort_input_by_local_experts, ...)" after the dispatch all-to-all and with
    restore_output_by_local_experts before the combine's (fused or not, a read and a write of the
    routed tokens); torchtitan's ExpertParallel likewise permutes the received tokens by local
    expert (expert_parallel.py ``_permute`` after its all-to-all, ``_unpermute`` before)."""
    return np.where((mesh.ep > 1) & (local_experts(model, mesh) > 1), 2.0, 1.0)


GLU_BYTES_PER_ELEMENT = 6.0
"""HBM bytes per element of the MLP width that a fused gated activation moves in one pass: reads gate
and up (2 + 2 bytes in bf16), writes their product (2). A count; the non-gated activation reads and
writes one (4). Backward is priced as two passes, as for every layer term."""


def activation_bytes(model: ModelSpec) -> float:
    """HBM bytes per element of the MLP width of one activation pass, by the count:
    ``GLU_BYTES_PER_ELEMENT`` for a gated MLP, else a read and a write (4)."""
    return GLU_BYTES_PER_ELEMENT if model.is_gated_mlp else 4.0


def routed_activation_bytes(model: ModelSpec, job: JobSpec) -> float:
    """HBM bytes per routed token copy and element of the expert width, per forward pass, of the
    experts' activation: the stack's measured gated activation where it has one
    (``Stack.routed_glu_bytes_per_element``, forward and backward together, hence the third), else
    the count (``GLU_BYTES_PER_ELEMENT``), plus the clamp the stack runs outside it
    (``expert_epilogue_bytes``)."""
    measured = job.software.routed_glu_bytes_per_element
    act = measured / 3.0 if measured is not None and model.is_gated_mlp else activation_bytes(model)
    return act + expert_epilogue_bytes(model, job)["clamp"]


def expert_epilogue_bytes(model: ModelSpec, job: JobSpec) -> dict[str, float]:
    """HBM bytes per routed token copy and element, per forward pass (the step runs each layer term
    three times: forward and a backward of twice its work), of the expert work the stack runs
    outside its fused kernels: 'clamp', per element of the expert width, the gated MLP's clamp
    (``ModelSpec.swiglu_limit``, ``Stack.glu_clamp_bytes_per_element``); 'bias', per hidden element,
    the experts' output bias (``ModelSpec.mlp_bias``, ``Stack.expert_bias_bytes_per_element``).
    Both stack figures count forward and backward together, hence the third."""
    stack = job.software
    clamp = (stack.glu_clamp_bytes_per_element or 0.0) if model.swiglu_limit is not None else 0.0
    bias = (stack.expert_bias_bytes_per_element or 0.0) if model.mlp_bias else 0.0
    return {"clamp": clamp / 3.0, "bias": bias / 3.0}


def elementwise_bytes_per_token(
    model: ModelSpec,
    moe: bool,
    t: np.ndarray,
    token_share: np.ndarray | float,
    routed_copies: np.ndarray | float,
    permute_copies: np.ndarray | float,
    routed_act: float,
) -> dict[str, np.ndarray]:
    """HBM bytes per token of one layer's element-wise passes outside its GEMMs and attention core,
    by op, on one rank, forward, in 16-bit activations (counts, as ``GLU_BYTES_PER_ELEMENT``):
    'norms', a norm per block (read + write, 4h); 'residual', a residual add per block (two reads and
    a write, 6h), both over the ``token_share`` of the tokens the rank holds there (1/t under
    sequence parallelism or attention DP, else 1); 'rope', the rotation of the rank's queries and
    keys (read + write); the MLP's activation (``activation_bytes`` per element of its width,
    split over t): 'dense_activation', or in a MoE layer 'shared_activation' and
    'routed_activation' (``routed_act`` bytes per element of the expert width for each of the
    ``routed_copies`` a rank's experts run per token); 'permute', the read and write of the routed
    copies each rank reorders (``permute_copies`` per token, dispatch and combine counted there).
    Training's layer (``layer_forward_parts``) and serving's round (``serving.step``) price the
    same counts."""
    h = model.hidden_size
    kind = model.layer_kind(moe)
    act = activation_bytes(model)
    zero = np.zeros(np.shape(t))
    d_qk, _ = attention_dims(model)
    rope = 4.0 * (model.num_attention_heads / t + kv_heads_per_rank(model, t)) * d_qk
    out = {
        "norms": zero + 4.0 * kind.blocks * h * token_share,
        "residual": zero + 6.0 * kind.blocks * h * token_share,
        "dense_activation": zero,
        "routed_activation": zero,
        "shared_activation": zero,
        "rope": zero + kind.attention * rope if model.position_embedding_type == "rope" else zero,
        "permute": zero,
    }
    if moe:
        out["routed_activation"] = zero + routed_act * routed_copies * model.expert_intermediate_size
        out["shared_activation"] = zero + act * model.shared_expert_width / t
        # what the dispatch carries: the latent under LatentMoE; bf16 read + write
        out["permute"] = zero + 4.0 * permute_copies * model.expert_input_size
    else:
        out["dense_activation"] = zero + kind.mlp * act * model.intermediate_size / t
    return out


def layer_forward_parts(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays, moe: bool
) -> LayerForward:
    """Forward time of one layer on one rank for one micro-batch, by part: its GEMMs
    (``layer_gemms``), the attention core and element-wise ops."""
    bw = cluster.gpu.achieved_hbm_bytes_per_s
    t = mesh.tp.astype(float)
    tokens = mesh.tokens_per_rank(job.seq_len)
    kind = model.layer_kind(moe)
    g = gemm_on(cluster, job)
    times = {
        gemm.name: gemm.count * g(gemm.m_rows, gemm.n, gemm.k, gemm.concurrent)
        for gemm in layer_gemms(model, job, mesh, moe)
    }
    zero = np.zeros(len(mesh))
    sp = np.where(mesh.sequence_parallel, 1.0 / t, 1.0)
    copies = zero
    if moe:
        copies = (model.num_experts_per_tok or 0) * moe_load_factor(job, mesh, model)  # routed copies of a token
    bytes_per_token = elementwise_bytes_per_token(
        model,
        moe,
        t,
        sp,
        routed_copies=copies / mesh.expert_tp / t,
        permute_copies=copies * 2.0 * token_reorders(model, mesh) / t,
        routed_act=routed_activation_bytes(model, job),
    )
    bytes_per_token["expert_bias"] = expert_epilogue_bytes(model, job)["bias"] * copies * model.expert_input_size / t
    # Mamba-2's mixer outside its GEMMs and scan, forward and backward as a third each
    # (``mamba_mixer_bytes_per_token``): the convolution, the z gate and norm, the layout copies
    for op, b in mamba_mixer_bytes_per_token(model, mesh).items():
        bytes_per_token[f"mamba_{op}"] = zero + kind.mamba * b / t
    elementwise = {op: tokens * b / bw for op, b in bytes_per_token.items()}
    return LayerForward(
        gemm_s=np.asarray(sum(times.values())),
        residual_gemm_s=np.asarray(sum(t for name, t in times.items() if name in residual_output_gemms(model))),
        core_s=kind.attention * attention_core_forward_s(model, cluster, job, mesh),
        scan_s=kind.mamba * mamba_scan_s(model, cluster, job, mesh) if kind.mamba else zero,
        elementwise_s=sum(elementwise.values(), zero),
        casts_s=quantise_forward_s(model, cluster, job, mesh, moe),
        softmax_s=kind.attention * unfused_softmax_forward_s(model, cluster, job, mesh),
        gemms=times,
        elementwise=elementwise,
    )


def mamba_scan_bytes_per_token(model: ModelSpec, tp: np.ndarray | float) -> np.ndarray | float:
    """HBM bytes per token that one Mamba-2 layer's SSD scan moves forward over ``tp`` ranks, by a
    count of the tensors its five kernels read and write (mamba_ssm ssd_combined.py @d757aef
    ``_mamba_chunk_scan_combined_fwd``, 16-bit inputs): chunk cumsum reads dt and writes it and
    its cumulative sums in fp32 (10 per head); chunk state reads x and B and writes the fp32 chunk
    states (H*P*N per chunk); state passing reads them and writes them in 16 bits; bmm reads B and C
    and writes the fp32 C B^T blocks (G*Q per token); chunk scan reads those blocks, x, C, dt, the
    cumulative sums and the passed states and writes y. Per token: x twice and y (6 d_inner), B and
    C (8 G*N), the blocks (8 G*Q), the states (12 H*P*N/Q), dt and its sums (26 H). Megatron's z
    gate, which runs inside the chunk scan, is ``mamba_mixer_bytes_per_token``'s. A count, not a
    measurement."""
    d_inner, heads = float(model.mamba_inner_size), float(model.mamba_num_heads or 0)
    per_token = 6.0 * d_inner + 8.0 * model.mamba_groups_state + 8.0 * mamba_chunk_blocks(model)
    return (per_token + 12.0 * mamba_chunk_states(model) + 26.0 * heads) / tp


def mamba_scan_backward_bytes_per_token(model: ModelSpec, tp: np.ndarray | float) -> np.ndarray | float:
    """HBM bytes per token that one Mamba-2 layer's SSD scan moves in backward over ``tp`` ranks,
    by the same count over mamba_ssm's ``_mamba_chunk_scan_combined_bwd`` (ssd_combined.py
    @d757aef): it first runs four forward kernels again (chunk cumsum, bmm, chunk state and state
    passing, the states now kept in fp32), then eleven of its own: dstates from C and dout (fp32),
    state passing backward (reads the states and their gradients in fp32, writes both in 16 bits),
    dx (reads x, B, the C B^T blocks, dout and the state gradients; writes dx and ddt), dB and dC
    (fp32 per group, then summed; the two bmm backwards read the C B^T gradient and add their share),
    dCB (fp32, summed), ddA from the blocks, the reversed cumulative sum of its chunk terms in three
    torch ops, and chunk cumsum backward. Per token: x and dout 22 d_inner, B, C and their
    gradients 54 G*N, the blocks and their gradient 32 G*Q, the states and their gradients
    34 H*P*N/Q, dt and the cumulative sums 138 H: 3.4-3.6x the forward at Nemotron 3's shapes,
    where every other layer term is priced at 2x. A count, not a measurement; no public timing of
    the backward at a stated shape was found."""
    d_inner, heads = float(model.mamba_inner_size), float(model.mamba_num_heads or 0)
    per_token = 22.0 * d_inner + 54.0 * model.mamba_groups_state + 32.0 * mamba_chunk_blocks(model)
    return (per_token + 34.0 * mamba_chunk_states(model) + 138.0 * heads) / tp


def mamba_chunk_blocks(model: ModelSpec) -> float:
    """Elements per token of a Mamba-2 layer's intra-chunk C B^T blocks: G x Q (one Q x Q block per
    group and chunk of Q tokens)."""
    return float(model.mamba_n_groups or 0) * float(model.mamba_chunk)


def mamba_chunk_states(model: ModelSpec) -> float:
    """Elements per token of a Mamba-2 layer's chunk states: H x P x N per chunk of Q tokens."""
    return float(model.mamba_inner_size) * float(model.ssm_state_size or 0) / float(model.mamba_chunk)


def mamba_scan_s(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """One Mamba-2 layer's SSD scan on one rank for one micro-batch, forward and backward, as the
    third the step runs three times (the flash core's convention): each pass the larger of its
    FLOPs (``flops.mamba_scan_flops_per_token_fwd``, heads and groups split over t; backward twice
    the forward's) at the 16-bit GEMM rate (its matmuls are Triton tensor-core dots in 16 bits
    whatever the job's format) and its traffic (``mamba_scan_bytes_per_token``,
    ``mamba_scan_backward_bytes_per_token``) at the achieved HBM bandwidth. The unfused scan is
    'mostly bottlenecked by memory bandwidth and latency', writing and reading intermediate data
    between its kernels (PyTorch blog, 'Accelerating Mamba2 with Kernel Fusion', 2025: fusing the
    forward's five made it 1.5-2.5x faster on A100 and H100), so the traffic decides; the kernels'
    rate has not been measured here. Checked against the one public kernel time found: tilelang's
    tuned chunk_scan forward alone (benchmark/mamba2/README.md: H800, batch 8, 8,192 tokens, 80
    heads, P 64, N 128, chunk 256, one group) takes 1.28 ms; the forward count prices all five
    kernels of that shape at 1.50 ms on an H800, where chunk_state alone adds about half the chunk
    scan's FLOPs: the count is short of the kernels' time, not over it."""
    forward, backward = mamba_scan_passes_s(model, cluster.gpu, mesh.tokens_per_rank(job.seq_len), mesh.tp)
    return (forward + backward) / 3.0


def mamba_scan_passes_s(
    model: ModelSpec, gpu: GPU, tokens: np.ndarray | float, tp: np.ndarray | float
) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward time of one Mamba-2 layer's SSD scan over ``tokens`` tokens on one of
    ``tp`` ranks (``mamba_scan_s``; benchmarks/gpu_mamba_scan.py sets them beside the kernels' own
    times on a GPU)."""
    t = np.asarray(tp, dtype=float)
    rate = gpu.peak_flops_per_s("bf16") * gpu.gemm_efficiency * gpu.sustained
    bw = gpu.achieved_hbm_bytes_per_s
    flops = tokens * mamba_scan_flops_per_token_fwd(model) / t
    forward = np.maximum(flops / rate, tokens * mamba_scan_bytes_per_token(model, t) / bw)
    backward = np.maximum(2.0 * flops / rate, tokens * mamba_scan_backward_bytes_per_token(model, t) / bw)
    return forward, backward


MAMBA_CONV_FORWARD_BYTES = 4.0
"""HBM bytes per conv channel (x, B and C) and token of a Mamba-2 layer's causal conv1d forward
with its SiLU: reads the 16-bit input and writes the output (``mamba_mixer_bytes_per_token``)."""

MAMBA_GATE_FORWARD_BYTES = 8.0
"""HBM bytes per d_inner element and token of a Mamba-2 layer's z gate and RMSNorm forward: the
gate inside the chunk scan reads z and writes the gated output (4), the norm reads and writes it
(4) (``mamba_mixer_bytes_per_token``)."""


def mamba_mixer_forward_bytes_per_token(model: ModelSpec) -> float:
    """HBM bytes per token (before TP) of one Mamba-2 mixer's forward outside its GEMMs and SSD
    scan: the conv and the gate, as ``mamba_mixer_bytes_per_token`` counts them (serving runs the
    forward alone, on tokens already in the kernels' layout)."""
    return MAMBA_CONV_FORWARD_BYTES * model.mamba_conv_channels + MAMBA_GATE_FORWARD_BYTES * model.mamba_inner_size


def mamba_mixer_bytes_per_token(model: ModelSpec, mesh: MeshArrays) -> dict[str, np.ndarray]:
    """HBM bytes per token (before TP) of one Mamba-2 mixer's work outside its GEMMs and SSD scan, by
    a count of the 16-bit tensors Megatron-Core's training path touches (megatron/core/ssm/
    mamba_mixer.py ``_ssm_training``, which calls mamba_ssm's ``mamba_split_conv1d_scan_combined``
    (ssd_combined.py @d757aef) without the norm weight and then its own RMSNorm), forward and
    backward together, returned as the third the step runs three times:
    'conv', per conv channel (x, B and C): causal_conv1d with its SiLU reads and writes them (4);
    the memory-efficient backward runs that forward again, since the mixer keeps only in_proj's
    output (4), and then its gradient (reads the input and the output gradient, writes the input
    gradient: 6): 14.
    'gate', per d_inner element: the z gate inside the chunk scan (reads z, writes the ungated
    output beside the gated one: 4) and the RMSNorm over y (read and write: 4); backward,
    ``_chunk_scan_bwd_dz`` (reads x, z, the saved output and the gradient; writes dz and the
    ungated gradient: 12) and the norm's (reads y and its gradient, writes the input's: 6): 26.
    'layout': Megatron's activations are sequence-first and the kernels batch-first: in_proj's
    output is copied transposed (``rearrange(zxBCdt, 'l b d -> b l d').contiguous()``, read and
    write: 4 per element of its width) and y back (4 per d_inner element), and in backward
    Transformer Engine's Linear copies in_proj's transposed output gradient to a contiguous one (4
    per element). A permutation of a batch of one sequence is already contiguous: nothing is
    copied at micro-batch 1. Counts of the tensors touched, not measurements."""
    d_inner, width = float(model.mamba_inner_size), float(mamba_in_proj_width(model))
    copies = np.where(mesh.micro_batch_size > 1, 8.0 * width + 4.0 * d_inner, 0.0)
    return {
        "conv": np.full(len(mesh), (2.0 * MAMBA_CONV_FORWARD_BYTES + 6.0) * model.mamba_conv_channels / 3.0),
        "gate": np.full(len(mesh), (MAMBA_GATE_FORWARD_BYTES + 18.0) * d_inner / 3.0),
        "layout": copies / 3.0,
    }


def layer_forward_s(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays, moe: bool) -> np.ndarray:
    """Forward time of one layer on one rank for one micro-batch (``layer_forward_parts``)."""
    return layer_forward_parts(model, cluster, job, mesh, moe).total_s


SAC_RECOMPUTED_MATMUL_SHARE = 0.5
"""torchtitan's per-op selective AC saves every second matmul's output and recomputes the others
(torchtitan llama3 parallelize.py, _custom_policy: "Saves output of all compute ops, except every
second mm"; stacks/torchtitan.yaml cites it). Its counter starts afresh at every forward of a
block (``selective_checkpointing_context_fn`` makes a new ``meta``), so the Llama block runs wk,
wo and w3 again (the 2nd, 4th and 6th of wq, wk, wv, wo, w1, w3, w2): half of the matmul FLOPs
whose outputs backward needs, since wq and wo, wk and wv, w1 and w3 pair up in size (the memory
side is ``memory.op_sac_kept_bytes_per_token``)."""

RESIDUAL_OUTPUT_GEMMS = ("mlp.out", "moe.expert_out", "moe.shared_out")
"""GEMMs whose output only the residual add uses: backward needs no value of theirs (a matmul's
gradient needs its inputs), so a saved-or-recomputed policy never runs them again. (The attention
output projection is not one: the second norm needs the residual sum it feeds.)"""


def residual_output_gemms(model: ModelSpec) -> tuple[str, ...]:
    """``RESIDUAL_OUTPUT_GEMMS`` of the model: under LatentMoE fc2_latent_proj takes the experts'
    place, their down projections feeding it (``flops.residual_output_matmul_params``)."""
    if model.moe_latent_size:
        return ("mlp.out", "moe.latent_up", "moe.shared_out")
    return RESIDUAL_OUTPUT_GEMMS


def selective_recompute_forward_s(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays, moe: bool
) -> np.ndarray:
    """Forward work one layer runs again in backward under selective recompute, as the stack's
    ``selective_recompute`` says: the attention core once (Megatron, Korthikanti et al. 2022), or
    torchtitan's per-op SAC: half of the GEMMs whose outputs backward needs (all but
    ``RESIDUAL_OUTPUT_GEMMS``: for Llama 0.36 of the layer's matmul FLOPs), with their fp8 casts,
    and every element-wise op (its save list keeps none; the attention output is saved). Its TP
    all-gathers are in ``traffic.tp_input_regathers``."""
    parts = layer_forward_parts(model, cluster, job, mesh, moe)
    if job.software.selective_recompute == "attention":
        return module_recompute_forward_s(model, cluster, job, mesh, parts, model.layer_kind(moe).attention)
    needed = parts.gemm_s - parts.residual_gemm_s
    share = needed / np.maximum(parts.gemm_s, 1e-30)
    return SAC_RECOMPUTED_MATMUL_SHARE * (needed + share * parts.casts_s) + parts.elementwise_s


def module_recompute_forward_s(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays, parts: LayerForward, attention: float = 1.0
) -> np.ndarray:
    """Forward work Megatron's selective recompute runs again for one layer whose forward is
    ``parts``: each module's GEMMs (with their share of the fp8 casts), element-wise ops and the
    attention core, as ``cost.recompute.MODULES`` lists them (the default, core_attn, runs the
    core once: Korthikanti et al. 2022). The MoE dispatch a 'moe' module runs again is
    ``traffic.ep_all_to_alls_per_microbatch``'s. ``attention``: the layer's attention blocks
    (``LayerKind.attention``)."""
    again_gemms, again_ops = recomputed_gemms(job), recomputed_ops(job)
    gemms = sum((time for name, time in parts.gemms.items() if name in again_gemms), np.zeros(len(mesh)))
    share = gemms / np.maximum(parts.gemm_s, 1e-30)
    ops = sum((time for op, time in parts.elementwise.items() if op in again_ops), np.zeros(len(mesh)))
    core = np.zeros(len(mesh))
    if recomputes_core(job):
        core = attention * attention_core_forward_s(model, cluster, job, mesh, recompute=True) + parts.softmax_s
    return gemms + share * parts.casts_s + ops + core


def lm_head_forward_s(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """Forward time of the vocab-parallel LM head GEMM (the loss after it is ``loss_s``), in 16 bits
    whatever the layers' format: under fp8 and fp4 every stack keeps the head out of the low-precision
    GEMMs. Megatron-Core's output_layer is a plain tensor_parallel.ColumnParallelLinear, outside
    Transformer Engine's fp8/fp4 autocast (megatron/core/models/gpt/gpt_model.py); torchtitan's MX
    converter skips it by default ("By default we always skip the output layer", MX.filter_fqns =
    ["output"]) and its float8 train configs filter it (``filter_fqns = ["output"]``, which the
    exporter writes); MPT unembeds with its tied embedding through F.linear, no Transformer Engine
    module; the NVFP4 recipes keep it in bf16 (NVIDIA, 'Pretraining Large Language Models with
    NVFP4', arXiv:2509.25149: "the output projection head"; torchtitan's nvfp4.md: "The LM head is
    therefore kept in bf16")."""
    head = lm_head_gemm(model, job, mesh)
    return gemm_on(cluster, job.in_bf16() if job.low_precision else job)(head.m_rows, head.n, head.k)


def loss_s(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """Cross entropy over the rank's (b*s/c) x (V/t) logits, forward and backward of one
    micro-batch: memory-bound, the stack's ``cross_entropy_bytes_per_logit``, eager, eager under TP's loss
    parallel, or compiled (counted from its
    loss code: Megatron's vocab-parallel cross entropy makes several fp32 passes, a fused loss
    one read and one write) at the achieved HBM bandwidth."""
    head = lm_head_gemm(model, job, mesh)
    return (
        head.m_rows
        * head.n
        * job.software.cross_entropy_bytes(job.loss_compiled, mesh.tp)
        / cluster.gpu.achieved_hbm_bytes_per_s
    )


FP8_CAST_BYTES_PER_ELEMENT: dict[str, float] = {"tensor": 7.0, "row": 7.0, "block": 4.0 + 2.0 / 32.0}
"""HBM bytes per element of a GEMM's input and output-gradient tensors for fp8 training, forward
and backward together, by scaling. Tensor- and row-scaled (current scaling): the 16-bit tensor is
read once for its amax and again to cast it (2 + 2 + write 1 = 5; Transformer Engine, 'Using FP8
with Transformer Engine', Float8CurrentScaling; torchao float8 dynamic scaling likewise), and the
backward GEMMs need the fp8 copy transposed (read 1 + write 1 = 2; Hopper's fp8 tensor cores take
only the TN layout, TE docs 'FP8 on Hopper'): 7. Block-scaled (MXFP8): the scale of each 32-element
block is computed where the block is quantised, with no amax pass over the tensor, and one kernel
writes both the row-wise copy the forward takes and the column-wise one the backward takes
(Transformer Engine common/util/cast_kernels.cuh, cast_mxfp8_2D_kernel: rowwise and colwise
scaling from one read): read 2 + write 1 + 1, plus one E8M0 scale byte per 32 elements each way.
Weights are cast once per step and cached across micro-batches (TE's ``is_first_microbatch``;
torchao casts before the FSDP all-gather), so they are not counted. A count of the tensors
touched, not a measurement."""


FP8_TRANSPOSE_BYTES_PER_ELEMENT: dict[str, float] = {"tensor": 2.0, "row": 2.0, "block": 0.0}
"""Of ``FP8_CAST_BYTES_PER_ELEMENT``, the transposed copy the backward GEMMs take (read 1 + write
1), made from the fp8 tensor where the GEMM runs; the rest quantises the 16-bit tensor. MXFP8
writes both copies in its one quantising kernel: nothing after."""

SP_GATHERED_INPUTS: dict[str, tuple[str, ...]] = {
    "megatron-core": ("attn.qkv", "attn.q", "attn.q_b", "attn.kv_b", "mlp.in", "mamba.in_proj", "moe.shared_in"),
    "torchtitan": ("attn.qkv", "attn.q", "attn.q_a", "attn.kv_a", "mlp.in"),
}
"""By ``Stack.tp_module_plan``, the GEMMs whose input a sequence-parallel all-gather delivers, quantised
where the stack gathers the job's fp8 scaling so: Megatron-Core's column-parallel linears (MLA's
up-projections gather the down-projections' sharded outputs; shared experts are TE linears),
torchtitan's attention projections on the gathered block input (its MoE block gathers in 16-bit)."""

SP_GATHERED_OUTPUT_GRADS: dict[str, tuple[str, ...]] = {
    "megatron-core": ("attn.out", "mlp.out", "mamba.out_proj", "moe.shared_out"),
    "torchtitan": ("attn.out", "mlp.out"),
}
"""By ``Stack.tp_module_plan``, the GEMMs whose output gradient is gathered in backward under
sequence parallelism (the row-parallel linears: their forward reduce-scatter's backward)."""


def cast_elements(model: ModelSpec, job: JobSpec, mesh: MeshArrays, moe: bool) -> tuple[np.ndarray, np.ndarray]:
    """(quantised, transposed) elements of one layer's GEMM inputs and output gradients on one rank
    per micro-batch. Where the stack gathers the job's fp8 scaling quantised
    (``Stack.fp8_all_gather_scalings``) under sequence parallelism, a gathered tensor is quantised
    on the rank's 1/t shard before the all-gather and only transposed after it (Transformer Engine
    ``_all_gather_fp8`` / ``_all_gather_mxfp8``: LayerNormLinear quantises the norm's local output
    and gathers the fp8 data; torchtitan's Float8ColwiseParallel casts the local input before the
    DTensor redistribute); otherwise every element is quantised where the GEMM runs (torchao
    row-wise scaling gathers 16-bit and casts the gathered tensor)."""
    gathered_fp8 = job.fp8_scaling in job.software.fp8_all_gather_scalings and job.dtype == "fp8"
    shard = np.where(mesh.sequence_parallel, 1.0 / mesh.tp, 1.0) if gathered_fp8 else 1.0
    quantised = np.zeros(len(mesh))
    transposed = np.zeros(len(mesh))
    plan = job.software.tp_module_plan
    for g in layer_gemms(model, job, mesh, moe):
        inputs, grads = g.count * g.m_rows * g.k, g.count * g.m_rows * g.n
        quantised = quantised + inputs * (shard if g.name in SP_GATHERED_INPUTS[plan] else 1.0)
        quantised = quantised + grads * (shard if g.name in SP_GATHERED_OUTPUT_GRADS[plan] else 1.0)
        transposed = transposed + inputs + grads
    return quantised, transposed


def cast_bytes_per_element(job: JobSpec) -> float:
    """HBM bytes per element of a GEMM input or output gradient that quantisation moves, forward and
    backward: ``FP8_CAST_BYTES_PER_ELEMENT`` of the fp8 scaling, the stack's
    ``fp4_cast_bytes_per_element`` under NVFP4, none in 16-bit."""
    if job.dtype == "fp8":
        return FP8_CAST_BYTES_PER_ELEMENT[job.fp8_scaling]
    if job.dtype == "fp4":
        return job.software.fp4_cast_bytes_per_element or 0.0
    return 0.0


def quantise_forward_s(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays, moe: bool) -> np.ndarray:
    """fp8 or fp4 cast and transpose traffic of one layer's GEMMs (``cast_bytes_per_element`` on each
    input M x K and output-gradient M x N), expressed per forward pass like every layer term (the
    step multiplies forwards by 3); zero in 16-bit."""
    cast_bytes = cast_bytes_per_element(job)
    if not cast_bytes:
        return np.zeros(len(mesh))
    transpose = FP8_TRANSPOSE_BYTES_PER_ELEMENT[job.fp8_scaling] if job.dtype == "fp8" else 0.0
    if job.software.fp8_non_tn_gemms and cluster.gpu.architecture in NON_TN_FP8_ARCHITECTURES:
        transpose = 0.0  # the backward GEMMs read the fp8 tensor as it is
    quantised, transposed = cast_elements(model, job, mesh, moe)
    moved = (cast_bytes - transpose) * quantised + transpose * transposed
    return moved / 3.0 / cluster.gpu.achieved_hbm_bytes_per_s


def layer_overhead_s(
    model: ModelSpec, job: JobSpec, mesh: MeshArrays, layers: np.ndarray, moe_layers: np.ndarray
) -> np.ndarray:
    """Fixed per-layer overhead of one micro-batch through the stage's layers: the stack's fitted
    ``layer_overhead_us`` per layer and forward pass (eager; compiled layers launch fewer kernels),
    the backward counting as two passes and full recompute as one more (``mesh.forward_passes``,
    for the share of layers it recomputes), selective recompute as the share of a forward's kernels
    it launches again (``selective_recompute_kernels`` of ``kernels_per_layer_eager``: torchtitan's
    per-op SAC 31 of 40, Megatron's core attention 1 of 16):
    launch gaps and framework hooks, which a large layer hides in its work and a small model's
    short layers do not; a tensor-parallel layer (tp > 1) adds the stack's fitted
    ``tp_layer_overhead_us``: torchtitan's TP runs every sharded op through DTensor, whose
    per-op dispatch makes small models CPU-bound (pytorch/pytorch#88838: Llama-3-8B on 8 H100,
    FSDP 8 at 26.9% MFU against FSDP 2 x TP 4 at 22.4%; pytorch/torchtitan#1587, 'training
    sometimes is CPU bounded, so we need to be more careful about DTensor overhead'). MoE layers
    add the stack's fitted ``moe_layer_overhead_us`` (routing,
    token permutation) and ``expert_gemm_overhead_us`` per local expert (E/ep): Transformer
    Engine's grouped linear, which Megatron-Core's TEGroupedMLP runs, issues one cuBLAS GEMM per
    local expert on its four compute streams (``nvte_multi_stream_cublas_gemm``;
    ``Stack.grouped_gemm_streams``, whose tiles ``wave_utilization`` counts together), each with its own launch, fp8
    quantisation and partly filled last wave; 32 local experts of 1,024 tokens pay that 32
    times where 4 experts of 8,192 tokens pay it 4 times for the same FLOPs. Fitted, not
    measured: no public per-expert trace was found. A hybrid model's layer, one block, pays its
    ``LayerKind.launch_share`` of the per-layer overhead (a transformer layer's is 1)."""
    stack = job.software
    per_layer = np.where(mesh.tp > 1, stack.layer_overhead_s(job.compiled, True), stack.layer_overhead_s(job.compiled))
    selective = stack.selective_recompute_kernels / stack.kernels_per_layer_eager
    relaunched = np.where(mesh.recompute == RECOMPUTE_SELECTIVE, selective, 0.0)
    passes = mesh.forward_passes(layers)
    moe = stack.moe_layer_overhead_s + local_experts(model, mesh) * stack.expert_gemm_overhead_s
    # a hybrid model's layers are single blocks, each its share of a transformer layer's launches
    dense_share, moe_share = model.layer_kind(moe=False).launch_share, model.layer_kind(moe=True).launch_share
    launches = (layers - moe_layers) * dense_share + moe_layers * moe_share
    return (passes + relaunched) * launches * per_layer + passes * moe_layers * moe


HOST_SYNC_SOFTENING_S = 20e-6
"""Width of the corner of max(host - device, 0) in ``dropless_sync_exposed_s``: softplus of this
scale instead of a hard max, so that the calibration's least squares sees a gradient where a row
is near the corner. About one kernel launch (a judgement, not a measurement); the kernels'
own run-to-run spread blurs the corner at least this much."""


def dropless_sync_exposed_s(
    model: ModelSpec, job: JobSpec, mesh: MeshArrays, layers: np.ndarray, moe_layers: np.ndarray, moe_busy_s: np.ndarray
) -> np.ndarray:
    """Host time exposed by dropless routing's per-layer synchronisation, per micro-batch on a rank
    holding ``layers`` layers of which ``moe_layers`` are MoE.

    Dropless, the tokens each expert receives are known only on the GPU, and the host needs them
    to size the all-to-all and the per-expert GEMMs: Megatron-Core's MoEAlltoAllTokenDispatcher
    copies them to the host and synchronises once per MoE layer forward (token_dispatcher.py,
    ``preprocess``: ``_maybe_update_cuda_sync_point("before_ep_alltoall")``, or
    "before_finish" without EP), while token drop padded to capacity
    (``moe_pad_expert_input_to_capacity``) knows every size in advance and never synchronises.
    After the synchronisation the GPU's queue is empty: until the next MoE layer's router the GPU
    runs only what the host has launched, so the host's work for that span (one layer: the
    experts' grouped linears, then the next attention) is exposed where it exceeds the GPU's,
    instead of running ahead of it. Priced per MoE layer forward (recomputed forwards too) as
    softplus(H - D) with H = local experts x the stack's fitted ``dropless_host_expert_us`` (a
    per-layer host figure beside it fitted to 0 on the published rows) and D the GPU's work
    in the layer's forward (``moe_busy_s``): its compute and its dispatch and combine
    (``traffic.ep_forward_per_moe_layer_s``, exposed or hidden), since the host launches the
    experts' GEMMs while the dispatch runs and the next attention while the combine does. (Left
    out until 2026-12, as a bound from above: refitted with it in, the per-expert host time went
    367.8 -> 408.1 us and the Megatron-Bridge groups' cross-validated MAPE gb300 10.6% -> 10.3%,
    gb200 6.9% -> 6.7%, b200 11.7% -> 11.6% with signed +4.1% -> +3.8%.) The backward reuses the forward's
    host-side split sizes and does not synchronise. Megatron-Bridge's Qwen3-30B-A3B on 8 B200 at
    micro-batch 1 shows it: 9,299 tokens/s per GPU dropless (25.11) against 18,066 with token drop
    (25.09), same mesh; at micro-batch 4 on GB200, where each layer's GPU time is 4x longer, the
    two agree (23,766 and 22,775)."""
    host_s = local_experts(model, mesh) * job.software.dropless_host_expert_s
    if not model.is_moe or job.moe_capacity_factor is not None or not np.any(host_s > 0):
        return np.zeros(len(mesh))
    gap = HOST_SYNC_SOFTENING_S * np.logaddexp(0.0, (host_s - moe_busy_s) / HOST_SYNC_SOFTENING_S)
    return moe_layers * (1.0 + mesh.recomputed_share(layers)) * gap


def local_experts(model: ModelSpec, mesh: MeshArrays) -> np.ndarray:
    """Routed experts each expert-parallel rank holds: E / ep (0 for a dense model)."""
    return model.num_experts_total / mesh.ep


def mtp_projection_forward_s(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """Forward time of one MTP module's projection of [norm(embedding); norm(hidden)], tokens x 2h
    to h, column-parallel over t (Megatron-Core MultiTokenPredictionLayer.eh_proj;
    ``flops.mtp_projection_params``)."""
    tokens = mesh.tokens_per_rank(job.seq_len)
    h = float(model.hidden_size)
    return gemm_on(cluster, job)(tokens, h / mesh.tp, np.asarray(2.0 * h))


ADAM_STATE_PASSES = 2.0
"""Adam reads and writes its whole state (the fp32 master weight, m and v: the job's
``optimizer_state_bytes_per_param``) once per step: 2 x 12 bytes with fp32 moments; the gradient
read and the 16-bit weight write are added from the job's dtypes."""


def optimizer_step_s(
    cluster: ClusterSpec,
    job: JobSpec,
    mesh: MeshArrays,
    dense_params: np.ndarray,
    expert_params: np.ndarray,
    dp_size: np.ndarray,
    edp_size: np.ndarray,
) -> np.ndarray:
    """Memory-bound Adam update of the parameters this rank owns (its ZeRO shard from stage 1):
    bytes touched per parameter / HBM bandwidth (Adam is elementwise, no matmul). fp32 working
    weights are the master (``JobSpec.weights_are_master``), updated in place with no copy written."""
    shard = mesh.zero_stage >= 1
    owned = dense_params / np.where(shard, dp_size, 1) + expert_params / np.where(shard, edp_size, 1)
    per_param = (
        ADAM_STATE_PASSES * job.optimizer_state_bytes_per_param
        + job.gradient_bytes_per_param
        + (0.0 if job.weights_are_master else job.weight_bytes_per_param)
    )
    return owned * per_param / cluster.gpu.achieved_hbm_bytes_per_s
