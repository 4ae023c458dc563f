"""plan serve: KV cache, memory, decode/prefill step terms, search, CLI (planner/serve)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import pytest

import planner
from planner.catalog import load_cluster, load_model
from planner.error_bar import interval
from planner.errors import PlannerError
from planner.schemas.base import GIB_BYTES
from planner.serving.engine import FittedParameters, load_engine
from planner.serving.export import export_commands
from planner.serving.kv import kv_bytes_per_token, sequence_kv_bytes_per_gpu
from planner.serving.layout import Layouts
from planner.serving.memory import plan_memory, reserved_context
from planner.serving.step import Setting, round_terms
from tests.conftest import assert_one_line_error

SEED = ["serve", "--model", "llama70b", "--cluster", "dgx-h100x1", "--input-len", "2048", "--output-len", "512"]


def _setting(model: str = "llama3-70b", cluster: str = "dgx-h100x1", weights: str = "bf16") -> Setting:
    return Setting(load_model(model), load_cluster(cluster), load_engine("vllm"), weights, "bf16", FittedParameters())


# ---- KV cache -----------------------------------------------------------------------------------
def test_kv_llama3_70b_8k_is_2_5_gib_per_sequence() -> None:
    # 80 layers x 2 x 8 KV heads x 128 x 2 bytes x 8192 tokens
    m = load_model("llama3-70b")
    assert kv_bytes_per_token(m, "bf16") * 8192 == 80 * 2 * 8 * 128 * 2 * 8192 == 2.5 * GIB_BYTES
    assert kv_bytes_per_token(m, "fp8") == kv_bytes_per_token(m, "bf16") / 2


def test_kv_mla_caches_the_latent_and_rope_key() -> None:
    m = load_model("deepseek-v3")
    assert kv_bytes_per_token(m, "bf16") == 61 * (512 + 64) * 2
    # every TP rank holds the whole latent (not split by heads); attention DP splits sequences instead
    one = sequence_kv_bytes_per_gpu(
        m, "bf16", np.array([1000.0]), 1, np.array([8.0]), np.array([1.0]), np.array([False])
    )
    assert one[0] == 61 * 576 * 2 * 1000


def test_kv_sliding_window_layers_stop_at_the_window() -> None:
    m = load_model("mistral-7b")  # every layer slides over 4096 tokens
    assert m.sliding_window == 4096 and m.num_sliding_layers == m.num_hidden_layers
    seq = lambda n: sequence_kv_bytes_per_gpu(
        m, "bf16", np.array([float(n)]), 16, np.array([1.0]), np.array([1.0]), np.array([False])
    )[0]
    assert seq(16384) == seq(4096) == 32 * 2 * 8 * 128 * 2 * 4096
    assert kv_bytes_per_token(m, "bf16", 8192.0) == kv_bytes_per_token(m, "bf16") / 2


def test_kv_chunked_layers_keep_one_chunk_where_the_engine_frees_the_rest() -> None:
    # Llama 4 Maverick: 36 chunked layers of 8192 tokens, 12 full; vLLM's ChunkedLocalAttentionSpec
    # holds one chunk ('chunk'), an engine whose behaviour is not sourced caches them all ('full')
    m = load_model("llama4-maverick")
    seq = lambda n, kv: sequence_kv_bytes_per_gpu(
        m, "bf16", np.array([float(n)]), 16, np.array([1.0]), np.array([1.0]), np.array([False]), kv
    )[0]
    per_layer_token = 2 * 8 * 128 * 2
    assert seq(32768, "chunk") == per_layer_token * (12 * 32768 + 36 * 8192)
    assert seq(32768, "full") == per_layer_token * 48 * 32768 == kv_bytes_per_token(m, "bf16", 32768.0) * 32768
    assert seq(8192, "chunk") == seq(8192, "full")  # within one chunk the caches agree
    assert (load_engine("vllm").chunked_kv, load_engine("trtllm").chunked_kv) == ("chunk", "full")


def test_chunked_attention_keys() -> None:
    # query i sees (i mod c) + 1 keys: the causal mean within a chunk, about (c + 1) / 2 over many
    from planner.cost.flops import attended_keys, chunked_keys

    assert chunked_keys(8192, 8192) == attended_keys(8192, None) == 4096.5
    assert chunked_keys(16384, 8192) == 4096.5
    assert chunked_keys(12288, 8192) == (8192 * 8193 / 2 + 4096 * 4097 / 2) / 12288


def test_kv_gqa_split_and_paged_rounding() -> None:
    m = load_model("llama3-70b")
    seq = lambda n, tp: sequence_kv_bytes_per_gpu(
        m, "bf16", np.array([float(n)]), 16, np.array([float(tp)]), np.array([1.0]), np.array([False])
    )[0]
    per_token = 80 * 2 * 8 * 128 * 2
    assert seq(17, 1) == 32 * per_token  # 17 tokens take two 16-token blocks
    assert seq(1024, 8) == 1024 * per_token / 8
    assert seq(1024, 16) == 1024 * per_token / 8  # 8 KV heads over 16 ranks: each rank keeps one, replicated


# ---- memory ---------------------------------------------------------------------------------------
def test_max_concurrency_is_kv_room_over_one_sequence() -> None:
    m, c, e = load_model("llama3-70b"), load_cluster("dgx-h100x1"), load_engine("vllm")
    lay = Layouts.of(8)
    mem = plan_memory(m, c, e, lay, "bf16", "bf16", 2048 + 256)
    kv_room = 0.9 * c.gpu.hbm_capacity_bytes - mem.weights_bytes[0] - mem.activations_bytes[0] - mem.runtime_bytes[0]
    assert mem.kv_cache_bytes[0] == pytest.approx(kv_room)
    per_seq = math.ceil(2304 / 16) * 16 * 80 * 2 * 1 * 128 * 2  # one KV head per rank at tp 8
    assert mem.max_concurrency[0] == math.floor(kv_room / per_seq)
    assert 16 * GIB_BYTES < mem.weights_bytes[0] < 17 * GIB_BYTES  # 70.6e9 x 2 bytes / 8
    # bf16 70B does not fit one 80 GB GPU; it does at fp8 on two
    one = plan_memory(m, c, e, Layouts.of(1), "bf16", "bf16", 2304)
    assert one.max_concurrency[0] == 0
    assert plan_memory(m, c, e, Layouts.of(2), "fp8", "bf16", 2304).max_concurrency[0] > 0
    assert reserved_context(load_engine("trtllm"), 2048, 512) == 2560
    assert reserved_context(e, 2048, 512) == 2304


# ---- decode and prefill --------------------------------------------------------------------------
def test_decode_batch1_70b_is_bound_by_reading_the_weights() -> None:
    s = _setting()
    terms = round_terms(s, Layouts.of(1), np.array([1.0]), np.array([2048.0]), np.array([0.0]), 2048)
    counts = s.model.parameter_counts
    weight_bytes = (counts.total - counts.embedding) * 2  # the embedding is a lookup: one row per token
    bound = weight_bytes / s.cluster.gpu.achieved_hbm_bytes_per_s
    assert terms.gemm_s[0] == pytest.approx(bound, rel=0.01)
    assert terms.total_s[0] == pytest.approx(bound, rel=0.02)  # KV of one sequence: 0.6 GiB vs 131 GiB


def test_tp8_cuts_decode_by_less_than_8x_because_of_all_reduces() -> None:
    s = _setting()
    t = round_terms(s, Layouts.of([1, 2, 4, 8]), np.ones(4), np.full(4, 2048.0), np.zeros(4), 2048)
    tpot = t.total_s
    assert np.all(np.diff(tpot) < 0)  # more TP, lower TPOT
    assert 5.0 < tpot[0] / tpot[3] < 8.0  # ... but less than linearly
    assert t.tp_comm_s[0] == 0 and t.tp_comm_s[3] > 0.1 * tpot[3]
    # 2 x 80 one-shot all-reduces of 8192 x 2 bytes: vLLM's 8 us latency dominates
    assert t.tp_comm_s[3] == pytest.approx(160 * (8e-6 + 7 * 8192 * 2 / (450e9 * 0.82)), rel=0.01)


def test_fp4_weights_compute_at_the_bf16_rate_without_fp4_tensor_cores() -> None:
    # W4A16 on Hopper (TensorRT-LLM's Triton MXFP4 MoE takes bf16 activations), the FP4 rate, twice
    # the FP8 one, on Blackwell
    h100, b200 = _setting(cluster="dgx-h100x1", weights="fp4"), _setting(cluster="dgx-b200x1", weights="fp4")
    gpu = h100.cluster.gpu
    assert h100.gemm_flops_per_s == gpu.peak_flops_per_s("bf16") * gpu.gemm_efficiency_for("bf16")
    assert h100.gemm_flops_per_s == _setting(cluster="dgx-h100x1").gemm_flops_per_s
    fp8 = b200.cluster.gpu.peak_flops_per_s("fp8") * b200.cluster.gpu.gemm_efficiency_for("fp8")
    assert b200.gemm_flops_per_s == pytest.approx(2.0 * fp8, rel=1e-12)


def test_a_waves_prompts_are_split_over_the_pipeline_stages() -> None:
    # trtllm-bench's offline waves (runs._waves): 64 prompts of 4K tokens and one output token each
    # on 1, 2 and 4 stages; every stage prefills its micro-batches' share of the prompts, so the
    # output per GPU stays within 1% (it had fallen to 1/pp: each micro-batch carried all 64)
    from planner.serving.runs import _waves

    s = _setting("llama3-8b")
    per_gpu = []
    for pp in (1, 2, 4):
        cost, tokens = _waves(s, Layouts.of(1, [pp]), 64.0, 64.0, 4096, 1)
        per_gpu.append(tokens / float(cost.total_s(s.params)[0]) / pp)
    assert per_gpu[1] == pytest.approx(per_gpu[0], rel=0.01) and per_gpu[2] == pytest.approx(per_gpu[0], rel=0.01)


def test_the_fitted_all_reduce_speed_divides_the_tp_time_alone() -> None:
    # tp_comm_fraction is the speed the engine's TP all-reduces reach against the collective
    # model's price: half of it doubles the TP time of a decode round and leaves every other term
    from planner.serving.step import round_cost

    s = _setting()
    lay = Layouts.of([1, 8])
    cost = round_cost(s, lay, np.full(2, 256.0), np.full(2, 2048.0), np.zeros(2), 2048)
    fast, slow = cost.terms(FittedParameters()), cost.terms(FittedParameters(tp_comm_fraction=0.5))
    assert slow.tp_comm_s[0] == fast.tp_comm_s[0] == 0.0  # one GPU: no all-reduce to slow
    assert slow.tp_comm_s[1] == pytest.approx(2.0 * fast.tp_comm_s[1], rel=1e-12) and fast.tp_comm_s[1] > 0
    for term in ("gemm_s", "attention_s", "elementwise_s", "ep_comm_s", "pp_comm_s", "overhead_s"):
        assert np.array_equal(getattr(slow, term), getattr(fast, term)), term
    assert slow.total_s[1] - fast.total_s[1] == pytest.approx(fast.tp_comm_s[1], rel=1e-9)


def test_the_element_wise_passes_are_the_training_counts_per_token() -> None:
    # Llama-3-8B on one GPU, per token per layer: 2 norms (4h each) and 2 residual adds (6h), RoPE
    # over 32 query and 8 KV heads of 128 (read + write, 2 bytes), the SwiGLU over 14,336 (6 bytes)
    from planner.serving.step import activation_traffic_s, round_cost

    s = _setting("llama3-8b")
    per_layer = 2 * 4 * 4096 + 2 * 6 * 4096 + 4 * (32 + 8) * 128 + 6 * 14336
    assert per_layer == 188_416
    one = activation_traffic_s(s, Layouts.of(1), np.array([1000.0]))
    assert one[0] == pytest.approx(1000 * 32 * per_layer / s.hbm_bytes_per_s, rel=1e-12)
    # TP2: every rank normalises all the tokens; heads and the MLP width split
    two = activation_traffic_s(s, Layouts.of(2), np.array([1000.0]))
    tp2 = 2 * 4 * 4096 + 2 * 6 * 4096 + 4 * (16 + 4) * 128 + 3 * 14336
    assert two[0] == pytest.approx(1000 * 32 * tp2 / s.hbm_bytes_per_s, rel=1e-12)
    # it is a memory-only term at the fitted decode HBM fraction
    cost = round_cost(s, Layouts.of(1), np.array([64.0]), np.array([1024.0]), np.array([0.0]), 1024)
    half = cost.terms(FittedParameters(decode_hbm_fraction=0.5)).elementwise_s
    assert half == pytest.approx(2.0 * cost.terms(FittedParameters()).elementwise_s, rel=1e-12)
    # Qwen3-30B-A3B at TP4 (48 MoE layers, top 8, h 2048): under EP 4 each rank reorders the 8/4
    # copies routed to its experts (bf16 read + write, dispatch and combine), under expert TP all 8;
    # under attention DP a rank normalises its quarter of the tokens
    q = _setting("qwen3-30b-a3b")
    t = np.full(3, 1000.0)
    tp_ep1, tp_ep4, adp = activation_traffic_s(q, Layouts.of(4, 1, [1, 4, 4], [False, False, True]), t)
    permute = 48 * 4 * 2 * 8 * 2048 * (1 - 1 / 4)
    assert (tp_ep1 - tp_ep4) * q.hbm_bytes_per_s == pytest.approx(1000 * permute, rel=1e-12)
    norms = 48 * 2 * (4 + 6) * 2048 * (1 - 1 / 4)
    assert (tp_ep4 - adp) * q.hbm_bytes_per_s == pytest.approx(1000 * norms, rel=1e-12)


def test_the_expert_gemm_fraction_slows_a_routed_experts_weight_reads_as_its_compute() -> None:
    # a routed expert's grouped GEMM reaches expert_gemm_fraction of a dense GEMM's roofline on both
    # sides: at batch 1 (weight-bound) and at a full prefill (compute-bound) half of it doubles the
    # experts' time, and the dense GEMMs' (attention projections, router, LM head) is unchanged
    from planner.serving.step import round_cost

    s = _setting("mixtral-8x7b", weights="bf16")
    lay = Layouts.of(np.full(2, 2.0))
    cost = round_cost(s, lay, np.array([1.0, 0.0]), np.array([1024.0, 0.0]), np.array([0.0, 8192.0]), 8192)
    experts = cost.expert_rows[: cost.gemm_pairs]
    assert experts.any() and not experts.all()
    for e in (1.0, 0.5):
        params = FittedParameters(expert_gemm_fraction=e)
        pair = np.maximum(
            cost.pair_compute_s / np.where(cost.expert_rows, e, 1.0)[:, None],
            cost.pair_memory_s / np.where(cost.expert_rows, e, 1.0)[:, None],
        )[: cost.gemm_pairs]
        assert cost.terms(params).gemm_s == pytest.approx(pair.sum(axis=0), rel=1e-12)
    fast, slow = cost.terms(FittedParameters()), cost.terms(FittedParameters(expert_gemm_fraction=0.5))
    dense = np.maximum(cost.pair_compute_s, cost.pair_memory_s)[: cost.gemm_pairs][~experts].sum(axis=0)
    assert slow.gemm_s == pytest.approx(2.0 * fast.gemm_s - dense, rel=1e-12)
    assert (
        cost.pair_memory_s[: cost.gemm_pairs][experts, 0].sum()
        > cost.pair_compute_s[: cost.gemm_pairs][experts, 0].sum()
    )


def test_the_fixed_time_is_per_block_and_round_whatever_the_pipeline() -> None:
    # block_overhead_us is paid once per block a round passes: a transformer layer is two blocks
    # (attention, MLP), a hybrid's layer one (attention, Mamba or MLP); under pipeline parallelism
    # each micro-batch passes every stage's blocks at pp pipeline steps, so a round still passes all
    from planner.serving.step import round_cost

    s = _setting()
    lay = Layouts.of(8, [1, 2, 4])
    cost = round_cost(s, lay, np.full(3, 64.0), np.full(3, 2048.0), np.zeros(3), 2048)
    assert cost.overhead_count.tolist() == [160.0, 160.0, 160.0]
    with_overhead = cost.terms(FittedParameters(block_overhead_us=40.0)).overhead_s
    assert with_overhead - cost.terms(FittedParameters()).overhead_s == pytest.approx(np.full(3, 160 * 40e-6))
    hybrid = _setting("nemotron-3-nano")
    one = round_cost(hybrid, Layouts.of(1), np.ones(1), np.full(1, 1024.0), np.zeros(1), 1024)
    assert one.overhead_count.tolist() == [52.0]  # 52 single blocks (hybrid_override_pattern)


def test_an_attention_dp_group_exchanges_moe_tokens_as_its_engine_does() -> None:
    # TensorRT-LLM's PyTorch backend all-to-alls only where EP exceeds top-k over multi-node NVLink
    # (select_alltoall_method_type), else it all-gathers the group's tokens and reduce-scatters the
    # outputs, as vLLM's default allgather_reducescatter always does
    from planner.cost.comm import all_gather_s, all_to_all_s
    from planner.serving.step import _link, ep_exchange_s, multi_node_nvlink

    assert multi_node_nvlink(load_cluster("gb200-nvl72")) and not multi_node_nvlink(load_cluster("dgx-b200"))
    tokens = np.full(2, 4096.0)
    for model, cluster, engine, all_to_all in (
        ("llama4-maverick", "gb200-nvl72", "trtllm", [True, True]),  # top 1: EP 8 and 16 exceed it
        ("deepseek-v3", "gb200-nvl72", "trtllm", [False, True]),  # top 8: EP 8 does not, 16 does
        ("llama4-maverick", "dgx-b200x2", "trtllm", [False, False]),  # no multi-node NVLink
        ("llama4-maverick", "gb200-nvl72", "vllm", [False, False]),  # allgather_reducescatter
    ):
        m = load_model(model)
        s = Setting(m, load_cluster(cluster), load_engine(engine), "fp8", "bf16", FittedParameters())
        lay = Layouts.of([8, 16], 1, [8, 16], True)
        link = _link(s.cluster, lay.ep, 1)
        k, h = float(m.num_experts_per_tok), float(m.expert_input_size)
        gather = all_gather_s(tokens * h * 1.0, link) + all_gather_s(tokens * h * 2.0, link)
        # a token goes once to each rank holding one of its k experts: Maverick (top 1) to one,
        # DeepSeek-V3 (top 8 of 256) at EP 16 to 16 x (1 - C(240, 8) / C(256, 8)) = 6.52 of 8
        ranks = np.array([ep * (1 - math.comb(int(m.num_experts_total) - int(m.num_experts_total) // ep, int(k))
                                / math.comb(int(m.num_experts_total), int(k))) for ep in (8, 16)])  # fmt: skip
        if model == "deepseek-v3":
            assert ranks[1] == pytest.approx(6.523, abs=1e-3)
        sent = tokens / lay.tp * ranks
        a2a = all_to_all_s(sent * h * 1.0, link) + all_to_all_s(sent * h * 2.0, link)
        got = ep_exchange_s(s, lay, tokens, k, h, 1.0, link)
        assert got == pytest.approx(np.where(all_to_all, a2a, gather)), (model, cluster, engine)


def test_a_prompt_attends_at_its_kernels_speed_in_fp8_over_an_fp8_cache() -> None:
    # the prompt's attention runs at the profile's measured kernel figure: the fitted compute fraction
    # (the weight GEMMs') leaves it alone; TensorRT-LLM's context FMHA is fp8 over an fp8 KV cache
    # (attentionOp mFP8ContextFMHA), vLLM's stays 16-bit
    from planner.serving.step import prefill_attention_s, round_cost

    model, cluster, lay = load_model("llama3-70b"), load_cluster("dgx-h100x1"), Layouts.of(8)
    prompts = np.full(1, 8192.0)

    def prefill(engine: str, kv: str) -> float:
        s = Setting(model, cluster, load_engine(engine), "fp8", kv, FittedParameters())
        return float(prefill_attention_s(s, lay, prompts, 8192.0)[0])

    gpu = cluster.gpu
    ratio = gpu.attention_efficiency_at("fused", 128, 128, True, fp8=True) / gpu.attention_efficiency_at(
        "fused", 128, 128, True
    )
    gain = prefill("trtllm", "bf16") / prefill("trtllm", "fp8")
    assert gain == pytest.approx(ratio) == pytest.approx(1.5625, abs=1e-4)
    assert prefill("trtllm-tensorrt", "fp8") == prefill("trtllm", "fp8")
    assert prefill("vllm", "fp8") == prefill("vllm", "bf16") == prefill("trtllm", "bf16")
    # 16-bit weights over an fp8 cache: the PyTorch backend's paged context FMHA (KV-cache reuse, on by
    # default) still takes fp8; a TensorRT engine builds it only for an fp8 or fp4 quant_algo
    sixteen_bit = [
        Setting(model, cluster, load_engine(e), "bf16", "fp8", FittedParameters()).fp8_context_attention
        for e in ("trtllm", "trtllm-tensorrt")
    ]
    assert sixteen_bit == [True, False]
    oss, b200 = load_model("gpt-oss-120b"), load_cluster("dgx-b200")
    gpt_oss = Setting(oss, b200, load_engine("trtllm-tensorrt"), "fp4", "fp8", FittedParameters())
    assert not gpt_oss.fp8_context_attention  # its attention stays 16-bit: no e4m3 output asked for
    s = Setting(model, cluster, load_engine("trtllm"), "fp8", "fp8", FittedParameters())
    cost = round_cost(s, lay, np.full(1, 64.0), np.full(1, 8192.0), prompts, 8192)
    slow = cost.terms(FittedParameters(compute_fraction=0.5))
    assert cost.compute_only_s.tolist() == [prefill("trtllm", "fp8")]
    # the attention term is the decode pairs (compute side / c) plus the prompt's, undivided
    decode = np.maximum(cost.pair_compute_s[cost.gemm_pairs :] / 0.5, cost.pair_memory_s[cost.gemm_pairs :]).sum(0)
    assert slow.attention_s == pytest.approx(decode + cost.compute_only_s, rel=1e-12)


def test_the_lm_head_multiplies_at_the_16bit_rate_its_weights_are_read_at() -> None:
    # ModelOpt's FP8/NVFP4 configs skip lm_head: its bytes were read at 16 bits (EMBEDDING_BYTES), and
    # its FLOPs now run at the 16-bit rate too, on the last stage pp times (gemm_pairs)
    from planner.serving.memory import lm_head_matrix_params
    from planner.serving.step import gemm_pairs

    model = load_model("llama3-70b")
    for weights in ("fp8", "fp4"):
        s = Setting(model, load_cluster("dgx-b200"), load_engine("trtllm"), weights, "fp8", FittedParameters())
        lay = Layouts.of(2, [1, 4])
        compute, _ = gemm_pairs(s, lay, np.full(2, 1024.0), np.full(2, 256.0))
        head = 2.0 * lm_head_matrix_params(model) * 256.0 / 2 / s.gemm_rate("bf16")
        assert compute[2].tolist() == pytest.approx([head, 4 * head], rel=1e-12), weights
        assert s.gemm_rate("bf16") < s.gemm_rate(weights)


def test_a_rank_routes_every_token_it_holds_and_schedules_its_own_sequences() -> None:
    # the fused MoE gates and sorts all k copies of every token a rank holds (TensorRT-LLM's runMoe
    # radix-sorts k x num_rows, the other ranks' copies keyed past its experts): Maverick (top 1, 24
    # MoE layers) and DeepSeek-V3 (top 8, 58) at TP 8, EP 8 over the TP ranks and DEP 8 on a DGX B200
    # (attention DP gathers the group's tokens) all route tokens x k x layers; only the all-to-all
    # over a GB200's multi-node NVLink (EP above top-k) leaves a rank its 1/ep
    from planner.serving.step import round_cost

    lay = Layouts.of(8, 1, [1, 8, 8], [False, False, True])
    for model, k, layers in (("llama4-maverick", 1, 24), ("deepseek-v3", 8, 58)):
        s = Setting(
            load_model(model), load_cluster("dgx-b200"), load_engine("trtllm"), "fp4", "fp8", FittedParameters()
        )
        cost = round_cost(s, lay, np.full(3, 512.0), np.full(3, 2048.0), np.zeros(3), 1024)
        assert cost.routed_copies.tolist() == [512.0 * k * layers] * 3, model
        ns = cost.terms(FittedParameters(routed_copy_ns=10.0)).overhead_s - cost.terms(FittedParameters()).overhead_s
        assert ns == pytest.approx(np.full(3, 512 * k * layers * 10e-9), rel=1e-12)
        # TensorRT-LLM schedules every attention-DP rank apart: the host time is a rank's 64 sequences'
        assert cost.sequence_count.tolist() == [512.0, 512.0, 64.0]
    s = Setting(load_model("llama4-maverick"), load_cluster("gb200-nvl72"), load_engine("trtllm"), "fp4", "fp8",
                FittedParameters())  # fmt: skip
    cost = round_cost(s, lay, np.full(3, 512.0), np.full(3, 2048.0), np.zeros(3), 1024)
    assert cost.routed_copies.tolist() == [512.0 * 24, 512.0 * 24, 512.0 * 24 / 8]
    # there a rank receives each token once, with its k choices, if one of its experts is among them:
    # DeepSeek-V3 (top 8 of 256) at DEP 16 and 32, the share 1 - C(256 - 256/ep, 8) / C(256, 8)
    s = Setting(load_model("deepseek-v3"), load_cluster("gb200-nvl72"), load_engine("trtllm"), "fp4", "fp8",
                FittedParameters())  # fmt: skip
    wide = Layouts.of([16, 32], 1, [16, 32], True)
    got = round_cost(s, wide, np.full(2, 512.0), np.full(2, 2048.0), np.zeros(2), 1024).routed_copies
    shares = [1 - math.comb(256 - 256 // ep, 8) / math.comb(256, 8) for ep in (16, 32)]
    assert shares == pytest.approx([0.4077, 0.2271], abs=1e-4)
    assert got == pytest.approx([512 * 8 * 58 * share for share in shares], rel=1e-12)
    # the busiest rank holds a sequence while any runs: one sequence on DEP 8 pays one's host time
    one = round_cost(s, Layouts.of(8, 1, 8, True), np.ones(1), np.full(1, 2048.0), np.zeros(1), 1024)
    assert one.sequence_count.tolist() == [1.0]
    # SGLang keeps one scheduler per TP group under attention DP: the replica's sequences, whole
    s = Setting(load_model("deepseek-v3"), load_cluster("dgx-b200"), load_engine("sglang"), "fp8", "fp8",
                FittedParameters())  # fmt: skip
    assert (
        round_cost(s, lay, np.full(3, 512.0), np.full(3, 2048.0), np.zeros(3), 1024).sequence_count.tolist()
        == [512.0] * 3
    )
    # a dense model routes nothing
    dense = round_cost(_setting(), Layouts.of(8), np.full(1, 512.0), np.full(1, 2048.0), np.zeros(1), 1024)
    assert dense.routed_copies.tolist() == [0.0]


def test_larger_batch_raises_throughput_and_tpot() -> None:
    s = _setting(weights="fp8")
    batch = np.array([1.0, 8.0, 64.0, 256.0])
    lay = Layouts.of(np.full(4, 8.0))
    tpot = round_terms(s, lay, batch, np.full(4, 2304.0), batch * 4, 2048).total_s
    assert np.all(np.diff(tpot) > 0)
    assert np.all(np.diff(batch / tpot) > 0)


def test_prefill_is_compute_bound() -> None:
    s = _setting()
    t = round_terms(s, Layouts.of(8), np.array([0.0]), np.array([0.0]), np.array([8192.0]), 8192)
    flops = 2 * s.model.parameter_counts.total * 8192 / 8
    assert t.gemm_s[0] == pytest.approx(flops / s.gemm_flops_per_s, rel=0.05)
    assert t.attention_s[0] > 0


def test_pp_does_not_cut_batch1_tpot() -> None:
    s = _setting(weights="fp8")
    t = round_terms(s, Layouts.of(4, [1, 2]), np.ones(2), np.full(2, 2048.0), np.zeros(2), 2048).total_s
    assert t[1] >= t[0]


def test_moe_decode_reads_only_touched_experts() -> None:
    s = _setting("mixtral-8x7b", weights="bf16")
    t = round_terms(s, Layouts.of(np.full(3, 2.0)), np.array([1.0, 2.0, 64.0]), np.full(3, 1024.0), np.zeros(3), 1024)
    assert t.gemm_s[0] < t.gemm_s[1] < t.gemm_s[2]


# ---- search, library, CLI -----------------------------------------------------------------------
def test_library_ranks_by_tokens_per_gpu_meeting_targets() -> None:
    r = planner.serve("llama70b", "dgx-h100x1", input_len=2048, output_len=512, tpot_s=0.03)
    assert r.candidates
    rates = [c.output_tokens_per_s_per_gpu for c in r.candidates]
    assert rates == sorted(rates, reverse=True)
    assert all(c.tpot_s <= 0.03 and c.meets_targets for c in r.candidates)
    assert all(c.config["tp"] * c.config["pp"] * c.config["replicas"] <= 8 for c in r.candidates)


def test_a_moe_target_search_takes_the_batches_its_replay_allows() -> None:
    """DeepSeek-V3's replay runs rounds of decode tokens alone, which read far fewer experts than the
    steady state's even spread of prompts (17.5 ms replayed against 43.8 ms steady at 6 sequences a
    replica): the search had stopped at the steady state's batch 6 (42 tokens/s per GPU) where its
    own replay meets a 50 ms TPOT at 24 (61 tokens/s per GPU since the fit on the replay, 2026-12-07;
    80 at 32 before)."""
    r = planner.serve("deepseek-v3", "dgx-h200x2", engine="trtllm", tpot_s=0.05, tp=8, pp=1, ep=8)
    best = r.candidates[0]
    assert best.meets_targets and best.tpot_s <= 0.05
    assert best.batch_per_replica >= 24
    assert best.output_tokens_per_s_per_gpu > 1.4 * 42.0
    assert best.steady_state_tpot_s is not None and best.steady_state_tpot_s > 0.05  # the steady state refuses it


def test_the_batch_search_gallops_from_the_steady_pick() -> None:
    from types import SimpleNamespace

    from planner.serving.search import _largest_meeting

    for limit in range(-1, 10):  # batches 0..limit meet the targets
        probed: list[int] = []

        def probe(k: int, probed: list[int] = probed, limit: int = limit) -> Any:
            probed.append(k)
            return SimpleNamespace(meets_targets=k <= limit, k=k)

        best, last = _largest_meeting(10, 3, probe)
        assert (best.k if best else None) == (limit if limit >= 0 else None)
        assert last is not None and len(probed) <= 6
        # the first guess, then the next batch up, then the largest
        assert probed[0] == 3 and (limit < 3 or probed[1] == 4) and (limit < 4 or probed[2] == 9)
        assert limit != 3 or len(probed) == 2  # the guess was the answer: two replays settle it
        # below a failed guess: 1, 2, 4, ... under it, so an answer next to the guess costs two too
        assert limit >= 3 or probed[1] == 2
        assert limit != 2 or len(probed) == 2
    assert _largest_meeting(0, 0, lambda k: None) == (None, None)  # type: ignore[arg-type, return-value]


def test_layouts_that_cannot_rank_are_not_replayed() -> None:
    """A layout whose throughput bound (its largest batch searched, over a round of decode tokens
    alone) is below the top-th found is not replayed: the same ranks as a search that replays every
    layout, in a fraction of the replays (DeepSeek-V3 on a GB200 rack had taken 28 s)."""
    few = planner.serve("qwen3-30b-a3b", "dgx-h100x1", tpot_s=0.03, top=3)
    every = planner.serve("qwen3-30b-a3b", "dgx-h100x1", tpot_s=0.03, top=1000)
    assert every.unreplayed == 0 and few.unreplayed > 0
    assert few.feasible + few.unreplayed >= every.feasible > few.feasible
    ranks = [(c.config, c.output_tokens_per_s_per_gpu, c.batch_per_replica) for c in few.candidates]
    assert ranks == [(c.config, c.output_tokens_per_s_per_gpu, c.batch_per_replica) for c in every.candidates[:3]]


def test_concurrency_and_rate_set_the_batch() -> None:
    r = planner.serve("llama3-8b", "dgx-h100x1", concurrency=64, tp=1)
    c = r.candidates[0]
    # the replayed batch is a time average: 8 in flight on each replica, to rounding
    assert c.config["replicas"] == 8 and c.batch_per_replica == pytest.approx(8, rel=1e-12)
    low = planner.serve("llama3-8b", "dgx-h100x1", request_rate=1.0, tp=1).candidates[0]
    high = planner.serve("llama3-8b", "dgx-h100x1", request_rate=50.0, tp=1).candidates[0]
    assert low.batch_per_replica < high.batch_per_replica
    # at a request rate the served throughput is the offered load: 50 req/s x 512 tokens over 8 GPUs
    assert high.output_tokens_per_s_per_gpu == pytest.approx(50.0 * 512 / 8)
    # Little's law: the batch covers rate x (TTFT + osl x TPOT) per replica
    assert high.batch_per_replica >= 50.0 / 8 * (high.ttft_s + 512 * high.tpot_s)


def test_attention_dp_wins_for_mla() -> None:
    r = planner.serve("deepseek-v3", "dgx-h200x1", weights_dtype="fp8", engine="trtllm", tpot_s=0.1)
    best = r.candidates[0]
    assert best.config["attention_dp"] and best.config["ep"] == 8


def test_disaggregation_balances_the_pools() -> None:
    r = planner.serve("llama3-8b", "dgx-h100x2", input_len=4096, output_len=256, disaggregate=True, tpot_s=0.02)
    best = r.candidates[0]
    split = best.config["prefill_decode_split"]
    assert split["prefill_gpus"] + split["decode_gpus"] <= 16
    assert split["prefill_replicas"] >= 1 and split["decode_replicas"] >= 1
    # long prompts, short answers: prefill needs a good share of the GPUs
    assert split["prefill_gpus"] >= 4
    # the prefill pool's launch command caps its batch at the prompts it was priced holding (the
    # engine's token budget of whole prompts in each pipeline stage), not at the decode batch
    prompts = max(1, load_engine("vllm").max_num_batched_tokens // 4096) * split["prefill_pp"]
    assert split["prefill_batch"] == prompts
    text = export_commands(r, "vllm")
    prefill, decode = text.split("# decode pool")[0], text.split("# decode pool")[1]
    assert f"--max-num-seqs {prompts} " in prefill
    assert f"--max-num-seqs {math.ceil(best.batch_per_replica)} " in decode
    short = planner.serve("llama3-8b", "dgx-h100x2", input_len=256, output_len=2048, disaggregate=True, tpot_s=0.02)
    s2 = short.candidates[0].config["prefill_decode_split"]
    assert s2["prefill_gpus"] / 16 < split["prefill_gpus"] / 16


def test_a_light_load_prefills_the_prompts_it_has() -> None:
    """At 1 request/s a prefill replica runs one prompt a round, not its full token budget: 70B on two
    DGX H100 had been refused a 300 ms TTFT (a full round of 4 prompts, 395 ms) that one prompt on
    TP8 meets (the colocated plan meets it too); and a lone prompt passes every pipeline stage one
    after the other, so a TP1 x PP8 prefill replica takes PP8's round for it (found by a review)."""
    from planner.serving.disagg import prefill_at, prefill_rounds
    from planner.serving.layout import Layouts
    from planner.serving.schemas import ServeRequest

    r = planner.serve("llama70b", "dgx-h100x2", disaggregate=True, request_rate=1.0, ttft_s=0.3)
    best = r.candidates[0]
    split = best.config["prefill_decode_split"]
    assert (split["prefill_tp"], split["prefill_pp"]) == (8, 1)
    assert 0.1 < best.steady_state_ttft_s < 0.13
    # replayed (``disagg.replayed_split``): the prompts' Poisson collisions at about 0.11 s each (an
    # M/D/1 wait of rho / (2 (1 - rho)) x 0.11 s, 7 ms) and the decode replica's first iteration
    assert best.replayed and best.sustains_rate and 0.13 < best.ttft_s < 0.17
    full = planner.serve("llama70b", "dgx-h100x2", disaggregate=True, concurrency=16, tp=8)
    assert full.candidates[0].ttft_s > 3 * best.steady_state_ttft_s  # the engine at capacity runs full rounds
    s = _setting("llama70b", "dgx-h100x2")
    req = ServeRequest(input_len=2048, output_len=512)
    rounds, _ = prefill_rounds(s, Layouts.of(np.array([8.0, 1.0]), pp=np.array([1.0, 8.0])), req)
    # TP8 holds 4 prompts a round (8,192 tokens), TP1 x PP8 4 in each of its 8 stages
    assert np.isfinite(rounds[0]).sum() == 4 and np.isfinite(rounds[1]).sum() == 32
    assert rounds[1][0] == rounds[1][7] < rounds[1][8]  # fewer prompts than stages: a lone prompt's pass
    rate, round_s = prefill_at(rounds, 1.0)
    assert round_s[0] == rounds[0][0] and rate[0] == pytest.approx(4 / rounds[0][3])  # one prompt; full rate
    assert prefill_at(rounds, 1e9)[1][0] == rounds[0][3]  # beyond what it sustains: full rounds


