"""Compute-time model checked against GEMM and attention microbenchmarks."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import load_cluster, load_model, load_stack
from planner.cost.compute import (
    attention_core_forward_s,
    gemm_on,
    layer_forward_parts,
    unfused_softmax_forward_s,
    wave_utilization,
)
from planner.mesh import MeshArrays
from planner.schemas import JobSpec, ModelSpec, ParallelConfig

_A100 = load_cluster("dgx-a100-80g")
# Microbenchmarks run for seconds at burst clocks: the profile's efficiencies describe them, and
# the sustained fraction a long training run loses (fitted from published runs) does not apply.
A100 = _A100.model_copy(
    update={
        "profile": _A100.profile.model_copy(
            update={"gpu": _A100.gpu.model_copy(update={"sustained_tensor_fraction": None})}
        )
    }
)
BF16 = JobSpec(global_batch_size=1, seq_len=2048)


@pytest.mark.parametrize(
    ("m", "n", "k", "measured_tflops"),
    # Azure AI Benchmarking Guide, ND A100 v4, cuBLASLt FP16 (the source of the A100 curve).
    [(4096, 4096, 4096, 228.0), (8192, 8192, 8192, 253.7), (6144, 12288, 12288, 250.8), (16384, 16384, 16384, 256.5)],
)
def test_gemm_model_reproduces_the_calibration_points(m: int, n: int, k: int, measured_tflops: float) -> None:
    seconds = float(gemm_on(A100, BF16)(np.array([float(m)]), float(n), float(k))[0])
    assert 2 * m * n * k / seconds / 1e12 == pytest.approx(measured_tflops, rel=0.01)


def test_skinny_gemm_against_its_measurement() -> None:
    # Not a calibration point: Azure ND A100 v4 measured the skinny 802816 x 192 x 768 GEMM at
    # 157.8 TFLOPS. The model (wave quantization of the 192-wide output, HBM roofline) gives about
    # 180: slower than the 256 of large square GEMMs, within 15% of the measurement.
    g = gemm_on(A100, BF16)
    tflops = 2 * 802816 * 192 * 768 / float(g(np.array([802816.0]), 192.0, 768.0)[0]) / 1e12
    assert tflops == pytest.approx(157.8, rel=0.15)
    assert tflops < 0.75 * 256.5
    # Wave quantization: 2048 x 4608 output = 288 tiles on 108 SMs = 3 waves, 89% filled.
    assert float(wave_utilization(np.array([2048.0]), np.array([4608.0]), 108)[0]) == pytest.approx(288 / 324)


def test_concurrent_expert_gemms_fill_the_waves_together() -> None:
    # One 256 x 1536 output is 12 tiles of 256 x 128 on a B200's 148 SMs (8% of a wave); four on
    # Transformer Engine's four compute streams are 48 tiles of one wave (32%).
    one = float(wave_utilization(np.array([256.0]), np.array([1536.0]), 148)[0])
    four = float(wave_utilization(np.array([256.0]), np.array([1536.0]), 148, 4.0)[0])
    assert one == pytest.approx(12 / 148) and four == pytest.approx(48 / 148)
    # Qwen3-30B-A3B at ep 8, micro-batch 1, force-balanced: each of the 16 local experts gets
    # 4096 x 8 x 8 / 128 = 2048 rows, fc1 2048 x 1536 = 96 tiles (65% of a wave alone); four at once are 384 tiles in 3
    # waves (86%): Megatron-Core prices the experts' GEMMs 0.65/0.86 as long as a one-stream stack.
    model = load_model("qwen3-30b-a3b")
    b200 = load_cluster("dgx-b200")
    mesh = MeshArrays.from_configs([ParallelConfig(tp=1, pp=1, dp=8, ep=8, micro_batch_size=1)])
    core = load_stack("megatron-core")
    assert core.grouped_gemm_streams == 4

    def expert_in_s(streams: int) -> float:
        stack = core.model_copy(update={"grouped_gemm_streams": streams})
        job = JobSpec(global_batch_size=64, seq_len=4096, stack=stack, moe_load_imbalance=1.0)
        return float(layer_forward_parts(model, b200, job, mesh, True).gemms["moe.expert_in"][0])

    assert expert_in_s(4) / expert_in_s(1) == pytest.approx((96 / 148) / (384 / 444), rel=1e-6)


def test_unfused_attention_matches_the_measured_standard_attention() -> None:
    # Azure ND A100 v4: 'Standard Attention (PyTorch)' at head dim 64, batch 2, seq 8192 runs at
    # 46.0 TFLOPS (full-square forward FLOPs). The roofline model gives about 51: within 15%.
    h = 2048
    model = ModelSpec(
        name="attn",
        source="test",
        num_hidden_layers=1,
        hidden_size=h,
        num_attention_heads=h // 64,
        intermediate_size=4 * h,
        vocab_size=1000,
        max_position_embeddings=8192,
    )
    job = JobSpec(global_batch_size=2, seq_len=8192, flash_attention=False, dropout=False)
    mesh = MeshArrays.from_configs([ParallelConfig(micro_batch_size=2)])
    seconds = float(
        attention_core_forward_s(model, A100, job, mesh)[0] + unfused_softmax_forward_s(model, A100, job, mesh)[0]
    )
    flops = 4 * 2 * 8192 * 8192 * 64 * (h // 64)
    assert flops / seconds / 1e12 == pytest.approx(46.0, rel=0.15)


@pytest.mark.parametrize(
    ("model_name", "tp", "ep"),
    [("gpt2-124m", 1, 1), ("llama3-70b", 8, 1), ("mixtral-8x7b", 2, 4), ("deepseek-v3", 1, 8), ("qwen3-30b-a3b", 4, 2)],
)
def test_layer_gemms_multiply_every_matmul_weight_once_per_token(model_name: str, tp: int, ep: int) -> None:
    # The GEMM shapes the step price (and the validator's replay) use, checked against the
    # independent count of matmul weights in planner.cost.params: a token's forward through a
    # layer is 2 FLOPs per weight it multiplies, split over the t TP ranks (MLA's low-rank
    # down-projections are replicated on every TP rank, hence tp=1 for deepseek-v3). Balanced
    # routing: every expert-parallel rank gets the mean (cost.routing prices the busiest one).
    from planner.catalog import load_model
    from planner.cost.compute import layer_gemms, lm_head_gemm
    from planner.cost.flops import dense_layer_matmul_params, moe_layer_active_matmul_params

    model = load_model(model_name)
    job = JobSpec(global_batch_size=64, seq_len=4096, moe_load_imbalance=1.0)
    mesh = MeshArrays.from_configs([ParallelConfig(tp=tp, ep=ep, dp=8 * ep, micro_batch_size=2)])
    tokens = 2 * 4096
    for moe, weights in ((False, dense_layer_matmul_params(model)), (True, moe_layer_active_matmul_params(model))):
        if moe and not model.is_moe:
            continue
        flops = sum(
            float(np.asarray(g.count * 2.0 * g.m_rows * g.n * g.k).reshape(-1)[0])
            for g in layer_gemms(model, job, mesh, moe)
        )
        assert flops * tp == pytest.approx(2.0 * weights * tokens, rel=1e-12)
    head = lm_head_gemm(model, job, mesh)
    assert float(head.n[0]) * tp == model.vocab_size and float(head.m_rows[0]) == tokens


def test_sliding_window_attention_is_priced_on_its_window() -> None:
    # a window as long as the sequence is full causal attention; a 128-token window attends 3%
    # of the keys at the rate of a 128-token call (flash_length_factor)
    from planner.catalog import load_model
    from planner.cost.compute import flash_length_factor
    from planner.cost.flops import attended_keys

    cluster = load_cluster("dgx-h100", gpus=8)
    job = JobSpec(global_batch_size=8, seq_len=8192)
    mesh = MeshArrays.from_configs([ParallelConfig(dp=8)])
    full = load_model("mistral-7b").model_copy(update={"sliding_window": None})
    t_full = attention_core_forward_s(full, cluster, job, mesh)[0]
    as_long = full.model_copy(update={"sliding_window": 8192})
    # (s+1)/2 keys per query against the flash convention's s/2: equal to 1e-4
    assert attention_core_forward_s(as_long, cluster, job, mesh)[0] == pytest.approx(t_full, rel=2e-4)
    narrow = full.model_copy(update={"sliding_window": 128})
    expected = (
        t_full
        * attended_keys(8192, 128)
        / (8192 / 2)
        * flash_length_factor(np.asarray(8192.0))
        / flash_length_factor(np.asarray(128.0))
    )
    assert attention_core_forward_s(narrow, cluster, job, mesh)[0] == pytest.approx(float(expected))


def test_attention_sinks_run_where_the_stack_runs_them() -> None:
    # gpt-oss-120b: Megatron-Core on NeMo 25.11+ runs its sinks in cuDNN fused attention (the
    # stack's own kernel): priced as without sinks. On 25.09 (TE 2.7) Megatron's local attention
    # takes the scores through HBM: the unfused square, its softmax in fp32 with the sink column.
    from planner.cost.compute import SINK_BYTES_PER_SCORE
    from planner.cost.memory import activation_parts

    cluster = load_cluster("dgx-b200", gpus=8)
    mesh = MeshArrays.from_configs([ParallelConfig(dp=8, ep=8)])
    oss = load_model("gpt-oss-120b")
    plain = oss.model_copy(update={"attention_sinks": False})
    fused = JobSpec(global_batch_size=8, seq_len=4096)
    assert (
        attention_core_forward_s(oss, cluster, fused, mesh)[0]
        == attention_core_forward_s(plain, cluster, fused, mesh)[0]
    )
    assert unfused_softmax_forward_s(oss, cluster, fused, mesh)[0] == 0.0
    old = JobSpec(global_batch_size=8, seq_len=4096, stack="megatron-core-25.09")
    scores = 4096 * 64 * 4096  # tokens x heads x keys: the full square, sliding layers too
    assert SINK_BYTES_PER_SCORE == {"unfused": 5.0, "local": 33.0}  # TE's unfused path; Megatron's own
    assert unfused_softmax_forward_s(oss, cluster, old, mesh)[0] == pytest.approx(
        scores * (4.0 + 33.0) / cluster.gpu.achieved_hbm_bytes_per_s
    )
    te_unfused = old.model_copy(
        update={"stack": load_stack("megatron-core-25.09").model_copy(update={"sink_attention": "unfused"})}
    )
    assert unfused_softmax_forward_s(oss, cluster, te_unfused, mesh)[0] == pytest.approx(
        scores * (4.0 + 5.0) / cluster.gpu.achieved_hbm_bytes_per_s
    )
    # a fused-sink stack with flash attention turned off runs Transformer Engine's unfused path too
    no_flash = fused.model_copy(update={"flash_attention": False})
    assert unfused_softmax_forward_s(oss, cluster, no_flash, mesh)[0] == pytest.approx(
        scores * (4.0 + 5.0) / cluster.gpu.achieved_hbm_bytes_per_s
    )
    unfused = attention_core_forward_s(oss, cluster, old, mesh)[0]
    assert (
        unfused == attention_core_forward_s(plain, cluster, old.model_copy(update={"flash_attention": False}), mesh)[0]
    )
    # the full square at the GEMM rate, against the causal half at the fused kernel's head-dim-64 rate
    assert unfused > 4 * attention_core_forward_s(oss, cluster, fused, mesh)[0]
    # the unfused path keeps the probabilities for backward: 2 bytes per score and head
    assert activation_parts(oss, old, mesh, True).core[0] == 2.0 * 64 * 4096
    assert activation_parts(oss, fused, mesh, True).core[0] == 4.0 * 64
    # and the plan says so
    from planner.pricing import estimate_mesh

    said = "attention sinks run on megatron-core-25.09's unfused attention"
    on_8 = ParallelConfig(dp=8, ep=8, zero_stage=1, recompute="full")
    assert any(said in w for w in estimate_mesh(oss, cluster, old, on_8).warnings)
    assert not any("attention sinks run on" in w for w in estimate_mesh(oss, cluster, fused, on_8).warnings)
    # Megatron-Bridge's GPT-OSS runs are the planner's largest known miss, and the plan says so
    missed = [w for w in estimate_mesh(oss, cluster, fused, on_8).warnings if w.startswith("known miss")]
    assert len(missed) == 1 and "12-24% below on GB200, GB300, B200 and B300" in missed[0]
    assert not any(w.startswith("known miss") for w in estimate_mesh(plain, cluster, fused, on_8).warnings)
    # measured on the fused path only: 25.09's unfused one says so instead
    assert not any(w.startswith("known miss") for w in estimate_mesh(oss, cluster, old, on_8).warnings)


def test_expert_bias_and_clamp_outside_the_fused_kernels_are_priced_where_the_stack_runs_them() -> None:
    # gpt-oss-120b on Megatron-Core: the experts' output bias is added in a loop over local experts
    # (49 bytes per routed copy and hidden element, forward and backward, measured on an H200) and the
    # SwiGLU clamp runs outside the fused activation (100 per element of the expert width, measured),
    # beside the activation itself (33, measured); the layer terms are per forward pass, a third of
    # that each. 8,192 tokens on one rank, top-4, h = f = 2880.
    cluster = load_cluster("dgx-b200", gpus=8)
    mesh = MeshArrays.from_configs([ParallelConfig(dp=8, ep=8, micro_batch_size=2)])
    oss = load_model("gpt-oss-120b")
    assert oss.swiglu_limit == 7.0 and oss.mlp_bias
    job = JobSpec(global_batch_size=16, seq_len=4096, moe_load_imbalance=1.0)
    stack = job.software
    assert (stack.expert_bias_bytes_per_element, stack.glu_clamp_bytes_per_element) == (49, 100)
    assert stack.routed_glu_bytes_per_element == 33
    bw = cluster.gpu.achieved_hbm_bytes_per_s
    ops = layer_forward_parts(oss, cluster, job, mesh, True).elementwise
    routed = 8192 * 4 * 2880  # routed copies x width
    assert ops["expert_bias"][0] == pytest.approx(routed * 49 / 3 / bw)
    assert ops["routed_activation"][0] == pytest.approx(routed * (33 + 100) / 3 / bw)
    # bias and clamp together 0.70 ms of the layer's 3.16 ms forward on a B200 (6.67 TB/s achieved)
    parts = layer_forward_parts(oss, cluster, job, mesh, True)
    assert routed * (49 + 100) / 3 / bw * 1e3 == pytest.approx(0.703, abs=0.001)
    assert parts.total_s[0] * 1e3 == pytest.approx(3.16, abs=0.02)
    # a model without the clamp or the biases pays neither; a stack that does not count them neither,
    # and one without a measured activation pays the count of its passes (6 bytes each)
    plain = oss.model_copy(update={"swiglu_limit": None, "mlp_bias": False})
    bare = layer_forward_parts(plain, cluster, job, mesh, True).elementwise
    assert bare["expert_bias"][0] == 0.0 and bare["routed_activation"][0] == pytest.approx(routed * 11 / bw)
    counted = job.model_copy(
        update={"stack": load_stack("megatron-core").model_copy(update={"routed_glu_bytes_per_element": None})}
    )
    counted_ops = layer_forward_parts(plain, cluster, counted, mesh, True).elementwise
    assert counted_ops["routed_activation"][0] == pytest.approx(routed * 6 / bw)
    uncounted = job.model_copy(
        update={"stack": load_stack("megatron-core").model_copy(update={"expert_bias_bytes_per_element": None})}
    )
    assert layer_forward_parts(oss, cluster, uncounted, mesh, True).elementwise["expert_bias"][0] == 0.0
    # recomputing moe_act runs the clamp again with the activation; recomputing the MoE, the bias too
    from planner.cost.recompute import MODULES

    assert "routed_activation" in MODULES["moe_act"].ops and "expert_bias" in MODULES["moe"].ops
    # the activation keeps the clamped copy of gate and up beside the unclamped one (4 bytes per
    # element of f and routed copy, 46 KB per token and layer here) unless moe_act is recomputed
    from planner.cost.memory import activation_parts, freed_parts

    kept = activation_parts(oss, job, mesh, True)
    assert kept.routed_clamped[0] == kept.routed_activation[0] == 4 * 4 * 2880
    assert activation_parts(plain, job, mesh, True).routed_clamped[0] == 0.0
    moe_act = job.model_copy(update={"recompute_modules": ("moe_act",)})
    assert "routed_clamped" in freed_parts(moe_act)
    # from a Hugging Face config.json the clamp comes with its key
    from planner.hf_config import model_from_hf_config

    hf = {**oss.model_dump(exclude={"name", "source", "aliases"}), "swiglu_limit": 7.0}
    assert model_from_hf_config(hf, "gpt-oss", "config.json").swiglu_limit == 7.0


def test_tokens_an_all_to_all_brings_to_several_local_experts_are_sorted_by_expert() -> None:
    # Qwen3-30B-A3B (top-8, h 2048), 4,096 tokens on a rank: permute and unpermute read and write
    # each routed copy once (8 bytes per element of h); at ep 8 (16 local experts) the received
    # tokens are sorted into expert order and back as well (16); at ep 1 (no all-to-all) or with
    # one expert per rank (ep 128) they are not.
    from planner.cost.compute import token_reorders

    model = load_model("qwen3-30b-a3b")
    cluster = load_cluster("dgx-b200", gpus=8)
    job = JobSpec(global_batch_size=64, seq_len=4096, moe_load_imbalance=1.0)
    bw = cluster.gpu.achieved_hbm_bytes_per_s
    meshes = [ParallelConfig(dp=8, ep=8), ParallelConfig(dp=8, ep=1), ParallelConfig(dp=128, ep=128)]
    mesh = MeshArrays.from_configs(meshes)
    assert list(token_reorders(model, mesh)) == [2.0, 1.0, 1.0]
    permute = layer_forward_parts(model, cluster, job, mesh, True).elementwise["permute"]
    copies = 4096 * 8 * 2048
    assert permute == pytest.approx(np.array([16.0, 8.0, 8.0]) * copies / bw)


def test_block_scaled_fp8_casts_in_one_pass_without_an_amax_read() -> None:
    """MXFP8 (Transformer Engine's cast_mxfp8_2D_kernel) reads the 16-bit tensor once and writes
    the row-wise and column-wise fp8 copies with a scale byte per 32 elements each way: 4 + 2/32
    bytes per element, against current scaling's amax read, cast and transposed copy (7)."""
    from planner.cost.compute import FP8_CAST_BYTES_PER_ELEMENT, quantise_forward_s

    model, cluster = load_model("llama3-8b"), load_cluster("dgx-b200")
    mesh = MeshArrays.from_configs([ParallelConfig(dp=8)])
    cast = {
        scaling: quantise_forward_s(
            model, cluster, JobSpec(global_batch_size=8, seq_len=4096, dtype="fp8", fp8_scaling=scaling), mesh, False
        )[0]
        for scaling in ("tensor", "block")
    }
    assert FP8_CAST_BYTES_PER_ELEMENT["tensor"] == 7.0
    assert cast["block"] / cast["tensor"] == pytest.approx((4 + 2 / 32) / 7)
    bf16 = JobSpec(global_batch_size=8, seq_len=4096)
    assert quantise_forward_s(model, cluster, bf16, mesh, False)[0] == 0.0


def test_fp8_casts_of_gathered_tensors_are_paid_on_the_shard() -> None:
    """Under sequence parallelism a stack that gathers the scaling quantised casts the rank's 1/t
    shard and transposes the gathered tensor (Transformer Engine _all_gather_fp8); torchao's
    row-wise scaling gathers 16-bit and casts it all; without SP nothing is gathered."""
    from planner.cost.compute import cast_elements, layer_gemms
    from planner.search import default_job

    model = load_model("llama3-8b")
    sp = MeshArrays.from_configs([ParallelConfig(tp=8, dp=8, sequence_parallel=True)])
    no_sp = MeshArrays.from_configs([ParallelConfig(tp=8, dp=8, sequence_parallel=False)])
    job = default_job(model, dtype="fp8")
    gemms = {g.name: g for g in layer_gemms(model, job, sp, False)}
    tokens = float(np.ravel(gemms["mlp.in"].m_rows)[0])
    total = sum(float(np.ravel(g.count * g.m_rows * (g.k + g.n))[0]) for g in gemms.values())
    gathered = tokens * (2 * model.hidden_size)  # qkv's and mlp.in's inputs: h wide each
    gathered += tokens * 2 * model.hidden_size  # attn.out's and mlp.out's output gradients
    quantised, transposed = cast_elements(model, job, sp, False)
    assert transposed[0] == pytest.approx(total)
    assert quantised[0] == pytest.approx(total - gathered * (1 - 1 / 8))
    assert np.array_equal(*cast_elements(model, job, no_sp, False))
    row = default_job(model, dtype="fp8", fp8_scaling="row", stack="torchtitan")
    assert np.array_equal(*cast_elements(model, row, sp, False))


def test_mla_down_projections_run_on_the_sequence_shard_in_megatron_core() -> None:
    """Megatron-Core's q_a/kv_a are duplicated linears on [s/TP, b, h] under SP (they had been priced
    on every token, t times their FLOPs); torchtitan's run on the gathered attention input."""
    from planner.cost.compute import layer_gemms
    from planner.search import default_job

    model = load_model("deepseek-v3")
    mesh = MeshArrays.from_configs([ParallelConfig(tp=4, dp=8, ep=8, sequence_parallel=True)])
    for stack, share in (("megatron-core", 0.25), ("torchtitan", 1.0)):
        gemms = {g.name: g for g in layer_gemms(model, default_job(model, stack=stack), mesh, True)}
        tokens = np.ravel(gemms["attn.q_b"].m_rows)[0]
        assert np.ravel(gemms["attn.q_a"].m_rows)[0] == pytest.approx(share * tokens)
        assert np.ravel(gemms["attn.kv_a"].m_rows)[0] == pytest.approx(share * tokens)
