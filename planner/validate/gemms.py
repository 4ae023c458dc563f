"""The GEMMs one rank of a plan runs, as replayable terms priced with ``planner.cost.compute``.

Shapes per rank and micro-batch are those ``planner.cost.compute.layer_forward_s`` and
``lm_head_forward_s`` price (Megatron-LM's column/row-parallel split, Shoeybi et al. 2019
section 3): QKV (tokens x (a*d_qk/t + k_v*(d_qk+d_v)) x h), attention output (tokens x h x
a*d_v/t), MLP in ((1 or 2)*f/t) and out, the vocab-parallel LM head, and for MoE layers the
router and each local expert's two GEMMs over its share of the routed tokens (MLA models: the
low-rank Q and KV projections). Each forward GEMM runs three times per micro-batch (forward,
input gradient, weight gradient: same FLOPs), four with full recompute; the LM head three.

The replay runs fp32 on CPU (no bf16 units there: the profile's fp32 peak is the measured rate)
and the job's 16-bit format on GPU (fp8 replays as bf16). GEMMs above ``max_gemm_flops`` are
replayed with the larger of M and N cut down (then the other, if need be), keeping K (the
reduction) and so the arithmetic per output element, and counted as proportionally more calls.
"""

from __future__ import annotations

import numpy as np

from planner.cost.compute import gemm_s
from planner.cost.flops import attention_dims
from planner.cost.memory import kv_heads_per_rank
from planner.cost.pipeline import layers_on_worst_stage, moe_layers_on_worst_stage, num_microbatches
from planner.mesh import MeshArrays
from planner.schemas.hardware import BYTES_PER_ELEMENT, ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig
from planner.validate.schemas import TermSpec


def replay_dtype(job: JobSpec, on_gpu: bool) -> str:
    """Matmul format of the replay: fp32 on CPU, the job's 16-bit format on GPU (fp8 as bf16)."""
    if not on_gpu:
        return "fp32"
    return "bf16" if job.dtype == "fp8" else job.dtype


def predict_gemm_s(m_rows: int, n: int, k: int, cluster: ClusterSpec, dtype: str) -> float:
    """``planner.cost.compute.gemm_s`` of one (M x K) @ (K x N) GEMM in ``dtype`` on ``cluster``'s GPU."""
    gpu = cluster.gpu
    rows, cols, inner = (np.asarray(float(x)) for x in (m_rows, n, k))
    return float(gemm_s(rows, cols, inner, gpu, gpu.peak_flops_per_s(dtype), BYTES_PER_ELEMENT[dtype]))


def gemm_shapes(model: ModelSpec, job: JobSpec, plan: ParallelConfig) -> list[tuple[str, tuple[int, int, int], float]]:
    """(name, (M, N, K), forward calls per micro-batch on the worst stage) of every GEMM."""
    pm = MeshArrays.from_configs([plan])
    t = float(plan.tp)
    h, a = model.hidden_size, model.num_attention_heads
    d_qk, d_v = attention_dims(model)
    kv = float(kv_heads_per_rank(model, np.asarray(t)))
    tokens = float(pm.tokens_per_rank(job.seq_len)[0])
    layers = float(layers_on_worst_stage(model, pm)[0])
    moe = float(moe_layers_on_worst_stage(model, layers_on_worst_stage(model, pm))[0])
    mats_in = 2.0 if model.is_gated_mlp else 1.0
    shapes: list[tuple[str, tuple[float, float, float], float]] = []
    if model.is_mla:
        r_q, r_kv = model.q_lora_rank, model.kv_lora_rank or 0
        d_nope, d_rope = model.qk_nope_head_dim or 0, model.qk_rope_head_dim or 0
        if r_q:
            shapes += [("attn.q_a", (tokens, r_q, h), layers), ("attn.q_b", (tokens, a * d_qk / t, r_q), layers)]
        else:
            shapes.append(("attn.q", (tokens, a * d_qk / t, h), layers))
        shapes += [
            ("attn.kv_a", (tokens, r_kv + d_rope, h), layers),
            ("attn.kv_b", (tokens, a * (d_nope + d_v) / t, r_kv), layers),
        ]
    else:
        shapes.append(("attn.qkv", (tokens, a * d_qk / t + kv * (d_qk + d_v), h), layers))
    shapes.append(("attn.out", (tokens, h, a * d_v / t), layers))
    if layers > moe:
        f = model.intermediate_size
        shapes += [
            ("mlp.in", (tokens, mats_in * f / t, h), layers - moe),
            ("mlp.out", (tokens, h, f / t), layers - moe),
        ]
    if moe > 0:
        experts, top_k = model.num_experts_total, model.num_experts_per_tok or 0
        width = model.expert_intermediate_size / plan.expert_tp
        routed_rows = tokens / t * top_k * plan.ep * plan.expert_tp / experts
        local = experts / plan.ep
        shapes += [
            ("moe.router", (tokens / t, experts, h), moe),
            ("moe.expert_in", (routed_rows, mats_in * width, h), moe * local),
            ("moe.expert_out", (routed_rows, h, width), moe * local),
        ]
    shapes.append(("lm_head", (tokens, model.vocab_size / t, h), -1.0))  # -1: once per micro-batch, never recomputed
    return [(name, (max(round(x), 1), max(round(y), 1), max(round(z), 1)), c) for name, (x, y, z), c in shapes]


def capped_shape(shape: tuple[int, int, int], max_flops: float | None) -> tuple[int, int, int]:
    """(M, N, K) with M or N (the larger first) cut so that 2*M*N*K <= ``max_flops``."""
    m, n, k = shape
    if max_flops is None or 2.0 * m * n * k <= max_flops:
        return shape
    if m >= n:
        m = max(int(max_flops // (2.0 * n * k)), 1)
        n = n if 2.0 * m * n * k <= max_flops else max(int(max_flops // (2.0 * m * k)), 1)
    else:
        n = max(int(max_flops // (2.0 * m * k)), 1)
        m = m if 2.0 * m * n * k <= max_flops else max(int(max_flops // (2.0 * n * k)), 1)
    return m, n, k


def gemm_terms(
    model: ModelSpec,
    job: JobSpec,
    plan: ParallelConfig,
    replay_cluster: ClusterSpec,
    on_gpu: bool,
    max_gemm_flops: float | None = None,
) -> list[TermSpec]:
    """One term per GEMM shape of ``plan``, priced on ``replay_cluster`` (module docstring)."""
    pm = MeshArrays.from_configs([plan])
    m = float(num_microbatches(job.batch_size, pm)[0])
    passes = 4.0 if plan.recompute == "full" else 3.0
    dtype = replay_dtype(job, on_gpu)
    terms = []
    for name, (rows, n, k), per_microbatch in gemm_shapes(model, job, plan):
        calls = m * (3.0 if per_microbatch < 0 else passes * per_microbatch)
        replay = capped_shape((rows, n, k), max_gemm_flops)
        terms.append(
            TermSpec(
                name=f"gemm.{name}",
                op="gemm",
                group="self",
                group_size=1,
                plan_group_size=1,
                gemm_mnk=replay,
                plan_gemm_mnk=(rows, n, k),
                dtype=dtype,
                calls_per_step=calls * (rows * n) / (replay[0] * replay[1]),
                predicted_s=predict_gemm_s(*replay, replay_cluster, dtype),
            )
        )
    return terms
