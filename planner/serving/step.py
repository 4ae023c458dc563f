"""One engine iteration of a serving replica (ARCHITECTURE 9.4): prefill and decode terms.

A replica of tp x pp GPUs runs continuous batching: each iteration carries the decode tokens of
the running sequences and, with chunked prefill (or TensorRT-LLM's in-flight batching), prompt
tokens of newly admitted ones. With pp stages the batch is split into pp micro-batches that chase
each other through the stages (vLLM's and TensorRT-LLM's pipeline-parallel scheduling), so one
*round*, in which every sequence advances one token, is the sum of the stages' times on a
micro-batch: TPOT = round time. At batch 1 PP therefore does not shorten TPOT (every stage's
weights are still read once per token); it only adds memory.

Per round, per GPU, over all layers (the terms of ``round_terms``):
  GEMMs        roofline per group of weights: max(FLOPs / (peak x GEMM efficiency x fitted compute
               fraction), weight bytes / (HBM bandwidth x STREAM fraction x fitted decode HBM
               fraction)) (Williams et al. 2009, 'Roofline'); at decode batch sizes M is small and
               the byte term wins: TPOT ~ weight bytes / achieved bandwidth. Routed experts read
               only the experts some token picked: E x (1 - (1 - k/E)^T) of them (uniform routing).
  attention    decode: the KV cache of every sequence in the micro-batch read from HBM (roofline
               with the score FLOPs: MLA's absorbed attention is 2a(2r + d_rope) FLOPs per key,
               DeepSeek-V2 appendix 'weight absorption'); prefill: the causal score FLOPs at the
               profile's fused-attention efficiency, keys per query from ``flops.attended_keys``
               (sliding windows included). A hybrid's attention blocks alone; its Mamba-2 blocks
               (``mamba_pair``) read and write each decoding sequence's state once per token, and
               run the SSD chunk scan over the prompt tokens (roofline of its FLOPs and traffic).
  TP           2 all-reduces per layer of T x h x 2 bytes (Megatron's TP, Shoeybi et al. 2019),
               one per block in a hybrid (each of its layers is one block);
               decode messages are KiB to tens of MiB, so the engine's one-shot all-reduce latency
               or the ring's 2(t-1) alpha (``cost.comm.all_reduce_s``) weighs: TP=8 cuts TPOT by
               < 8x; the time divided by the fitted ``tp_comm_fraction`` (the speed the engines'
               all-reduces reach at these sizes, below the collective model's: ARCHITECTURE 9.7).
  EP           under attention DP, per MoE layer, the engine's token exchange
               (``EngineProfile.moe_token_exchange``, ``ep_exchange_s``): 2 all-to-alls
               (dispatch in the activation format, combine in bf16) of the rank's tokens x top-k x h
               (``cost.comm.all_to_all_s``), or an all-gather of the group's tokens x h and a
               reduce-scatter of the experts' outputs (``cost.comm.all_gather_s``).
  PP           pp - 1 sends of T x h x 2 bytes per round (``cost.comm.send_recv_s``); the LM head
               on the last stage paces the pipeline, so it counts pp times (``gemm_pairs``).
  overhead     the engine's fitted fixed time per block and iteration (kernel launches and gaps;
               every block once per round), per running sequence on each scheduler (host-side
               scheduling, sampling and detokenisation of each request every iteration; an engine
               that schedules every attention-DP rank apart, its rank's sequences) and per routed
               token copy a rank's MoE layers route (``routed_copies``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.cost.comm import GroupLink, all_gather_s, all_reduce_s, all_to_all_s, group_link, send_recv_s
from planner.cost.compute import (
    activation_bytes,
    elementwise_bytes_per_token,
    mamba_mixer_forward_bytes_per_token,
    mamba_scan_bytes_per_token,
)
from planner.cost.flops import attended_keys, attention_dims, chunked_keys, mamba_scan_flops_per_token_fwd
from planner.schemas.hardware import GPU, ClusterSpec
from planner.schemas.model import ModelSpec
from planner.serving.engine import EngineProfile, FittedParameters
from planner.serving.kv import (
    kv_layers,
    layer_cached_tokens,
    mamba_state_bytes,
    mamba_state_elements,
    mixer_tp,
    sequence_kv_bytes_per_gpu,
)
from planner.serving.layout import Layouts
from planner.serving.memory import (
    MemoryPlan,
    attention_weights_dtype,
    block_weight_bytes_per_gpu,
    lm_head_matrix_params,
    lm_head_read_bytes_per_gpu,
    plan_memory,
    weight_params,
)

ACTIVATION_BYTES = 2.0
"""Activations and collectives move bf16 (2 bytes), as vLLM and TensorRT-LLM do outside GEMMs."""

FP4_OVER_FP8 = 2.0
"""Blackwell's dense FP4 tensor throughput is twice its FP8 (NVIDIA DGX B200 datasheet: 72 PF FP8
and 144 PF FP4 per 8 GPUs). GPUs without FP4 tensor cores (Hopper, Ada, Ampere) run FP4 weights
weight-only, dequantised inside a GEMM whose activations stay in bf16 (W4A16), at their bf16 rate:
TensorRT-LLM's GPT-OSS deployment guide lists Hopper's MoE backend for MXFP4 weights as TRITON
with BF16 activations (Blackwell's TRTLLM backend takes MXFP8 activations), and vLLM's Marlin
MXFP4/NVFP4 kernels on those GPUs are W4A16. Until 2026-12-06 they were priced at the fp8 rate:
GPT-OSS on H100 and H200 came out 85-137% above its published throughput."""


def fp4_tensor_cores(gpu: GPU) -> bool:
    """Whether ``gpu`` multiplies FP4 in its tensor cores (Blackwell, data-centre and GB202);
    elsewhere FP4 weights run weight-only at the bf16 rate (``FP4_OVER_FP8``)."""
    return (gpu.architecture or "").startswith("blackwell")


def resolve_ssm_dtype(model: ModelSpec, engine: EngineProfile, stated: str | None = None) -> str:
    """A hybrid's SSM state format as the engines resolve it: the one asked for (vLLM
    --mamba-ssm-cache-dtype, TensorRT-LLM kv_cache_config.mamba_ssm_cache_dtype), else the
    checkpoint's config.json (``ModelSpec.mamba_ssm_cache_dtype``), else the engine's default
    (``EngineProfile.mamba_ssm_dtype``)."""
    return stated or model.mamba_ssm_cache_dtype or engine.mamba_ssm_dtype


@dataclass(frozen=True)
class Setting:
    """What is served and how: model, cluster, engine, formats and fitted parameters."""

    model: ModelSpec
    cluster: ClusterSpec
    engine: EngineProfile
    weights_dtype: str
    kv_dtype: str
    params: FittedParameters
    ssm_state_dtype: str = "bf16"  # a hybrid's Mamba-2 SSM state (ServeRequest.mamba_ssm_dtype)

    def memory(self, lay: Layouts, context_tokens: float) -> MemoryPlan:
        """``memory.plan_memory`` of the layouts in this setting's formats."""
        return plan_memory(
            self.model,
            self.cluster,
            self.engine,
            lay,
            self.weights_dtype,
            self.kv_dtype,
            context_tokens,
            self.ssm_state_dtype,
        )

    @property
    def gemm_flops_per_s(self) -> float:
        """Large-GEMM rate in the weight format's compute dtype (before the fitted compute fraction)."""
        return self.gemm_rate(self.weights_dtype)

    def gemm_rate(self, weights_dtype: str) -> float:
        """Large-GEMM rate of weights in ``weights_dtype``, in their compute dtype (before the fitted
        compute fraction)."""
        gpu = self.cluster.gpu
        if weights_dtype == "fp4" and fp4_tensor_cores(gpu):
            return gpu.peak_flops_per_s("fp8") * gpu.gemm_efficiency_for("fp8") * FP4_OVER_FP8
        if weights_dtype == "fp4":  # weight-only: bf16 activations (FP4_OVER_FP8)
            return gpu.peak_flops_per_s("bf16") * gpu.gemm_efficiency_for("bf16")
        return gpu.peak_flops_per_s(weights_dtype) * gpu.gemm_efficiency_for(weights_dtype)

    def attention_flops_per_s(self, d_qk: float, d_v: float, context: bool = False) -> float:
        """Fused attention forward at the profile's best-kernel efficiency for heads of ``d_qk`` and
        ``d_v`` (``GPU.attention_efficiency_at``: the exponentials per score weigh more at small
        heads), 16-bit, or for a prompt (``context``) an FP8 FMHA where the engine runs one over an
        fp8 KV cache (``EngineProfile.fp8_context_attention``)."""
        gpu = self.cluster.gpu
        fp8 = context and self.fp8_context_attention
        efficiency = gpu.attention_efficiency_at("fused", d_qk, d_v, forward_only=True, fp8=fp8)
        return gpu.peak_flops_per_s("bf16") * efficiency

    @property
    def fp8_context_attention(self) -> bool:
        """Whether the engine runs the prompt's attention as an FP8 FMHA here
        (``EngineProfile.fp8_context_attention``): over an fp8 KV cache, and where the engine asks for
        it, with fp8 or fp4 weights, never with a checkpoint whose attention stays 16-bit
        (``memory.attention_weights_dtype``) in an engine that keys it on the weights."""
        mode = self.engine.fp8_context_attention
        if mode == "never" or self.kv_dtype != "fp8":
            return False
        if mode == "fp8_kv":
            return True
        return attention_weights_dtype(self.model, self.weights_dtype) in ("fp8", "fp4")

    @property
    def hbm_bytes_per_s(self) -> float:
        """HBM bandwidth at the profile's STREAM rate, before the fitted decode fraction."""
        return self.cluster.gpu.achieved_hbm_bytes_per_s