def test_a_decode_pool_replay_prices_no_prompt() -> None:
    """A disaggregated decode replica's replay (``prompt_done``): a request arrives with its KV cache
    and decodes from the next iteration, so at a trickle its first token is one decode iteration at
    batch 1 (the round of one sequence at its prompt's context), where the colocated replica's is its
    prompt's prefill, and every gap after it is that round again."""
    from planner.serving.layout import Layouts
    from planner.serving.replay import replay
    from planner.serving.step import round_terms

    s, one = _setting("llama70b", "dgx-h100x1"), Layouts.of(8.0)
    decode = replay(s, one, 2048, 64, 0.01, 8, prompt_done=True)
    colocated = replay(s, one, 2048, 64, 0.01, 8)
    alone = float(round_terms(s, one, np.ones(1), np.full(1, 2048.0), np.zeros(1), 2048).total_s[0])
    assert decode.ttft_s == pytest.approx(alone, rel=0.01)
    assert decode.itl_s == pytest.approx(alone, rel=0.02) and colocated.itl_s == pytest.approx(decode.itl_s, rel=0.01)
    assert colocated.ttft_s > 4 * decode.ttft_s  # a 2K prompt's prefill on TP8 against one decode round


def test_a_disaggregated_plan_at_a_rate_is_replayed_pool_by_pool() -> None:
    """At a request rate each pool of the chosen split is replayed (``disagg.replayed_split``): the
    steady state had left out a prompt's wait for a busy prefill replica (70B on 16 DGX H100 at 30
    req/s: a split priced at 261 ms replayed at 1.0 s). The splits are screened with an M/D/1 wait
    (``queue_wait_s``) and replayed in that order until one meets the TTFT target, so every decode
    layout whose first split queues finds one that meets it."""
    from planner.serving.disagg import queue_wait_s

    assert queue_wait_s(0.8, 1.0) == pytest.approx(2.0) and math.isinf(queue_wait_s(1.0, 1.0))
    assert queue_wait_s(0.0, 5.0) == 0.0
    r = planner.serve("llama70b", "dgx-h100x16", disaggregate=True, request_rate=30.0, ttft_s=0.5, top=20)
    assert r.feasible == 18 and all(c.replayed and c.sustains_rate for c in r.candidates)
    for c in r.candidates:  # the replay adds the queue and the decode replica's first iteration
        assert c.ttft_s <= 0.5 and c.ttft_s > c.steady_state_ttft_s + 0.9 * c.tpot_s
    slow = planner.serve("llama70b", "dgx-h100x4", disaggregate=True, request_rate=8.0, top=20)
    assert max(c.ttft_s / c.steady_state_ttft_s for c in slow.candidates) > 2  # no target: a hot prefill pool
    # the why line names both pools and the replayed TTFT beside its steady estimate
    first = slow.candidates[0]
    assert first.why.startswith("decode 3x tp8 pp1 beside prefill 1x tp4 pp2; TTFT ")
    assert f"TTFT {first.ttft_s * 1e3:.0f} ms replayed (its steady-state estimate " in first.why
    # the launch commands cap each pool where its replay admitted: the decode servers at their KV room
    # (not the time-mean batch, which would queue the bursts), the prefill servers at the budget's prompts
    best = slow.candidates[0]
    split = best.config["prefill_decode_split"]
    prefill, decode = export_commands(slow, "vllm").split("# decode pool")[:2]
    assert f"--max-num-seqs {best.max_concurrency // split['decode_replicas']} " in decode
    assert best.max_concurrency // split["decode_replicas"] > 10 * best.batch_per_replica
    assert f"--max-num-seqs {split['prefill_batch']} " in prefill
    assert split["prefill_batch"] == 4 * split["prefill_pp"]  # 8,192 tokens of 2K prompts in each stage


