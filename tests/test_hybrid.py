"""Hybrid Mamba-2 / attention / MLP / MoE models (NemotronH): layer kinds, counts, pricing and the
refusals of what the planner does not price for them (ARCHITECTURE 8.10)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import planner
from planner.catalog import load_cluster, load_model
from planner.cost.compute import (
    layer_forward_parts,
    mamba_mixer_bytes_per_token,
    mamba_scan_backward_bytes_per_token,
    mamba_scan_bytes_per_token,
    mamba_scan_s,
)
from planner.cost.flops import (
    attention_score_flops_per_token_fwd,
    mamba_scan_flops_per_token_fwd,
    model_flops_per_token,
)
from planner.cost.memory import mamba_activation_bytes_per_token
from planner.errors import PlannerError, UnpriceableError
from planner.mesh import MeshArrays
from planner.runs import model_from_row
from planner.schemas import JobSpec, ParallelConfig
from planner.schemas.model import LayerKind, ModelSpec

NANO = "nemotron-3-nano-30b-a3b"


def _config_file(tmp_path: Path, name: str, config: dict) -> str:
    """``config`` written as tmp_path/name/config.json (a path per config: the catalog caches by path)."""
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return str(path)


def _transformer(layers: int, **extra: object) -> ModelSpec:
    fields = {
        "name": "t",
        "source": "test",
        "num_hidden_layers": layers,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "intermediate_size": 5632,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    }
    return ModelSpec(**{**fields, **extra})  # type: ignore[arg-type]


def test_nemotron_3_nano_counts_as_published() -> None:
    """31.6 B total and about 3.5 B active (HF model card, Megatron-Bridge docs); 23 Mamba-2, 6
    attention and 23 MoE blocks."""
    m = load_model(NANO)
    c = m.parameter_counts
    assert c.total == pytest.approx(31.58e9, rel=1e-3)
    assert c.active_per_token == pytest.approx(3.58e9, rel=1e-2)
    assert (m.blocks_of("M"), m.blocks_of("*"), m.blocks_of("-"), m.blocks_of("E")) == (23, 6, 0, 23)
    assert m.num_moe_layers == 23 and m.num_dense_layers == 29
    # Mamba-2 mixer: in_proj 2688 x (2*4096 + 2*8*128 + 64), out_proj 4096 x 2688, conv over
    # 4096 + 2048 channels (4 weights + a bias each), dt_bias, A_log, D and the gated norm
    assert c.mamba_per_layer == 2688 * 10304 + 4096 * 2688 + 6144 * 5 + 3 * 64 + 4096
    h8 = load_model("nemotron-h-8b")
    assert h8.parameter_counts.total == pytest.approx(8.10e9, rel=1e-3)
    # ZeRO-3 gathers the largest block, not the mean: Nemotron-H 8B's MLP block (2 x 4096 x 21504 and its norm)
    from planner.cost.params import largest_dense_layer

    assert largest_dense_layer(h8) == 2 * 4096 * 21504 + 4096 > h8.parameter_counts.dense_layer


def test_layer_kinds_of_a_transformer_and_of_a_hybrid() -> None:
    t = _transformer(4)
    assert t.layer_kind(moe=False) == LayerKind(attention=1.0, mamba=0.0, mlp=1.0, moe=0.0, blocks=2.0)
    assert t.layer_kind(moe=True) == LayerKind(attention=1.0, mamba=0.0, mlp=0.0, moe=1.0, blocks=2.0)
    nano = load_model(NANO)
    dense = nano.layer_kind(moe=False)
    assert (dense.attention, dense.mamba, dense.mlp) == pytest.approx((6 / 29, 23 / 29, 0.0))
    assert dense.row_parallel_outputs == pytest.approx(1.0)
    assert nano.layer_kind(moe=True).row_parallel_outputs == 0.0
    assert nano.attention_layer_share == pytest.approx(6 / 52)


def test_hybrid_model_flops_count_each_block_once() -> None:
    """6 x the active matmul parameters and LM head, plus 3 x the score FLOPs of the 6 attention
    blocks and the SSD scans of the 23 Mamba blocks."""
    m, s = load_model(NANO), 8192
    h, d_inner = 2688, 4096
    attention = h * 32 * 128 + 2 * h * 2 * 128 + 32 * 128 * h
    mamba = h * 10304 + d_inner * h
    expert = 2 * h * 1856
    moe = h * 128 + 6 * expert + 2 * expert
    matmul = 6 * attention + 23 * mamba + 23 * moe + 131072 * h
    scores = 6 * 2.0 * s * 32 * 256
    scan = 23 * 2.0 * (128 * 128 * 8 + 64 * (128 * 64 + 2 * 128 * 64))
    assert mamba_scan_flops_per_token_fwd(m) == pytest.approx(scan / 23)
    assert 52 * attention_score_flops_per_token_fwd(m, s) == pytest.approx(scores)
    assert model_flops_per_token(m, s) == pytest.approx(6.0 * matmul + 3.0 * (scores + scan))


@pytest.mark.parametrize(("pattern", "experts"), [("*-*-*-*-", {}), ("*E*E*E*E", {"num_experts": 8})])
def test_attention_and_ffn_blocks_price_as_the_transformer_they_make(pattern: str, experts: dict) -> None:
    """A pattern of attention and MLP (or MoE) blocks is a transformer of half as many layers: the
    same parameters, FLOPs, memory, compute and communication, block by block; only the exposed
    tail of the gradient reduction differs (one bucket per layer, and the hybrid has twice as many
    layers, each a block)."""
    moe = {"num_experts_per_tok": 2, "moe_intermediate_size": 1408, **experts} if experts else {}
    hybrid = _transformer(8, hybrid_override_pattern=pattern, **moe)
    plain = _transformer(4, **moe)
    assert hybrid.parameter_counts.total == plain.parameter_counts.total
    assert model_flops_per_token(hybrid, 4096) == pytest.approx(model_flops_per_token(plain, 4096))
    mesh = {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 2, "global_batch_size": 64, "seq_len": 4096}
    if experts:
        mesh["ep"] = 4
    a = planner.estimate(hybrid, "dgx-h100x1", **mesh)
    b = planner.estimate(plain, "dgx-h100x1", **mesh)
    for term in ("compute", "tp_comm", "ep_comm", "layer_overhead", "optimizer", "bubble"):
        assert getattr(a.time_breakdown_s, term) == pytest.approx(
            getattr(b.time_breakdown_s, term), rel=1e-9, abs=1e-15
        ), term
    assert a.memory_per_gpu_bytes == pytest.approx(b.memory_per_gpu_bytes, rel=1e-9)
    assert a.time_breakdown_s.dp_comm == pytest.approx(b.time_breakdown_s.dp_comm / 2, rel=1e-9)
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=2e-3)


def test_a_hybrid_prices_its_mamba_blocks() -> None:
    """Nemotron 3 Nano on 8 B200 as Megatron-Bridge runs it (tp1 ep8 mbs2): the Mamba blocks' GEMMs
    and scan make the step, and a Mamba block costs more than an attention block of the same width
    would leave out (the scan and its in_proj are priced, not skipped)."""
    m = load_model(NANO)
    mesh = {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "micro_batch_size": 2, "global_batch_size": 512, "seq_len": 8192}
    est = planner.estimate(m, "dgx-b200x1", **mesh)
    no_mamba = m.model_copy(update={"hybrid_override_pattern": m.hybrid_override_pattern.replace("M", "*")})
    attention_only = planner.estimate(no_mamba, "dgx-b200x1", **mesh)
    assert est.tokens_per_s_per_gpu < attention_only.tokens_per_s_per_gpu * 1.2
    assert 20_000 < est.tokens_per_s_per_gpu < 60_000


def test_mamba_scan_backward_and_mixer_traffic_are_counted_from_the_kernels() -> None:
    """Nemotron 3 Nano's Mamba-2 mixer (d_inner 4096 = 64 heads x 64, 8 groups x state 128, chunk 128),
    the tensors of mamba_ssm's SSD kernels and Megatron-Core's training path, per token: the
    backward reruns four forward kernels and runs eleven of its own, 3.6x the forward's bytes; the
    layer term carries forward and backward as a third; the layout copies exist only for micro-batches
    of several sequences."""
    m = load_model(NANO)
    d, gn, gq, states, heads = 4096, 8 * 128, 8 * 128, 64 * 64 * 128 / 128, 64
    forward = 6 * d + 8 * gn + 8 * gq + 12 * states + 26 * heads
    backward = 22 * d + 54 * gn + 32 * gq + 34 * states + 138 * heads
    assert mamba_scan_bytes_per_token(m, 1) == pytest.approx(forward) == pytest.approx(91_776)
    assert mamba_scan_backward_bytes_per_token(m, 2) == pytest.approx(backward / 2)
    assert backward / forward == pytest.approx(3.555, abs=1e-3)

    cluster = load_cluster("dgx-b200", gpus=8)
    job = JobSpec(global_batch_size=64, seq_len=8192, dtype="fp8")
    one, two = (MeshArrays.from_configs([ParallelConfig(dp=8, ep=8, micro_batch_size=b)]) for b in (1, 2))
    bw = cluster.gpu.achieved_hbm_bytes_per_s
    tokens = 2 * 8192
    # memory-bound at this shape: (forward + backward bytes) / bandwidth, a third per layer term
    assert mamba_scan_s(m, cluster, job, two)[0] == pytest.approx(tokens * (forward + backward) / bw / 3)
    width = 2 * d + 2 * gn + heads  # in_proj's z, x, B, C, dt
    mixer = mamba_mixer_bytes_per_token(m, two)
    assert mixer["conv"][0] == pytest.approx(14 * (d + 2 * gn) / 3)
    assert mixer["gate"][0] == pytest.approx(26 * d / 3)
    assert mixer["layout"][0] == pytest.approx((8 * width + 4 * d) / 3)
    assert mamba_mixer_bytes_per_token(m, one)["layout"][0] == 0.0
    ops = layer_forward_parts(m, cluster, job, two, moe=False).elementwise
    assert ops["mamba_layout"][0] == pytest.approx(23 / 29 * tokens * (8 * width + 4 * d) / 3 / bw)
    # the memory-efficient path keeps in_proj's output, the scan's ungated output and the norm's input,
    # and out_proj's input, not the convolution's output (run again in backward)
    assert mamba_activation_bytes_per_token(m, 2.0) == pytest.approx(2 * width + 4 * d + 2 * d)


def test_mamba_scan_forward_count_against_tilelangs_chunk_scan() -> None:
    """tilelang's tuned chunk_scan forward alone takes 1.28 ms on an H800 (benchmark/mamba2/README.md:
    batch 8, 8,192 tokens, 80 heads, P 64, N 128, chunk 256, one group); the count prices the five
    kernels of mamba_ssm's forward at that shape at 1.50 ms, memory-bound: short of them, not over."""
    shape = {"mamba_num_heads": 80, "mamba_head_dim": 64, "ssm_state_size": 128, "mamba_n_groups": 1}
    m = load_model(NANO).model_copy(update={**shape, "mamba_chunk_size": 256})
    gpu = load_cluster("dgx-h800").gpu
    tokens = 8 * 8192
    memory_s = tokens * mamba_scan_bytes_per_token(m, 1) / gpu.achieved_hbm_bytes_per_s
    flops_s = tokens * mamba_scan_flops_per_token_fwd(m) / (gpu.peak_flops_per_s("bf16") * gpu.gemm_efficiency)
    assert memory_s * 1e3 == pytest.approx(1.50, abs=0.01)
    assert flops_s < memory_s / 2


