"""The GEMMs one rank of a plan runs, as replayable terms priced with ``planner.cost.compute``.

Shapes per rank and micro-batch are the ones the step price uses, taken from the same functions,
``planner.cost.compute.layer_gemms`` and ``lm_head_gemm`` (Megatron-LM's column/row-parallel
split, Shoeybi et al. 2019 section 3): QKV (tokens x (a*d_qk/t + k_v*(d_qk+d_v)) x h), attention
output (tokens x h x a*d_v/t), MLP in ((1 or 2)*f/t) and out, the vocab-parallel LM head, and for
MoE layers the router, each local expert's two GEMMs over its share of the routed tokens and the
shared experts (MLA models: the low-rank Q and KV projections). Each forward GEMM runs three
times per micro-batch (forward, input gradient, weight gradient: same FLOPs), four with full
recompute; the LM head three.

The replay runs fp32 on CPU (no bf16 units there: the profile's fp32 peak is the measured rate)
and the job's 16-bit format on GPU (fp8 replays as bf16). GEMMs above ``max_gemm_flops`` are
replayed with the larger of M and N cut down (then the other, if need be), keeping K (the
reduction) and so the arithmetic per output element, and counted as proportionally more calls.
"""

from __future__ import annotations

import math

import numpy as np

from planner.cost.compute import Gemm, gemm_s, layer_gemms, lm_head_gemm
from planner.cost.pipeline import moe_layers_of, num_microbatches, with_recompute_every
from planner.cost.step import RankLoad, slowest_rank
from planner.mesh import MeshArrays
from planner.schemas.hardware import BYTES_PER_ELEMENT, ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig
from planner.validate.schemas import TermSpec


def replay_dtype(job: JobSpec, on_gpu: bool) -> str:
    """Matmul format of the replay: fp32 on CPU, the job's 16-bit format on GPU (fp8 and fp4 as bf16)."""
    if not on_gpu:
        return "fp32"
    return "bf16" if job.low_precision else job.dtype


def predict_gemm_s(m_rows: int, n: int, k: int, cluster: ClusterSpec, dtype: str) -> float:
    """``planner.cost.compute.gemm_s`` of one (M x K) @ (K x N) GEMM in ``dtype`` on ``cluster``'s GPU."""
    gpu = cluster.gpu
    rows, cols, inner = (np.asarray(float(x)) for x in (m_rows, n, k))
    return float(gemm_s(rows, cols, inner, gpu, gpu.peak_flops_per_s(dtype), BYTES_PER_ELEMENT[dtype]))


def stage_layer_kinds(model: ModelSpec, rank: RankLoad) -> list[tuple[bool, float]]:
    """(is MoE, how many) of the layer kinds on ``rank``, the rank that sets the plan's step
    (``cost.step.slowest_rank``; an MTP layer counts as a layer of its kind), kinds it has none
    of left out."""
    moe = float(moe_layers_of(model, np.array([rank.decoders]), rank.mtp)[0])
    layers = float(rank.layers)
    return [(is_moe, count) for is_moe, count in ((False, layers - moe), (True, moe)) if count > 0]


def self_term(name: str, op: str, dtype: str, calls_per_step: float, predicted_s: float, **fields: object) -> TermSpec:
    """A term timed on each rank alone (a GEMM or a layer shard): group 'self' of one rank."""
    return TermSpec(
        name=name,
        op=op,  # type: ignore[arg-type]
        group="self",
        group_size=1,
        plan_group_size=1,
        dtype=dtype,
        calls_per_step=calls_per_step,
        predicted_s=predicted_s,
        **fields,  # type: ignore[arg-type]
    )


def gemm_shapes(
    model: ModelSpec, job: JobSpec, plan: ParallelConfig, rank: RankLoad
) -> list[tuple[str, tuple[int, int, int], float]]:
    """(name, (M, N, K), forward calls per micro-batch on ``rank``, the rank that sets the step)
    of every GEMM: ``planner.cost.compute.layer_gemms`` of its dense and MoE layers (a GEMM both kinds
    run, attention's, once with their calls summed), its MTP projections, then the LM head
    (calls -n: n times per micro-batch on the last rank, never recomputed)."""
    pm = MeshArrays.from_configs([plan])
    calls: dict[tuple[str, tuple[int, int, int]], float] = {}
    for is_moe, count in stage_layer_kinds(model, rank):
        for gemm in layer_gemms(model, job, pm, is_moe):
            key = (gemm.name, _rounded(gemm))
            calls[key] = calls.get(key, 0.0) + count * float(np.asarray(gemm.count).reshape(-1)[0])
    out = [(name, shape, c) for (name, shape), c in calls.items()]
    if rank.mtp:
        h = model.hidden_size
        tokens = float(pm.tokens_per_rank(job.seq_len)[0])
        out.append(("mtp.projection", (max(round(tokens), 1), max(round(h / plan.tp), 1), 2 * h), float(rank.mtp)))
    if rank.heads:
        out.append(("lm_head", _rounded(lm_head_gemm(model, job, pm)), -float(rank.heads)))
    return out


def _rounded(gemm: Gemm) -> tuple[int, int, int]:
    """(M, N, K) of a one-row Gemm as whole numbers of at least 1 (M is fractional when the
    routed tokens do not split evenly over the experts)."""
    return tuple(max(round(float(np.asarray(x).reshape(-1)[0])), 1) for x in (gemm.m_rows, gemm.n, gemm.k))  # type: ignore[return-value]


def capped_shape(shape: tuple[int, int, int], max_flops: float | None) -> tuple[int, int, int]:
    """(M, N, K) cut so that 2*M*N*K <= ``max_flops``, K (the reduction) kept and M x N as square as
    the shape allows: both M and N down to sqrt(max_flops / 2K) where both exceed it, else the
    larger one alone. Cutting the larger alone had left thin GEMMs (Llama-3 70B's MLP at 8,192 x
    14 x 8,192 with gloo's 2e9 cap), which a CPU runs at a fifth of a square GEMM's rate, so `plan
    calibrate --from` a gloo report fitted the profile's rate 0.57x (a review, 2026-12-07)."""
    m, n, k = shape
    if max_flops is None or 2.0 * m * n * k <= max_flops:
        return shape
    budget = max_flops / (2.0 * k)  # M x N at most
    side = math.sqrt(budget)
    if m >= side and n >= side:
        m = n = max(int(side), 1)
    elif m < side:
        n = max(int(budget // m), 1)
    else:
        m = max(int(budget // n), 1)
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
    pm = with_recompute_every(model, job, MeshArrays.from_configs([plan]))
    m = float(num_microbatches(job.batch_size, pm)[0])
    rank = slowest_rank(model, replay_cluster, job, plan)
    passes = float(pm.forward_passes(rank.layers)[0])
    dtype = replay_dtype(job, on_gpu)
    terms = []
    for name, (rows, n, k), per_microbatch in gemm_shapes(model, job, plan, rank):
        calls = m * (-3.0 * per_microbatch if per_microbatch < 0 else passes * per_microbatch)
        replay = capped_shape((rows, n, k), max_gemm_flops)
        terms.append(
            self_term(
                f"gemm.{name}",
                "gemm",
                dtype,
                calls * (rows * n) / (replay[0] * replay[1]),
                predict_gemm_s(*replay, replay_cluster, dtype),
                gemm_mnk=replay,
                plan_gemm_mnk=(rows, n, k),
            )
        )
    return terms