def test_decode_layouts_that_cannot_reach_the_top_are_not_replayed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """At a rate the decode layouts are replayed in the order of their steady TPOT until the next,
    at ``REPLAYED_TPOT_FLOOR`` of it, cannot reach the top: the ranking is the one replaying every
    layout gives (Qwen3-30B-A3B on two DGX H100 at 20 req/s: 7 of 22 layouts not replayed)."""
    from planner.serving import disagg

    kw = {"disaggregate": True, "request_rate": 20.0}
    pruned = planner.serve("qwen3-30b-a3b", "dgx-h100x2", **kw)
    monkeypatch.setattr(disagg, "REPLAYED_TPOT_FLOOR", 0.0)
    every = planner.serve("qwen3-30b-a3b", "dgx-h100x2", **kw)
    assert (pruned.unreplayed, every.unreplayed, pruned.feasible, every.feasible) == (7, 0, 15, 22)
    assert [(c.config, c.tpot_s, c.ttft_s) for c in pruned.candidates] == [
        (c.config, c.tpot_s, c.ttft_s) for c in every.candidates
    ]
    assert disagg._top_tpot_s([0.02, 0.01, 0.01, 0.03], 2) == 0.02 and disagg._top_tpot_s([0.01], 2) == math.inf


def test_a_disaggregated_plan_at_a_concurrency_waits_by_littles_law() -> None:
    """A closed loop of N requests through a split spends N / rate in the system each
    (``disagg.concurrency_ttft_s``): where the pools bound the rate, the requests they cannot hold
    wait for admission, and the first token comes N / rate - (osl - 1) x TPOT after the request was
    sent. 70B on four DGX H100 at 2,000 in flight (the decode pool holds 820) had printed the prefill
    round's 1.8 s; at 16 in flight the loop bounds the rate and the TTFT is the round's."""
    r = planner.serve("llama70b", "dgx-h100x4", disaggregate=True, concurrency=2000)
    osl, gpus = r.request.output_len, r.num_gpus
    for c in r.candidates:
        rate = c.output_tokens_per_s_per_gpu * gpus / osl
        assert c.ttft_s == pytest.approx(2000 / rate - (osl - 1) * c.tpot_s, rel=1e-6)
    assert r.candidates[0].ttft_s > 30.0
    light = planner.serve("llama70b", "dgx-h100x4", disaggregate=True, concurrency=16).candidates[0]
    rate = light.output_tokens_per_s_per_gpu * 32 / osl
    assert light.ttft_s < 1.0 and 16 / rate - (osl - 1) * light.tpot_s == pytest.approx(light.ttft_s, rel=1e-6)