def test_a_hybrid_plan_on_megatron_core_says_how_far_the_held_out_runs_fell_below_it() -> None:
    """The held-out Nemotron 3 rows ran below the planner (ARCHITECTURE 8.10): a hybrid's plan on
    Megatron-Core says so; a transformer's and another stack's do not."""
    mesh = {"tp": 1, "dp": 8, "ep": 8, "micro_batch_size": 2, "global_batch_size": 512, "seq_len": 8192}
    est = planner.estimate(NANO, "dgx-b200x1", **mesh)
    missed = [w for w in est.warnings if w.startswith("known miss")]
    assert len(missed) == 1 and "Nemotron 3 Nano 11-21% on B200, B300, GB200 and GB300" in missed[0]
    plain = planner.estimate("qwen3-30b-a3b", "dgx-b200x1", **mesh)
    assert not any(w.startswith("known miss") for w in plain.warnings)
    other = planner.estimate(NANO, "dgx-b200x1", stack="torchtitan", **{**mesh, "ep": 1, "micro_batch_size": 1})
    assert not any(w.startswith("known miss") for w in other.warnings)


def test_mamba_meshes_the_planner_does_not_price_are_refused() -> None:
    m = load_model(NANO)
    with pytest.raises(PlannerError, match="context parallelism of Mamba layers"):
        planner.estimate(m, "dgx-h100x1", tp=2, cp=2, dp=2, seq_len=8192)
    with pytest.raises(PlannerError, match="tp 16 must divide nemotron-3-nano-30b-a3b's 64 Mamba-2 heads and 8 groups"):
        planner.estimate(m, "dgx-h100x16", tp=16, dp=8, seq_len=8192)


