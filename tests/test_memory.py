"""Memory model: Korthikanti et al. 2022 activation constants, ZeRO savings, pipeline in-flight."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from planner.catalog import load_cluster, load_model
from planner.cost.memory import (
    activation_bytes_per_token_layer,
    korthikanti_bytes_per_layer,
    model_state_bytes,
    rank_params,
)
from planner.cost.pipeline import bubble_fraction, microbatches_in_flight, rank_layers
from planner.mesh import MeshArrays
from planner.pricing import estimate_mesh
from planner.schemas import JobSpec, ParallelConfig

GPT_22B = load_model("gpt-22b")  # h 6144, a 64: Korthikanti et al. 2022, Table 3


def _mesh(**kw: object) -> MeshArrays:
    return MeshArrays.from_configs([ParallelConfig(**kw)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tp", "sp", "recompute"),
    [
        (1, False, "none"),
        (8, False, "none"),
        (8, True, "none"),
        (8, False, "selective"),
        (8, True, "selective"),
        (4, True, "none"),
        (1, False, "full"),
        (8, False, "full"),
    ],
)
def test_gpt_block_reproduces_korthikanti_table2(tp: int, sp: bool, recompute: str) -> None:
    # GPT block with dropout and without flash attention, 2-byte activations (paper's setting).
    s, b = 2048, 4
    job = JobSpec(global_batch_size=b, seq_len=s, flash_attention=False, dropout=True)
    mesh = _mesh(tp=tp, sequence_parallel=sp, recompute=recompute)
    ours = float(activation_bytes_per_token_layer(GPT_22B, job, mesh, moe=False)[0]) * s * b
    ref = korthikanti_bytes_per_layer(s, b, GPT_22B.hidden_size, GPT_22B.num_attention_heads, tp, sp, recompute)
    assert ours == pytest.approx(ref, rel=1e-12)


def test_korthikanti_constants_by_hand() -> None:
    # s = 2048, b = 1, h = 6144, a = 64 (the 22B model). 5as/h = 5*64*2048/6144 = 106.67, so
    # no parallelism keeps 2048*6144*(34 + 106.67) = 1.7700e9 bytes per layer.
    s, b, h, a = 2048, 1, 6144, 64
    assert korthikanti_bytes_per_layer(s, b, h, a, 1, False, "none") == pytest.approx(1.7700e9, rel=1e-4)
    # t = 8 without SP: 10 + 24/8 + 106.67/8 = 26.33 -> 3.3135e8.
    assert korthikanti_bytes_per_layer(s, b, h, a, 8, False, "none") == pytest.approx(3.3135e8, rel=1e-4)
    # t = 8 with SP and selective recompute: 34/8 = 4.25 -> 5.3477e7.
    assert korthikanti_bytes_per_layer(s, b, h, a, 8, True, "selective") == pytest.approx(5.3477e7, rel=1e-4)
    # Full recompute: the layer input, 2sbh = 2.5166e7.
    assert korthikanti_bytes_per_layer(s, b, h, a, 8, True, "full") == pytest.approx(2.5166e7, rel=1e-4)


def test_modern_llama_block_with_flash_attention() -> None:
    # Llama 3 70B, bf16, flash attention, no dropout, t = 1. Kept per token, in bytes:
    # norm inputs and outputs 8h, Q 2h, K and V 2 * 2 * 1024, O input 2h, SwiGLU 6f, LSE 4a.
    m = load_model("llama3-70b")
    job = JobSpec(global_batch_size=1, seq_len=8192)
    got = float(activation_bytes_per_token_layer(m, job, _mesh(), moe=False)[0])
    h, f, a = 8192, 28672, 64
    assert got == 8 * h + 2 * h + 4 * 1024 + 2 * h + 6 * f + 4 * a
    # No s^2 term: doubling the sequence does not change bytes per token.
    job2 = JobSpec(global_batch_size=1, seq_len=16384)
    assert float(activation_bytes_per_token_layer(m, job2, _mesh(), moe=False)[0]) == got


def test_fp8_under_transformer_engine_keeps_linear_inputs_in_one_byte() -> None:
    # TE's linears save the fp8 cast of their input for the weight gradient: the two norm
    # outputs, O's input and the SwiGLU product drop to 1 byte; torchao keeps the 16-bit input.
    m = load_model("llama3-70b")
    h, f, a = 8192, 28672, 64
    te = JobSpec(global_batch_size=1, seq_len=8192, dtype="fp8", stack="megatron-core")
    ao = JobSpec(global_batch_size=1, seq_len=8192, dtype="fp8", stack="torchtitan")
    got_te = float(activation_bytes_per_token_layer(m, te, _mesh(), moe=False)[0])
    got_ao = float(activation_bytes_per_token_layer(m, ao, _mesh(), moe=False)[0])
    assert got_te == 4 * h + 2 * h + 2 * h + 4 * 1024 + h + 5 * f + 4 * a
    assert got_ao == 8 * h + 2 * h + 4 * 1024 + 2 * h + 6 * f + 4 * a
    bf16 = JobSpec(global_batch_size=1, seq_len=8192, stack="megatron-core")
    assert float(activation_bytes_per_token_layer(m, bf16, _mesh(), moe=False)[0]) == got_ao


def test_zero_stages_shrink_model_states_as_published() -> None:
    # Rajbhandari et al. 2020, Figure 1: with K = 12 and d = 64, ZeRO-1 ~4x, ZeRO-2 ~8x savings,
    # ZeRO-3 ~d-fold (less the working set).
    m = load_model("llama3-8b")
    job = JobSpec(global_batch_size=64, seq_len=4096)
    totals = []
    for z in range(4):
        mesh = _mesh(dp=64, zero_stage=z)
        params = rank_params(m, mesh, np.array([32]), np.array([0]), 0, np.array([True]), np.array([True]))
        w, g, o = model_state_bytes(job, mesh, params)
        totals.append(float((w + g + o)[0]))
    assert totals[0] / totals[1] == pytest.approx(16 / (4 + 12 / 64), rel=1e-9)  # ~3.8x
    assert totals[0] / totals[2] == pytest.approx(16 / (2 + 14 / 64), rel=1e-9)  # ~7.2x
    assert totals[3] < totals[2] / 4
    assert totals == sorted(totals, reverse=True)


def test_optimizer_state_sharded_over_dp_and_cp() -> None:
    m = load_model("llama3-8b")
    job = JobSpec(global_batch_size=64, seq_len=8192)
    a = rank_params(
        m, _mesh(dp=8, cp=2, zero_stage=1), np.array([32]), np.array([0]), 0, np.array([True]), np.array([True])
    )
    _, _, opt_cp = model_state_bytes(job, _mesh(dp=8, cp=2, zero_stage=1), a)
    _, _, opt_dp = model_state_bytes(job, _mesh(dp=16, zero_stage=1), a)
    assert float(opt_cp[0]) == pytest.approx(float(opt_dp[0]))


@pytest.mark.parametrize(("p", "m", "expected"), [(4, 4, 0.429), (4, 16, 0.158), (4, 64, 0.045), (8, 64, 0.099)])
def test_bubble_table_from_reference(p: int, m: int, expected: float) -> None:
    # shared/reference strategy notes: (p-1)/(m+p-1).
    mesh = _mesh(pp=p)
    assert float(bubble_fraction(np.array([m]), mesh)[0]) == pytest.approx(expected, abs=5e-4)


def test_interleaving_and_zero_bubble_shrink_the_bubble() -> None:
    m = np.array([16])
    plain = float(bubble_fraction(m, _mesh(pp=4))[0])
    inter = float(bubble_fraction(m, _mesh(pp=4, schedule="interleaved-1f1b", virtual_stages=2))[0])
    zb = float(bubble_fraction(m, _mesh(pp=4, schedule="zb-h1"))[0])
    assert inter == pytest.approx(3 / (2 * 16 + 3))
    assert zb == pytest.approx(1 / (16 + 1))
    assert zb < inter < plain


def test_in_flight_microbatches_per_schedule() -> None:
    m = np.array([32])
    assert microbatches_in_flight(m, _mesh(pp=8, schedule="gpipe"))[0] == 32
    assert microbatches_in_flight(m, _mesh(pp=8))[0] == 8
    inter = microbatches_in_flight(m, _mesh(pp=8, schedule="interleaved-1f1b", virtual_stages=4))[0]
    assert inter == pytest.approx(8 * (1 + 7 / 32))


def test_all_combinations_give_finite_nonnegative_activations() -> None:
    m = load_model("mixtral-8x7b")
    job = JobSpec(global_batch_size=32, seq_len=4096)
    for tp, sp, rec in itertools.product((1, 2, 8), (False, True), ("none", "selective", "full")):
        if sp and tp == 1:
            continue
        for moe in (False, True):
            v = activation_bytes_per_token_layer(m, job, _mesh(tp=tp, sequence_parallel=sp, recompute=rec), moe=moe)
            assert np.all(np.isfinite(v)) and np.all(v > 0)


def test_expert_tp_does_not_shrink_routed_activations() -> None:
    m = load_model("mixtral-8x7b")
    job = JobSpec(global_batch_size=16, seq_len=4096)
    per_token = [
        float(
            activation_bytes_per_token_layer(
                m, job, _mesh(tp=4, dp=4, ep=2, expert_tp=e, sequence_parallel=True), moe=True
            )[0]
        )
        for e in (1, 2, 4)
    ]
    assert per_token[0] <= per_token[1] <= per_token[2]


def test_without_pipeline_every_schedule_holds_one_microbatch() -> None:
    m = np.array([64])
    assert microbatches_in_flight(m, _mesh(schedule="gpipe"))[0] == 1
    assert microbatches_in_flight(m, _mesh())[0] == 1


def test_interleaved_last_stage_holds_its_warmup() -> None:
    # Megatron-LM warm-up on the last rank: (v-1)*p + 1 chunks of 1/v stage each.
    m = np.array([64])
    mesh = _mesh(pp=8, schedule="interleaved-1f1b", virtual_stages=4)
    assert microbatches_in_flight(m, mesh, first=False)[0] == pytest.approx((3 * 8 + 1) / 4)
    assert microbatches_in_flight(m, _mesh(pp=8), first=False)[0] == 1
    assert microbatches_in_flight(m, _mesh(pp=8, schedule="gpipe"), first=False)[0] == 64


def test_uneven_stage_split_puts_the_extra_layers_in_the_middle() -> None:
    from planner.cost.pipeline import layers_on_worst_stage, stage_layer_counts
    from planner.search import default_job

    # Qwen3-235B: 94 layers on pp = 8 with 4 virtual stages (32 chunks of 2 or 3 layers).
    split = stage_layer_counts(94, 8, 4)
    assert sum(split) == 94 and split[0] == split[-1] == 11 and max(split) == 12
    # DeepSeek-V3: 61 layers on 8 x 4.
    split = stage_layer_counts(61, 8, 4)
    assert sum(split) == 61 and max(split) == 8
    mesh = _mesh(pp=8, dp=1, schedule="interleaved-1f1b", virtual_stages=4)
    qwen = load_model("qwen3-235b-a22b")
    even = default_job(qwen, stack="deepspeed")  # a stack that takes no layout runs this split
    assert layers_on_worst_stage(qwen, even, mesh)[0] == 12
    assert stage_layer_counts(80, 4, 1) == [20, 20, 20, 20]


# ---- against Megatron-LM's theoretical_memory_usage.py -------------------------------------------


def megatron_weight_and_optimizer_bytes(model, tp: int, pp: int, dp: int, distributed_optimizer: bool, mtp: int):
    """megatron/training/theoretical_memory_usage.py compute_weight_and_optimizer_memory, restated
    for RMSNorm SwiGLU models: parameters of the most loaded shard ((block/pp + MTP block +
    embedding)/tp, the output layer too when untied and pp = 1) x 18 bytes, or 6 + 12/dp with the
    distributed optimizer (bf16 weight, fp32 main grad, fp32 Adam states sharded over dp). It
    splits every parameter over tp only: expert parallelism is not in it (the known MoE gap)."""
    h, a = model.hidden_size, model.num_attention_heads
    if model.is_mla:
        q = model.q_lora_rank * (h + a * (model.qk_nope_head_dim + model.qk_rope_head_dim) + 1)
        kv = model.kv_lora_rank * (h + a * (model.qk_nope_head_dim + model.v_head_dim) + 1)
        attention = q + kv + h * model.qk_rope_head_dim + a * model.v_head_dim * h
    else:
        kv_channels = h // a
        attention = 2 * h * h * (1 + model.num_kv_heads / a) * (kv_channels * a / h)
    dense = 2 * h * (model.intermediate_size * 3 / 2 + 1) + attention
    experts = model.num_experts_total or 1
    moe = 2 * h * (model.expert_intermediate_size * experts * 3 / 2 + model.shared_expert_width * 3 / 2 + 1) + attention
    n_moe = model.num_moe_layers
    block = dense * (model.num_hidden_layers - n_moe) + moe * n_moe + h
    mtp_block = (moe if n_moe else dense) * mtp
    embedding = h * model.vocab_size
    shard = (block / pp + mtp_block + embedding) / tp
    if not model.tie_word_embeddings and pp == 1:
        shard += embedding / tp
    return shard * (6 + 12 / dp if distributed_optimizer else 18)


@pytest.mark.parametrize(
    ("model_name", "cluster_name", "config", "mtp"),
    [
        ("llama3-70b", "dgx-h100x16", ParallelConfig(tp=8, dp=16, zero_stage=1), 0),
        ("llama3-70b", "dgx-h100x16", ParallelConfig(tp=8, dp=16, zero_stage=0), 0),
        (
            "mixtral-8x7b",
            "dgx-h100x2",
            ParallelConfig(tp=2, dp=8, expert_tp=2, zero_stage=1, sequence_parallel=True),
            0,
        ),
        ("deepseek-v3", "dgx-h100x2", ParallelConfig(tp=8, dp=2, expert_tp=8, zero_stage=1, sequence_parallel=True), 1),
    ],
)
def test_model_states_match_megatrons_theoretical_memory(model_name, cluster_name, config, mtp) -> None:
    # Where Megatron's formula applies (no expert parallelism: experts split over tp like every
    # weight, fp32 main grads), the planner's weights + gradients + optimizer agree within 0.05%
    # (the router and MTP's 2h x h projection, which the formula leaves out).
    model, cluster = load_model(model_name), load_cluster(cluster_name)
    job = JobSpec(global_batch_size=64, seq_len=4096, gradient_dtype="fp32", mtp_layers=mtp)
    mem = estimate_mesh(model, cluster, job, config).memory_breakdown_bytes
    ours = mem.weights + mem.gradients + mem.optimizer
    theirs = megatron_weight_and_optimizer_bytes(model, config.tp, config.pp, config.dp, config.zero_stage >= 1, mtp)
    assert ours == pytest.approx(theirs, rel=5e-4)


def test_expert_parallelism_is_where_megatrons_formula_overcounts() -> None:
    # Mixtral on 16 GPUs, tp 2, ep 8, expert_tp 1: a rank holds one of the 8 experts, unsplit, and
    # shards its Adam states over the expert-data-parallel group (tp*dp/ep = 2); Megatron's
    # formula charges every rank all 8 experts / tp with states sharded over dp = 8.
    model, cluster = load_model("mixtral-8x7b"), load_cluster("dgx-h100x2")
    job = JobSpec(global_batch_size=64, seq_len=4096, gradient_dtype="fp32")
    config = ParallelConfig(tp=2, dp=8, ep=8, zero_stage=1, sequence_parallel=True)
    mem = estimate_mesh(model, cluster, job, config).memory_breakdown_bytes
    ours = mem.weights + mem.gradients + mem.optimizer
    c = model.parameter_counts
    experts = c.moe_experts_per_layer * model.num_moe_layers
    rest = c.total - experts
    # the rest split over tp 2 with states over dp 8; each expert whole, states over tp*dp/ep = 2
    expected = rest / 2 * (6 + 12 / 8) + experts / 8 * (6 + 12 / 2)
    theirs = megatron_weight_and_optimizer_bytes(model, 2, 1, 8, True, 0)
    assert ours < 0.5 * theirs
    assert ours == pytest.approx(expected, rel=1e-6)


def test_the_ep_overlap_warm_up_chunk_stays_within_the_step() -> None:
    """With --ep-comm-overlap Megatron-Core warms up one more chunk, but never more than all of the
    step's micro-batches ('are_all_microbatches_in_warmup'): 2 micro-batches over pp 2 x v 2 are
    all in flight either way (the extra 1/v had been added past the cap); 4 leave room for it."""
    import planner

    def activations(batch: int, overlap: bool) -> float:
        est = planner.estimate("qwen3-30b-a3b", "dgx-h100x2", ep_comm_overlap=overlap, global_batch_size=batch,
                               pp=2, ep=8, virtual_stages=2, micro_batch_size=1)  # fmt: skip
        return est.memory_breakdown_bytes.activations

    assert activations(16, True) == activations(16, False)
    assert activations(32, True) > activations(32, False)


@pytest.mark.parametrize(
    ("stack", "zero", "scaling", "architecture", "linear_bytes", "gathered_bytes"),
    [
        # Megatron-Core with --fp8-param-gather: fp8 parameters; Hopper keeps the transpose the
        # input-gradient GEMM takes, Blackwell's non-TN GEMMs need none, MXFP8 keeps both copies
        ("megatron-core", 1, "tensor", "hopper", 2.0, 1.0),
        ("megatron-core", 1, "tensor", "blackwell", 1.0, 1.0),
        ("megatron-core", 1, "block", "blackwell", 2.0 + 2 / 32, 2.0),  # MXFP8 gathered in bf16
        # Hopper's block scaling is Float8BlockScaling: both copies kept, the row-wise one gathered
        # in fp8, its 128 x 128 tiles' scales a rounding error
        ("megatron-core", 1, "block", "hopper", 2.0, 1.0),
        # plain DDP: no fp8 parameters, the bf16 weight and Transformer Engine's cached fp8 copies
        ("megatron-core", 0, "tensor", "hopper", 4.0, 2.0),
        # torchao casts per use: the bf16 weight alone
        ("torchtitan", 3, "tensor", "hopper", 2.0, 2.0),
    ],
)
def test_fp8_linear_weights_at_rest_and_gathered(
    stack, zero, scaling, architecture, linear_bytes, gathered_bytes
) -> None:  # type: ignore[no-untyped-def]
    """The weights a Megatron-Core fp8 plan holds and gathers: the export writes --fp8-param-gather
    (as Megatron-Bridge's fp8 recipes set it), the memory had counted a bf16 copy alone everywhere."""
    from planner.cost.memory import linear_weight_bytes_per_param
    from planner.cost.traffic import dp_buffers_bytes

    m = load_model("llama3-8b")
    job = JobSpec(global_batch_size=64, seq_len=4096, dtype="fp8", fp8_scaling=scaling, stack=stack)
    mesh = _mesh(dp=8, zero_stage=zero)
    assert float(linear_weight_bytes_per_param(job, mesh, architecture)[0]) == pytest.approx(linear_bytes)
    params = rank_params(m, mesh, np.array([32]), np.array([0]), 0, np.array([True]), np.array([True]))
    linear = float(params.dense_linear[0])
    assert linear == pytest.approx(32 * (4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336), rel=1e-12)
    (_, _), (dense, _) = dp_buffers_bytes(job, mesh, params, architecture=architecture)
    others = float(params.dense[0]) - linear  # the embedding, LM head and norms stay 16-bit
    assert float(dense[0]) == pytest.approx(others * 2.0 + linear * gathered_bytes)
    bf16 = JobSpec(global_batch_size=64, seq_len=4096, stack=stack)
    assert float(linear_weight_bytes_per_param(bf16, mesh, architecture)[0]) == 2.0
    # with nothing to shard (dp*cp = 1) a ZeRO stage is moot: the mesh runs, and exports as, plain DDP
    alone = _mesh(dp=1, tp=8, zero_stage=zero)
    ddp = float(linear_weight_bytes_per_param(job, _mesh(dp=1, tp=8, zero_stage=0), architecture)[0])
    assert float(linear_weight_bytes_per_param(job, alone, architecture)[0]) == ddp


def test_the_most_loaded_gpu_is_one_rank_not_the_embedding_and_the_busiest_layers() -> None:
    """Llama-3-70B at tp 4, pp 4, v 8 splits its 80 layers [20, 20, 21, 19]: the first rank holds 20
    and the embedding, rank 2 holds 21. The peak had paired the embedding with 21 layers (4.75 B
    parameters a rank, a GPU no pipeline has); then each rank was priced with its own, rank 2 with
    the first rank's micro-batches in flight (an upper bound, which made it the peak); now with its
    own, ((v-1)p + 2(p-1-2) + 1)/v = 3.875 against the first's 4.375, so the first rank is the peak:
    20 layers and the embedding."""
    m = load_model("llama3-70b")
    config = ParallelConfig(
        tp=4, pp=4, dp=8, virtual_stages=8, schedule="interleaved-1f1b", zero_stage=1, sequence_parallel=True
    )
    est = estimate_mesh(m, load_cluster("dgx-h100x16"), JobSpec(global_batch_size=512, seq_len=8192), config)
    assert est.layers_per_stage == [20, 20, 21, 19]
    c = m.parameter_counts
    assert est.memory_breakdown_bytes.weights == pytest.approx(2 * (20 * c.dense_layer + c.embedding) / 4)
    assert est.memory_peak_rank == 0
    mesh = MeshArrays.from_configs([config])
    job = JobSpec(global_batch_size=512, seq_len=8192)
    ranks = rank_layers(m, job, mesh)
    assert (int(ranks.middle[0]), int(ranks.middle_index[0]), int(ranks.second[0])) == (21, 2, 20)
    held = [float(microbatches_in_flight(np.array([64]), mesh, rank=np.array([i]))[0]) for i in range(4)]
    assert held == [4.375, 4.125, 3.875, 3.625]


def test_a_rank_running_mtp_layers_holds_its_own_embedding() -> None:
    """Megatron-Core's GPTModel builds the embedding on every stage that runs MTP layers (`if
    self.pre_process or self.mtp_process`), to embed the shifted tokens each depth reads: DeepSeek-V3's
    last stage holds 129,280 x 7,168 = 0.93B more parameters (beside its untied LM head), a tied
    model's none (its last stage holds the embedding as its head already)."""
    from planner.cost.flops import mtp_projection_params
    from planner.cost.memory import rank_params

    for name, extra in (("deepseek-v3", True), ("gpt2-124m", False)):
        model = load_model(name)
        mesh = MeshArrays.from_configs([ParallelConfig(tp=2, pp=4, dp=1)])
        c = model.parameter_counts
        last = np.array([True])
        args = (model, mesh, np.array([4]), np.array([0]))
        without = rank_params(*args, 0, ~last, last).dense[0]
        with_mtp = rank_params(*args, 1, ~last, last).dense[0]
        embedding = c.embedding / 2 if extra else 0.0
        assert with_mtp - without == pytest.approx(mtp_projection_params(model) / 2 + embedding)
        first = rank_params(*args, 1, last, ~last).dense[0] - rank_params(*args, 0, last, ~last).dense[0]
        assert first == pytest.approx(mtp_projection_params(model) / 2)  # the first stage holds it already
    assert load_model("deepseek-v3").parameter_counts.embedding == 129280 * 7168


def test_the_first_stage_holds_the_models_leading_dense_layers() -> None:
    """DeepSeek-V3's first three layers are dense (first_k_dense_replace): at pp 16 its first stage
    (4 layers and the embedding) holds one MoE layer, not four, 8.0 GiB of bf16 weights at tp 1 and ep 8
    where it had been priced at 14.0 (more than the 12.2 of a stage of four MoE layers)."""
    from planner.cost.memory import stage_layers, stage_memory

    model, cluster = load_model("deepseek-v3"), load_cluster("dgx-h100x128")
    job = JobSpec(global_batch_size=4096, seq_len=4096)
    configs = [
        ParallelConfig(tp=1, pp=16, dp=64, ep=8, recompute="full"),
        ParallelConfig(tp=1, pp=8, dp=128, ep=8, virtual_stages=2, recompute="full", schedule="interleaved-1f1b"),
        ParallelConfig(tp=1, pp=16, dp=64, ep=8, recompute="full", schedule="dualpipev"),
    ]
    mesh = MeshArrays.from_configs(configs)
    layers, moe, _ = stage_layers(model, job, mesh, "first")
    assert layers.tolist()[:2] == [4, 8] and moe.tolist()[:2] == [1, 5]
    assert moe[2] == min(layers[2], model.num_moe_layers)  # DualPipe's rank 0, priced as the busiest
    one = MeshArrays.from_configs(configs[:1])
    gib = [float(stage_memory(model, cluster, job, one, np.array([64.0]), r).weights[0]) / 2**30 for r in
           ("first", "middle")]  # fmt: skip
    assert gib == pytest.approx([8.05, 12.24], abs=0.01)
    # an explicit interleaved layout whose first chunk holds the embedding alone: the first rank's 8
    # decoders are its second chunk's (layers 32-39), all MoE
    odd = ParallelConfig(tp=1, pp=4, dp=64, ep=8, virtual_stages=2, schedule="interleaved-1f1b", recompute="full",
                         pipeline_layout="E|(t*8|)*6t*13L")  # fmt: skip
    layers, moe, _ = stage_layers(
        model, job.model_copy(update={"mtp_layers": 0}), MeshArrays.from_configs([odd]), "first"
    )
    assert layers.tolist() == [8] and moe.tolist() == [8]
    qwen = load_model("qwen3-30b-a3b")  # no leading dense layer: every layer of the first stage is MoE
    layers, moe, _ = stage_layers(qwen, job, one, "first")
    assert moe.tolist() == layers.tolist() == [3]


def test_the_ranks_between_are_priced_at_their_own_positions_and_bound_every_rank() -> None:
    """DeepSeek-V3 at pp 8 splits its non-last ranks evenly: the busiest other rank had been looked
    for from rank 0, and priced there without the embedding but with its leading dense layers
    counted as MoE, 7.7% over the true peak, rank 1 (a review, 2026-12-07); at pp 2 the ranks
    between hold nothing. An explicit layout's counts need not grow towards the last: its busiest
    middle rank is priced at rank 1's micro-batches, the most any of them holds, so a lighter rank
    holding more is covered (Llama-3 8B 'Et*2|t*2|t*6|t*2|t*8|...' had fit at 78.4 GiB while its rank
    2 alone needs 83.0)."""
    model, job = load_model("deepseek-v3"), JobSpec(global_batch_size=1024, seq_len=4096)
    for pp, middle, at in ((8, 8, 1), (2, 0, 0)):
        mesh = MeshArrays.from_configs([ParallelConfig(pp=pp, dp=8, ep=8, recompute="selective")])
        ranks = rank_layers(model, job, mesh)
        assert (int(ranks.middle[0]), int(ranks.middle_index[0])) == (middle, at)
        assert int(ranks.second[0]) == middle  # rank 1, as busy as any between at pp 8; none at pp 2
    llama = load_model("llama3-8b")
    tight = ParallelConfig(pp=8, dp=4, micro_batch_size=1, pipeline_layout="Et*2|t*2|t*6|t*2|t*8|t*4|t*4|t*4L")
    job8 = JobSpec(global_batch_size=64, seq_len=14336)
    ranks = rank_layers(llama, job8, MeshArrays.from_configs([tight]))
    assert (int(ranks.middle[0]), int(ranks.middle_index[0]), int(ranks.second[0])) == (8, 1, 2)
    # the estimate names the rank its memory is: DeepSeek-V3's rank 1, the layout's bound none
    deep = estimate_mesh(
        model, load_cluster("dgx-b200x32"), job, ParallelConfig(pp=8, dp=32, ep=8, recompute="selective")
    )
    assert deep.memory_peak_rank == 1
    assert estimate_mesh(llama, load_cluster("dgx-h100x4"), job8, tight).memory_peak_rank is None
    heavier = tight.model_copy(update={"pipeline_layout": "Et*2|t*2|t*6|t*6|t*8|t*4|t*4|t*0L"})
    cluster = load_cluster("dgx-h100x4")
    peak, other = (estimate_mesh(llama, cluster, job8, c).memory_per_gpu_bytes for c in (tight, heavier))
    assert not estimate_mesh(llama, cluster, job8, tight).fits and peak == pytest.approx(other)


def test_mla_latents_and_router_scores_sit_where_each_stack_runs_them() -> None:
    # Megatron-Core: the latents (their norms' 16-bit inputs and outputs) and the router run on the SP
    # shard; torchtitan replicates both over TP (DTensor Replicate inputs, a NoParallel router gate)
    from planner.cost.memory import activation_parts

    model = load_model("deepseek-v3")  # q_lora 1536 + kv_lora 512 = 2,048 latent elements, rope key 64, 256 experts
    mesh = MeshArrays.from_configs([ParallelConfig(tp=4, dp=1, sequence_parallel=True)])
    for stack, share in (("megatron-core", 1 / 4), ("torchtitan", 1.0)):
        parts = activation_parts(model, JobSpec(global_batch_size=64, seq_len=4096, stack=stack), mesh, moe=True)
        assert parts.mla_latents[0] == pytest.approx(2 * 2048 * share + 2 * 64), stack
        assert parts.mla_normed[0] == pytest.approx(2 * 2048 * share), stack
        assert parts.router[0] == pytest.approx(8 * 256 * share), stack
    dense = activation_parts(model, JobSpec(global_batch_size=64, seq_len=4096), mesh, moe=False)
    assert dense.router[0] == 0.0


@pytest.mark.parametrize(
    ("layout", "v", "leading"),
    [
        ("Et|(t|)*31(t*2|)*7t|(t*2|)*7mL", 3, 1),  # layer 0 on rank 0, layers 1 and 2 on ranks 1 and 2
        ("Et*3|(t*4|)*14tmL", 1, 3),
        ("E|(t*2|)*30tmL", 2, 0),  # the embedding alone: rank 0's decoders are its second chunk's, all MoE
    ],
)
def test_an_explicit_layouts_first_rank_counts_the_leading_dense_layers_it_holds(
    layout: str, v: int, leading: int
) -> None:
    # DeepSeek-V3's first 3 layers are dense; an explicit interleaved layout had priced all of the first
    # rank's layers as MoE, 82.0 GiB where the plan's own split of the same layout counted 78.3 (a review)
    from planner.cost.pipeline import first_rank_leading_dense_layers
    from planner.search import default_job

    model = load_model("deepseek-v3")
    schedule = "interleaved-1f1b" if v > 1 else "1f1b"
    config = ParallelConfig(pp=16, dp=4, ep=4, virtual_stages=v, schedule=schedule, pipeline_layout=layout)
    mesh = MeshArrays.from_configs([config])
    decoders = rank_layers(model, default_job(model, seq_len=4096), mesh).stage("first", mesh.pp)[0]
    assert first_rank_leading_dense_layers(model, mesh, decoders)[0] == leading


def test_a_candidates_mesh_given_back_to_estimate_is_priced_as_the_plan_priced_it() -> None:
    # the plan writes its own split into each candidate as pipeline_layout; priced back as an explicit layout
    # it had taken the bound for the middle ranks (Llama-3-8B on a GB200 rack: 61.6 -> 64.4 GiB, a review)
    import planner

    ranking = planner.plan("llama3-8b", "gb200-nvl72x1", top=3)
    for c in ranking.candidates:
        assert c.config.parallel.pipeline_layout is not None
        e = planner.estimate("llama3-8b", "gb200-nvl72x1", **c.config.parallel.model_dump())
        assert (e.memory_per_gpu_bytes, e.memory_peak_rank, e.step_time_s, e.fits) == (
            c.memory_per_gpu_bytes,
            c.memory_peak_rank,
            c.step_time_s,
            c.fits,
        )


def test_fp32_working_weights_are_the_optimizers_master() -> None:
    # with fp32 weights the optimizer keeps its two moments alone (8 bytes): the master had been
    # counted twice, in the weights and in 12 bytes of state (Llama-3-70B at tp 8 pp 2 dp 8: +2.3 GB)
    import planner

    ask = dict(tp=8, pp=2, dp=8)
    mixed = planner.estimate("llama70b", "dgx-h100x16", **ask).memory_breakdown_bytes
    fp32 = planner.estimate("llama70b", "dgx-h100x16", weight_dtype="fp32", **ask).memory_breakdown_bytes
    assert fp32.weights == pytest.approx(2 * mixed.weights)
    assert fp32.optimizer == pytest.approx(mixed.optimizer * 8 / 12)


def test_a_middle_rank_holding_a_leading_dense_layer_is_not_priced_as_moe() -> None:
    # DeepSeek-V3 (first 3 layers dense) at pp 16, v 2: rank 1's first chunk holds layers 2 and 3, one of
    # them dense; rank 2's four layers are all MoE. Rank 1 had been priced as four MoE layers at its own
    # micro-batches in flight (83.4 GB, named the peak); the peak is rank 2's (a review, 2026-12-08)
    import planner
    from planner.cost.pipeline import rank_leading_dense

    model = planner.load_model("deepseek-v3")
    est = planner.estimate(
        model, "dgx-h100x32", tp=1, pp=16, dp=16, ep=8, micro_batch_size=2, virtual_stages=2, recompute="full"
    )
    assert rank_leading_dense(model, est.config.job, 16, 2)[:3] == [2, 1, 0]
    assert est.memory_peak_rank == 2
    assert 82.5e9 < est.memory_per_gpu_bytes < 83.2e9