def test_a_ttft_target_runs_fewer_prompts_a_prefill_round() -> None:
    """At capacity under a TTFT target a prefill replica runs the most prompts a round whose first
    token is within it (``disagg.prefill_within``): 70B on four DGX H100 at 300 ms had been refused,
    every prefill pool priced at a full budget's round (388 ms); now one prompt a round, and the
    launch command caps the prefill server there. Without a target the full round."""
    r = planner.serve("llama70b", "dgx-h100x4", disaggregate=True, ttft_s=0.3)
    best = r.candidates[0]
    split = best.config["prefill_decode_split"]
    assert best.ttft_s <= 0.3 and split["prefill_batch"] == 1
    prefill = export_commands(r, "vllm").split("# decode pool")[0]
    assert "--max-num-seqs 1 " in prefill
    full = planner.serve("llama70b", "dgx-h100x4", disaggregate=True).candidates[0]
    assert full.ttft_s > 0.3 and full.config["prefill_decode_split"]["prefill_batch"] > 1


def test_a_disaggregated_plan_runs_the_decode_batch_its_rate_needs() -> None:
    """Where the prefill pool bounds the rate, a decode replica runs the batch that serves it (Little's
    law B = rate x osl x TPOT(B)), not the grid's next batch: a review (2026-12-07) found 192 a decode
    replica at 29.2 ms printed beside 337 tokens/s per GPU, which 192 would have served at 411. Each
    row's throughput is its decode replicas' batch over their TPOT. At a rate the batch and TPOT are
    the decode pool's replay (``disagg.replayed_split``): its time-mean batch serves the rate by
    Little's law over the replayed time a sequence spends in it, its first iteration included."""
    for kw in ({"tpot_s": 0.03, "ttft_s": 0.5}, {}, {"request_rate": 10.0}):
        r = planner.serve("llama70b", "dgx-h100x4", disaggregate=True, top=3, **kw)
        for c in r.candidates:
            n_d = c.config["prefill_decode_split"]["decode_replicas"]
            served = n_d * c.batch_per_replica / c.tpot_s * 1.0 / 32
            replayed = "request_rate" in kw
            assert c.replayed is replayed
            assert c.output_tokens_per_s_per_gpu == pytest.approx(served, rel=0.02 if replayed else 1e-6), kw


def test_a_disaggregated_plan_no_split_meets_names_the_target(cli) -> None:
    """No candidate: the error names the target no split reaches and the shortest any gives (it had
    said 'within memory' whatever bound it); a budget of more prompts than the engine's batch limit
    (8B's 4-token prompts: 2,048 a round beyond vLLM's 1,024) prefills as many as it holds."""
    assert_one_line_error(
        cli("serve", "-m", "llama70b", "-c", "dgx-h100x4", "--disaggregate", "--ttft-ms", "50"),
        "no prefill/decode split meets the TTFT target of 50 ms: the shortest is",
    )
    assert_one_line_error(
        cli("serve", "-m", "llama70b", "-c", "dgx-h100x4", "--disaggregate", "--tpot-ms", "5"),
        "no prefill/decode split meets the TPOT target of 5 ms: the shortest is",
    )
    r = planner.serve("llama3-8b", "dgx-h100x1", disaggregate=True, input_len=4)
    assert r.candidates and r.candidates[0].config["prefill_decode_split"]["prefill_batch"] <= 1024


def test_a_disaggregated_closed_loop_counts_the_prompt_in_a_requests_time() -> None:
    """At a concurrency N the rate is at most N / (TTFT + (osl - 1) x TPOT) (Little's law): the
    disaggregated plan had counted all 16 requests decoding all the time, 22% high."""
    r = planner.serve("llama70b", "dgx-h100x2", disaggregate=True, concurrency=16, tp=8)
    c = r.candidates[0]
    little = 16 * 512 / (c.ttft_s + 511 * c.tpot_s) / 16
    assert c.output_tokens_per_s_per_gpu == pytest.approx(little, rel=1e-6)