@pytest.mark.parametrize(
    ("update", "fragment"),
    [
        ({"hybrid_override_pattern": "M*X-"}, "hybrid_override_pattern has 'X'"),
        ({"hybrid_override_pattern": "M*-"}, "hybrid_override_pattern has 3 layers, num_hidden_layers is 4"),
        ({"hybrid_override_pattern": "", "num_experts": 8, "num_experts_per_tok": 2}, "has 0 layers"),
        ({"hybrid_override_pattern": "M*E-"}, "MoE layers ('E') exactly when the model declares experts"),
        ({"hybrid_override_pattern": "M*--"}, "Mamba layers ('M') need mamba_num_heads"),
        ({"mamba_num_heads": 64}, "need a hybrid_override_pattern"),
        ({"hybrid_override_pattern": "**--", "first_k_dense_replace": 1}, "first_k_dense_replace"),
    ],
)
def test_malformed_hybrid_models_are_refused_by_field(update: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        _transformer(4, **update)


def test_a_nemotron_h_config_reads_as_the_catalog_model(tmp_path: Path) -> None:
    """The config.json NemotronH checkpoints ship (n_groups, conv_kernel, chunk_size,
    moe_shared_expert_intermediate_size, mlp_hidden_act, layer_norm_epsilon of its RMSNorm)."""
    nano = load_model(NANO)
    config = {
        "model_type": "nemotron_h",
        "hybrid_override_pattern": nano.hybrid_override_pattern,
        "num_hidden_layers": 52,
        "hidden_size": 2688,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "mamba_num_heads": 64,
        "mamba_head_dim": 64,
        "ssm_state_size": 128,
        "n_groups": 8,
        "conv_kernel": 4,
        "chunk_size": 128,
        "intermediate_size": 1856,
        "mlp_hidden_act": "relu2",
        "layer_norm_epsilon": 1e-5,
        "n_routed_experts": 128,
        "num_experts_per_tok": 6,
        "moe_intermediate_size": 1856,
        "moe_shared_expert_intermediate_size": 3712,
        "vocab_size": 131072,
        "max_position_embeddings": 262144,
    }
    read = load_model(_config_file(tmp_path, "nano", config))
    assert read.parameter_counts.total == nano.parameter_counts.total
    assert (read.norm_type, read.position_embedding_type, read.mamba_n_groups) == ("rmsnorm", "none", 8)


NANO_ROW = {
    "name": "row",
    "model": {
        "name": "Nemotron-3-Nano-30B-A3B",
        "hf_id": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        "layers": 52,
        "hidden": 2688,
        "heads": 32,
        "kv_heads": 2,
        "head_dim": 128,
        "vocab": 131072,
        "experts": 128,
        "top_k": 6,
        "expert_ffn": 1856,
        "shared_experts": 1,
        "shared_expert_ffn": 3712,
        "architecture": "hybrid: 23 Mamba-2 + 23 MoE + 6 GQA attention layers (52 total)",
        "shape_partial": True,
        "seq_len": 8192,
    },
}


def test_a_hybrid_row_is_priced_as_the_catalog_model_its_hf_id_names() -> None:
    model = model_from_row(NANO_ROW)
    assert model.hybrid_override_pattern == load_model(NANO).hybrid_override_pattern
    assert model.max_position_embeddings == 8192
    wrong = copy.deepcopy(NANO_ROW)
    wrong["model"]["top_k"] = 5
    with pytest.raises(
        UnpriceableError, match=r"disagrees with catalog model nemotron-3-nano-30b-a3b on top_k 5 \(catalog 6\)"
    ):
        model_from_row(wrong)
    unknown = copy.deepcopy(NANO_ROW)
    unknown["model"]["hf_id"] = "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16"
    with pytest.raises(UnpriceableError, match="no catalog model holds for hf_id"):
        model_from_row(unknown)


def test_megatron_exports_hybrids_for_the_release_that_trains_them() -> None:
    """pretrain_mamba.py's arguments at Megatron-LM core_v0.17.0 (export.megatron.HYBRID_RELEASE):
    the pattern with '|' between the plan's pipeline segments and '/' before each MTP depth, the MoE
    blocks placed by the pattern (no --moe-layer-freq), Super's --moe-latent-size; the launcher
    starts pretrain_mamba.py; torchtitan and DeepSpeed have no Mamba-2 layer or latent experts.
    (tests/test_frameworks.py runs these exports through that release's own validate_args.)"""
    from planner.export import export, megatron_args
    from planner.export.common import ExportRefusalError
    from planner.export.launch import entry_point

    job = JobSpec(global_batch_size=64, seq_len=8192)
    h8 = load_model("nemotron-h-8b")
    text = " ".join(megatron_args(h8, job, ParallelConfig(tp=2, pp=4, dp=2)))
    segments = "M-M-M-M*-M-M-M|-M-M*-M-M-M-M-|M*-M-M-M-M-M*-|M-M-M-M-M-"  # 14, 14, 14, 10: the plan's split
    assert segments.replace("|", "") == h8.hybrid_override_pattern
    spec = "--spec megatron.core.models.mamba.mamba_layer_specs mamba_stack_spec"
    assert f"{spec} --hybrid-layer-pattern {segments}" in text
    assert "--mamba-num-heads 128 --mamba-head-dim 64 --mamba-state-dim 128 --mamba-num-groups 8" in text
    assert "--position-embedding-type none" in text and "--squared-relu" in text
    assert "--is-hybrid-model" not in text and "--hybrid-override-pattern" not in text
    assert "--pipeline-model-parallel-layout" not in text and "virtual-pipeline" not in text

    nano = load_model(NANO)
    args = megatron_args(nano, job, ParallelConfig(tp=1, pp=1, dp=8, ep=8))
    text = " ".join(args)
    assert f"--hybrid-layer-pattern {nano.hybrid_override_pattern} " in text
    assert "--num-experts 128 --moe-router-topk 6 --moe-grouped-gemm --moe-ffn-hidden-size 1856" in text
    assert "--moe-shared-expert-intermediate-size 3712" in text and "--expert-model-parallel-size 8" in text
    assert "--moe-layer-freq" not in text and "--moe-latent-size" not in text and "--mtp-num-layers" not in text
    script, _ = entry_point("megatron", nano, job, ParallelConfig(tp=1, pp=1, dp=8, ep=8), None)
    assert script == ["pretrain_mamba.py"]
    assert entry_point("megatron", load_model("llama3-8b"), job, ParallelConfig(dp=8), None)[0] == ["pretrain_gpt.py"]

    super_ = load_model("nemotron-3-super-120b-a12b")
    text = " ".join(megatron_args(super_, job, ParallelConfig(tp=1, pp=4, dp=2, ep=2)))
    main = super_.hybrid_override_pattern or ""
    written = text.split("--hybrid-layer-pattern ")[1].split()[0]
    segments, mtp = written.split("|"), written.split("/")[1:]
    assert mtp == ["*E", "*E"] and "".join(segments).split("/")[0] == main  # the MTP depths after the last segment
    assert len(segments) == 4 and len(segments[-1].split("/")[0]) < len(segments[0])  # the head's rank is lighter
    assert "--mtp-num-layers 2" in text and "--moe-latent-size 1024" in text and "--num-experts 512" in text
    no_mtp = " ".join(megatron_args(super_, job.model_copy(update={"mtp_layers": 0}), ParallelConfig(dp=8, ep=8)))
    assert f"--hybrid-layer-pattern {main} " in no_mtp and "--mtp-num-layers" not in no_mtp
    early = ParallelConfig(
        tp=1, pp=2, dp=4, ep=4, virtual_stages=2, schedule="interleaved-1f1b", pipeline_layout="Et*30|t*30|t*28mm|L"
    )
    with pytest.raises(ExportRefusalError, match="MTP layers before the last pipeline stage of a hybrid model"):
        megatron_args(super_, job, early)
    for fmt in ("torchtitan", "deepspeed"):
        with pytest.raises(ExportRefusalError, match="hybrid Mamba-2 layers"):
            export(fmt, h8, job, ParallelConfig(tp=1, pp=1, dp=8))
        with pytest.raises(ExportRefusalError, match="LatentMoE"):
            export(fmt, super_, job, ParallelConfig(tp=1, pp=1, dp=8, ep=8))


def test_a_hybrid_pipeline_is_the_plans_split_in_segments_of_one_block_or_more() -> None:
    """Megatron-LM core_v0.17.0 takes a hybrid's split as '|' segments, p x v of them: the plan
    balances the last rank against its LM head (52 blocks on 4 ranks: 14, 14, 14, 10), interleaves
    virtual stages and splits 52 blocks over 8 ranks; every segment keeps a block (no empty ends,
    as a transformer's layout may have), and DualPipe and layout strings stay refused."""
    from planner.export import megatron_args

    est = planner.estimate("nemotron-h-8b", "dgx-h100x16", tp=2, pp=4, seq_len=8192)
    assert est.layers_per_stage == [14, 14, 14, 10]
    pattern = load_model("nemotron-h-8b").hybrid_override_pattern or ""
    args = megatron_args(load_model("nemotron-h-8b"), est.config.job, est.config.parallel)
    written = args[args.index("--hybrid-layer-pattern") + 1]
    assert [len(s) for s in written.split("|")] == [14, 14, 14, 10] and written.replace("|", "") == pattern
    vp = planner.estimate(
        "nemotron-h-8b", "dgx-h100x16", tp=2, pp=4, virtual_stages=2, schedule="interleaved-1f1b", seq_len=8192
    )
    args = megatron_args(load_model("nemotron-h-8b"), vp.config.job, vp.config.parallel)
    segments = [len(s) for s in args[args.index("--hybrid-layer-pattern") + 1].split("|")]
    assert len(segments) == 8 and sum(segments) == 52 and min(segments) >= 1
    assert [sum(segments[r::4]) for r in range(4)] == vp.layers_per_stage  # chunk c on rank c mod p
    assert vp.step_time_s < est.step_time_s  # the bubble shrinks
    assert planner.estimate("nemotron-h-8b", "dgx-h100x16", tp=2, pp=8, seq_len=8192).layers_per_stage[-1] >= 1
    with pytest.raises(PlannerError, match="segments of one block or more, without a layout string or DualPipe"):
        planner.estimate("nemotron-h-8b", "dgx-h100x16", tp=2, pp=4, schedule="dualpipev", seq_len=8192)
    with pytest.raises(PlannerError, match="segments of one block or more"):
        planner.estimate("nemotron-h-8b", "dgx-h100x16", tp=2, pp=2, pipeline_layout="Et*26|t*26L", seq_len=8192)


def _latent_moe(latent: int | None) -> ModelSpec:
    """A small Nemotron-3-Super-like hybrid: LatentMoE blocks between Mamba and attention blocks."""
    return _transformer(
        4,
        hybrid_override_pattern="ME*E",
        hidden_act="relu2",
        mamba_num_heads=32,
        mamba_head_dim=64,
        ssm_state_size=128,
        mamba_n_groups=8,
        num_experts=64,
        num_experts_per_tok=8,
        moe_intermediate_size=1344,
        shared_expert_intermediate_size=None,
        n_shared_experts=2,
        moe_latent_size=latent,
    )


def test_latent_moe_runs_the_experts_on_the_latent() -> None:
    """Nemotron 3 Super's LatentMoE (Megatron's num_floating_point_operations: 'Routed experts run on
    moe_latent_size' plus the up and down projections): the experts' weights and FLOPs over the
    latent, two h x latent projections per MoE layer, the shared experts on h, and the dispatch
    carrying the latent."""
    from planner.cost.flops import moe_ffn_active_matmul_params
    from planner.cost.traffic import routed_message_bytes
    from planner.mesh import MeshArrays
    from planner.schemas.job import JobSpec
    from planner.schemas.parallel import ParallelConfig

    plain, latent = _latent_moe(None), _latent_moe(512)
    h, f = 2048, 1344
    per_layer = 64 * 2 * 512 * f + 2 * h * 512  # routed experts on the latent, and the two projections
    assert latent.parameter_counts.moe_layer - latent.parameter_counts.moe_experts_per_layer == (
        plain.parameter_counts.moe_layer - plain.parameter_counts.moe_experts_per_layer + 2 * h * 512
    )
    assert latent.parameter_counts.moe_experts_per_layer + 2 * h * 512 == per_layer
    shared = 2 * 2 * h * f
    assert moe_ffn_active_matmul_params(latent) == h * 64 + 8 * 2 * 512 * f + 2 * h * 512 + shared
    job = JobSpec(global_batch_size=16, seq_len=4096)
    mesh = MeshArrays.from_configs([ParallelConfig(dp=8, ep=8, micro_batch_size=2)])
    assert routed_message_bytes(latent, job, mesh)[0] == pytest.approx(routed_message_bytes(plain, job, mesh)[0] / 4)
    a = planner.estimate(latent, "dgx-h100x1", dp=8, ep=8, micro_batch_size=2, global_batch_size=64, seq_len=4096)
    b = planner.estimate(plain, "dgx-h100x1", dp=8, ep=8, micro_batch_size=2, global_batch_size=64, seq_len=4096)
    assert a.time_breakdown_s.ep_comm < b.time_breakdown_s.ep_comm / 3
    with pytest.raises(ValueError, match="moe_latent_size without experts"):
        _transformer(4, moe_latent_size=512)


def test_a_nemotron_h_config_may_list_its_blocks_by_name(tmp_path: Path) -> None:
    """Newer NemotronH configs (Nemotron 3 Super) give ``layers_block_type`` instead of the pattern
    string: mamba, attention, mlp, moe (Megatron-LM's checkpoint loader maps them to M * - E)."""
    config = {
        "model_type": "nemotron_h",
        "layers_block_type": ["mamba", "moe", "attention", "moe"],
        "num_hidden_layers": 4,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "intermediate_size": 1344,
        "mamba_num_heads": 32,
        "mamba_head_dim": 64,
        "ssm_state_size": 128,
        "n_groups": 8,
        "n_routed_experts": 64,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 1344,
        "moe_shared_expert_intermediate_size": 2688,
        "moe_latent_size": 512,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    }
    read = load_model(_config_file(tmp_path, "super", config))
    assert (read.hybrid_override_pattern, read.moe_latent_size, read.n_shared_experts) == ("ME*E", 512, 2)
    refused = {
        "gdn": ({**config, "layers_block_type": ["mamba", "moe", "gdn", "moe"]}, "names 'gdn'; allowed: mamba, "),
        "mtp": ({**config, "mtp_layers_block_type": ["attention", "moe"]}, "need mtp_hybrid_override_pattern"),
    }
    mtp = {**config, "mtp_layers_block_type": ["attention", "moe"], "num_nextn_predict_layers": 2}
    read_mtp = load_model(_config_file(tmp_path, "mtp-ok", mtp))
    assert (read_mtp.mtp_hybrid_override_pattern, read_mtp.num_nextn_predict_layers) == ("*E", 2)
    for name, (bad, fragment) in refused.items():
        with pytest.raises(PlannerError, match=fragment):
            load_model(_config_file(tmp_path, name, bad))


def test_nemotron_3_super_counts_and_prices_its_mtp_blocks() -> None:
    """120 B total, 12 B active (the name's A12B); each of its 2 MTP modules is an attention and a
    LatentMoE block ('*E', Megatron-Bridge's Nemotron3SuperProvider) with its projection and LM head,
    counted in the model FLOPs and on the last rank's layers."""
    from planner.cost.flops import mtp_block_counts, mtp_matmul_params_active
    from planner.cost.pipeline import layers_with_mtp, moe_layers_of

    m = load_model("nemotron-3-super")
    c = m.parameter_counts
    assert c.total == pytest.approx(120.67e9, rel=1e-3) and c.active_per_token == pytest.approx(12.77e9, rel=1e-3)
    assert mtp_block_counts(m) == (2, 1)
    assert layers_with_mtp(m, 88, 2) == 92 and moe_layers_of(m, 88, 2) == pytest.approx(40 + 2)
    h = 4096
    attention = h * 32 * 128 + 2 * h * 2 * 128 + 32 * 128 * h
    moe = h * 512 + 22 * 2 * 1024 * 2688 + 2 * h * 1024 + 2 * 2 * h * 2688
    assert mtp_matmul_params_active(m) == attention + moe + 2 * h * h + 131072 * h
    with_mtp = model_flops_per_token(m, 8192, 2)
    assert with_mtp - model_flops_per_token(m, 8192) == pytest.approx(
        2 * (6.0 * mtp_matmul_params_active(m) + 3.0 * 2.0 * 8192 * 32 * 256)
    )
    with pytest.raises(ValueError, match="need mtp_hybrid_override_pattern"):
        m.model_copy(update={"mtp_hybrid_override_pattern": None}).model_validate(
            {**m.model_dump(), "mtp_hybrid_override_pattern": None}
        )


def test_the_validator_replays_a_hybrids_gemms_and_collectives_not_a_layer_shard() -> None:
    """plan validate: the GEMMs of a hybrid's rank come from the same layer_gemms, each block's counted
    by its layers (Nemotron-H 8B: 24 Mamba in_proj, 4 QKV, 24 MLP fc1 per micro-batch); the layer shard,
    a transformer layer, is refused when asked for."""
    from planner.cost.step import slowest_rank
    from planner.schemas.job import JobSpec
    from planner.schemas.parallel import ParallelConfig
    from planner.validate.gemms import gemm_shapes
    from planner.validate.run import build_validation
    from planner.validate.settings import ValidationSettings

    h8 = load_model("nemotron-h-8b")
    job = JobSpec(global_batch_size=64, seq_len=8192)
    plan = ParallelConfig(tp=1, pp=1, dp=8)
    calls = {
        name: c for name, _, c in gemm_shapes(h8, job, plan, slowest_rank(h8, load_cluster("dgx-h100x1"), job, plan))
    }
    assert calls["mamba.in_proj"] == pytest.approx(24) and calls["attn.qkv"] == pytest.approx(4)
    assert calls["mlp.in"] == pytest.approx(24) and calls["lm_head"] == -1.0
    with pytest.raises(PlannerError, match="--layer-shard: the layer shard is a transformer layer"):
        build_validation(h8, load_cluster("dgx-h100x1"), job, {}, ValidationSettings(layer_shard=True), top=1)