@dataclass(frozen=True)
class RoundTerms:
    """Seconds per round (columns), by term."""

    gemm_s: np.ndarray
    attention_s: np.ndarray
    elementwise_s: np.ndarray
    tp_comm_s: np.ndarray
    ep_comm_s: np.ndarray
    pp_comm_s: np.ndarray
    overhead_s: np.ndarray

    @property
    def total_s(self) -> np.ndarray:
        return (
            self.gemm_s
            + self.attention_s
            + self.elementwise_s
            + self.tp_comm_s
            + self.ep_comm_s
            + self.pp_comm_s
            + self.overhead_s
        )

    def as_dict(self, i: int) -> dict[str, float]:
        return {k: float(getattr(self, k)[i]) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class RoundCost:
    """A round's time as a function of the fitted parameters (c compute fraction, e expert GEMM
    fraction, h decode HBM fraction, o overhead per block): sum over roofline pairs of
    max(compute / c, memory / h), both / e for routed experts' grouped GEMMs, plus
    compute-only time (prefill attention), plus memory-only time / h (element-wise passes),
    plus communication, plus overhead_count x o. The pairs are computed at c = h = 1 once, so a
    fit re-prices a row with arithmetic only.

    The prompt's attention is not divided by c: its rate is the profile's own measured kernel
    figure (cuDNN / FlashAttention forward, ``GPU.attention_efficiency_at``), while c stands for
    what the engine's weight GEMMs reach against the GEMM figures, on Blackwell mostly the FP4
    GEMMs' rate (``FP4_OVER_FP8``, ARCHITECTURE 9.4), which the attention kernel does not share.
    Divided by c, a 16-bit prompt's attention on Blackwell was priced at 0.55 x 0.665 = 0.37 of
    the 16-bit peak, where cuDNN's prefill kernel measured 0.60-0.63 of GB200's at 16K tokens and 32
    or 64 query heads over 4 or 8 KV heads (1,491 and 1,563 TFLOP/s; NVIDIA/cudnn-frontend
    benchmark/attention_inference/results/prefill_sweep/gb200 @d6d35d69, cuDNN 9.27). Decode
    attention's FLOP side (a pair) is still divided by c, which the same argument says it should
    not be: it rarely binds (a decode query reads its whole KV for a few FLOPs per byte; absorbed
    MLA is the exception), and undivided the throughput CV moved 10.44% -> 10.43% with the RTX PRO
    6000 group 14.9% -> 15.4%, so it was left, a known inconsistency (ARCHITECTURE 9.7)."""

    pair_compute_s: np.ndarray  # (pairs, n): GEMM groups and decode attention
    pair_memory_s: np.ndarray
    compute_only_s: np.ndarray
    memory_only_s: np.ndarray  # element-wise passes over the activations (``activation_traffic_s``)
    tp_comm_s: np.ndarray
    ep_comm_s: np.ndarray
    pp_comm_s: np.ndarray
    overhead_count: np.ndarray  # blocks a round passes through (each micro-batch through every stage's)
    sequence_count: np.ndarray  # running sequences x rounds on a scheduler: the per-sequence host work
    routed_copies: np.ndarray  # token copies x MoE layers a rank routes per round (``routed_copies``)
    gemm_pairs: int  # the first gemm_pairs pairs are GEMMs, the rest attention (and Mamba-2 mixing)
    expert_rows: np.ndarray  # bool per pair: routed-expert GEMMs (scaled by expert_gemm_fraction)
    kv_rows: np.ndarray  # bool per pair: decode attention over the paged KV cache (at kv_read_fraction)

    def terms(self, params: FittedParameters) -> RoundTerms:
        c, h = params.compute_fraction, params.decode_hbm_fraction
        compute = self.pair_compute_s / c
        compute[self.expert_rows] /= params.expert_gemm_fraction
        memory = self.pair_memory_s / h
        memory[self.expert_rows] /= params.expert_gemm_fraction
        memory[self.kv_rows] *= h / params.kv_read_fraction  # decode attention reads the paged KV cache
        pair = np.maximum(compute, memory)
        return RoundTerms(
            gemm_s=pair[: self.gemm_pairs].sum(axis=0),
            attention_s=pair[self.gemm_pairs :].sum(axis=0) + self.compute_only_s,
            elementwise_s=self.memory_only_s / h,
            tp_comm_s=self.tp_comm_s / params.tp_comm_fraction,
            ep_comm_s=self.ep_comm_s,
            pp_comm_s=self.pp_comm_s,
            overhead_s=(
                self.overhead_count * params.block_overhead_us + self.sequence_count * params.sequence_overhead_us
            )
            * 1e-6
            + self.routed_copies * params.routed_copy_ns * 1e-9,
        )

    def total_s(self, params: FittedParameters) -> np.ndarray:
        return self.terms(params).total_s

    def scaled(self, weight: float | np.ndarray) -> RoundCost:
        """``weight`` x this cost (``weight`` >= 0, or one per column)."""
        zero = RoundCost(
            self.pair_compute_s[:0],
            self.pair_memory_s[:0],
            np.zeros_like(self.compute_only_s),
            np.zeros_like(self.memory_only_s),
            np.zeros_like(self.tp_comm_s),
            np.zeros_like(self.ep_comm_s),
            np.zeros_like(self.pp_comm_s),
            np.zeros_like(self.overhead_count),
            np.zeros_like(self.sequence_count),
            np.zeros_like(self.routed_copies),
            0,
            self.expert_rows[:0],
            self.kv_rows[:0],
        )
        return zero.plus(self, weight)

    def plus(self, other: RoundCost, weight: float | np.ndarray = 1.0) -> RoundCost:
        """This cost plus ``weight`` x ``other`` (max(w x, w y) = w max(x, y) for w >= 0, so the
        pairs of both stay pairs): a static batch is one prefill plus osl decode rounds."""
        w = np.asarray(weight, dtype=float)

        def cat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return np.concatenate(
                [a[: self.gemm_pairs], w * b[: other.gemm_pairs], a[self.gemm_pairs :], w * b[other.gemm_pairs :]]
            )

        return RoundCost(
            pair_compute_s=cat(self.pair_compute_s, other.pair_compute_s),
            pair_memory_s=cat(self.pair_memory_s, other.pair_memory_s),
            compute_only_s=self.compute_only_s + w * other.compute_only_s,
            memory_only_s=self.memory_only_s + w * other.memory_only_s,
            tp_comm_s=self.tp_comm_s + w * other.tp_comm_s,
            ep_comm_s=self.ep_comm_s + w * other.ep_comm_s,
            pp_comm_s=self.pp_comm_s + w * other.pp_comm_s,
            overhead_count=self.overhead_count + w * other.overhead_count,
            sequence_count=self.sequence_count + w * other.sequence_count,
            routed_copies=self.routed_copies + w * other.routed_copies,
            gemm_pairs=self.gemm_pairs + other.gemm_pairs,
            expert_rows=self._rows(self.expert_rows, other, other.expert_rows),
            kv_rows=self._rows(self.kv_rows, other, other.kv_rows),
        )

    @staticmethod
    def side_by_side(costs: list[RoundCost]) -> RoundCost:
        """``costs`` of the same pairs (their ``gemm_pairs``, ``expert_rows`` and ``kv_rows`` alike) as
        one cost whose columns are theirs in order: a fit prices hundreds of rows in one ``total_s``."""
        head = costs[0]
        for c in costs[1:]:
            if not (
                c.gemm_pairs == head.gemm_pairs
                and np.array_equal(c.expert_rows, head.expert_rows)
                and np.array_equal(c.kv_rows, head.kv_rows)
            ):
                raise ValueError("side_by_side: costs of different pairs")

        shared = ("gemm_pairs", "expert_rows", "kv_rows")  # the pairs' shape, the same in every cost
        columns = {
            f.name: np.concatenate([getattr(c, f.name) for c in costs], axis=-1)
            for f in dataclasses.fields(RoundCost)
            if f.name not in shared
        }
        return RoundCost(**columns, **{name: getattr(head, name) for name in shared})

    def _rows(self, mine: np.ndarray, other: RoundCost, theirs: np.ndarray) -> np.ndarray:
        """A per-pair mask of this cost and ``other`` in ``plus``'s order of pairs."""
        return np.concatenate(
            [mine[: self.gemm_pairs], theirs[: other.gemm_pairs], mine[self.gemm_pairs :], theirs[other.gemm_pairs :]]
        )


def _link(cluster: ClusterSpec, size: np.ndarray, stride: object) -> GroupLink:
    """``cost.comm.group_link`` of integer group sizes (the layout columns are floats)."""
    size_i = np.asarray(size).astype(np.int64)
    return group_link(cluster, size_i, np.broadcast_to(np.asarray(stride).astype(np.int64), size_i.shape))


def experts_touched_fraction(model: ModelSpec, tokens: np.ndarray) -> np.ndarray:
    """Share of a MoE layer's experts at least one of ``tokens`` routes to: 1 - (1 - k/E)^T, for
    uniform independent routing (an estimate; real routing is skewed, which touches fewer)."""
    if not model.is_moe:
        return np.zeros_like(tokens)
    k, E = float(model.num_experts_per_tok or 1), float(model.num_experts_total)
    return 1.0 - np.power(1.0 - k / E, np.maximum(tokens, 0.0))


STATE_UPDATE_FLOPS_PER_ELEMENT = 5.0
"""FLOPs per SSM state element of one decode step: decay and input, h' = exp(dt A) h + dt B x
(3), and the readout C h (2) (Dao and Gu 2024, 'Transformers are SSMs', the recurrent form of
SSD; vLLM's selective_state_update kernel, which reads and writes the state once)."""


def multi_node_nvlink(cluster: ClusterSpec) -> bool:
    """Whether the cluster's NVLink domain spans hosts (GB200 / GB300 NVL72: 72 GPUs over 18 hosts
    of 4), which TensorRT-LLM's MNNVL all-to-all needs (``MnnvlMemory.supports_mnnvl``)."""
    p = cluster.profile
    return p.gpus_per_node > (p.gpus_per_host or p.gpus_per_node)


def received_share(model: ModelSpec, lay: Layouts) -> np.ndarray:
    """Share of the tokens with at least one of their top-k (distinct) experts among an EP rank's
    E/ep under uniform routing: 1 - C(E - E/ep, k) / C(E, k) (1/ep at top 1; DeepSeek-V3's top 8
    of 256 at EP 16: 0.41). An all-to-all dispatch sends a token, with its k choices, to each such
    rank (TensorRT-LLM's MNNVL all-to-all, fused_moe_wide_ep.py)."""
    k = int(model.num_experts_per_tok or 0)
    experts = float(model.num_experts_total)
    if not k or not experts:
        return np.zeros(len(lay.ep))
    local = experts / lay.ep
    none_here = np.ones_like(local)
    for i in range(k):  # C(E - E/ep, k) / C(E, k) as a product
        none_here = none_here * np.clip((experts - local - i) / (experts - i), 0.0, 1.0)
    return 1.0 - none_here


def all_to_all_dispatch(s: Setting, lay: Layouts, top_k: float) -> np.ndarray:
    """Per layout, whether the engine dispatches a MoE layer's tokens by all-to-all (each rank then
    holds only the copies routed to its experts) rather than gathering the attention-DP group's
    tokens on every rank (``ep_exchange_s``)."""
    if s.engine.moe_token_exchange == "all_gather" or not multi_node_nvlink(s.cluster):
        return np.zeros(len(lay.ep), dtype=bool)
    return np.asarray(lay.attention_dp & (lay.ep > top_k))


def schedulers(s: Setting, lay: Layouts) -> np.ndarray:
    """Schedulers of each layout's replica: one per attention-DP rank where the engine schedules
    each apart (``EngineProfile.scheduler_per_attention_dp_rank``: each with its own batch cap and
    token budget), else one."""
    return np.where(lay.attention_dp & s.engine.scheduler_per_attention_dp_rank, lay.tp, 1.0)


def _busiest_share(count: np.ndarray, parts: np.ndarray) -> np.ndarray:
    """``count`` split over ``parts`` (pipeline micro-batches, attention-DP schedulers), as the
    busiest part holds it: count / parts, and at least one while any runs."""
    return np.maximum(count / parts, np.minimum(count, 1.0))


class RoundPricer:
    """The terms of rounds of one setting's layouts (the module docstring), as functions of the
    round's load. What depends on the layouts alone (the groups' links, the weight bytes and FLOP
    times per token, the shares and per-token traffic) is worked out once, the first time a round
    needs it, so that a replay pricing hundreds of rounds of one layout at different loads
    (``replay.replay``) pays for it once: ``round_cost`` on a fresh pricer is the one price, and
    each module-level term (``gemm_pairs``, ``tp_all_reduce_s``, ...) this class's method of it."""

    def __init__(self, s: Setting, lay: Layouts) -> None:
        self.s = s
        self.lay = lay

    # -- what the layouts alone decide ------------------------------------------------------------

    @functools.cached_property
    def tp_link(self) -> GroupLink:
        return _link(self.s.cluster, self.lay.tp, 1)

    @functools.cached_property
    def ep_link(self) -> GroupLink:
        return _link(self.s.cluster, self.lay.ep, 1)

    @functools.cached_property
    def pp_link(self) -> GroupLink:
        return _link(self.s.cluster, self.lay.pp, self.lay.tp)

    @functools.cached_property
    def received_share(self) -> np.ndarray:
        return received_share(self.s.model, self.lay)

    @functools.cached_property
    def top_k(self) -> float:
        return float(self.s.model.num_experts_per_tok or 0)

    @functools.cached_property
    def all_to_all(self) -> np.ndarray:
        """``all_to_all_dispatch`` at the model's top-k."""
        return all_to_all_dispatch(self.s, self.lay, self.top_k)

    @functools.cached_property
    def schedulers(self) -> np.ndarray:
        return schedulers(self.s, self.lay)

    @functools.cached_property
    def attention_share(self) -> np.ndarray:
        """Ranks a replica's sequences (and prompts) are split over for attention: tp under attention
        DP (each rank holds whole sequences), else 1."""
        return np.where(self.lay.attention_dp, self.lay.tp, 1.0)

    @functools.cached_property
    def heads_per_rank(self) -> np.ndarray:
        m = self.s.model
        return np.where(
            self.lay.attention_dp, float(m.num_attention_heads), np.ceil(m.num_attention_heads / self.lay.tp)
        )

    @functools.cached_property
    def _block_weight_bytes(self) -> tuple[np.ndarray, np.ndarray]:
        """(non-expert, routed-expert) bytes of the blocks one GPU of a stage holds, times pp."""
        non_expert, experts = block_weight_bytes_per_gpu(self.s.model, self.lay, self.s.weights_dtype)
        return non_expert * self.lay.pp, experts * self.lay.pp

    @functools.cached_property
    def _gemm_s_per_token(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(non-expert, routed-expert, LM head FLOP seconds per token through the blocks, per token
        that needs logits; head byte seconds) of ``gemm_pairs``."""
        s, lay, m = self.s, self.lay, self.s.model
        w = weight_params(m)
        active_expert_params = m.num_moe_layers * self.top_k * m.parameter_counts.moe_expert_each
        rate = s.gemm_flops_per_s
        # the attention projections at their own format's rate (16-bit in gpt-oss's checkpoint)
        attention_rate = s.gemm_rate(attention_weights_dtype(m, s.weights_dtype))
        non_expert = 2.0 / lay.tp * (w.attention / attention_rate + w.dense / rate)
        # split over tp, or whole on each attention-DP rank for its 1/tp of the tokens: the same FLOPs per GPU
        experts = 2.0 * active_expert_params / lay.tp / rate
        # the head stays 16-bit (memory.EMBEDDING_BYTES); the last stage runs it besides its share of
        # the blocks and sets the pipeline's pace
        head = lay.pp * (2.0 * lm_head_matrix_params(m) / lay.tp) / s.gemm_rate("bf16")
        head_bytes_s = lay.pp * lm_head_read_bytes_per_gpu(m, s.engine, lay) / s.hbm_bytes_per_s
        return non_expert, experts, head, head_bytes_s

    @functools.cached_property
    def _activation_bytes_per_token(self) -> tuple[np.ndarray, np.ndarray]:
        """Bytes per token (per micro-batch) of ``activation_traffic_s``'s passes over all layers:
        (those over the tokens a rank holds, those over the routed copies of the group's)."""
        m, lay = self.s.model, self.lay
        t = lay.tp.astype(float)
        share = np.where(lay.attention_dp, 1.0 / t, 1.0)
        k = self.top_k

        def per_layer(moe: bool) -> tuple[np.ndarray, np.ndarray]:
            parts = elementwise_bytes_per_token(
                m, moe, t, share, routed_copies=k / t, permute_copies=2.0 * k / lay.ep, routed_act=activation_bytes(m)
            )
            group = parts.pop("routed_activation") + parts.pop("permute")
            return np.asarray(sum(parts.values())), group

        own, group = (m.num_dense_layers * part for part in per_layer(False))
        if m.num_moe_layers:
            moe_own, moe_group = per_layer(True)
            own, group = own + m.num_moe_layers * moe_own, group + m.num_moe_layers * moe_group
        return own, group

    # -- the terms ----------------------------------------------------------------------------------

    def tp_all_reduce_s(self, message_bytes: np.ndarray) -> np.ndarray:
        """One TP all-reduce: the ring/NVLS price of ``cost.comm.all_reduce_s``, or the engine's
        one-shot kernel inside one node (latency + (t-1) x M over the link: each rank reads every
        peer's whole buffer), whichever is faster, as the engines pick by message size (one-shot for
        decode's KiB messages, ring/NVLS for prefill's MiB ones)."""
        s, lay, link = self.s, self.lay, self.tp_link
        ring = all_reduce_s(message_bytes, link)
        if not s.engine.custom_all_reduce or s.engine.custom_all_reduce_latency_us is None:
            return ring
        # (t-1) buffers over the links among the group (all of a switch's, t-1 of a switchless mesh's)
        one_shot = s.engine.custom_all_reduce_latency_us * 1e-6 + (lay.tp - 1) * message_bytes / link.intra_bytes_per_s
        inside = lay.tp <= s.cluster.fast_domain_gpus
        return np.where((lay.tp > 1) & inside, np.minimum(ring, one_shot), ring)

    def round_weight_bytes(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(non-expert, routed-expert) weight bytes one GPU reads in a round of micro-batches of
        ``tokens``: every block's once over the pp stages' passes, and of the routed experts those
        some token picks (``experts_touched_fraction``)."""
        non_expert, experts = self._block_weight_bytes
        return non_expert, experts * experts_touched_fraction(self.s.model, tokens)

    def gemm_pairs(
        self, tokens: np.ndarray, head_tokens: np.ndarray, rank_tokens: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(FLOP time, byte time) of the weight GEMMs of a round on one GPU, summed over the stages,
        for the non-expert weights, the routed experts and the LM head (see the module docstring).
        ``tokens``: tokens per micro-batch through the blocks; ``head_tokens``: those that need logits.
        Under pipeline parallelism the head counts pp times: the engines split the blocks evenly
        over the stages and run the head on the last (TensorRT-LLM's and vLLM's PP), so the last
        stage is the slowest, and with pp micro-batches in flight a round, in which each passes every
        stage once, lasts pp times that stage's time: the blocks once and the head pp times, where the
        sum of the stages had counted the head once. Llama-3.3-70B in FP4 at PP 8 on the RTX PRO
        6000: the head's 2.1 GB of bf16 weights beside a stage's 4.9 GB of blocks; its 10 rows went
        +39% -> +27% (ARCHITECTURE 9.7). Each GEMM runs at its weights' format's rate
        (``Setting.gemm_rate``): the blocks' format, the attention projections' where the checkpoint keeps
        them 16-bit (``memory.attention_weights_dtype``, gpt-oss), the head's 16-bit
        (``memory.EMBEDDING_BYTES``). ``rank_tokens`` (default ``tokens``): the busiest rank's tokens
        through the non-expert weights, in the replica's count (times the attention-DP group): under
        attention DP each rank runs them whole for the tokens it holds, a lone prompt on one rank
        (``cost``)."""
        non_expert_bytes, expert_bytes = self.round_weight_bytes(tokens)
        non_expert_s, experts_s, head_s, head_bytes_s = self._gemm_s_per_token
        bw = self.s.hbm_bytes_per_s
        own = tokens if rank_tokens is None else rank_tokens
        compute = np.stack(np.broadcast_arrays(non_expert_s * own, experts_s * tokens, head_s * head_tokens))
        memory = np.stack(np.broadcast_arrays(non_expert_bytes / bw, expert_bytes / bw, head_bytes_s))
        return compute, np.broadcast_to(memory, compute.shape)

    def decode_attention_pair(self, sequences: np.ndarray, context: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(FLOP time, byte time) of a round's decode attention: every sequence's KV read once."""
        s, lay, m = self.s, self.lay, self.s.model
        per_rank = sequences / self.attention_share
        kv_bytes = per_rank * sequence_kv_bytes_per_gpu(
            m, s.kv_dtype, context, 1, lay.tp, lay.pp, lay.attention_dp, s.engine.chunked_kv
        )
        kv_bytes = kv_bytes * lay.pp
        if m.is_mla:
            # absorbed: scores over [latent; rope] keys, values the latent itself
            d_qk, d_v = float(m.kv_lora_rank + m.qk_rope_head_dim), float(m.kv_lora_rank)  # type: ignore[operator]
        else:
            d_qk, d_v = attention_dims(m)
        per_key = 2.0 * (d_qk + d_v)
        keys = layer_cached_tokens(m, context, chunked_kv="chunk")  # the mask, whatever the cache keeps
        flops = per_rank * self.heads_per_rank * per_key * keys
        return flops / s.attention_flops_per_s(d_qk, d_v), kv_bytes / s.hbm_bytes_per_s

    def mamba_pair(self, sequences: np.ndarray, prompt_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(FLOP time, byte time) of a round's Mamba-2 mixing over all the hybrid's Mamba blocks on one
        GPU per micro-batch: each decoding sequence's conv and SSM state read and written once
        (``kv.mamba_state_bytes``, 2x: vLLM's causal_conv1d_update and selective_state_update update
        them in place) with ``STATE_UPDATE_FLOPS_PER_ELEMENT`` per SSM element, and the prompt tokens'
        SSD chunk scan forward (``flops.mamba_scan_flops_per_token_fwd``, its traffic
        ``compute.mamba_scan_bytes_per_token``, the conv and gate ``compute.mamba_mixer_forward_bytes
        _per_token``, the counts training's forward prices) at the 16-bit rate (the scan's matmuls are
        16-bit whatever the weights). Heads split over tp, whole per rank under attention DP. Zero for a
        transformer."""
        s, lay, m = self.s, self.lay, self.s.model
        n_mamba = float(m.blocks_of("M"))
        if not n_mamba:
            zero = np.zeros(np.broadcast_shapes(np.shape(sequences), np.shape(prompt_tokens), lay.tp.shape))
            return zero, zero
        t = mixer_tp(lay.tp, lay.attention_dp)
        sequences, prompt_tokens = sequences / self.attention_share, prompt_tokens / self.attention_share
        _, ssm = mamba_state_elements(m, t)
        state_flops = sequences * STATE_UPDATE_FLOPS_PER_ELEMENT * ssm
        scan_flops = prompt_tokens * mamba_scan_flops_per_token_fwd(m, 1.0) / t
        state_bytes = 2.0 * sequences * mamba_state_bytes(m, t, s.ssm_state_dtype)
        token_bytes = (sequences + prompt_tokens) * mamba_mixer_forward_bytes_per_token(m) / t
        scan_bytes = prompt_tokens * mamba_scan_bytes_per_token(m, t)
        gpu = s.cluster.gpu
        rate = gpu.peak_flops_per_s("bf16") * gpu.gemm_efficiency_for("bf16")
        compute = n_mamba * (state_flops + scan_flops) / rate
        memory = n_mamba * (state_bytes + token_bytes + scan_bytes) / s.hbm_bytes_per_s
        return compute, memory

    def prefill_attention_s(self, tokens: np.ndarray, prompt_len: float) -> np.ndarray:
        """Prefill attention of ``tokens`` prompt tokens per micro-batch from prompts of ``prompt_len``:
        causal score FLOPs 2 a (d_qk + d_v) x keys per query per layer (``flops.attended_keys``)."""
        m = self.s.model
        d_qk, d_v = attention_dims(m)
        sliding, chunked = m.num_sliding_layers, m.num_chunked_layers
        keys = (kv_layers(m) - sliding - chunked) * attended_keys(int(prompt_len), None)
        if sliding:
            keys += sliding * attended_keys(int(prompt_len), m.sliding_window)
        if chunked:
            keys += chunked * chunked_keys(int(prompt_len), m.attention_chunk_size or int(prompt_len))
        flops = tokens / self.attention_share * self.heads_per_rank * 2.0 * (d_qk + d_v) * keys
        return flops / self.s.attention_flops_per_s(d_qk, d_v, context=True)

    def activation_traffic_s(self, tokens: np.ndarray, rank_tokens: np.ndarray | None = None) -> np.ndarray:
        """Byte time of a round's element-wise passes over ``tokens`` (per micro-batch) outside the
        GEMMs and attention, summed over all layers, on one GPU, before the fitted decode HBM
        fraction: norms, residual adds, RoPE, the MLPs' gated activation and the MoE's token reorders,
        at the counts training prices (``compute.elementwise_bytes_per_token``). Under TP every rank
        normalises all the tokens, under attention DP its 1/tp; the MLP widths and heads split over tp;
        a rank's experts run k/tp routed copies per token at their whole width (the experts split over
        ep, each over tp/ep) and reorder the k/ep copies routed to them, dispatch and combine
        (TensorRT-LLM's CUTLASS MoE expands the rows to expert order and finalises them back; under
        attention DP after the group's tokens are gathered). Qwen3-235B (top 8) at DEP 4 moves 113 KB
        per token and layer on each GPU this way: at 3,000 tokens per iteration 32 GB, as much as the
        rank's FP4 expert weights; unpriced until 2026-12-06 (ARCHITECTURE 9.7). The passes over a
        rank's own tokens (all but the routed copies' activation and reorders) run over
        ``rank_tokens`` (default ``tokens``; ``gemm_pairs``)."""
        own, group = self._activation_bytes_per_token
        own_tokens = tokens if rank_tokens is None else rank_tokens
        return (own_tokens * own + tokens * group) / self.s.hbm_bytes_per_s

    def ep_exchange_s(
        self, tokens: np.ndarray, top_k: float, width: float, dispatch_bytes: float, link: GroupLink
    ) -> np.ndarray:
        """One MoE layer's token exchange over an attention-DP group of ``tokens`` (the group's, each
        rank holding tokens / tp), as the engine runs it (``EngineProfile.moe_token_exchange``):
        'all_gather', every rank gathers the group's tokens (dispatch format) before the routed
        experts and the outputs are reduce-scattered back in bf16 (vLLM's default
        allgather_reducescatter, SGLang's DP-attention gather and scatter); 'all_to_all_over_mnnvl',
        TensorRT-LLM's PyTorch backend: 2 all-to-alls, each token to every rank holding one of its
        experts (``received_share``: its top-k copies' ranks, less those that share one), where EP exceeds
        top-k over multi-node NVLink, else the all-gather (tensorrt_llm/_torch/modules/fused_moe
        select_alltoall_method_type: moe_ep_size <= top_k, or no MNNVL -> NotEnabled). Priced with
        an all-to-all everywhere until 2026-12-06 (ARCHITECTURE 9.7)."""
        dispatch = self.all_to_all if top_k == self.top_k else all_to_all_dispatch(self.s, self.lay, top_k)
        gather = np.zeros(0)
        if not dispatch.all():
            gather = all_gather_s(tokens * width * dispatch_bytes, link) + all_gather_s(
                tokens * width * ACTIVATION_BYTES, link
            )
            if not dispatch.any():
                return gather
        # each token goes once to every rank holding one of its experts (at top 1, its one expert's)
        sent = tokens / self.lay.tp * self.lay.ep * self.received_share
        a2a = all_to_all_s(sent * width * dispatch_bytes, link) + all_to_all_s(sent * width * ACTIVATION_BYTES, link)
        return a2a if dispatch.all() else np.where(dispatch, a2a, gather)

    def routed_copies(self, tokens: np.ndarray) -> np.ndarray:
        """Token copies (each token once per top-k expert) a rank's MoE layers sort in a round of
        ``tokens`` (the replica's, per micro-batch), summed over the MoE layers. The engines' fused MoE
        sorts the k copies of every token the rank holds into expert order and builds the expert maps
        over them, whichever rank's experts they go to: TensorRT-LLM's CutlassMoeFCRunner::runMoe
        (cpp/tensorrt_llm/kernels/mixtureOfExperts/moe_kernels.cu @03cff08f) keys the copies bound for
        other EP ranks past its own experts and radix-sorts all k x num_rows (``sorter_.run(..., k *
        num_rows)``) before expanding its own. Under TP every rank holds all the tokens, under attention
        DP with an all-gather the group's. An all-to-all dispatch (``all_to_all_dispatch``) sends a
        token, with its k choices, to each rank that holds one of its experts (``received_share``).
        The time per copy is fitted (``FittedParameters.routed_copy_ns``; ARCHITECTURE 9.7)."""
        received = np.where(self.all_to_all, self.received_share, 1.0)
        return float(self.s.model.num_moe_layers) * np.asarray(tokens, dtype=float) * self.top_k * received

    def cost(
        self,
        decode_sequences: np.ndarray,
        decode_context: np.ndarray,
        prefill_tokens: np.ndarray,
        prompt_len: float,
    ) -> RoundCost:
        """One round of a replica: ``decode_sequences`` running sequences at mean context
        ``decode_context`` plus ``prefill_tokens`` prompt tokens (whole replica), split over the pp
        micro-batches as the busiest holds them (``_busiest_share``): B / pp sequences and at least one
        while any runs; P / pp prompt tokens and at least one piece of a prompt, the whole prompt or
        the chunk the engine's token budget cuts it to (``search.prefill_chunk``), while any prefills.
        A piece runs in one micro-batch through every stage in turn (vLLM's and TensorRT-LLM's
        pipeline parallelism schedule a request into one micro-batch), so a round whose prompt tokens
        are fewer than pp pieces lasts as long as its busiest micro-batch's pass, the stages' share of
        which the others wait on: a lone 2K prompt of Llama-3.1 405B on TP1 x PP8 takes its pass
        through the 8 stages, where spread over them at once it had come out at 0.22 s against a
        FLOP floor of 0.84 s (a review of `plan serve`, 2026-12-07; ARCHITECTURE 9.4)."""
        s, lay, m = self.s, self.lay, self.s.model
        pp = lay.pp
        decode_sequences = np.asarray(decode_sequences, dtype=float)
        dec = _busiest_share(decode_sequences, pp)
        # under attention DP each rank holds whole prompts, so the piece is a rank's: a rank's P / tp
        # prompt tokens over pp micro-batches, at least one piece of them (a review, 2026-12-07: on the
        # replica's P, one 2K prompt on each of 8 ranks at TP8 x PP2 came out 219 ms against 424 at PP1)
        share = self.attention_share
        total = np.asarray(prefill_tokens, dtype=float)
        prompt = total / share
        piece = prompt_piece(s.engine, prompt_len)
        pf = np.maximum(prompt / pp, np.minimum(prompt, piece)) * share
        # what a rank runs for the tokens it holds (the attention core, and under attention DP the
        # non-expert weights and the passes over its own tokens) runs a prompt's piece whole on the one
        # rank that holds it, and a decoding sequence's: the busiest rank holds at least that piece and
        # one sequence while any runs, in the replica's count (times the group). A lone 32K prompt of
        # Qwen3-30B-A3B at TP 8 with attention DP had run its attention as 4K on each rank, 0.32 s of
        # TTFT below the 0.41 s its FLOPs need at peak (a review, 2026-12-07), and, until 2026-12-08, its
        # attention projections too (TTFT 0.99 -> 1.10 s, under vLLM), and one decoding sequence's 3.2 GB
        # of KV read an eighth on each rank (TPOT 6.7 -> 7.7 ms)
        attention_pf = np.maximum(prompt / pp, np.minimum(total, piece)) * share
        rank_dec = _busiest_share(dec, share) * share
        tokens = dec + pf
        rank_tokens = rank_dec + attention_pf
        head_tokens = dec + np.where(pf > 0, np.maximum(pf / max(prompt_len, 1.0), 1.0), 0.0)
        g_compute, g_memory = self.gemm_pairs(tokens, head_tokens, rank_tokens)
        a_compute, a_memory = self.decode_attention_pair(rank_dec, np.asarray(decode_context, dtype=float))
        m_compute, m_memory = self.mamba_pair(rank_dec, attention_pf)
        message = tokens * m.hidden_size * ACTIVATION_BYTES
        blocks = float(m.num_hidden_layers) * m.layer_kind(moe=False).blocks  # one TP all-reduce after each
        n = g_compute.shape[1]
        zero = np.zeros(n)
        tp_comm = (
            zero if lay.attention_dp.all() else np.where(lay.attention_dp, 0.0, blocks * self.tp_all_reduce_s(message))
        )
        exchanging = lay.attention_dp & (lay.ep > 1)
        ep_comm = zero
        if exchanging.any():
            dispatch_bytes = 1.0 if s.weights_dtype in ("fp8", "fp4") else ACTIVATION_BYTES
            width = float(m.expert_input_size)  # a LatentMoE dispatches the latent projection
            exchange = self.ep_exchange_s(tokens, self.top_k, width, dispatch_bytes, self.ep_link)
            ep_comm = np.where(exchanging, float(m.num_moe_layers) * exchange, 0.0)
        pp_comm = (pp - 1) * send_recv_s(message, self.pp_link)
        # an engine that schedules each attention-DP rank apart does the ranks' host work side by side
        return RoundCost(
            pair_compute_s=np.concatenate([g_compute, a_compute[None, :], m_compute[None, :]]),
            pair_memory_s=np.concatenate([g_memory, a_memory[None, :], m_memory[None, :]]),
            compute_only_s=self.prefill_attention_s(attention_pf, prompt_len),
            memory_only_s=self.activation_traffic_s(tokens, rank_tokens),
            tp_comm_s=np.broadcast_to(tp_comm, (n,)).astype(float),
            ep_comm_s=np.broadcast_to(ep_comm, (n,)).astype(float),
            pp_comm_s=np.broadcast_to(pp_comm, (n,)).astype(float),
            # every micro-batch passes its stage's share of the blocks at each of pp pipeline steps: all per round
            overhead_count=np.full(n, blocks),
            sequence_count=np.broadcast_to(_busiest_share(decode_sequences, self.schedulers), (n,)).astype(float),
            routed_copies=np.broadcast_to(self.routed_copies(tokens), (n,)).astype(float),
            gemm_pairs=3,
            expert_rows=np.array([False, True, False, False, False]),
            kv_rows=np.array([False, False, False, True, False]),
        )


def tp_all_reduce_s(s: Setting, lay: Layouts, message_bytes: np.ndarray) -> np.ndarray:
    """``RoundPricer.tp_all_reduce_s``."""
    return RoundPricer(s, lay).tp_all_reduce_s(message_bytes)


def round_weight_bytes(s: Setting, lay: Layouts, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``RoundPricer.round_weight_bytes``."""
    return RoundPricer(s, lay).round_weight_bytes(tokens)


def gemm_pairs(s: Setting, lay: Layouts, tokens: np.ndarray, head_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``RoundPricer.gemm_pairs``."""
    return RoundPricer(s, lay).gemm_pairs(tokens, head_tokens)


def decode_attention_pair(
    s: Setting, lay: Layouts, sequences: np.ndarray, context: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``RoundPricer.decode_attention_pair``."""
    return RoundPricer(s, lay).decode_attention_pair(sequences, context)


def mamba_pair(
    s: Setting, lay: Layouts, sequences: np.ndarray, prompt_tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``RoundPricer.mamba_pair``."""
    return RoundPricer(s, lay).mamba_pair(sequences, prompt_tokens)


def prefill_attention_s(s: Setting, lay: Layouts, tokens: np.ndarray, prompt_len: float) -> np.ndarray:
    """``RoundPricer.prefill_attention_s``."""
    return RoundPricer(s, lay).prefill_attention_s(tokens, prompt_len)


def activation_traffic_s(s: Setting, lay: Layouts, tokens: np.ndarray) -> np.ndarray:
    """``RoundPricer.activation_traffic_s``."""
    return RoundPricer(s, lay).activation_traffic_s(tokens)


def ep_exchange_s(
    s: Setting, lay: Layouts, tokens: np.ndarray, top_k: float, width: float, dispatch_bytes: float, link: GroupLink
) -> np.ndarray:
    """``RoundPricer.ep_exchange_s``."""
    return RoundPricer(s, lay).ep_exchange_s(tokens, top_k, width, dispatch_bytes, link)


def routed_copies(s: Setting, lay: Layouts, tokens: np.ndarray) -> np.ndarray:
    """``RoundPricer.routed_copies``."""
    return RoundPricer(s, lay).routed_copies(tokens)


def round_cost(
    s: Setting,
    lay: Layouts,
    decode_sequences: np.ndarray,
    decode_context: np.ndarray,
    prefill_tokens: np.ndarray,
    prompt_len: float,
) -> RoundCost:
    """``RoundPricer.cost`` (a pricer kept for many rounds of the same layouts prices them faster)."""
    return RoundPricer(s, lay).cost(decode_sequences, decode_context, prefill_tokens, prompt_len)


def prompt_piece(engine: EngineProfile, prompt_len: float) -> float:
    """Tokens of a prompt one iteration takes: the prompt, or the chunk the engine's token budget cuts
    it to, at least one (TensorRT-LLM without chunked prefill runs a prompt whole; longer prompts
    than its budget need chunking, priced the same: ``search.runs_chunked``)."""
    return min(max(prompt_len, 1.0), float(engine.max_num_batched_tokens))


def steady_round(s: Setting, lay: Layouts, batch: np.ndarray, input_len: float, output_len: float) -> RoundCost:
    """A replica's steady round at ``batch`` running sequences of ``input_len`` / ``output_len``
    tokens: their decode tokens at the mean context isl + osl / 2, and the prompts a round takes,
    B x isl / osl tokens on the mean (Little's law: every osl rounds each sequence is replaced), in
    whole pieces as the engines run them (a prompt, or the chunk the token budget cuts it to,
    ``search.prefill_chunk``). A scheduler takes q = (B / its share) x pieces per prompt / osl pieces
    a round on the mean, arriving at random (Poisson, lam a second): a round after one of length T
    holds K ~ Poisson(lam T) of them. A round without one decodes only (T0); a round with K >= 1
    lasts as long as its busiest micro-batch (``RoundPricer.cost``), one piece while K <= pp (the
    pieces of a round fill the pp micro-batches side by side: T1), K / pp beyond. The rounds form a
    two-state chain (a long round draws more pieces into the next, so they bunch): the share of
    rounds with a piece is a / (1 - b + a), a = 1 - e^(-lam T0), b = 1 - e^(-lam T1), and lam
    solves q = lam x the mean round; those rounds are priced once at their mean pieces,
    E[max(K, pp) | K >= 1] over the chain (``_busiest_pieces``; the price is linear past pp). The
    chain's weights are taken at the setting's parameters (a fit re-prices the two rounds, not the
    weights). Against the replay of Poisson arrivals at the batch it ran (70B, 8 req/s of 2K / 256 on
    one DGX H100): 2 x TP4 62.0 ms against 61.6, TP4 x PP2 126.5 against 120.0, TP2 x PP4 248.8
    against 241.7, TP8 147.5 against 135.5 (when the chain landed: 69.5 against 70.3, 121.9 against
    115.9, 127.7 with the pieces of each round drawn apart, Poisson(q), 238.5 against 229.6).
    Spread evenly over every round instead (until 2026-12-07), the mean prompt
    tokens made each decode round of a MoE read the routed experts of its few prompt tokens too (Nemotron 3 Nano at
    concurrency 1, 2K / 512 on B200 TP2: four prompt tokens a round beside the one decoded, 1.01 ms
    of weight reads where a decode round reads 0.35), each round of a dense model at a small batch
    bound by its weights where the rounds with a prompt are bound by its FLOPs, and a pipeline's
    prompt pass shared by its stages at once: 70B on one DGX H100 with a 30 ms TPOT target had a
    steady curve at 287 tokens/s per GPU for 2 x TP4 where the replay gave 142 (now 143). The one
    round ``search.price_colocated``, the serving fit's concurrency and TPOT rows
    (``runs.plan_row``, ``calibrate.replay_ratios``) and a row's latencies at its load
    (``runs._latencies``) price."""
    batch = np.asarray(batch, dtype=float)
    pricer = RoundPricer(s, lay)
    context = np.full(batch.shape, input_len + output_len / 2.0)
    piece = prompt_piece(s.engine, input_len)
    pieces = math.ceil(max(input_len, 1.0) / piece)
    q = batch / pricer.attention_share * pieces / output_len  # a scheduler's pieces a round, on the mean
    pp = np.broadcast_to(lay.pp, q.shape).astype(float)
    tokens = max(input_len, 1.0) / pieces * pricer.attention_share  # a piece on every scheduler: the replica's
    decode_only = pricer.cost(batch, context, np.zeros_like(q), input_len)
    t0 = decode_only.total_s(s.params)
    t1 = pricer.cost(batch, context, pp * tokens, input_len).total_s(s.params)  # up to pp pieces: one pass

    # arrivals at random (Poisson, lam pieces a second) into rounds of two kinds: a round after one of
    # length T holds Poisson(lam T) pieces, so long rounds (with pieces) draw more into the next and the
    # pieces bunch; the chain's share of rounds with a piece, and lam from q = lam x the mean round
    def chain(lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(P(a piece after a round without one), the share of rounds with a piece) at ``lam``."""
        a, b = -np.expm1(-lam * t0), -np.expm1(-lam * t1)
        return a, a / np.maximum(1.0 - b + a, 1e-300)

    lam = _arrival_rate(q, t0, t1, chain)
    a, share = chain(lam)
    after_short = (1.0 - share) * a / np.maximum(share, 1e-300)  # of the rounds with a piece, those after one without
    mean_pieces = after_short * _busiest_pieces(lam * t0, pp) + (1.0 - after_short) * _busiest_pieces(lam * t1, pp)
    with_prompts = pricer.cost(batch, context, mean_pieces * tokens, input_len)
    return decode_only.scaled(1.0 - share).plus(with_prompts, share)


ARRIVAL_RATE_BISECTIONS = 64
"""Halvings of ``_arrival_rate``'s bracket: 2^-64 of q / t0, below float64's resolution of it."""


def _arrival_rate(
    q: np.ndarray,
    t0: np.ndarray,
    t1: np.ndarray,
    chain: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> np.ndarray:
    """The rate lam (pieces a second) at which a scheduler's rounds take q pieces each on the mean:
    lam x ((1 - share) t0 + share t1) = q, share the chain's share of rounds with a piece at lam.
    The left side rises from 0 with lam (a higher rate makes more rounds long) and is at least q at
    lam = q / t0 (every round at least t0 long), so the root lies in [0, q / t0], found by
    bisection. Until 2026-12-08 the fixed point lam <- q / mean round was iterated undamped, which,
    where a round with a piece lasts many times one without (t1 / t0 large: a 32K prompt's chunks
    beside a few decoding sequences), swung between two rates and never settled: Llama-3.1 70B on
    one DGX H100 at TP 8, 32K / 500 at 16 in flight, priced 0.50 pieces a round where it takes
    0.13, a steady TPOT of 234 ms where the replay gives 74 (a review of `plan serve`); now 78."""
    lo, hi = np.zeros_like(q), q / t0
    for _ in range(ARRIVAL_RATE_BISECTIONS):
        mid = 0.5 * (lo + hi)
        _, share = chain(mid)
        above = mid * ((1.0 - share) * t0 + share * t1) >= q
        lo, hi = np.where(above, lo, mid), np.where(above, mid, hi)
    return 0.5 * (lo + hi)


def _busiest_pieces(mean: np.ndarray, pp: np.ndarray) -> np.ndarray:
    """E[max(K, pp) | K >= 1] for K ~ Poisson(``mean``): a round's pieces as its busiest micro-batch
    prices them (one pass while K <= pp). E[max(K, pp); K >= 1] = mean + sum over 1 <= k < pp of
    P(K = k) (pp - k)."""
    below = np.zeros_like(mean)
    pmf = np.exp(-mean)
    for k in range(1, int(pp.max())):
        pmf = pmf * mean / k
        below += np.where(k < pp, pmf * (pp - k), 0.0)
    some = -np.expm1(-mean)
    return np.where(some > 0, (mean + below) / np.maximum(some, 1e-300), pp)


def round_terms(
    s: Setting,
    lay: Layouts,
    decode_sequences: np.ndarray,
    decode_context: np.ndarray,
    prefill_tokens: np.ndarray,
    prompt_len: float,
) -> RoundTerms:
    """Terms of one round at the setting's fitted parameters (``round_cost``)."""
    cost = round_cost(s, lay, decode_sequences, decode_context, prefill_tokens, prompt_len)
    return cost.terms(s.params)