def test_the_kv_moves_at_the_pace_of_its_busier_end() -> None:
    """MLA's latent is whole on every decode rank: under attention DP one rank takes a sequence's
    whole cache through one link, where the transfer had divided it over the 8 prefill GPUs."""
    from planner.serving.disagg import kv_transfer_s
    from planner.serving.kv import kv_bytes_per_token
    from planner.serving.layout import Layouts

    s = _setting("deepseek-v3", weights="fp8")
    prefill = Layouts.of(np.array([8.0]))
    decode = Layouts.of(np.array([8.0]), ep=np.array([8.0]), attention_dp=np.array([True]))
    whole = 2048 * kv_bytes_per_token(s.model, s.kv_dtype, 2048.0, s.engine.chunked_kv)
    link = s.cluster.intra_node if s.cluster.num_gpus <= s.cluster.fast_domain_gpus else s.cluster.inter_node
    assert kv_transfer_s(s, prefill, decode, 2048)[0] == pytest.approx(
        whole / link.bus_bandwidth_bytes_per_s + link.latency_s, rel=1e-9
    )


def test_a_disaggregated_plan_says_it_counts_its_idle_gpus() -> None:
    """Its figures are per GPU of the cluster, idle ones included; the warning had said they were
    left out (found by a review). Llama-3 70B at TP16 on a GB200 rack: 4 replicas of 16, 8 idle."""
    from planner.serving.search import gpus_used

    r = planner.serve("llama70b", "gb200-nvl72", disaggregate=True, tp=16)
    best = r.candidates[0]
    assert gpus_used(best) == 64
    (note,) = [w for w in r.warnings if "idle" in w]
    assert note.startswith("#1 runs on 64 of the 72 GPUs: the other 8 idle, which its tokens/s per GPU and $/Mtok "
                           "count as serving nothing")  # fmt: skip


def test_weights_too_large_for_any_layout_say_so(cli) -> None:
    """The shard alone exceeds the GPU: the KV cache's format and the context are beside the point
    (the message had offered --kv-dtype fp8 and a shorter context, with the sequence counted in full
    where vLLM reserves half the output)."""
    r = cli("serve", "--model", "llama3-405b", "--cluster", "dgx-h100x1")
    assert_one_line_error(
        r,
        "no layout fits: the smallest weight shard is 94.5 GiB per GPU, more than the 79.7 GiB a GPU holds; use "
        "more GPUs or --weights-dtype fp8",
    )


def test_seed_command_ranks_in_a_table(cli) -> None:
    r = cli(*SEED, "--tpot-ms", "30")
    assert r.code == 0, r.err
    assert "TPOT ms" in r.out and "tok/s/GPU" in r.out and "why #1 wins" in r.out


def test_json_keys(cli) -> None:
    r = cli(*SEED, "--tpot-ms", "30", "--json")
    assert r.code == 0, r.err
    data = r.json()
    c = data["candidates"][0]
    for key in (
        "config",
        "ttft_s",
        "tpot_s",
        "output_tokens_per_s_per_gpu",
        "output_tokens_per_s_per_user",
        "max_concurrency",
        "memory_per_gpu_bytes",
        "memory_breakdown_bytes",
        "kv_cache_bytes_per_token",
        "meets_targets",
        "warnings",
    ):
        assert key in c
    for key in ("tp", "pp", "ep", "attention_dp", "replicas", "gpus_per_replica", "prefill_decode_split"):
        assert key in c["config"]
    assert set(c["memory_breakdown_bytes"]) == {"weights", "kv_cache", "activations", "runtime"}
    assert c["kv_cache_bytes_per_token"] == 327680


def test_workload_file(cli, tmp_path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("input_len: 1024\noutput_len: 128\ntpot_ms: 40\n")
    r = cli("serve", "--model", "llama3-8b", "--cluster", "dgx-h100x1", "--workload", str(f), "--json")
    assert r.code == 0, r.err
    assert r.json()["request"]["input_len"] == 1024 and r.json()["request"]["tpot_s"] == 0.04
    f.write_text("input_len: 1024\nfoo: 1\n")
    assert_one_line_error(cli("serve", "--model", "llama3-8b", "--cluster", "dgx-h100x1", "--workload", str(f)), "foo")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--model", "llama3-7b", "--cluster", "dgx-h100x1"], ("unknown model",)),
        (["--model", "llama70b", "--cluster", "dgx-h100x1", "--tp", "16"], ("tp", "16")),
        (["--model", "llama70b", "--cluster", "dgx-h100x1", "--tp", "3"], ("tp", "heads")),
        (["--model", "llama70b", "--cluster", "dgx-h100x1", "--ep", "2"], ("ep", "experts")),
        (["--model", "llama70b", "--cluster", "dgx-h100x1", "--input-len", "-5"], ("input-len",)),
        (["--model", "llama70b", "--cluster", "dgx-h100x1", "--output-len", "0"], ("output-len",)),
        (["--model", "llama70b", "--cluster", "dgx-h100x1", "--tpot-ms", "nan"], ("tpot-ms",)),
        (["--model", "llama70b", "--cluster", "dgx-h100x1", "--ttft-ms", "-1"], ("ttft-ms",)),
        (["--model", "llama70b", "--cluster", "dgx-h100x1", "--weights-dtype", "int3"], ("weights_dtype",)),
        (["--model", "llama70b", "--cluster", "dgx-h100x1", "--engine", "tgi"], ("engine",)),
        (["--model", "llama70b", "--cluster", "dgx-h100x1", "--concurrency", "4", "--request-rate", "2"], ("both",)),
        (["--model", "llama8b", "--cluster", "dgx-h100x1", "--request-rate", "1e-300"], ("--request-rate", ">= 0.001")),
        # two pools of the pinned replica do not fit (it had blamed targets, load and memory)
        (["--model", "llama8b", "--cluster", "dgx-h100", "--tp", "8", "--disaggregate"], ("disaggregate", "need 16")),
    ],
)
def test_cli_errors_exit_2(cli, args: list[str], words: tuple[str, ...]) -> None:
    assert_one_line_error(cli("serve", *args), *words)


def test_infeasible_targets_give_an_empty_ranking_with_reason(cli) -> None:
    r = cli(*SEED, "--tpot-ms", "0.5", "--json")
    assert r.code == 2 and r.err.startswith("error: no candidate: ")  # as the table: scripts tell it from success
    data = r.json()
    assert data["candidates"] == [] and "lowest TPOT" in data["reason"]
    # the table and --export have nothing to show: one error line, exit 2 (scripts tell it from success)
    r = cli(*SEED, "--tpot-ms", "0.5")
    assert_one_line_error(r, "no candidate", "lowest TPOT")
    assert cli(*SEED, "--tpot-ms", "0.5", "--export", "vllm").code == 2
    too_big = planner.serve("llama3-405b", "dgx-h100x1", input_len=2048, output_len=512)
    assert too_big.candidates == [] and "fits" in too_big.reason


def test_targets_no_layout_meets_at_once_name_each_layouts_trade_off(cli) -> None:
    """The lowest TPOT and the lowest TTFT come from different layouts where the targets conflict; the
    reason names each with its other latency (the bare minima, 35.5 ms and 525 ms, had each read as
    inside the asked 40 ms and 2 s)."""
    r = cli("serve", "--model", "llama70b", "--cluster", "dgx-h100x2", "--concurrency", "512", "--tpot-ms", "40",
            "--ttft-ms", "2000")  # fmt: skip
    lowest_tpot = "the lowest TPOT is 35.5 ms (8x tp2 pp1, its TTFT"
    assert_one_line_error(r, lowest_tpot, "and the lowest TTFT 525 ms (2x tp8 pp1, its TPOT 76.4 ms)")


def test_library_errors_are_planner_errors() -> None:
    with pytest.raises(PlannerError, match="input_len"):
        planner.serve("llama70b", "dgx-h100x1", input_len=-1)
    with pytest.raises(PlannerError, match="unknown model"):
        planner.serve("nope-70b", "dgx-h100x1")


def test_engine_profiles_are_sourced() -> None:
    from typing import get_args

    from planner.serving.engine import ENGINES
    from planner.serving.export import EXPORTS
    from planner.serving.schemas import EngineName

    assert get_args(EngineName) == ENGINES == EXPORTS  # one list of engines: the type, the loader, the exports
    for name in ENGINES:
        e = load_engine(name)
        assert e.kv_block_tokens >= 1 and 0 < e.gpu_memory_fraction <= 1
    assert load_engine("vllm").gpu_memory_fraction == 0.9 and load_engine("vllm").kv_block_tokens == 16
    json.dumps(load_engine("trtllm").model_dump(mode="json"))


@pytest.mark.parametrize(
    ("engine", "flags"),
    [
        ("vllm", ("vllm serve meta-llama/Meta-Llama-3-70B", "--tensor-parallel-size 4", "--max-num-seqs")),
        (
            "sglang",
            ("sglang.launch_server --model-path meta-llama/Meta-Llama-3-70B", "--tp-size 4", "--max-running-requests"),
        ),
        ("trtllm", ("trtllm-serve meta-llama/Meta-Llama-3-70B", "--tp_size 4", "--max_batch_size")),
        (
            "trtllm-tensorrt",
            ("trtllm-serve meta-llama/Meta-Llama-3-70B \\\n    --backend tensorrt", "--tp_size 4", "--max_num_tokens"),
        ),
    ],
)
def test_export_launch_flags(cli, engine: str, flags: tuple[str, ...]) -> None:
    r = cli(*SEED, "--tpot-ms", "30", "--tp", "4", "--export", engine)
    assert r.code == 0, r.err
    for flag in flags:
        assert flag in r.out


def test_the_exported_batch_cap_is_the_batch_replayed(cli) -> None:
    """A replayed batch is a time average (48.00000000000021 at 48 in flight): the export had capped
    vLLM at 49 sequences (found by a review)."""
    r = cli("serve", "--model", "llama70b", "--cluster", "dgx-h100x1", "--tpot-ms", "30", "--json")
    best = r.json()["candidates"][0]
    assert best["batch_per_replica"] == pytest.approx(48, rel=1e-9)
    r = cli("serve", "--model", "llama70b", "--cluster", "dgx-h100x1", "--tpot-ms", "30", "--export", "vllm")
    assert "--max-num-seqs 48 " in r.out


def test_export_disaggregated_and_attention_dp(cli) -> None:
    table = cli("serve", "--model", "llama3-8b", "--cluster", "dgx-h100x2", "--disaggregate")
    # the pools' GPUs and the KV's move, which the JSON's warnings held alone (found by a review)
    assert table.code == 0 and "#1: prefill:decode GPUs " in table.out and " ms per request" in table.out
    r = cli("serve", "--model", "llama3-8b", "--cluster", "dgx-h100x2", "--disaggregate", "--export", "sglang")
    assert r.code == 0 and "--disaggregation-mode prefill" in r.out and "--disaggregation-mode decode" in r.out
    r = cli(
        "serve",
        "--model",
        "deepseek-v3",
        "--cluster",
        "dgx-h200x1",
        "--weights-dtype",
        "fp8",
        "--engine",
        "trtllm",
        "--attention-dp",
        "--export",
        "trtllm",
    )
    assert r.code == 0, r.err
    assert "enable_attention_dp: true" in r.out and "trtllm-serve deepseek-ai/DeepSeek-V3" in r.out
    # SGLang 0.5.23 spells attention DP --attn-dp-size (--enable-dp-attention is deprecated)
    r = cli(
        "serve", "--model", "deepseek-v3", "--cluster", "dgx-h200x1", "--weights-dtype", "fp8", "--attention-dp",
        "--tp", "8", "--export", "sglang",
    )  # fmt: skip
    assert r.code == 0, r.err
    commands = "\n".join(line for line in r.out.splitlines() if not line.startswith("#"))
    assert "--attn-dp-size 8" in commands and "--enable-dp-attention" not in commands
    assert "# --attn-dp-size: SGLang 0.5.23 or later; before, --dp-size 8 --enable-dp-attention" in r.out
    assert_one_line_error(cli(*SEED, "--export", "tgi"), "export", "vllm")
    assert_one_line_error(cli(*SEED, "--tpot-ms", "0.5", "--export", "vllm"), "nothing to export")


def test_a_price_gives_cost_per_million_tokens_in_the_order_of_throughput() -> None:
    # $/Mtok = price per GPU-hour / (3600 x output tokens/s per GPU) x 1e6: on one cluster the
    # ranking by throughput per GPU is the ranking by cost
    from planner.serving.render import layout_label
    from planner.serving.schemas import ServeRequest
    from planner.serving.search import layout_curves

    r = planner.serve("llama70b", load_cluster("dgx-h100x1").with_price(2.5), tpot_s=0.03)
    costs = [c.cost_per_million_output_tokens_usd for c in r.candidates]
    assert costs[0] == pytest.approx(2.5 / 3600 / r.candidates[0].output_tokens_per_s_per_gpu * 1e6)
    assert costs == sorted(costs)
    curves = layout_curves(load_model("llama3-70b"), load_cluster("dgx-h100x1"), ServeRequest(tpot_s=0.03))
    steady = {c.label: float(c.tokens_per_s_per_gpu[c.meets].max()) for c in curves if c.meets.any()}
    # the steady-state curves agree with the table's replayed figures where no pipeline runs (2 x TP4
    # at 205.3 tokens/s per GPU on the curve, 205.1 before the refit of 2026-12-07's review fixes;
    # 143.3 until the fit took each published run's replay, 2026-12-07, its time per block on Hopper
    # 56 -> 47 us, which a 30 ms TPOT feels most). Until the steady round took its prompts in whole
    # pieces (step.steady_round, 2026-12-07) the curve, its prompt tokens spread over every round,
    # lay above them: 287 against 142, TP8 270 against 203
    for c in r.candidates:
        assert c.replayed
        if c.config["pp"] == 1:
            assert c.output_tokens_per_s_per_gpu == pytest.approx(steady[layout_label(c)], rel=0.02)
    assert steady["2x tp4 pp1"] == pytest.approx(205.3, abs=0.1)


def test_layouts_priced_alike_are_shown_once() -> None:
    from planner.serving.search import merge_equivalents

    # DeepSeek-V3 without attention DP: tp8 with ep 1, 2, 4 and 8 tied (EP over the TP ranks was
    # priced as expert TP) and showed once; each rank now reorders only the k/ep routed copies its
    # experts run (step.activation_traffic_s), so the more EP the faster, and none is merged
    r = planner.serve("deepseek-v3", "dgx-b200x1", weights_dtype="fp4", engine="trtllm", tp=8, attention_dp=False)
    assert [c.config["ep"] for c in r.candidates] == [8, 4, 2, 1]
    rates = [c.output_tokens_per_s_per_gpu for c in r.candidates]
    assert rates == sorted(rates, reverse=True) and rates[0] > 1.1 * rates[-1]
    assert not any(c.equivalent_layouts for c in r.candidates)
    # candidates priced alike (the winner again under another layout) show once, in the first's place
    best, nxt = r.candidates[:2]
    twin = best.model_copy(update={"config": {**best.config, "ep": 2}})
    merged = merge_equivalents([best, twin, nxt])
    assert [c.config["ep"] for c in merged] == [8, 4]
    assert merged[0].equivalent_layouts == ["1x tp8 pp1 ep2"] and not merged[1].equivalent_layouts


def test_one_output_token_has_no_tpot_and_its_user_waits_the_ttft(cli) -> None:
    # the table showed TPOT 11014.2 ms (the steady-state round under a full prefill) and 0.1 tok/s per user
    # without a target the closed loop at the KV room (214 a replica) ran the 4 prompts the 8,192-token
    # budget admits and queued the rest, a TTFT of 5.3 s; replayed at the 4 it ran (search._without_queue),
    # the TTFT is the prompt's own, at the same throughput, as a loose TTFT target finds it
    ranked = planner.serve("llama8b", "dgx-h100", input_len=2048, output_len=1)
    best = ranked.candidates[0]
    assert best.tpot_s is None and best.replayed and best.batch_per_replica == pytest.approx(4.0)
    assert best.ttft_s == pytest.approx(0.209, rel=0.02)
    assert best.output_tokens_per_s_per_user == pytest.approx(1.0 / best.ttft_s, rel=1e-12)
    assert best.why.startswith("tp1 pp1; one output token: TTFT 209 ms, its round 86% gemm")
    loose = planner.serve("llama8b", "dgx-h100", input_len=2048, output_len=1, ttft_s=100.0).candidates[0]
    assert loose.output_tokens_per_s_per_gpu == pytest.approx(best.output_tokens_per_s_per_gpu, rel=0.01)
    assert json.loads(ranked.model_dump_json())["candidates"][0]["tpot_s"] is None
    replayed = planner.serve("llama8b", "dgx-h100", input_len=2048, output_len=1, concurrency=64).candidates[0]
    assert replayed.replayed and replayed.tpot_s is None and replayed.steady_state_tpot_s is None
    r = cli("serve", "-m", "llama8b", "-c", "dgx-h100", "--output-len", "1", "--top", "1")
    assert r.code == 0 and "│       - │" in r.out
    assert_one_line_error(
        cli("serve", "-m", "llama8b", "-c", "dgx-h100", "--output-len", "1", "--tpot-ms", "20"),
        "tpot_s: a request of output_len 1 has no token after the first to time; give a TTFT target instead",
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("input_len: -5\n", "field 'input_len': Input should be greater than 0"),
        ("input_len: 128\nrequest_rate: .inf\n", "field 'request_rate': Input should be a finite number"),
        ("concurrency: many\n", "field 'concurrency': Input should be a valid integer"),
    ],
)
def test_a_bad_workload_value_names_the_file(cli, tmp_path, text: str, said: str) -> None:
    """A workload file's counts were checked only when the request was built, as 'serve: field ...',
    without the file's name."""
    f = tmp_path / "w.yaml"
    f.write_text(text)
    r = cli("serve", "--model", "llama3-8b", "--cluster", "dgx-h100x1", "--workload", str(f))
    assert_one_line_error(r, f"{f}: {said}")


def test_a_workload_count_given_as_true_is_refused(cli, tmp_path) -> None:
    """YAML's true is no count: read as 1 it priced a one-token prompt."""
    f = tmp_path / "w.yaml"
    f.write_text("input_len: true\noutput_len: 128\n")
    r = cli("serve", "--model", "llama3-8b", "--cluster", "dgx-h100x1", "--workload", str(f))
    assert_one_line_error(r, f"{f}: field 'input_len': expected a number, got true")


def test_an_export_keeps_the_rankings_warnings_on_stderr(cli) -> None:
    # the launch flags go to stdout; the warnings the table shows (FP4 weights on a GPU without FP4
    # tensor cores) had been dropped. TensorRT-LLM runs no NVFP4 off Blackwell, so vLLM's (Marlin) W4A16
    r = cli("serve", "-m", "llama3-8b", "-c", "l40s", "--export", "vllm", "--weights-dtype", "fp4")
    assert r.code == 0 and "vllm serve" in r.out
    assert "warning: fp4 weights on L40S" in r.err and "no FP4 tensor cores" in r.err


def test_attention_dp_ranks_hold_the_embedding_and_as_their_engine_says_the_lm_head() -> None:
    # DeepSeek-V3 at tp 8 with attention DP: vLLM's DP ranks are engines of TP 1 and TensorRT-LLM
    # replicates the head (enable_lm_head_tp_in_adp False), so each GPU holds both whole, 2 x V x h x 2
    # bytes = 3.45 GiB, where 1/8 of them had been counted; SGLang keeps its head vocab-parallel
    from planner.serving.memory import embedding_and_head_bytes_per_gpu

    m = load_model("deepseek-v3")
    whole = 129280 * 7168 * 2
    adp, plain = Layouts.of(8, attention_dp=True), Layouts.of(8)
    for engine, head in (("vllm", whole), ("trtllm", whole), ("sglang", whole / 8)):
        embedding, lm_head = embedding_and_head_bytes_per_gpu(m, load_engine(engine), adp)
        assert (float(embedding[0]), float(lm_head[0])) == (whole, head)
        assert float(embedding_and_head_bytes_per_gpu(m, load_engine(engine), plain)[1][0]) == whole / 8


def test_a_tied_heads_logits_read_the_embedding_matrix() -> None:
    # gpt2's head is its embedding: the decode round had read no head weights and counted no logits FLOPs
    from planner.serving.memory import lm_head_read_bytes_per_gpu

    m = load_model("gpt2-124m")
    assert m.tie_word_embeddings and m.parameter_counts.lm_head == 0
    read = lm_head_read_bytes_per_gpu(m, load_engine("vllm"), Layouts.of(1))
    assert float(read[0]) == m.vocab_size * m.hidden_size * 2


def test_a_layout_that_leaves_gpus_idle_says_so() -> None:
    from planner.serving.render import layout_label
    from planner.serving.search import gpus_used

    # EP 64 on an NVL72 rack runs on 64 of its 72 GPUs; its tokens/s per GPU and $/Mtok count 64
    r = planner.serve("deepseek-v3", "gb200-nvl72", ep=64, weights_dtype="fp8")
    assert any(w.startswith("#1 runs on 64 of the 72 GPUs: the other 8 idle") for w in r.warnings)
    assert not any("idle" in w for w in planner.serve("llama3-8b", "dgx-h100").warnings)
    # and names the layout that serves the most over the whole cluster where it is another (a review:
    # 70B on 12 H100, #1 on 8 at 583 tokens/s per GPU, 4,664 in all; 3 x TP2 x PP2 on all 12, 6,358)
    twelve = planner.serve("llama3-70b", load_cluster("dgx-h100x2", gpus=12), top=4)
    (note,) = [w for w in twelve.warnings if w.startswith("#1 runs on 8 of the 12 GPUs")]
    most = max(twelve.candidates, key=lambda c: c.output_tokens_per_s_per_gpu * gpus_used(c))
    assert gpus_used(most) == 12 and most is not twelve.candidates[0]
    total = most.output_tokens_per_s_per_gpu * 12
    first = twelve.candidates[0].output_tokens_per_s_per_gpu * 8
    said = f"over the whole cluster {layout_label(most)} serves the most, {total:,.0f} tokens/s on 12 GPUs"
    assert note.endswith(f"{said} against #1's {first:,.0f}")


# ---- the error bar ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["trtllm", "trtllm-tensorrt"])
def test_the_shipped_fit_keeps_each_architectures_errors_for_its_bands(name: str) -> None:
    from planner.error_bar import MOE_SUFFIX

    cal = load_engine(name).calibration
    assert cal is not None and {k.removesuffix(MOE_SUFFIX) for k in cal.cv_error_pct} == set(cal.rows)
    for arch, rows in cal.rows.items():
        # one cross-validated error per throughput row the fit used, dense and MoE apart, and one per
        # TPOT row it used (TensorRT-LLM's online table: rate rows, none of which publishes a throughput)
        errors = cal.cv_error_pct.get(arch, []) + cal.cv_error_pct.get(arch + MOE_SUFFIX, [])
        tpot_rows = cal.latency_error_pct["tpot"].get(arch, [])
        assert len(errors) + len(tpot_rows) == len(rows) > 0
    # and the TTFT and TPOT rows' errors: the 42 batch-1 TTFT rows and the online table's 72 (H100, H200),
    # all of them TensorRT-engine runs; no PyTorch-backend row publishes a latency
    ttft = sum(len(v) for v in cal.latency_error_pct["ttft"].values())
    tpot = sum(len(v) for v in cal.latency_error_pct["tpot"].values())
    assert (ttft, tpot) == ((114, 72) if name == "trtllm-tensorrt" else (0, 0))


def test_a_band_reads_the_architectures_runs_of_the_models_kind_first() -> None:
    from planner.error_bar import MIN_INTERVAL_ROWS

    trtllm = load_engine("trtllm")
    cal = trtllm.calibration
    assert cal is not None
    errors, basis = trtllm.published_errors("throughput", "hopper")
    assert errors == cal.cv_error_pct["hopper"] and basis.endswith(
        "cross-validated trtllm runs of dense models on hopper"
    )
    moe, basis = trtllm.published_errors("throughput", "hopper", moe=True)
    assert moe == cal.cv_error_pct["hopper+moe"] and "of MoE models on hopper" in basis
    # no PyTorch-backend row publishes a TTFT: the TensorRT-engine runtime's stand in, and the basis says so
    ttft, basis = trtllm.published_errors("ttft", "hopper")
    tensorrt = load_engine("trtllm-tensorrt")
    assert ttft == tensorrt.calibration.latency_error_pct["ttft"]["hopper"]  # type: ignore[union-attr]
    assert basis == (
        f"{len(ttft)} trtllm-tensorrt TTFT runs of dense models on hopper standing in for trtllm's "
        "(no trtllm row publishes TTFT)"
    )
    assert tensorrt.published_errors("ttft", "hopper") == (
        ttft,
        f"{len(ttft)} trtllm-tensorrt TTFT runs of dense models on hopper",
    )
    # with the server's request path fitted (calibrate.fit_request_path), the TTFT band straddles the
    # prediction; it still leans above it (the online table's loaded rows queue longer than replayed).
    # Without the path the band had lain wholly above the prediction (ARCHITECTURE 9.7)
    low, high = interval(0.1, ttft)  # type: ignore[misc]
    assert low < 0.1 < high and high - 0.1 > 0.1 - low
    # vLLM has no fit of its own: TensorRT-LLM's errors stand in, and the basis says so
    stand_in, basis = load_engine("vllm").published_errors("throughput", "hopper")
    assert stand_in == errors and basis.endswith("standing in for vllm's (a floor: vllm has no fit of its own)")
    # two stand-ins on the way (vLLM reads TensorRT-LLM's, whose TTFTs are its TensorRT runtime's): one clause
    assert load_engine("vllm").published_errors("ttft", "hopper") == (
        ttft,
        f"{len(ttft)} trtllm-tensorrt TTFT runs of dense models on hopper standing in for vllm's (a floor: vllm "
        "has no fit of its own, and no trtllm row publishes TTFT)",
    )

    def calibrated(errors_by_key: dict[str, list[float]]) -> tuple[list[float], str]:
        engine = trtllm.model_copy(update={"calibration": cal.model_copy(update={"cv_error_pct": errors_by_key})})
        return engine.published_errors("throughput", "hopper")

    nine = [float(e) for e in range(MIN_INTERVAL_ROWS)]
    # exactly MIN_INTERVAL_ROWS of the kind on the architecture: those alone
    assert calibrated({"hopper": nine, "hopper+moe": [50.0], "ampere": [9.0] * 20}) == (
        nine,
        "9 cross-validated trtllm runs of dense models on hopper",
    )
    # one fewer: the architecture's of either kind
    errors, basis = calibrated({"hopper": nine[:-1], "hopper+moe": [50.0], "ampere": [9.0] * 20})
    assert sorted(errors) == [*nine[:-1], 50.0] and basis == "9 cross-validated trtllm runs on hopper"
    # too few on the architecture: every architecture's, counted by architecture
    errors, basis = calibrated({"hopper": [1.0] * 4, "ampere": [2.0] * 5, "ada+moe": [3.0] * 7})
    assert (
        sorted(errors) == [1.0] * 4 + [2.0] * 5
        and "of dense models on every GPU architecture (ampere 5, hopper 4)" in basis
    )
    assert calibrated({"ada": [1.0]}) == ([], "no cross-validated trtllm runs")


def test_a_band_is_where_published_runs_priced_alike_landed() -> None:
    # published = predicted / (1 + error): twenty errors of -10..+9% around 1,000 tokens/s put the
    # 10th and 90th percentile errors at -8.9% and +7.9% (positions 2.1 and 18.9 of 20)
    assert interval(1000.0, [float(e) for e in range(-10, 10)]) == pytest.approx((1000 / 1.079, 1000 / 0.911))
    # a TTFT the planner predicts 20% low in every row: the band lies a quarter above it
    assert interval(0.4, [-20.0] * 9) == pytest.approx((0.5, 0.5))


def test_every_candidate_carries_its_bands_and_no_throughput_band_at_a_stated_rate(cli) -> None:
    r = cli(*SEED, "--engine", "trtllm", "--json")
    assert r.code == 0, r.err
    data = r.json()
    json.dumps(data)
    trtllm = load_engine("trtllm")
    for metric, name in (("throughput", "output_tokens_per_s_per_gpu"), ("ttft", "ttft_s"), ("tpot", "tpot_s")):
        errors, basis = trtllm.published_errors(metric, "hopper")  # type: ignore[arg-type]
        assert data["interval_basis"][metric] == basis
        for c in data["candidates"]:
            assert c[f"{name}_interval"] == pytest.approx(list(interval(c[name], errors)))  # type: ignore[arg-type]
    best = data["candidates"][0]
    low, high = best["ttft_s_interval"]
    assert low < best["ttft_s"] < high and high - best["ttft_s"] > best["ttft_s"] - low  # leaning above, as measured
    assert data["request_path_s"] > 0 and data["request_path_s"] == pytest.approx(
        trtllm.parameters("hopper").request_path_s
    )
    text = cli(*SEED, "--engine", "trtllm").out
    path_ms = data["request_path_s"] * 1e3
    assert f"TTFT holds {path_ms:.1f} ms of a request's path through the server" in " ".join(text.split())
    for label in ("tok/s/GPU", "TTFT", "TPOT"):
        assert f"band {label}: published runs priced at #1's" in text
    assert "trtllm runs of dense models on hopper" in text and "same relative bands" in text
    # at a stated request rate the throughput is the offered load, not a prediction: no band
    rated = cli(*SEED, "--engine", "trtllm", "--request-rate", "2", "--json").json()
    assert set(rated["interval_basis"]) == {"ttft", "tpot"} and rated["candidates"]
    assert all(c["output_tokens_per_s_per_gpu_interval"] is None for c in rated["candidates"])
    assert all(c["ttft_s_interval"] is not None for c in rated["candidates"])
    # one output token: no TPOT, so no TPOT band, and a TTFT target below #1's band is called likely missed
    one = cli(*SEED[:-4], "--output-len", "1", "--ttft-ms", "2000", "--engine", "trtllm", "--json").json()
    assert "tpot" not in one["interval_basis"] and one["candidates"][0]["tpot_s_interval"] is None
    low = one["candidates"][0]["ttft_s_interval"][0]
    assert (low > 2.0) == any("TTFT target 2.00 s lies below #1's band" in w for w in one["warnings"])


def test_targets_at_the_band_end_are_met_by_every_candidates_band(cli) -> None:
    from planner.error_bar import quantile

    asked = ["--ttft-ms", "500", "--tpot-ms", "30"]
    plain = cli(*SEED, *asked, "--json").json()
    banded = cli(*SEED, *asked, "--targets-at-band-end", "--json").json()
    assert plain["searched_targets_s"] == {} and banded["request"]["ttft_s"] == 0.5
    vllm = load_engine("vllm")
    for metric, target in (("ttft", 0.5), ("tpot", 0.03)):
        near = quantile(vllm.published_errors(metric, "hopper")[0], 0.1)  # type: ignore[arg-type]
        assert near < 0 and banded["searched_targets_s"][metric] == pytest.approx(target * (1 + near / 100))
        for c in banded["candidates"]:  # the slow end of every ranked candidate's band meets the asked target
            assert c[f"{metric}_s_interval"][1] <= target * (1 + 1e-9)
    # the prediction alone met the targets with less margin, and more throughput
    assert max(c["tpot_s_interval"][1] for c in plain["candidates"]) > 0.03
    assert (
        banded["candidates"][0]["output_tokens_per_s_per_gpu"] < plain["candidates"][0]["output_tokens_per_s_per_gpu"]
    )
    assert any("TTFT target 500 ms met at the slow end of the band, +" in w for w in banded["warnings"])
    alone = cli(*SEED, "--targets-at-band-end", "--json").json()
    assert "--targets-at-band-end: no TTFT or TPOT target to check" in alone["warnings"]
    # a target nothing meets names the asked targets and the ones searched
    none = cli(*SEED, "--ttft-ms", "1", "--targets-at-band-end", "--json").json()
    assert (
        none["candidates"] == []
        and "(asked: TPOT any, TTFT 1 ms; searched at the band's slow end: TPOT any, TTFT " in (none["reason"])
    )


def test_a_rows_checkpoint_brings_its_chunked_attention() -> None:
    """A runs row's shape has no key for Llama 4's chunked attention, its checkpoint's config.json
    has: the catalog model whose hf_repos hold the row's hf_id gives it, where the shape agrees;
    the row's 32K prompt then pays the chunked layers' attention over 8,192 keys at most."""
    from planner.serving.runs import model_from_row
    from planner.serving.step import prefill_attention_s

    shape = {
        "layers": 48,
        "hidden": 5120,
        "heads": 40,
        "kv_heads": 8,
        "head_dim": 128,
        "ffn_dense": 16384,
        "ffn_expert": 8192,
        "experts": 128,
        "top_k": 1,
        "shared_experts": 1,
        "moe_every_n_layers": 2,
        "vocab": 202048,
    }
    row = {"name": "r", "model": {"hf_id": "meta-llama/Llama-4-Maverick-17B-128E-Instruct", "shape": shape}}
    m = model_from_row(row)
    assert (m.attention_chunk_size, m.num_chunked_layers) == (8192, 36)
    # a shape that disagrees with the checkpoint's, or states its own window, keeps its own attention
    for own in ({"layers": 24}, {"sliding_window": 4096}):
        other = model_from_row({**row, "model": {**row["model"], "shape": shape | own}})
        assert other.num_chunked_layers == 0 and other.attention_chunk_size is None
    unknown = model_from_row({**row, "model": {"hf_id": "someone/else", "shape": shape}})
    assert unknown.num_chunked_layers == 0
    # 36 chunked layers see 8,192 keys per query at most: a 32K prompt's attention is a fraction
    full = Setting(unknown, load_cluster("dgx-b200x1"), load_engine("trtllm"), "fp4", "fp8", FittedParameters())
    chunked = Setting(m, load_cluster("dgx-b200x1"), load_engine("trtllm"), "fp4", "fp8", FittedParameters())
    lay, tokens = Layouts.of(8), np.array([32768.0])
    ratio = prefill_attention_s(chunked, lay, tokens, 32768)[0] / prefill_attention_s(full, lay, tokens, 32768)[0]
    # 12 full layers of s/2 keys per query and 36 of 4 causal chunks (4,096 on average): 0.44
    assert ratio == pytest.approx((12 * 16384.5 + 36 * 4096.5) / (48 * 16384.5), rel=0.01)


def test_the_lm_head_paces_the_pipeline() -> None:
    # blocks split evenly over the stages, the head on the last one: that stage is the slowest and
    # a round lasts pp times it, so the head's time counts pp times and the blocks' once
    from planner.serving.step import gemm_pairs

    s = _setting()
    lay = Layouts.of(1, [1, 2, 4])
    tokens, head_tokens = np.full(3, 64.0), np.full(3, 64.0)
    compute, memory = gemm_pairs(s, lay, tokens, head_tokens)
    assert memory[0].tolist() == pytest.approx([memory[0, 0]] * 3)  # all the blocks' weights once a round
    assert memory[2].tolist() == pytest.approx([memory[2, 0], 2 * memory[2, 0], 4 * memory[2, 0]])
    assert compute[2].tolist() == pytest.approx([compute[2, 0], 2 * compute[2, 0], 4 * compute[2, 0]])
    # Llama-3-70B's head (128,256 x 8,192 bf16, 2.1 GB) beside its 80 layers (137 GB): at PP 4 the
    # weight reads of a decode round grow by 3 x 1.5%
    assert memory[2, 0] / memory[0, 0] == pytest.approx(128256 * 8192 * 2 / (memory[0, 0] * s.hbm_bytes_per_s))


def test_a_static_batch_faster_than_its_weight_reads_is_refused() -> None:
    """Each decode step of a static batch reads the weights its GPU holds: at the datasheet HBM
    bandwidth Mixtral-8x7B at TP 2 on A100 (its blocks' 46.5 GB per GPU, every expert touched by
    32 tokens) steps at most every 22.8 ms, about 700 output tokens/s per GPU at batch 32; a row
    that states 801 (TensorRT-LLM 0.9's table) is refused with the reason, one just below the bound
    is priced."""
    from planner.serving.memory import block_weight_bytes_per_gpu
    from planner.serving.runs import RowPlan, UnpriceableError, _check_static_rate_reachable

    model, cluster = load_model("mixtral-8x7b"), load_cluster("dgx-a100-80g")
    s = Setting(model, cluster, load_engine("trtllm"), "bf16", "bf16", FittedParameters())
    lay = Layouts.of(2)
    non_expert, experts = block_weight_bytes_per_gpu(s.model, lay, "bf16")
    assert float(non_expert[0] + experts[0]) / 1e9 == pytest.approx(46.5, abs=0.1)
    ceiling = 32 / (float(non_expert[0] + experts[0]) / s.cluster.gpu.hbm_bandwidth_bytes_per_s) / 2
    assert ceiling == pytest.approx(701, abs=3)

    def plan(rate: float) -> RowPlan:
        return RowPlan("r", "g", s, lay, "static", 2048, 2048, 32.0, {"output_tokens_per_s_per_gpu": rate})

    said = r"measured.output_tokens_per_s_per_gpu 801 is above 70\d, what a static batch of 32 reaches"
    with pytest.raises(UnpriceableError, match=said):
        _check_static_rate_reachable(plan(801.0))
    with pytest.raises(UnpriceableError):
        _check_static_rate_reachable(plan(1.001 * ceiling))
    _check_static_rate_reachable(plan(0.999 * ceiling))


def test_a_replayed_candidates_breakdown_is_its_steady_rounds() -> None:
    """tpot_breakdown_s prices the steady-state round by term: replayed, it sums to steady_state_tpot_s
    (a review had read it against tpot_s, which the replay prices whole)."""
    import planner

    c = planner.serve("qwen3-30b-a3b", "dgx-h100", concurrency=64).candidates[0]
    assert c.replayed and c.steady_state_tpot_s is not None
    assert sum(c.tpot_breakdown_s.values()) == pytest.approx(c.steady_state_tpot_s, rel=1e-9)
    assert c.tpot_s != pytest.approx(c.steady_state_tpot_s, rel=1e-6)


def test_a_plan_without_target_says_what_its_users_wait(cli) -> None:
    """Without a target #1 runs its largest batch: the first screen says what each user then gets,
    and how to ask for interactive serving; a target or a load drops the line."""
    r = cli("serve", "--model", "llama3-8b", "--cluster", "dgx-h100")
    text = " ".join(r.out.split())
    assert r.code == 0 and "no target: ranked by throughput at each layout's largest batch, so #1's users wait" in text
    assert "give --tpot-ms (50 ms is 20 tokens/s a user) and --ttft-ms" in text
    targeted = cli("serve", "--model", "llama3-8b", "--cluster", "dgx-h100", "--tpot-ms", "30")
    assert "no target: ranked" not in targeted.out


def test_trtllm_bench_sizes_its_token_budget_as_its_tuning_code_does() -> None:
    """tensorrt_llm/bench/build/tuning.py finetune_setting and bench/benchmark/utils/general.py
    get_settings, by hand: 367 requests of 20K/2K on one stage, 367 x 11 = 4,037 tokens -> 4,096, a
    batch of 384 (rounded to 128), and without chunked prefill at least 20,000 + 384 = 20,384; 1,000
    of 128/128 2,000 -> 2,048; 4,096 requests (the cap) of 128/2,048 4,352 -> 4,608 (rounded to 512)."""
    from planner.serving.runs import trtllm_bench_max_num_tokens

    assert trtllm_bench_max_num_tokens(367, 20000, 2000, 1) == 20384
    assert trtllm_bench_max_num_tokens(1000, 128, 128, 1) == 2048
    assert trtllm_bench_max_num_tokens(5000, 128, 2048, 1) == 4608
    assert trtllm_bench_max_num_tokens(5000, 128, 2048, 4) == 2048  # 1,024 a stage x 1.0625 = 1,088


def test_a_rate_no_layout_sustains_names_the_most_any_does(cli) -> None:
    """A review (2026-12-07): 70B at 14 req/s of 2K/256 on one DGX H100 was refused as 'more than any
    layout sustains within memory'; the error gives the most any layout sustains at the steady state,
    which one, and what bounds it."""
    r = cli("serve", "--model", "llama70b", "--cluster", "dgx-h100x1", "--request-rate", "14", "--output-len", "256")
    assert r.code == 2 and r.out == ""
    match = re.search(
        r"exceeds what any layout sustains at the steady state: at most ([\d.]+)/s, (\dx tp\d pp\d)", r.err
    )
    assert match is not None, r.err
    most = float(match.group(1))
    assert 10 < most < 14 and "use more GPUs or a lower rate" in r.err
    # below it the steady state takes the rate: a plan, or the replay's refusal, never the steady state's
    below = cli("serve", "--model", "llama70b", "--cluster", "dgx-h100x1", "--request-rate", str(0.9 * most),
                "--output-len", "256")  # fmt: skip
    assert below.code == 0 or "when its arrivals are replayed" in below.err, below.err


def test_a_moe_plan_of_an_engine_without_a_fit_says_whose_expert_rate_it_borrows() -> None:
    """vLLM and SGLang borrow TensorRT-LLM's PyTorch-backend fit; its routed-expert rate was fitted to
    TensorRT-LLM's own MoE kernels, and vLLM's published GPT-OSS-20B rows on H100 run well above it
    (ARCHITECTURE 9.7): a MoE plan says so, with the rate, and where no published row checks it, that."""
    from planner.serving.engine import load_engine

    hopper = load_engine("trtllm").fitted["hopper"].expert_gemm_fraction
    r = planner.serve("gpt-oss-20b", "dgx-h100x1", engine="vllm", concurrency=8, top=1)
    (note,) = [w for w in r.warnings if "routed experts" in w]
    assert f"trtllm's fitted rate on hopper, {hopper:.2f} of the dense GEMMs'" in note and "37-41% above" in note
    r = planner.serve("qwen3-30b-a3b", "dgx-b200x1", engine="sglang", top=1)
    assert any("no published sglang MoE row checks it" in w for w in r.warnings)
    dense = planner.serve("llama8b", "dgx-h100x1", engine="vllm", top=1)
    assert not any("routed experts" in w for w in dense.warnings)
    own = planner.serve("gpt-oss-20b", "dgx-h100x1", engine="trtllm", concurrency=8, top=1)
    assert not any("routed experts" in w for w in own.warnings)


def test_a_pipelined_winner_of_a_closed_loop_says_its_micro_batches_fill_side_by_side(cli) -> None:  # type: ignore[no-untyped-def]
    # 70B on one DGX H100 without targets ranks 1 x TP2 x PP4 first on its closed loop's TPOT, about
    # 0.6x its steady state's: requests arriving apart would see about the steady state (a review)
    r = cli(*SEED)
    assert r.code == 0, r.err
    text = " ".join(r.out.split())
    assert "#1's 4 pipeline micro-batches fill side by side in a closed loop of equal requests" in text
    steady = float(text.split("steady-state estimate was TTFT ")[1].split("TPOT ")[1].split(" ms")[0])
    assert steady > 1.2 * 126.0
    at_rate = cli(*SEED, "--request-rate", "2", "--tp", "2", "--pp", "4")
    assert at_rate.code == 0 and "fill side by side" not in at_rate.out


def test_under_attention_dp_the_rank_holding_a_lone_request_runs_its_own_work_whole() -> None:
    # each attention-DP rank runs the attention projections (replicated) and the KV reads of the
    # sequences it holds: a lone prompt or sequence on one rank of 8 costs that rank what it costs on
    # TP 1, where they had been priced an eighth on each rank; the routed experts still spread over EP
    from planner.serving.step import RoundPricer

    s = _setting("qwen3-30b-a3b")
    adp = Layouts.of(8, 1, 8, True)
    one = Layouts.of(1)
    piece = float(s.engine.max_num_batched_tokens)
    lone = RoundPricer(s, adp).cost(np.zeros(1), np.zeros(1), np.full(1, piece), piece)
    alone = RoundPricer(s, one).cost(np.zeros(1), np.zeros(1), np.full(1, piece), piece)
    eight = RoundPricer(s, adp).cost(np.zeros(1), np.zeros(1), np.full(1, 8 * piece), piece)
    assert lone.pair_compute_s[0, 0] == pytest.approx(alone.pair_compute_s[0, 0])  # attention projections
    assert eight.pair_compute_s[0, 0] == pytest.approx(lone.pair_compute_s[0, 0])  # one prompt on each rank
    assert lone.pair_compute_s[1, 0] == pytest.approx(alone.pair_compute_s[1, 0] / 8)  # experts over EP 8
    assert eight.pair_compute_s[1, 0] == pytest.approx(8 * lone.pair_compute_s[1, 0])
    # one decoding sequence at 32K: its rank reads all its KV (3.2 GB: 48 layers x 2 x 4 heads x 128 x 2 B)
    context = np.full(1, 32768.0)
    decode = RoundPricer(s, adp).cost(np.ones(1), context, np.zeros(1), 1.0).pair_memory_s[3, 0]
    assert decode * s.hbm_bytes_per_s == pytest.approx(48 * 2 * 4 * 128 * 2 * 32768, rel=0.01)
    both = RoundPricer(s, adp).cost(np.full(1, 8.0), context, np.zeros(1), 1.0).pair_memory_s[3, 0]
    assert both == pytest.approx(decode)  # eight sequences, one on each rank: the same read


def test_the_steady_round_takes_the_pieces_the_batch_brings_even_when_a_piece_dwarfs_a_decode_round() -> None:
    # a 32K prompt's 8K chunks beside 16 decoding sequences: a round with a chunk lasts 10 to 40 times one
    # without. The rate at which the rounds take pieces had been iterated undamped and swung between
    # two values, pricing 0.50 pieces a round where the batch brings 0.13: a steady TPOT of 234 ms
    # where the replay gives 74. For pp 1 the mean round is t0 + q (t1 - t0) (work conserving)
    from planner.serving.step import RoundPricer, prompt_piece, steady_round

    s = _setting("llama3.1-70b")
    lay, batch, isl, osl = Layouts.of(8), np.array([4.0, 16.0, 64.0]), 32000.0, 500.0
    piece = prompt_piece(s.engine, isl)
    pieces = math.ceil(isl / piece)
    q = batch * pieces / osl
    pricer = RoundPricer(s, lay)
    context = np.full(3, isl + osl / 2)
    t0 = pricer.cost(batch, context, np.zeros(3), isl).total_s(s.params)
    t1 = pricer.cost(batch, context, np.full(3, isl / pieces), isl).total_s(s.params)
    steady = steady_round(s, lay, batch, isl, osl).total_s(s.params)
    assert (t1 / t0 > 10).all()
    assert steady.tolist() == pytest.approx((t0 + q * (t1 - t0)).tolist(), rel=0.03)
