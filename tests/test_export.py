"""plan export: each target's settings parse back (argparse, tomllib, json) to the planned mesh,
and what a target cannot express is refused with one line naming the knob."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from typing import Any

import pytest

from planner.catalog import load_cluster, load_model
from planner.cost.layout import check_layout, parse_layout
from planner.cost.pipeline import chunk_layer_counts, plan_layout, stage_layer_counts
from planner.errors import PlannerError
from planner.export import (
    FORMATS,
    deepspeed_config,
    export,
    megatron_args,
    render,
    torchtitan_args,
    torchtitan_config,
)
from planner.export.common import ExportRefusalError
from planner.export.megatron import pipeline_layout
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig
from planner.search import default_job
from tests.conftest import assert_one_line_error

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

LLAMA70B = load_model("llama3-70b")  # 80 layers, dense
MIXTRAL = load_model("mixtral-8x7b")  # 32 layers, 8 experts
QWEN3_MOE = load_model("qwen3-30b-a3b")  # 48 layers, 128 experts: a model torchtitan builds
DSV3 = load_model("deepseek-v3")  # 61 layers: uneven pipeline splits
LLAMA405B = load_model("llama3-405b")  # torchtitan 0.3 has only an fp8 config function for it
QWEN3_235B = load_model("qwen3-235b-a22b")  # no torchtitan 0.3 pre-training config function
JOB = JobSpec(global_batch_size=1024, seq_len=4096)
JOB_NO_MTP = JobSpec(global_batch_size=1024, seq_len=4096, mtp_layers=0)  # torchtitan trains no MTP
TITAN_JOB = JOB.model_copy(update={"mtp_layers": 0})  # torchtitan builds no MTP module
DS_JOB = JOB.model_copy(update={"stack": "deepspeed"})  # the split DeepSpeed's PipelineModule can make


def mesh(**kw: Any) -> ParallelConfig:
    if kw.get("virtual_stages", 1) > 1:
        kw.setdefault("schedule", "interleaved-1f1b")
    return ParallelConfig(**kw)


# ---- Megatron-LM -------------------------------------------------------------------------------


def megatron_parser() -> argparse.ArgumentParser:
    """The flags the mapping emits, declared as Megatron-LM's arguments.py declares them."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    for flag in (
        "--tensor-model-parallel-size",
        "--pipeline-model-parallel-size",
        "--context-parallel-size",
        "--expert-model-parallel-size",
        "--expert-tensor-parallel-size",
        "--num-layers",
        "--seq-length",
        "--num-layers-per-virtual-pipeline-stage",
        "--micro-batch-size",
        "--global-batch-size",
        "--recompute-num-layers",
        # _add_network_size_args, _add_moe_args, _add_mla_args: the architecture
        "--hidden-size",
        "--ffn-hidden-size",
        "--num-attention-heads",
        "--kv-channels",
        "--num-query-groups",
        "--max-position-embeddings",
        "--num-experts",
        "--moe-router-topk",
        "--moe-ffn-hidden-size",
        "--moe-router-num-groups",
        "--moe-router-group-topk",
        "--moe-shared-expert-intermediate-size",
        "--q-lora-rank",
        "--kv-lora-rank",
        "--qk-head-dim",
        "--qk-pos-emb-head-dim",
        "--v-head-dim",
        "--cpu-offloading-num-layers",
    ):
        p.add_argument(flag, type=int)
    p.add_argument("--position-embedding-type", choices=["learned_absolute", "rope", "mrope", "relative", "none"])
    p.add_argument("--normalization", choices=["LayerNorm", "RMSNorm"])
    p.add_argument("--moe-layer-freq")
    p.add_argument("--recompute-modules", nargs="*")
    for flag in ("--pipeline-model-parallel-layout", "--recompute-method", "--ckpt-format", "--fp8-format"):
        p.add_argument(flag)
    p.add_argument("--mtp-num-layers", type=int, default=None)  # arguments.py _add_mtp_args
    # arguments.py _add_moe_args
    p.add_argument("--moe-token-dispatcher-type", choices=["allgather", "alltoall", "flex"], default="allgather")
    p.add_argument("--moe-flex-dispatcher-backend", choices=["deepep", "hybridep"], default="deepep")
    p.add_argument("--moe-router-score-function", choices=["softmax", "sigmoid"], default="softmax")
    # _add_network_size_args and _add_mla_args: RoPE's base and scaling
    p.add_argument("--rotary-base", type=int, default=10000)
    p.add_argument("--use-rope-scaling", action="store_true")
    p.add_argument("--rope-scaling-factor", type=float, default=8.0)
    p.add_argument("--rope-type", choices=["rope", "yarn"])
    for flag in ("--rotary-scaling-factor", "--mscale", "--mscale-all-dim"):
        p.add_argument(flag, type=float)
    p.add_argument("--moe-router-topk-scaling-factor", type=float)
    p.add_argument("--recompute-granularity", choices=["full", "selective"])
    p.add_argument("--fp8-recipe", choices=["tensorwise", "delayed", "mxfp8", "blockwise", "custom"], default="delayed")
    # _add_transformer_engine_args: NVFP4 and the layers kept in bf16
    p.add_argument("--fp4-format", choices=["e2m1"], dest="fp4")
    p.add_argument("--fp4-recipe", choices=["nvfp4", "custom"], default="nvfp4")
    p.add_argument("--first-last-layers-bf16", action="store_true")
    p.add_argument("--num-layers-at-start-in-bf16", type=int, default=1)
    p.add_argument("--num-layers-at-end-in-bf16", type=int, default=1)
    p.add_argument(
        "--data-parallel-sharding-strategy", choices=["no_shard", "optim", "optim_grads", "optim_grads_params"]
    )
    p.add_argument("--attention-backend", choices=["flash", "fused", "unfused", "local", "auto"])
    # _add_network_size_args: windows, sinks and GPT-OSS's activation
    p.add_argument("--softmax-type", choices=["learnable", "vanilla", "off-by-one"], default="vanilla")
    p.add_argument("--window-size", type=lambda x: tuple(int(i) for i in x.strip("()").split(",")))  # tuple_type
    p.add_argument("--window-attn-skip-freq")  # moe_freq_type: an int or a list expression
    p.add_argument("--no-rope-freq")  # no_rope_freq_type: an int or a list expression
    p.add_argument("--glu-linear-offset", type=float, default=0.0)
    p.add_argument("--norm-epsilon", type=float, default=1e-5)  # _add_network_size_args
    p.add_argument("--activation-func-clamp-value", type=float)
    p.add_argument("--attention-dropout", type=float, default=0.1)
    p.add_argument("--hidden-dropout", type=float, default=0.1)
    for flag in (
        "--moe-router-enable-expert-bias",
        "--moe-router-pre-softmax",
        "--moe-apply-probs-on-input",
        "--sequence-parallel",
        "--use-distributed-optimizer",
        "--use-megatron-fsdp",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "--use-tp-pp-dp-mapping",
        "--bf16",
        "--fp16",
        "--tp-comm-overlap",
        "--grad-reduce-in-bf16",
        "--use-precision-aware-optimizer",
        "--fp8-param-gather",
        "--reuse-grad-buf-for-mxfp8-param-ag",
        "--group-query-attention",
        "--swiglu",
        "--quick-geglu",
        "--squared-relu",
        "--untie-embeddings-and-output-weights",
        "--disable-bias-linear",
        "--add-qkv-bias",
        "--qk-layernorm",
        "--multi-latent-attention",
        "--moe-grouped-gemm",
        "--cross-entropy-loss-fusion",
        "--moe-permute-fusion",
    ):
        p.add_argument(flag, action="store_true")
    p.add_argument("--cross-entropy-fusion-impl", choices=["native", "te"], default="native")
    p.add_argument(
        "--moe-router-load-balancing-type", choices=["aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none"]
    )
    p.add_argument("--moe-aux-loss-coeff", type=float, default=0.0)
    # _add_training_args: the moments' formats under the precision-aware optimizer
    for flag in ("--exp-avg-dtype", "--exp-avg-sq-dtype"):
        p.add_argument(flag, choices=["fp32", "fp16", "bf16", "fp8"], default="fp32")
    p.add_argument("--no-gradient-accumulation-fusion", action="store_false", dest="gradient_accumulation_fusion")
    return p


def megatron_mesh(model: ModelSpec, ns: argparse.Namespace) -> dict[str, Any]:
    """Read the planner's knobs back from parsed Megatron-LM arguments."""
    pp, layers = ns.pipeline_model_parallel_size, ns.num_layers
    if ns.pipeline_model_parallel_layout:
        v = len(parse_layout(ns.pipeline_model_parallel_layout)) // pp
    elif ns.num_layers_per_virtual_pipeline_stage:
        v = layers // (pp * ns.num_layers_per_virtual_pipeline_stage)
    else:
        v = 1
    if ns.use_megatron_fsdp:
        zero = {"optim_grads": 2, "optim_grads_params": 3}[ns.data_parallel_sharding_strategy]
    else:
        zero = 1 if ns.use_distributed_optimizer else 0
    return {
        "tp": ns.tensor_model_parallel_size,
        "pp": pp,
        "cp": ns.context_parallel_size,
        "ep": ns.expert_model_parallel_size or 1,
        "expert_tp": ns.expert_tensor_parallel_size or 1,
        "micro_batch_size": ns.micro_batch_size,
        "virtual_stages": v,
        "zero_stage": zero,
        "recompute": ns.recompute_granularity or "none",
        "sequence_parallel": ns.sequence_parallel,
    }


MEGATRON_CASES = [
    (LLAMA70B, mesh(tp=8, pp=4, dp=4, virtual_stages=2, zero_stage=1, recompute="selective", sequence_parallel=True)),
    (LLAMA70B, mesh(tp=4, pp=1, dp=16, cp=2, micro_batch_size=2, zero_stage=3, recompute="full")),
    (LLAMA70B, mesh(tp=8, pp=2, dp=8, zero_stage=0, micro_batch_size=4)),
    (MIXTRAL, mesh(tp=2, pp=2, dp=8, ep=8, expert_tp=2, zero_stage=1, sequence_parallel=True)),
    (DSV3, mesh(tp=8, pp=4, dp=4, ep=8, virtual_stages=2, zero_stage=1, recompute="full", sequence_parallel=True)),
    (DSV3, mesh(tp=4, pp=8, dp=4, ep=16, zero_stage=1, sequence_parallel=True)),
]


@pytest.mark.parametrize(("model", "config"), MEGATRON_CASES)
def test_megatron_arguments_round_trip(model: ModelSpec, config: ParallelConfig) -> None:
    args = megatron_args(model, JOB, config)
    ns = megatron_parser().parse_args(args)
    back = megatron_mesh(model, ns)
    assert back == {k: getattr(config, k) for k in back}
    assert ns.global_batch_size == JOB.batch_size and ns.seq_length == JOB.seq_len
    assert ns.num_layers == model.num_hidden_layers
    assert (ns.mtp_num_layers or 0) == model.num_nextn_predict_layers  # the job trains the model's MTP layers
    if ns.pipeline_model_parallel_layout:  # Megatron's rules, the layout's MTP layers the job's
        stages = parse_layout(ns.pipeline_model_parallel_layout)
        check_layout(stages, model.num_hidden_layers, config.pp, ns.mtp_num_layers or 0)
    assert ns.bf16 and not ns.fp16
    assert ns.attention_dropout == ns.hidden_dropout == 0.0  # the job has no dropout; Megatron's default is 0.1
    # the fused loss the stack's loss bytes count (Megatron's defaults: off, native); the fused permute for MoE
    assert ns.cross_entropy_loss_fusion and ns.cross_entropy_fusion_impl == "te"
    assert ns.moe_permute_fusion == model.is_moe
    assert ns.overlap_grad_reduce == (config.dp * config.cp > 1)
    if config.zero_stage >= 2:
        assert ns.ckpt_format == "fsdp_dtensor" and not ns.gradient_accumulation_fusion
    if config.recompute == "full":
        assert (ns.recompute_method, ns.recompute_num_layers) == ("uniform", 1)


def test_megatron_uneven_split_is_a_layout_matching_the_priced_split() -> None:
    # DeepSeek-V3 (61 layers + 1 MTP) on pp 4 x v 2: the layout holds every layer once, the MTP
    # layer and the loss on the last chunk, and its per-rank counts are the split the engine prices.
    from planner.cost.pipeline import rank_layer_split

    config = mesh(tp=8, pp=4, dp=4, ep=8, virtual_stages=2, sequence_parallel=True, zero_stage=1)
    text = pipeline_layout(DSV3, JOB, config)
    assert text is not None
    stages = parse_layout(text)
    assert len(stages) == 8 and stages[0][0] == "E" and stages[-1][-2:] == ["m", "L"]
    assert sum(s.count("t") for s in stages) == 61
    per_rank = [sum(stages[c].count("t") for c in range(rank, 8, 4)) for rank in range(4)]
    assert (max(per_rank[:-1]), per_rank[-1]) == rank_layer_split(DSV3, JOB, 4, 2) == (16, 13)


@pytest.mark.parametrize(("layers", "pp", "v"), [(61, 4, 2), (80, 3, 1), (30, 4, 1), (7, 2, 3), (96, 8, 4)])
def test_chunk_sizes_sum_to_the_cost_engine_split(layers: int, pp: int, v: int) -> None:
    sizes = chunk_layer_counts(layers, pp, v)
    assert sum(sizes) == layers and max(sizes) - min(sizes) <= 1
    assert [sum(sizes[c] for c in range(r, pp * v, pp)) for r in range(pp)] == stage_layer_counts(layers, pp, v)


def test_megatron_text_is_the_argument_list_with_comments() -> None:
    config = MEGATRON_CASES[4][1]
    text = export("megatron", DSV3, JOB, config, header="my header")
    lines = text.splitlines()
    assert lines[0] == "# my header" and all(line.startswith("#") for line in lines[:3])
    body = [line.removesuffix(" \\") for line in lines if not line.startswith("#")]
    assert all(line.startswith("--") for line in body)
    assert all(line.endswith(" \\") for line in lines[-len(body) : -1]) and not lines[-1].endswith("\\")
    assert shlex.split(" ".join(body)) == megatron_args(DSV3, JOB, config)


def test_megatron_precision_and_attention_flags() -> None:
    config = mesh(tp=8, pp=2, dp=8, sequence_parallel=True)
    fp8 = JobSpec(global_batch_size=1024, seq_len=4096, dtype="fp8", dropout=True, flash_attention=False)
    ns = megatron_parser().parse_args(megatron_args(LLAMA70B, fp8, config))
    assert ns.bf16 and ns.fp8_format == "hybrid" and ns.attention_backend == "unfused"
    assert ns.attention_dropout == 0.1  # dropout kept: Megatron-LM's default
    order = megatron_parser().parse_args(
        megatron_args(LLAMA70B, JOB, config.model_copy(update={"order": "tp-cp-pp-dp"}))
    )
    assert order.use_tp_pp_dp_mapping


# ---- torchtitan --------------------------------------------------------------------------------


def torchtitan_mesh(model: ModelSpec, job: JobSpec, doc: dict[str, Any]) -> dict[str, Any]:
    """Read the planner's knobs back from a parsed torchtitan job file."""
    par, train = doc["parallelism"], doc["training"]
    replicate, shard = par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]
    pp = par["pipeline_parallel_degree"]
    if "module_fqns_per_model_part" in par:
        v = len(par["module_fqns_per_model_part"]) // pp
    elif "pipeline_parallel_layers_per_stage" in par:
        v = model.num_hidden_layers // par["pipeline_parallel_layers_per_stage"] // pp
    else:
        v = 1
    mbs = par["pipeline_parallel_microbatch_size"] if pp > 1 else train["local_batch_size"]
    zero = {"never": 2, "always": 3}.get(par.get("fsdp_reshard_after_forward", ""), 0)  # else DDP: ZeRO-0
    dp = replicate * shard
    # torchtitan's train.py: accumulation = global / (local * dp); a pipeline splits local into micro-batches.
    accumulation = train["global_batch_size"] // (train["local_batch_size"] * dp)
    microbatches = accumulation * (train["local_batch_size"] // mbs)
    assert microbatches == job.batch_size // (dp * mbs)
    return {
        "tp": par["tensor_parallel_degree"],
        "pp": pp,
        "dp": dp,
        "cp": par["context_parallel_degree"],
        "ep": par.get("expert_parallel_degree", 1),
        "expert_tp": par.get("expert_tensor_parallel_degree", 1),
        "micro_batch_size": mbs,
        "virtual_stages": v,
        "zero_stage": zero,
        "recompute": doc["activation_checkpoint"]["mode"],
    }


TORCHTITAN_CASES = [
    (LLAMA70B, mesh(tp=8, pp=4, dp=4, virtual_stages=2, zero_stage=3, recompute="selective", sequence_parallel=True)),
    (LLAMA70B, mesh(tp=1, pp=1, dp=32, cp=4, micro_batch_size=2, zero_stage=2, recompute="full")),
    (LLAMA70B, mesh(dp=128, zero_stage=0, micro_batch_size=8)),
    (QWEN3_MOE, mesh(tp=2, pp=1, dp=16, ep=8, expert_tp=2, zero_stage=3, sequence_parallel=True)),
    (QWEN3_MOE, mesh(tp=2, pp=1, dp=16, ep=8, expert_tp=1, zero_stage=2, sequence_parallel=True)),
    (DSV3, mesh(tp=8, pp=4, dp=4, ep=8, virtual_stages=2, zero_stage=3, recompute="full", sequence_parallel=True)),
]


@pytest.mark.parametrize(("model", "config"), TORCHTITAN_CASES)
def test_torchtitan_toml_round_trip(model: ModelSpec, config: ParallelConfig) -> None:
    text = export("torchtitan-0.2", model, TITAN_JOB, config, header="my header")
    assert text.startswith("# my header\n")
    doc = tomllib.loads(text)
    assert doc == torchtitan_config(model, TITAN_JOB, config)
    back = torchtitan_mesh(model, TITAN_JOB, doc)
    assert back == {k: getattr(config, k) for k in back}
    assert doc["training"]["seq_len"] == JOB.seq_len and doc["training"]["global_batch_size"] == JOB.batch_size
    assert doc["training"]["mixed_precision_param"] == "bfloat16"
    par = doc["parallelism"]
    if config.pp > 1:
        expected = {"1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B"}[config.schedule]
        assert par["pipeline_parallel_schedule"] == expected
    if "pipeline_parallel_layers_per_stage" in par:
        assert par["pipeline_parallel_first_stage_less_layers"] == par["pipeline_parallel_last_stage_less_layers"] == 0
    if config.recompute == "selective":
        assert doc["activation_checkpoint"]["selective_ac_option"] == "op"


def test_torchtitan_uneven_split_lists_every_module_once() -> None:
    doc = tomllib.loads(export("torchtitan-0.2", DSV3, TITAN_JOB, TORCHTITAN_CASES[-1][1]))
    parts = doc["parallelism"]["module_fqns_per_model_part"]
    flat = [name for part in parts for name in part]
    assert flat == ["tok_embeddings", *[f"layers.{i}" for i in range(61)], "norm", "output"]
    layout = parse_layout(plan_layout(DSV3, TITAN_JOB, 4, 2) or "")
    assert [sum(n.startswith("layers.") for n in part) for part in parts] == [s.count("t") for s in layout]


def test_torchtitan_fp8_and_moot_zero() -> None:
    fp8 = JobSpec(global_batch_size=64, seq_len=4096, dtype="fp8")
    one_rank = mesh(tp=8, pp=1, dp=1, zero_stage=1, sequence_parallel=True)  # ZeRO-1 with nothing to shard
    out = render("torchtitan-0.2", LLAMA70B, fp8, one_rank)
    doc = tomllib.loads(out.text)
    assert doc["model"] == {"name": "llama3", "flavor": "70B", "converters": ["quantize.linear.float8"]}
    assert doc["parallelism"]["data_parallel_shard_degree"] == doc["parallelism"]["data_parallel_replicate_degree"] == 1
    assert any("moot" in note for note in out.notes)


def test_exports_of_nvfp4_and_bf16_last_layers() -> None:
    """fp4 is Megatron's --fp4-format e2m1 --fp4-recipe nvfp4; the bf16 layers are the end ones of
    --first-last-layers-bf16 (Megatron) or the float8 converter's filter_fqns (torchtitan 0.2);
    targets without NVFP4 say so."""
    fp4 = JobSpec(global_batch_size=1024, seq_len=4096, dtype="fp4", bf16_last_layers=12)
    config = mesh(tp=8, pp=2, dp=8, sequence_parallel=True)
    ns = megatron_parser().parse_args(megatron_args(LLAMA70B, fp4, config))
    assert ns.bf16 and ns.fp4 == "e2m1" and ns.fp4_recipe == "nvfp4" and ns.fp8_format is None
    assert ns.first_last_layers_bf16 and (ns.num_layers_at_start_in_bf16, ns.num_layers_at_end_in_bf16) == (0, 12)
    fp8 = JobSpec(global_batch_size=64, seq_len=4096, dtype="fp8", bf16_last_layers=2)
    doc = tomllib.loads(render("torchtitan-0.2", LLAMA70B, fp8, mesh(tp=8, pp=1, dp=1)).text)
    assert doc["quantize"]["linear"]["float8"]["filter_fqns"] == ["output", "layers.78.", "layers.79."]
    mx = fp8.model_copy(update={"fp8_scaling": "block"})  # the LM head stays bf16 under either converter
    doc = tomllib.loads(render("torchtitan-0.2", LLAMA70B, mx, mesh(tp=8, pp=1, dp=1)).text)
    assert doc["quantize"]["linear"]["mx"]["filter_fqns"] == ["output", "layers.78.", "layers.79."]
    with pytest.raises(PlannerError, match="bf16_last_layers 2 on a MoE model"):
        render("torchtitan-0.2", QWEN3_MOE, fp8.model_copy(update={"mtp_layers": 0}), mesh(dp=8, ep=8))
    with pytest.raises(PlannerError, match=r"torchtitan 0\.2 has no NVFP4 converter"):
        render("torchtitan-0.2", LLAMA70B, fp4.model_copy(update={"stack": "torchtitan"}), mesh(tp=8, pp=1, dp=1))
    # torchtitan 0.3 trains Llama-3 8B in NVFP4 through one config function, its last 5 layers in bf16
    llama8b, titan_fp4 = load_model("llama3-8b"), fp4.model_copy(update={"stack": "torchtitan", "bf16_last_layers": 5})
    assert "--config llama3_8b_first_85_pct_layers_nvfp4" in render("torchtitan", llama8b, titan_fp4, mesh(dp=8)).text
    with pytest.raises(PlannerError, match="use --bf16-last-layers 5"):
        render("torchtitan", llama8b, titan_fp4.model_copy(update={"bf16_last_layers": 0}), mesh(dp=8))
    with pytest.raises(PlannerError, match="llama3 70B in fp4"):
        render("torchtitan", LLAMA70B, titan_fp4, mesh(tp=8, pp=1, dp=1))
    with pytest.raises(PlannerError, match="bf16_last_layers 2: llama3_8b_mxfp8 converts the linears"):
        render("torchtitan", load_model("llama3-8b"), fp8.model_copy(update={"fp8_scaling": "block"}), mesh(dp=8))
    with pytest.raises(PlannerError, match="--dtype fp4"):
        render("deepspeed", LLAMA70B, fp4, mesh(dp=64))


def _flags(argv: list[str]) -> dict[str, list[str]]:
    """torchtitan 0.3 overrides as flag -> values (a boolean flag has none); the subcommand last."""
    flags: dict[str, list[str]] = {}
    for token in argv[:-1]:
        if token.startswith("--"):
            flags[token] = []
            last = token
        else:
            flags[last].append(token)
    return flags


def test_torchtitan_03_overrides_say_every_degree_and_the_split() -> None:
    argv = torchtitan_args(DSV3, TITAN_JOB, TORCHTITAN_CASES[-1][1])  # tp 8, pp 4 x 2, ep 8, ZeRO-3
    assert argv[-1] == "activation_checkpoint:full" and argv[:4] == ["--module", "deepseek_v3", "--config",
                                                                      "deepseek_v3_671b"]  # fmt: skip
    flags = _flags(argv)
    p = "--parallelism."
    degrees = [flags[p + k][0] for k in ("data_parallel_shard_degree", "tensor_parallel_degree",
                                         "pipeline_parallel_degree", "context_parallel_degree",
                                         "expert_parallel_degree")]  # fmt: skip
    assert degrees == ["4", "8", "4", "1", "8"] and flags[p + "data_parallel_replicate_degree"] == ["1"]
    parts = [v.split(",") for v in flags[p + "module_fqns_per_model_part"]]
    assert [n for part in parts for n in part] == ["tok_embeddings", *[f"layers.{i}" for i in range(61)], "norm",
                                                   "lm_head"]  # fmt: skip
    assert flags[p + "pipeline_parallel_schedule"] == ["Interleaved1F1B"]
    assert "--training.disable_cuda_graphs" in flags and "--compile.no_enable" in flags
    # even split (DualPipeV: 2 x 2 halves of 20): layers per stage, no embedding/head weight; TP without SP;
    # CP on the partial_dtensor backend
    config = mesh(tp=2, pp=2, dp=4, cp=2, zero_stage=3, schedule="dualpipev")
    even = _flags(torchtitan_args(LLAMA70B, TITAN_JOB, config))
    assert even[p + "pipeline_parallel_layers_per_stage"] == ["20"] and even[p + "pipeline_parallel_schedule"] == [
        "DualPipeV"
    ]
    assert even[p + "pipeline_parallel_first_stage_less_layers"] == even[p + "pipeline_parallel_last_stage_less_layers"]
    assert p + "no_enable_sequence_parallel" in even and even[p + "spmd_backend"] == ["partial_dtensor"]
    replicas = _flags(torchtitan_args(LLAMA70B, TITAN_JOB, mesh(dp=64, zero_stage=0)))
    assert replicas[p + "data_parallel_replicate_degree"] == ["64"] and replicas[p + "data_parallel_shard_degree"] == [
        "1"
    ]
    assert "--training.disable_cuda_graphs" not in replicas


def test_torchtitan_03_fp8_picks_the_config_function_that_builds_its_converters() -> None:
    row = FP8.model_copy(update={"fp8_scaling": "row", "mtp_layers": 0})
    block = FP8.model_copy(update={"fp8_scaling": "block"})
    assert torchtitan_args(LLAMA405B, row, mesh(tp=8, pp=8, dp=4, zero_stage=3))[3] == "llama3_405b"
    assert torchtitan_args(DSV3, row, mesh(pp=8, dp=8, ep=8, zero_stage=3))[3] == "deepseek_v3_671b_float8"
    assert torchtitan_args(load_model("llama3-8b"), block, mesh(dp=64, zero_stage=3))[3] == "llama3_8b_mxfp8"
    out = render("torchtitan", load_model("llama3-8b"), block, mesh(dp=64, zero_stage=3), header="h")
    assert out.text.startswith("# h\n") and any("torchao" in n for n in out.notes)


# ---- DeepSpeed ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        mesh(dp=64, micro_batch_size=2, zero_stage=3, recompute="full"),
        mesh(dp=32, micro_batch_size=1, zero_stage=2, overlap_grad_reduce=False),
        mesh(pp=4, dp=16, micro_batch_size=4, zero_stage=1, recompute="full"),
        mesh(pp=2, dp=8, zero_stage=1, overlap_grad_reduce=False),
    ],
)
def test_deepspeed_json_round_trip(config: ParallelConfig) -> None:
    out = render("deepspeed", LLAMA70B, DS_JOB, config, header="ignored: JSON has no comments")
    ds = json.loads(out.text)
    assert ds == deepspeed_config(LLAMA70B, DS_JOB, config)
    b, gas = ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]
    assert b == config.micro_batch_size and ds["train_batch_size"] == JOB.batch_size
    assert ds["train_batch_size"] == b * gas * config.dp  # config-json.md: batch = micro * accumulation * dp
    assert ds["zero_optimization"]["stage"] == config.zero_stage
    assert ds["bf16"] == {"enabled": True} and ds["fp16"] == {"enabled": False}
    assert ("activation_checkpointing" in ds) == (config.recompute == "full")
    if config.zero_stage >= 1:  # ZeRO-1 and 2 run overlap_comm alike (zero/stage_1_and_2.py); its default is off
        assert ds["zero_optimization"]["overlap_comm"] == config.overlap_grad_reduce
    if config.pp > 1:
        assert any(f"num_stages={config.pp}" in note for note in out.notes)
        assert ds.get("pipeline") == ({"activation_checkpoint_interval": 1} if config.recompute == "full" else None)


def test_deepspeed_zero3_names_the_moe_block_a_leaf() -> None:
    """ZeRO-3 of a MoE model whose HF block calls only the routed experts (DeepSeek-V3 skips an
    expert with no tokens, Mixtral loops over the experts hit) names that block in
    zero_optimization.leaf_module.classes; ZeRO-1 and dense models, and GPT-OSS (one fused expert
    parameter), write no leaf; a MoE model of no known type gets a note instead."""
    z3 = mesh(dp=64, zero_stage=3, recompute="full")
    leaf = {
        name: render("deepspeed", model, DS_JOB.model_copy(update={"mtp_layers": 0}), z3)
        for name, model in [("dsv3", DSV3), ("mixtral", MIXTRAL), ("llama", LLAMA70B),
                            ("gpt-oss", load_model("gpt-oss-120b")),
                            ("custom", MIXTRAL.model_copy(update={"model_type": None, "name": "my-moe"}))]
    }  # fmt: skip
    zero = {name: json.loads(out.text)["zero_optimization"] for name, out in leaf.items()}
    assert zero["dsv3"]["leaf_module"] == {
        "classes": ["transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3MoE"]
    }
    assert zero["mixtral"]["leaf_module"] == {
        "classes": ["transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock"]
    }
    assert all("leaf_module" not in zero[name] for name in ("llama", "gpt-oss", "custom"))
    assert [note for note in leaf["custom"].notes if "leaf_module" in note] == [
        "name your MoE block in zero_optimization.leaf_module.classes: my-moe (no model type) has no Hugging Face "
        "block the export knows, and a block that calls only the experts its tokens chose changes ZeRO-3's traced "
        "fetch order every step; as a leaf it is gathered whole, as the plan priced"
    ]
    known = ("dsv3", "mixtral", "llama", "gpt-oss")
    assert not any("leaf_module" in note for name in known for note in leaf[name].notes)
    z1 = json.loads(render("deepspeed", MIXTRAL, DS_JOB, mesh(dp=64, zero_stage=1)).text)
    assert "leaf_module" not in z1["zero_optimization"]


def test_deepspeed_refuses_a_split_its_partition_methods_cannot_make() -> None:
    """Priced on megatron-core, whose split balances the last stage (80 layers on 4 stages:
    [20, 20, 21, 19]), the mesh cannot be partitioned so by PipelineModule: refused, naming both."""
    config = mesh(pp=4, dp=16, micro_batch_size=4, zero_stage=1)
    with pytest.raises(PlannerError, match=r"the plan splits the decoder layers \[20, 20, 21, 19\], which no"):
        render("deepspeed", LLAMA70B, JOB, config)
    assert render("deepspeed", LLAMA70B, DS_JOB, config).text  # the deepspeed stack plans [20, 20, 20, 20]


# ---- refusals ----------------------------------------------------------------------------------

FP16 = JobSpec(global_batch_size=1024, seq_len=4096, dtype="fp16")
FP8 = JobSpec(global_batch_size=1024, seq_len=4096, dtype="fp8")
ODD_SEQ = JobSpec(global_batch_size=1024, seq_len=4098)

REFUSALS = [
    ("megatron", LLAMA70B, JOB, mesh(tp=8, pp=2, dp=8, schedule="gpipe"), "--schedule gpipe"),
    ("megatron", LLAMA70B, JOB, mesh(tp=8, pp=2, dp=8, schedule="zb-h1"), "--schedule zb-h1"),
    ("megatron", LLAMA70B, JOB, mesh(tp=8, pp=2, dp=8, zero_stage=3), "--zero-stage 3 with pp 2"),
    ("megatron", LLAMA70B, JOB, mesh(tp=8, pp=2, dp=8, order="dp-tp-cp-pp"), "--order dp-tp-cp-pp"),
    ("megatron", MIXTRAL, FP16, mesh(tp=2, pp=2, dp=8, ep=8, sequence_parallel=True), "--ep > 1 with --dtype fp16"),
    ("megatron", MIXTRAL, JOB, mesh(tp=2, pp=2, dp=8, ep=8), "no sequence parallelism"),
    ("torchtitan-0.2", LLAMA70B, JOB, mesh(tp=8, pp=2, dp=8, zero_stage=1), "--zero-stage 1"),
    ("torchtitan-0.2", LLAMA70B, JOB, mesh(tp=8, pp=2, dp=8, zero_stage=0), "--zero-stage 0 with tp, pp or cp"),
    ("torchtitan-0.2", LLAMA70B, JOB, mesh(dp=32, cp=4, zero_stage=0), "--zero-stage 0 with cp"),
    ("torchtitan-0.2", LLAMA70B, FP16, mesh(dp=128, zero_stage=3), "--dtype fp16"),
    ("torchtitan-0.2", LLAMA70B, JOB, mesh(tp=8, pp=2, dp=8, zero_stage=3, schedule="zb-h1"), "--schedule zb-h1"),
    ("torchtitan-0.2", LLAMA70B, JOB, mesh(tp=8, pp=2, dp=8, zero_stage=3, order="tp-dp-cp-pp"), "--order"),
    ("torchtitan-0.2", LLAMA70B, ODD_SEQ, mesh(tp=2, dp=64, zero_stage=3), "seq_len 4098"),
    ("torchtitan-0.2", QWEN3_MOE, JOB, mesh(tp=4, dp=32, ep=4, expert_tp=2, zero_stage=3), "--expert-tp 2"),
    ("torchtitan-0.2", QWEN3_MOE, JOB, mesh(pp=2, dp=8, ep=8, zero_stage=1), "pp 2 for qwen3"),
    ("torchtitan-0.2", DSV3, JOB_NO_MTP, mesh(dp=8, cp=2, ep=8, zero_stage=3), "cp 2 for deepseek_v3"),
    ("torchtitan-0.2", QWEN3_MOE, JOB, mesh(dp=16, cp=8, ep=2, zero_stage=3), "--ep 2"),
    ("torchtitan", QWEN3_MOE, JOB, mesh(tp=2, dp=16, ep=8, expert_tp=2, zero_stage=3), "--expert-tp 2"),
    ("torchtitan", QWEN3_MOE, JOB, mesh(tp=2, dp=8, ep=4, zero_stage=0, sequence_parallel=True), "--ep 4"),
    (
        "torchtitan",
        LLAMA70B,
        JOB,
        mesh(tp=8, pp=4, dp=4, zero_stage=3, recompute="full", recompute_layers=4),
        "--recompute-layers 4",
    ),
    ("torchtitan", LLAMA405B, JOB, mesh(tp=8, pp=8, dp=4, zero_stage=3), "llama3 405B in bf16"),
    ("torchtitan", QWEN3_235B, JOB, mesh(dp=64, ep=16, zero_stage=3), "qwen3 235B-A22B in bf16"),
    ("torchtitan", LLAMA70B, FP8, mesh(tp=8, dp=16, zero_stage=3), "llama3 70B in fp8-tensor"),
    ("torchtitan", LLAMA70B, ODD_SEQ, mesh(tp=4, dp=32, zero_stage=3, sequence_parallel=True), "seq_len 4098"),
    ("torchtitan", LLAMA70B, JOB, mesh(tp=8, dp=16, zero_stage=1), "--zero-stage 1"),
    ("torchtitan", DSV3, JOB, mesh(pp=8, dp=8, ep=8, zero_stage=3), "MTP layer"),
    ("torchtitan", MIXTRAL, JOB, mesh(dp=8, ep=8, zero_stage=3), "model mixtral-8x7b"),
    ("deepspeed", LLAMA70B, JOB, mesh(tp=8, dp=16, zero_stage=3), "--tp 8"),
    ("deepspeed", LLAMA70B, JOB, mesh(cp=2, dp=64, zero_stage=3), "--cp 2"),
    ("deepspeed", MIXTRAL, JOB, mesh(dp=64, ep=8, zero_stage=1), "--ep 8"),
    ("deepspeed", LLAMA70B, JOB, mesh(dp=128, recompute="selective"), "--recompute selective"),
    ("deepspeed", LLAMA70B, FP8, mesh(dp=128), "--dtype fp8"),
    ("deepspeed", LLAMA70B, JOB, mesh(pp=4, dp=32, zero_stage=2), "--zero-stage 2 with pp 4"),
    ("deepspeed", LLAMA70B, JOB, mesh(pp=4, dp=32, virtual_stages=2), "--schedule interleaved-1f1b"),
    ("deepspeed", LLAMA70B, JOB, mesh(pp=4, dp=32, order="tp-cp-pp-dp"), "--order tp-cp-pp-dp"),
    # a bf16 pipeline without ZeRO runs DeepSpeed's BF16_Optimizer, which shards the optimizer over dp
    ("deepspeed", LLAMA70B, DS_JOB, mesh(pp=2, dp=8, zero_stage=0), "--zero-stage 0 with pp 2 in bf16"),
    ("deepspeed", LLAMA70B, JobSpec(global_batch_size=1000, seq_len=4096), mesh(dp=128), "global batch 1000"),
]


@pytest.mark.parametrize(("fmt", "model", "job", "config", "knob"), REFUSALS)
def test_refusals_name_the_knob_in_one_line(
    fmt: str, model: ModelSpec, job: JobSpec, config: ParallelConfig, knob: str
) -> None:
    with pytest.raises(PlannerError) as err:
        export(fmt, model, job, config)
    message = str(err.value)
    assert message.startswith(f"{fmt} cannot express ") and knob in message and "\n" not in message


def test_unknown_format_is_refused() -> None:
    with pytest.raises(PlannerError, match=r"not one of megatron, torchtitan, torchtitan-0\.2, deepspeed"):
        export("nemo", LLAMA70B, JOB, mesh(dp=128))
    assert FORMATS == ("megatron", "torchtitan", "torchtitan-0.2", "deepspeed")


# ---- CLI ---------------------------------------------------------------------------------------

GIVEN = ("-m", "llama70b", "-c", "dgx-h100x16", "-B", "512", "--tp", "8", "--pp", "2", "--dp", "8")


def test_cli_given_mesh_megatron(cli) -> None:
    r = cli("export", "-f", "megatron", *GIVEN, "--sequence-parallel", "-z", "1", "--recompute", "selective")
    assert r.code == 0, r.err
    assert r.out.startswith("# plan export --format megatron: llama3-70b on dgx-h100x16 (128 GPUs), tp8 pp2 dp8")
    body = " ".join(line.removesuffix(" \\") for line in r.out.splitlines() if not line.startswith("#"))
    ns = megatron_parser().parse_args(shlex.split(body))
    assert (ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.global_batch_size) == (8, 2, 512)
    assert ns.use_distributed_optimizer and ns.recompute_granularity == "selective" and ns.sequence_parallel
    assert r.err.startswith("plan export: tp8 pp2 dp8 cp1 ep1 mbs1 v1 z1 selective sp 1f1b")


def test_cli_deepspeed_stdout_is_pure_json_and_notes_go_to_stderr(cli) -> None:
    r = cli("export", "-f", "deepspeed", "-m", "llama8b", "-c", "dgx-h100x2", "-B", "64", "--tp", "1", "--cp", "1")
    assert r.code == 0, r.err
    ds = json.loads(r.out)
    assert ds["train_batch_size"] == 64
    assert ds["train_batch_size"] % (ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"]) == 0
    assert "plan export:" in r.err and "{" not in r.err


def test_cli_search_exports_the_best_mesh_the_target_can_express(cli) -> None:
    # Megatron-FSDP does not run with pp > 1, so a ZeRO-2/3 winner is skipped for the best ZeRO-0/1 mesh.
    r = cli("export", "-f", "megatron", "-m", "llama70b", "-c", "dgx-h100x16", "-B", "512", "--tp", "8", "--pp", "4")
    assert r.code == 0, r.err
    ns = megatron_parser().parse_args(
        shlex.split(" ".join(line.removesuffix(" \\") for line in r.out.splitlines() if not line.startswith("#")))
    )
    assert ns.tensor_model_parallel_size == 8 and ns.pipeline_model_parallel_size == 4 and not ns.use_megatron_fsdp
    if "skipped" in r.err:
        assert "megatron cannot express --zero-stage" in r.err


def test_cli_out_writes_the_file_and_nothing_to_stdout(cli, tmp_path) -> None:
    target = tmp_path / "job.toml"
    r = cli(
        "export",
        "-f",
        "torchtitan-0.2",
        "-m",
        "llama8b",
        "-c",
        "dgx-h100x2",
        "-B",
        "64",
        "-z",
        "3",
        "--out",
        str(target),
    )
    assert r.code == 0, r.err
    assert r.out == "" and f"wrote {target}" in r.err
    doc = tomllib.loads(target.read_text())
    par = doc["parallelism"]
    degrees = [par[k] for k in ("tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree")]
    assert par["data_parallel_shard_degree"] * degrees[0] * degrees[1] * degrees[2] == 16
    assert par["fsdp_reshard_after_forward"] == "always"
    assert list(tmp_path.iterdir()) == [target]  # no temporary file left behind


def test_cli_refusal_and_missing_format_are_one_line_errors(cli) -> None:
    r = cli("export", "-f", "megatron", *GIVEN, "--schedule", "gpipe")
    assert_one_line_error(r, "stack megatron-core runs no gpipe pipeline schedule")
    assert r.out == ""
    assert_one_line_error(cli("export", "-m", "llama70b", "-c", "dgx-h100x16"), "--format")


def test_cli_export_module_imports_in_either_order() -> None:
    # planner.cli imports its command modules, which register themselves; importing the command's
    # module first must register it once too.
    code = (
        "import planner.cli.export, planner.cli; "
        "assert [c.name for c in planner.cli.app.registered_commands].count('export') == 1"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_cli_exports_the_batch_the_mesh_runs_when_it_may_grow(cli) -> None:
    args = ("-m", "llama8b", "-c", "dgx-h100x2", "-B", "1000", "--max-batch-growth", "0.05", "--tp", "1", "--cp", "1")
    r = cli("export", "-f", "deepspeed", *args, "--pp", "1", "--dp", "16")
    assert r.code == 0, r.err
    ds = json.loads(r.out)
    assert (
        ds["train_batch_size"] == 1008 == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 16
    )
    assert "grown from 1000 to 1008" in r.err


def test_bf16_adam_moments_price_and_export_as_megatrons_precision_aware_optimizer(cli) -> None:
    from planner.pricing import estimate_mesh

    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100")
    fp32 = JobSpec(global_batch_size=64, seq_len=4096)
    bf16 = fp32.model_copy(update={"optimizer_state_bytes_per_param": 8.0})
    config = ParallelConfig(dp=8, zero_stage=1)
    a, b = estimate_mesh(model, cluster, fp32, config), estimate_mesh(model, cluster, bf16, config)
    assert b.memory_breakdown_bytes.optimizer == pytest.approx(a.memory_breakdown_bytes.optimizer * 8 / 12)
    # Adam reads and writes its whole state, plus the gradient read and the bf16 weight write
    assert b.time_breakdown_s.optimizer == pytest.approx(a.time_breakdown_s.optimizer * (16 + 4) / (24 + 4))
    args = megatron_args(model, bf16, config)
    at = args.index("--use-precision-aware-optimizer")
    assert args[at + 1 : at + 5] == ["--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
    assert "--use-precision-aware-optimizer" not in megatron_args(model, fp32, config)
    parsed = megatron_parser().parse_args(args)
    assert parsed.use_precision_aware_optimizer and parsed.exp_avg_dtype == "bf16"
    with pytest.raises(PlannerError, match=r"torchtitan-0.2 cannot express 8 bytes of optimizer state per parameter"):
        torchtitan_config(model, bf16.model_copy(update={"stack": "torchtitan"}), ParallelConfig(dp=8, zero_stage=3))
    r = cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--adam-moments", "fp16")
    assert_one_line_error(r, "--adam-moments 'fp16': allowed fp32, bf16")


def test_megatron_export_writes_the_architecture_the_plan_priced() -> None:
    """tests/test_frameworks.py builds these with Megatron-Core itself; here, the flags."""
    p = megatron_parser()

    def parsed(name: str):  # type: ignore[no-untyped-def]
        model = load_model(name)
        config = ParallelConfig(dp=8, ep=8 if model.is_moe else 1)
        return p.parse_args(megatron_args(model, default_job(model, global_batch_size=8), config))

    llama = parsed("llama3-70b")
    assert (llama.hidden_size, llama.ffn_hidden_size, llama.num_attention_heads, llama.num_query_groups) == (
        8192, 28672, 64, 8,
    )  # fmt: skip
    assert llama.group_query_attention and llama.swiglu and llama.untie_embeddings_and_output_weights
    assert (llama.normalization, llama.position_embedding_type, llama.disable_bias_linear) == ("RMSNorm", "rope", True)
    gpt3 = parsed("gpt3-175b")  # GELU, LayerNorm with biases, learned positions, tied embeddings
    assert not (gpt3.swiglu or gpt3.group_query_attention or gpt3.untie_embeddings_and_output_weights)
    assert (gpt3.normalization, gpt3.position_embedding_type, gpt3.disable_bias_linear) == (
        "LayerNorm", "learned_absolute", False,
    )  # fmt: skip
    ds = parsed("deepseek-v3")
    assert ds.multi_latent_attention and (ds.q_lora_rank, ds.kv_lora_rank, ds.qk_head_dim, ds.v_head_dim) == (
        1536, 512, 128, 128,
    )  # fmt: skip
    assert (ds.num_experts, ds.moe_router_topk, ds.moe_layer_freq) == (256, 8, "([0]*3+[1]*58)")
    # MLA's latent norms (q_a_layernorm, kv_a_layernorm) exist in Megatron-Core only with qk_layernorm;
    # DeepSeek's and Qwen3's norms take 1e-6 (config.json rms_norm_eps), Llama's Megatron's default 1e-5
    assert ds.qk_layernorm and not llama.qk_layernorm and (ds.norm_epsilon, llama.norm_epsilon) == (1e-6, 1e-5)
    assert parsed("qwen3-30b-a3b").norm_epsilon == 1e-6
    assert eval(ds.moe_layer_freq) == [0] * 3 + [1] * 58  # as arguments.py's moe_freq_type evaluates it
    # its node-limited routing (HF n_group 8, topk_group 4), which a flex dispatch is priced with
    assert (ds.moe_router_num_groups, ds.moe_router_group_topk) == (8, 4)
    assert llama.moe_router_num_groups is None and parsed("qwen3-30b-a3b").moe_router_num_groups is None
    assert ds.window_size is None and ds.softmax_type == "vanilla"
    # GPT-OSS as Megatron-Bridge's GPTOSSProvider builds it: a 128-token window on every second
    # layer (window_attn_skip_freq 2: one full layer after each sliding one), learnable sinks,
    # biases, quick-GEGLU with offset 1 and clamp 7
    oss = parsed("gpt-oss-120b")
    assert (oss.window_size, oss.window_attn_skip_freq, oss.softmax_type) == ((128, 0), "2", "learnable")
    assert oss.quick_geglu and not oss.swiglu and (oss.glu_linear_offset, oss.activation_func_clamp_value) == (1.0, 7.0)
    assert not oss.disable_bias_linear and (oss.num_experts, oss.moe_router_topk, oss.kv_channels) == (128, 4, 64)
    assert oss.attention_backend == "fused"  # cuDNN fused attention takes the sink (Stack.sink_attention)
    # NeMo 25.09's TE 2.7 predates sinks: Megatron's own attention runs them (what Bridge falls back to)
    model = load_model("gpt-oss-120b")
    old = default_job(model, global_batch_size=8, stack="megatron-core-25.09")
    assert p.parse_args(megatron_args(model, old, ParallelConfig(dp=8, ep=8))).attention_backend == "local"
    mistral = parsed("mistral-7b")  # every layer slides: no skip pattern
    assert (mistral.window_size, mistral.window_attn_skip_freq, mistral.softmax_type) == ((4096, 0), None, "vanilla")
    # Llama 4 Maverick: MoE on every second layer from layer 1, dense 16384-wide MLPs between, one
    # shared expert as wide as the routed ones, RoPE skipped on every 4th (the unchunked) layer
    mav = parsed("llama4-maverick")
    assert (mav.moe_layer_freq, eval(mav.moe_layer_freq)) == ("([0]*1+[1]*1)*24", [0, 1] * 24)
    assert (mav.ffn_hidden_size, mav.moe_ffn_hidden_size, mav.moe_shared_expert_intermediate_size) == (
        16384, 8192, 8192,
    )  # fmt: skip
    assert (mav.no_rope_freq, parsed("llama4-scout").moe_layer_freq, llama.no_rope_freq) == ("4", None, None)


def test_torchtitan_builds_its_flavor_and_refuses_models_it_has_not() -> None:
    doc = tomllib.loads(render("torchtitan-0.2", QWEN3_MOE, JOB, mesh(dp=8, ep=8, zero_stage=3)).text)
    assert doc["model"] == {"name": "qwen3", "flavor": "30B-A3B"}
    with pytest.raises(ExportRefusalError, match="no model of its shape") as err:
        render("torchtitan-0.2", MIXTRAL, JOB, mesh(dp=8, ep=8, zero_stage=3))
    assert not err.value.mesh_bound  # no other mesh of the job would export: the CLI says so at once
    # the layers of a flavor are not the model: a llama3 flavor builds Llama 3's vocabulary and RoPE base
    # and no window, so Mistral-7B (and Llama-2-70B) had been exported as another model (a review)
    for name, said in (
        ("mistral-7b", "llama3 8B has its layers but not its vocabulary 32,000 (it builds 128,256), RoPE base "
         "10000 (500000), a 4096-token sliding window"),
        ("llama2-70b", "llama3 70B has its layers but not its vocabulary 32,000"),
    ):  # fmt: skip
        with pytest.raises(ExportRefusalError, match=re.escape(said)) as err:
            render("torchtitan-0.2", load_model(name), JOB, mesh(dp=8, zero_stage=3))
        assert not err.value.mesh_bound


def test_cli_export_refuses_what_would_not_run_and_finds_what_would(cli) -> None:  # type: ignore[no-untyped-def]
    # DeepSpeed: the open search's best meshes use TP; the export finds one DeepSpeed runs
    ds = cli("export", "-f", "deepspeed", "-m", "llama70b", "-c", "dgx-h100x16")
    assert ds.code == 0 and json.loads(ds.out)["train_batch_size"] > 0, ds.err
    # a model torchtitan does not build: refused at once, no advice to pin mesh knobs
    mixtral = cli("export", "-f", "torchtitan", "-m", "mixtral-8x7b", "-c", "dgx-h100x4")
    assert_one_line_error(mixtral, "torchtitan cannot express model mixtral-8x7b", "no model of its shape")
    assert "pin" not in mixtral.err
    # tp, pp and dp pinned without --zero-stage: the target stack's stage (torchtitan's FSDP), not 0
    titan = cli("export", "-f", "torchtitan-0.2", *GIVEN)
    assert titan.code == 0 and 'fsdp_reshard_after_forward = "always"' in titan.out, titan.err
    titan03 = cli("export", "-f", "torchtitan", *GIVEN)
    assert titan03.code == 0 and "--parallelism.fsdp_reshard_after_forward always" in titan03.out, titan03.err
    # a mesh predicted not to fit is refused unless asked for
    args = ("-f", "deepspeed", "-m", "llama70b", "-c", "dgx-h100x8", "--tp", "1", "--pp", "4", "--dp", "16", "-z", "1")
    oom = cli("export", *args, "--recompute", "full")
    assert_one_line_error(oom, "needs 106.1 GiB per GPU", "--ignore-memory")
    forced = cli("export", *args, "--recompute", "full", "--ignore-memory")
    assert forced.code == 0 and "warning: does not fit" in forced.err


# ---- launch commands ---------------------------------------------------------------------------


def _launch(out: str) -> tuple[list[str], Any]:
    """The lines before the torchrun command, and the command parsed by torch's own torchrun parser."""
    from torch.distributed.run import get_args_parser

    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.removeprefix("srun ").startswith("torchrun"))
    words = shlex.split(" ".join(line.removesuffix(" \\") for line in lines[start:]))
    return lines[:start], get_args_parser().parse_args(words[words.index("torchrun") + 1 :])


LAUNCHES = [
    ("megatron", (), "pretrain_gpt.py", False),
    ("torchtitan", (), "torchtitan.train", True),
    ("torchtitan-0.2", ("--out", "job.toml"), "torchtitan.train", True),
    ("deepspeed", ("--out", "ds.json"), "$TRAIN_SCRIPT", False),
]


@pytest.mark.parametrize(("fmt", "extra", "entry", "module"), LAUNCHES)
def test_cli_launcher_starts_the_plan_on_its_nodes(cli, tmp_path, fmt: str, extra: tuple[str, ...], entry: str,
                                                   module: bool) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    pytest.importorskip("torch.distributed.run")
    extra = tuple(str(tmp_path / e) if e.endswith((".toml", ".json")) else e for e in extra)
    # torchtitan trains bf16 with TP or PP only under FSDP (Stack.amp_through_sharding): dp 2 there
    meshes = {"deepspeed": ("1", "1", "16"), "megatron": ("8", "2", "1")}
    tp, pp, dp = meshes.get(fmt, ("4", "2", "2"))
    mesh_args = ("--tp", tp, "--pp", pp, "--dp", dp)
    r = cli("export", "-f", fmt, "-m", "llama3-8b", "-c", "dgx-h100x2", "-B", "64", *mesh_args, *extra,
            "--launcher", "torchrun")  # fmt: skip
    assert r.code == 0, r.err
    before, run = _launch(r.out)
    assert (run.nnodes, run.nproc_per_node, run.rdzv_backend, run.rdzv_endpoint) == ("2", "8", "c10d",
                                                                                     "$MASTER_ADDR:29500")  # fmt: skip
    assert (run.training_script, run.module) == (entry, module)
    args = run.training_script_args
    if fmt == "megatron":  # tp 8: Megatron's environment, and the exported arguments as Megatron reads them
        assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in before
        ns = megatron_parser().parse_args(args)
        assert (ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size) == (8, 2)
    else:
        assert not any(line.startswith("export ") for line in before)
    if fmt == "torchtitan":
        assert args[:4] == ["--module", "llama3", "--config", "llama3_8b"] and args[-1].startswith("activation_")
    if extra:  # the file the settings were written to
        assert args[-1] == extra[-1] and (tmp_path / extra[-1]).exists()


def test_cli_slurm_asks_for_the_nodes_and_gpus_and_srun_s_torchrun(cli) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch.distributed.run")
    r = cli("export", "-f", "torchtitan", "-m", "llama70b", "-c", "dgx-h100x16", *GIVEN[4:], "--launcher", "slurm")
    assert r.code == 0, r.err
    before, run = _launch(r.out[r.out.index("#!/bin/bash") :])
    assert before[:4] == [
        "#!/bin/bash",
        "#SBATCH --nodes=16",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
    ]
    assert any(line.startswith("export MASTER_ADDR=$(scontrol show hostnames") for line in before)
    assert (run.nnodes, run.nproc_per_node, run.module, run.training_script) == ("16", "8", True, "torchtitan.train")


FAKE_SLURM = {
    "scontrol": 'for i in $(seq 0 $((SLURM_NNODES - 1))); do echo "tray$i"; done\n',
    # srun: the command once per node, as Slurm starts it there (its own $SLURM_NODEID)
    "srun": 'for i in $(seq 0 $((SLURM_NNODES - 1))); do SLURM_NODEID=$i "$@" || exit 1; done\n',
    # torchrun: what it was started with on this node, NUL-separated
    "torchrun": 'printf "%s\\0" "$@" > "$RUN_DIR/node$SLURM_NODEID"\n',
}


def _run_sbatch(script: str, nodes: int, tmp_path) -> list[list[str]]:  # type: ignore[no-untyped-def]
    """Run an exported sbatch script under bash with stand-ins for srun, scontrol and torchrun;
    each node's torchrun arguments as the shell passed them."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKE_SLURM.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "job.sh").write_text(script)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_NNODES": str(nodes),
           "SLURM_JOB_NODELIST": f"tray[0-{nodes - 1}]", "RUN_DIR": str(tmp_path)}  # fmt: skip
    done = subprocess.run(["bash", str(tmp_path / "job.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [(tmp_path / f"node{i}").read_text().split("\0")[:-1] for i in range(nodes)]


def test_nvl72_launch_runs_torchrun_per_tray_in_the_plan_s_host_order(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch.distributed.run")
    from torch.distributed.run import get_args_parser

    mesh = ("--tp", "4", "--pp", "1", "--dp", "32")
    r = cli("export", "-f", "megatron", "-m", "llama3-8b", "-c", "gb200-nvl72x2", "--gpus", "128", *mesh,
            "--launcher", "slurm")  # fmt: skip
    assert r.code == 0, r.err
    script = r.out[r.out.index("#!/bin/bash") :]
    head = script.splitlines()[:5]
    # 128 GPUs of two racks: 32 trays of 4, 16 trays (64 GPUs) of each rack (ClusterSpec.fast_domain_gpus)
    assert head[1:] == ["#SBATCH --nodes=32", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=4",
                        "#SBATCH --segment=16"]  # fmt: skip
    # Blackwell: Megatron-LM no longer asks for one CUDA connection with tp > 1 (validate_args), and
    # the notes above the script no longer say it does
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in r.out
    runs = _run_sbatch(script, 32, tmp_path)
    exported = megatron_parser()
    for node, argv in enumerate(runs):
        run = get_args_parser().parse_args(argv)
        # the static rendezvous: node i is the i-th tray in Slurm's order, ranks 4i..4i+3
        assert (run.nnodes, run.nproc_per_node, run.node_rank) == ("32", "4", node)
        assert (run.master_addr, run.master_port, run.rdzv_backend) == ("tray0", 29500, "static")
        assert run.training_script == "pretrain_gpt.py"
        ns = exported.parse_args(run.training_script_args)
        assert (ns.tensor_model_parallel_size, ns.micro_batch_size) == (4, 1)
        assert run.training_script_args == runs[0][runs[0].index("pretrain_gpt.py") + 1 :]

    # without Slurm: the same flags with the host's place in $NODE_RANK, said in the header
    r = cli("export", "-f", "megatron", "-m", "llama3-8b", "-c", "gb200-nvl72x2", "--gpus", "128", *mesh,
            "--launcher", "torchrun")  # fmt: skip
    before, run = _launch(r.out.replace('"$NODE_RANK"', "7"))  # as the shell expands it on host 7
    assert (run.nnodes, run.nproc_per_node, run.node_rank, run.master_addr) == ("32", "4", 7, "$MASTER_ADDR")
    assert '--node-rank "$NODE_RANK"' in r.out
    assert any("NODE_RANK its place, 0-31, hosts 16 at a time from one rack" in line for line in before)


@pytest.mark.parametrize(("gpus", "segment"), [("144", "18"), ("64", "16"), ("100", None)])
def test_nvl72_segments_follow_the_plan_s_placement(cli, gpus: str, segment: str | None) -> None:  # type: ignore[no-untyped-def]
    # whole racks keep each rack whole (18 trays); one rack's 64 GPUs are 16 trays of it; 100 GPUs
    # (25 trays) are no whole number of 16-tray segments, so Slurm is not asked for any
    r = cli("export", "-f", "megatron", "-m", "llama3-8b", "-c", "gb200-nvl72x2", "--gpus", gpus, "--tp", "1",
            "--pp", "1", "--dp", gpus, "-B", gpus, "--launcher", "slurm")  # fmt: skip
    assert r.code == 0, r.err
    lines = r.out[r.out.index("#!/bin/bash") :].splitlines()
    assert f"#SBATCH --nodes={int(gpus) // 4}" in lines
    assert [line for line in lines if line.startswith("#SBATCH --segment")] == (
        [f"#SBATCH --segment={segment}"] if segment else []
    )
    if segment is None:
        assert any("25 hosts are no whole number of such segments" in line for line in lines)


def test_a_dgx_launch_keeps_c10d_and_no_segment(cli) -> None:  # type: ignore[no-untyped-def]
    from planner.export.launch import segment_hosts

    assert segment_hosts(load_cluster("dgx-h100x16"), 128) is None  # a host is the whole NVLink domain
    assert segment_hosts(load_cluster("gb200-nvl72x2"), 144) == 18
    r = cli("export", "-f", "megatron", "-m", "llama3-8b", "-c", "dgx-h100x2", "--tp", "8", "--pp", "1", "--dp", "2",
            "--launcher", "slurm")  # fmt: skip
    assert "--segment" not in r.out and "--rdzv-backend c10d" in r.out and "bash -c" not in r.out
    bad = cli("export", "-f", "megatron", "-m", "llama3-8b", "-c", "gb200-nvl72x2", "--gpus", "130", "--tp", "1",
              "--pp", "1", "--dp", "130", "-B", "130", "--launcher", "torchrun")  # fmt: skip
    assert_one_line_error(bad, "--launcher: 130 GPUs do not fill nodes of 4")


def test_launcher_refusals_are_one_line(cli) -> None:  # type: ignore[no-untyped-def]
    from planner.export.launch import node_split

    r = cli("export", "-f", "deepspeed", "-m", "llama3-8b", "-c", "dgx-h100x2", "--launcher", "torchrun")
    assert_one_line_error(r, "--launcher with --format deepspeed needs --out FILE")
    assert "plan export:" not in r.err  # refused before the search
    assert node_split(4, 8) == (1, 4) and node_split(32, 8) == (4, 8)
    with pytest.raises(PlannerError, match="12 GPUs do not fill nodes of 8"):
        node_split(12, 8)
    assert_one_line_error(cli("export", "-f", "megatron", *GIVEN, "--launcher", "mpirun"), "--launcher")


def test_megatron_exports_what_its_startup_checks_ask_for_or_refuses(cli) -> None:  # type: ignore[no-untyped-def]
    """The export review's cases, each a Megatron-LM startup failure before: the fp8 recipe (delayed
    scaling, the default, refuses layernorm and moe_act recompute), grouped GEMMs for every MoE
    (moe_act recompute needs them; without them SequentialMLP loops over experts), the distributed
    optimizer under bf16 moments; and what Megatron cannot run at all, refused."""
    llama8, oss = load_model("llama3-8b"), load_model("gpt-oss-120b")
    one = ParallelConfig(tp=1, pp=1, dp=8)
    for scaling, recipe in (("tensor", "tensorwise"), ("block", "mxfp8")):
        job = JobSpec(global_batch_size=64, seq_len=4096, dtype="fp8", fp8_scaling=scaling)
        ns = megatron_parser().parse_args(megatron_args(llama8, job, one))
        assert (ns.fp8_recipe, ns.fp8_format) == (recipe, "hybrid")
    # block scaling is MXFP8 where the GPU has its tensor cores and Transformer Engine's 128-element
    # tiles (Float8BlockScaling, 'blockwise') on Hopper and GB202, which have none
    block = JobSpec(global_batch_size=64, seq_len=4096, dtype="fp8", fp8_scaling="block")
    for cluster, recipe in (("dgx-b200", "mxfp8"), ("dgx-h100", "blockwise"), ("rtx-pro-6000", "blockwise")):
        ns = megatron_parser().parse_args(megatron_args(llama8, block, one, load_cluster(cluster)))
        assert ns.fp8_recipe == recipe, cluster
    refusal = cli("export", "-f", "torchtitan", "-m", "llama3-8b", "-c", "dgx-h100", "--dtype", "fp8",
                  "--fp8-scaling", "block")  # fmt: skip
    assert_one_line_error(refusal, "torchao's MXFP8, which needs data-centre Blackwell")
    assert cli("export", "-f", "torchtitan", "-m", "llama3-8b", "-c", "dgx-b200", "--dtype", "fp8",
               "--fp8-scaling", "block").code == 0  # fmt: skip
    # a torchtitan plan's row-wise fp8 (a Megatron-Core job cannot state it: Stack.fp8_scalings)
    row = JobSpec(global_batch_size=64, seq_len=4096, dtype="fp8", fp8_scaling="row", stack="torchtitan")
    with pytest.raises(PlannerError, match="fp8 scaling 'row'"):
        megatron_args(llama8, row, one)
    with pytest.raises(PlannerError, match="stack megatron-core scales fp8 per tensor or block"):
        JobSpec(global_batch_size=64, seq_len=4096, dtype="fp8", fp8_scaling="row")
    job = JobSpec(global_batch_size=64, seq_len=4096)
    assert megatron_parser().parse_args(megatron_args(oss, job, ParallelConfig(dp=8, ep=8))).moe_grouped_gemm
    assert "--moe-grouped-gemm" not in megatron_args(llama8, job, one)
    bf16_moments = JobSpec(global_batch_size=64, seq_len=4096, optimizer_state_bytes_per_param=8.0)
    with pytest.raises(PlannerError, match="Adam moments in bf16 with --zero-stage 0"):
        megatron_args(llama8, bf16_moments, one)
    ns = megatron_parser().parse_args(megatron_args(llama8, bf16_moments, ParallelConfig(tp=8, pp=1, dp=1)))
    assert ns.use_precision_aware_optimizer and ns.use_distributed_optimizer  # one rank: ZeRO-0 as priced
    with pytest.raises(ValueError, match="flex dispatcher does not pad"):  # the schema, as every JobSpec rule
        JobSpec(global_batch_size=64, seq_len=4096, moe_dispatcher="flex", moe_capacity_factor=1.0)
    assert_one_line_error(cli("export", "-f", "megatron", "-m", "bloom-176b", "-c", "dgx-a100-80gx48"), "ALiBi")
    pins = ("--tp", "1", "--pp", "1", "--dp", "8", "--cp", "2", "--zero-stage", "3")
    fp8_moe = cli("export", "-f", "torchtitan-0.2", "--dtype", "fp8", "-m", "qwen3-30b-a3b", "-c", "dgx-h100x2", *pins)
    assert_one_line_error(fp8_moe, "float8 experts with pp 1, cp 2")


def test_megatron_writes_the_checkpoints_router() -> None:
    """The router decides which model trains (not its cost): DeepSeek-V3's sigmoid scores with
    the aux-loss-free expert bias and a 2.5 scale, Nemotron 3's the same at 2.5 and 5.0, Llama 4's
    top-1 sigmoid weight on the expert's input; softmax routers renormalised over the top k need no
    flag, an unnormalised one (DeepSeek-V2's) pre-softmax; what Megatron-Core cannot build is refused.
    (tests/test_frameworks.py reads each back from the TransformerConfig Megatron-LM builds.)"""
    job = JobSpec(global_batch_size=64, seq_len=4096)

    def router(model: ModelSpec) -> list[str]:
        args = megatron_args(model, job, ParallelConfig(dp=8, ep=8))
        return [a for i, a in enumerate(args) if "router" in a or "probs" in a or "router" in args[i - 1]]

    assert router(load_model("deepseek-v3"))[:5] == [
        "--moe-router-topk", "8", "--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias"
    ]  # fmt: skip
    assert "--moe-router-topk-scaling-factor 2.5" in " ".join(router(load_model("deepseek-v3")))
    assert "--moe-router-topk-scaling-factor 5" in " ".join(router(load_model("nemotron-3-super-120b-a12b")))
    assert router(load_model("llama4-scout")) == [
        "--moe-router-topk", "1", "--moe-router-score-function", "sigmoid", "--moe-apply-probs-on-input",
        "--moe-router-load-balancing-type", "aux_loss",  # its config.json's router_aux_loss_coef 0.001
    ]  # fmt: skip
    # Qwen3-MoE's load-balancing loss (config.json router_aux_loss_coef 0.001), then its router alone
    args = " ".join(megatron_args(load_model("qwen3-30b-a3b"), job, ParallelConfig(dp=8, ep=8)))
    assert "--moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 0.001" in args
    qwen = load_model("qwen3-30b-a3b").model_copy(update={"router_aux_loss_coef": None})
    assert router(qwen) == ["--moe-router-topk", "8"]
    v2 = qwen.model_copy(update={"norm_topk_prob": False, "routed_scaling_factor": 16.0})
    assert router(v2) == [
        "--moe-router-topk",
        "8",
        "--moe-router-pre-softmax",
        "--moe-router-topk-scaling-factor",
        "16",
    ]
    for update, refusal in (
        ({"scoring_func": "sqrtsoftplus"}, "router score function 'sqrtsoftplus'"),
        ({"router_expert_bias": True}, "expert bias on softmax scores"),
        ({"scoring_func": "sigmoid", "norm_topk_prob": False}, "unnormalised sigmoid top-8 weights"),
    ):
        with pytest.raises(ExportRefusalError, match=refusal):
            megatron_args(qwen.model_copy(update=update), job, ParallelConfig(dp=8, ep=8))


def test_megatron_writes_the_checkpoints_rope_or_says_what_it_cannot() -> None:
    """RoPE decides which model trains, not its cost: Llama 3's base, Llama 3.1's llama3 scaling
    (Megatron fixes all but the factor), DeepSeek-V3's YaRN on MLA; GPT-OSS's YaRN on standard
    attention, a base Megatron's int argument cannot take, or an unstated one are notes."""
    from planner.export.megatron import megatron_notes, rope_args

    assert rope_args(load_model("llama3-70b")) == (["--rotary-base", "500000"], None)
    assert rope_args(load_model("llama3-405b"))[0] == [
        "--rotary-base", "500000", "--use-rope-scaling", "--rope-scaling-factor", "8"
    ]  # fmt: skip
    assert rope_args(load_model("deepseek-v3"))[0][2:] == [
        "--rope-type", "yarn", "--rotary-scaling-factor", "40", "--mscale", "1", "--mscale-all-dim", "1"
    ]  # fmt: skip
    oss = load_model("gpt-oss-120b")
    assert rope_args(oss)[0] == ["--rotary-base", "150000"]
    job, mesh = JobSpec(global_batch_size=64, seq_len=4096), ParallelConfig(dp=8, ep=8)
    assert any(
        "RoPE scaling (yarn, factor 32.0) has no Megatron-LM argument" in n for n in megatron_notes(oss, job, mesh)
    )
    llama = load_model("llama3-8b")
    other = {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0}
    assert "(llama3, factor 16.0) has no Megatron-LM argument" in str(
        rope_args(llama.model_copy(update={"rope_scaling": {**other, "original_max_position_embeddings": 8192}}))[1]
    )
    assert rope_args(llama.model_copy(update={"rope_theta": 10000.5}))[0] == []
    assert "set --rotary-base" in str(rope_args(load_model("llama4-maverick"))[1])  # its base left unstated
    scout = rope_args(load_model("llama4-scout"))  # Llama 4 scaling: high frequency factor 1, where Megatron fixes 4
    assert scout[0] == ["--rotary-base", "500000"] and "(llama3, factor 16.0) has no Megatron-LM argument" in str(
        scout[1]
    )
    assert rope_args(load_model("gpt3-175b")) == ([], None)  # learned positions


def test_hf_configs_state_rope_as_either_transformers_release_writes_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from planner.hf_config import model_from_hf_config

    base = {
        "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072,
    }  # fmt: skip
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}  # fmt: skip
    four = model_from_hf_config({**base, "rope_theta": 500000.0, "rope_scaling": scaling}, "l", "l")
    five = model_from_hf_config({**base, "rope_parameters": {"rope_theta": 500000.0, **scaling}}, "l", "l")
    assert (four.rope_theta, four.rope_scaling) == (five.rope_theta, five.rope_scaling) == (500000.0, scaling)
    plain = model_from_hf_config({**base, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}, "l", "l")
    assert (plain.rope_theta, plain.rope_scaling) == (10000.0, None)


def test_moe_expert_dp_keeps_the_distributed_optimizer_at_dp_one() -> None:
    """At dp*cp = 1 a MoE mesh whose experts are not split over every tp rank still shards their
    optimizer state over expert-DP (tp*cp*dp / (ep*expert_tp)): the export keeps the distributed
    optimizer the price counted on, and the ZeRO rules apply (constraints.shards_nothing)."""
    from planner.constraints import check_config, shards_nothing

    mixtral = load_model("mixtral-8x7b")
    job = default_job(mixtral)
    config = ParallelConfig(tp=8, pp=4, dp=1, ep=2, zero_stage=1, sequence_parallel=True)
    assert config.expert_dp == 4 and not shards_nothing(mixtral.is_moe, config)
    args = megatron_args(mixtral, job, config)
    assert "--use-distributed-optimizer" in args and "--overlap-grad-reduce" in args
    dense = ParallelConfig(tp=8, pp=4, dp=1, zero_stage=1, sequence_parallel=True)
    assert shards_nothing(load_model("llama3-70b").is_moe, dense)
    assert "--use-distributed-optimizer" not in megatron_args(load_model("llama3-70b"), job, dense)
    zero2 = ParallelConfig(tp=8, pp=4, dp=1, ep=1, zero_stage=2, sequence_parallel=True)
    with pytest.raises(PlannerError, match="at most ZeRO-1 with pipeline parallelism"):
        check_config(mixtral, load_cluster("dgx-h100x4"), job, zero2)


def test_an_order_torchtitan_cannot_place_is_named_by_the_open_search(cli) -> None:
    """Every mesh of a search shares the pinned rank order, so no other mesh would do: the open
    search named the first mesh's other refusal (--recompute-layers 8), never the order."""
    r = cli("export", "--model", "llama3-8b", "--cluster", "dgx-h100x2", "-f", "torchtitan", "--order", "pp-dp-cp-tp")
    assert_one_line_error(r, "torchtitan cannot express --order pp-dp-cp-tp")


@pytest.mark.parametrize(("pins", "named"), [(("--ep", "8"), "--ep 8"), (("--cp", "2", "--ep", "8"), "--cp 2")])
def test_a_pinned_degree_deepspeed_lacks_is_named_before_any_mesh(cli, pins: tuple[str, ...], named: str) -> None:
    """Every mesh shares a pinned degree: --ep 8 had been refused as the first mesh's --tp 2, a
    degree the user never gave, with 'so do the other best meshes'."""
    r = cli("export", "-f", "deepspeed", "--model", "mixtral-8x7b", "--cluster", "dgx-h100x2", *pins)
    assert_one_line_error(r, f"deepspeed cannot express {named}: ")
    assert "--tp" not in r.err and "other best meshes" not in r.err


def test_an_export_whose_degrees_fit_nothing_says_why_the_open_search_was_refused(cli) -> None:
    """8B at 64K tokens on 16 H100 fits at tp 4, which a DeepSpeed config cannot write; at tp 1 nothing
    fits. The export had said only 'no mesh fits in memory ... try more GPUs' (a review, 2026-12-07)."""
    r = cli("export", "-f", "deepspeed", "--stack", "deepspeed", "--model", "llama3.1-8b", "--cluster", "dgx-h100x2",
            "-s", "65536", "-B", "64")  # fmt: skip
    assert_one_line_error(
        r, "deepspeed cannot write the open search's meshes (deepspeed cannot express --tp ", "and with --tp 1",
        "no mesh fits in memory",
    )  # fmt: skip


def test_interleaving_groups_reach_every_megatron_export_and_no_torchtitan_one(cli) -> None:
    """A hybrid's pattern path returned before the group size was written (Megatron's default pp
    would leave a last group of 2 < pp and raise); torchtitan's Interleaved1F1B runs its own
    rounds, max(1, m // pp), and refuses an m they do not divide."""
    r = cli("export", "-f", "megatron", "--model", "nemotron-h-8b", "--cluster", "dgx-h100", "--tp", "2",
            "--pp", "4", "-v", "2", "-B", "10")  # fmt: skip
    assert r.code == 0, r.err
    assert "--microbatch-group-size-per-virtual-pipeline-stage 5" in " ".join(r.out.split())
    r = cli("export", "-f", "torchtitan", "--stack", "megatron-core", "--model", "llama3-8b", "--cluster",
            "dgx-h100x1", "--pp", "4", "-v", "2", "-B", "11")  # fmt: skip
    assert_one_line_error(r, "torchtitan cannot express interleaved-1f1b over 11 micro-batches with pp 4",
                          "runs max(1, m // pp) = 2 rounds")  # fmt: skip
    # 10 micro-batches over pp 4 make 2 rounds of 5, which torch runs (tests/test_frameworks.py runs 8 over pp 3)
    r = cli("export", "-f", "torchtitan", "--stack", "megatron-core", "--model", "llama3-8b", "--cluster",
            "dgx-h100x1", "--pp", "4", "-v", "2", "-B", "10")  # fmt: skip
    assert r.code == 0, r.err


def test_megatron_core_grows_the_batch_to_pp_micro_batches_where_allowed(cli) -> None:
    """Interleaving needs at least pp micro-batches on Megatron-Core: a 3-sequence batch over pp 4
    grows to 4 within --max-batch-growth 0.5 (as it did before groups), and is refused with the
    growth it would need without it."""
    args = ("estimate", "--model", "llama3-70b", "--cluster", "dgx-h100x4", "--tp", "8", "--pp", "4", "--dp", "1",
            "-v", "2", "-B", "3")  # fmt: skip
    r = cli(*args, "--max-batch-growth", "0.5", "--json")
    assert r.code == 0, r.err
    assert (r.json()["config"]["job"]["global_batch_size"], r.json()["num_microbatches"]) == (4, 4)
    assert_one_line_error(cli(*args), "needs at least pp 4 micro-batches (got 3)", "the nearest batch it runs is 4")


@pytest.mark.parametrize("fmt", ["torchtitan", "torchtitan-0.2"])
def test_the_selective_recompute_note_speaks_only_where_the_plan_priced_another_policy(fmt: str) -> None:
    """torchtitan's op policy is what --stack torchtitan prices (stacks/torchtitan.yaml:
    selective_recompute alternate_matmuls); a Megatron-priced plan recomputed the attention core."""
    model = load_model("llama3-8b")
    config = ParallelConfig(dp=64, zero_stage=3, recompute="selective")
    said = {}
    for stack in ("torchtitan", "megatron-core"):
        job = default_job(model, global_batch_size=64, stack=stack)
        said[stack] = [n for n in render(fmt, model, job, config).notes if "attention core" in n]
    assert said["torchtitan"] == [] and len(said["megatron-core"]) == 1
    assert "megatron-core's selective recompute" in said["megatron-core"][0]


def test_more_chunks_than_layers_export_through_a_layout_with_embedding_and_loss_chunks() -> None:
    """Llama-3.1-405B's 126 layers on pp 16 x v 8 = 128 chunks: the plan's layout gives the embedding
    and the loss a chunk each, which Megatron-Core's validate_layer_layout takes; the export had
    refused every such mesh ('at most one per layer'), the open search's winner on 64 DGX-H100."""
    model = load_model("llama3-405b")
    job = default_job(model, global_batch_size=256)
    config = ParallelConfig(
        tp=4, pp=16, dp=2, cp=4, virtual_stages=8, schedule="interleaved-1f1b", sequence_parallel=True
    )
    args = megatron_args(model, job, config)
    layout = args[args.index("--pipeline-model-parallel-layout") + 1]
    assert layout == "E|(t|)*126L"
    layers = pytest.importorskip("megatron.core.transformer.pipeline_parallel_layer_layout")
    megatron = layers.PipelineParallelLayerLayout(layout, pipeline_model_parallel_size=16)
    megatron.validate_layer_layout(num_layers=126, mtp_num_layers=None)
    assert megatron.virtual_pipeline_model_parallel_size == 8


def test_fp8_parameters_are_exported_where_they_were_priced() -> None:
    """--fp8-param-gather where memory.fp8_parameters priced fp8 weights (a sharded optimizer with
    something to shard), with --reuse-grad-buf-for-mxfp8-param-ag for MXFP8 under the distributed
    optimizer (its bf16 gather, as priced); none at dp 1, which runs plain DDP."""
    model = load_model("llama3-70b")

    def argv(cluster: str, scaling: str, **pins: Any) -> list[str]:
        job = JobSpec(global_batch_size=64, seq_len=4096, dtype="fp8", fp8_scaling=scaling)
        return megatron_args(model, job, ParallelConfig(**pins), load_cluster(cluster))

    mx = argv("dgx-b200x8", "block", tp=8, pp=2, dp=4, zero_stage=1)
    assert mx[mx.index("--fp8-recipe") + 1] == "mxfp8"
    assert "--fp8-param-gather" in mx and "--reuse-grad-buf-for-mxfp8-param-ag" in mx
    assert megatron_parser().parse_args(mx).reuse_grad_buf_for_mxfp8_param_ag
    cs = argv("dgx-h100x8", "tensor", tp=8, pp=2, dp=4, zero_stage=1)
    assert "--fp8-param-gather" in cs and "--reuse-grad-buf-for-mxfp8-param-ag" not in cs
    alone = argv("dgx-h100x8", "tensor", tp=8, pp=8, dp=1, zero_stage=1)
    assert "--fp8-param-gather" not in alone and "--use-distributed-optimizer" not in alone


def test_exports_say_what_the_launch_line_changes_from_the_plan() -> None:
    """An export review (2026-12-07): what the plan priced and the framework runs by default differ."""
    from planner.export.megatron import megatron_notes
    from planner.export.torchtitan import torchtitan_notes
    from planner.export.torchtitan03 import torchtitan_args_notes

    mixtral = load_model("mixtral-8x7b")
    ep = mesh(tp=2, dp=16, ep=8, sequence_parallel=True, zero_stage=1)
    # Megatron's --moe-aux-loss-coeff defaults to 0: the model's own coefficient is written (Mixtral's
    # config.json: 0.02), and a model stating none is told to set one
    args = " ".join(megatron_args(mixtral, JOB, ep))
    assert "--moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 0.02" in args
    assert not any("--moe-aux-loss-coeff is 0" in n for n in megatron_notes(mixtral, JOB, ep))
    unstated = mixtral.model_copy(update={"router_aux_loss_coef": None})
    assert "--moe-aux-loss-coeff" not in megatron_args(unstated, JOB, ep)
    notes = " ".join(megatron_notes(unstated, JOB, ep))
    assert "default --moe-aux-loss-coeff is 0" in notes and "states no coefficient" in notes
    dsv3_mesh = mesh(tp=8, pp=4, dp=4, ep=8, zero_stage=1, sequence_parallel=True)
    dsv3_said = " ".join(megatron_notes(DSV3, JOB, dsv3_mesh) + megatron_args(DSV3, JOB, dsv3_mesh))
    assert "--moe-aux-loss-coeff" not in dsv3_said  # its expert bias balances
    # force-balanced routing trains no model: said where the flag is written
    balanced = JOB.model_copy(update={"moe_load_imbalance": 1.0})
    assert "--moe-router-force-load-balancing" in megatron_args(mixtral, balanced, ep)
    assert any("trains no model" in n for n in megatron_notes(mixtral, balanced, ep))
    assert not any("trains no model" in n for n in megatron_notes(mixtral, JOB, ep))
    # torchtitan's llama3 flavors scale RoPE as Llama 3.1: said for Llama 3, not for Llama 3.1
    dense = mesh(dp=8, zero_stage=3)
    for notes_of in (torchtitan_notes, torchtitan_args_notes):
        assert any("scale RoPE as Llama 3.1 does" in n for n in notes_of(load_model("llama3-8b"), JOB_NO_MTP, dense))
        assert not any("RoPE" in n for n in notes_of(load_model("llama3.1-8b"), JOB_NO_MTP, dense))
    # torchtitan 0.3's runtime differs from the 0.2-era runs its calibration rests on
    assert any("FlexAttention" in n for n in torchtitan_args_notes(load_model("llama3.1-8b"), JOB_NO_MTP, dense))


def test_a_deepspeed_export_names_why_no_searched_mesh_fits(cli) -> None:
    """The search's best meshes carried the plan's own uneven split as a Megatron layout string,
    which the DeepSpeed export refused as '--pipeline-layout', a flag nobody gave: a stack that
    takes no layout gets none written, and the refusal is that of the best mesh within
    DeepSpeed's degrees (its partition cannot reproduce the plan's split)."""
    from planner.search import default_job, search

    model = load_model("deepseek-v3")
    ranking = search(model, load_cluster("gb200-nvl72x2"), default_job(model, stack="deepspeed"), {}, top=3)
    assert all(c.config.parallel.pipeline_layout is None for c in ranking.candidates)
    r = cli("export", "-f", "deepspeed", "-m", "deepseek-v3", "-c", "gb200-nvl72x2")
    assert_one_line_error(r, "no PipelineModule partition_method reproduces", "with --tp 1, --cp 1, --ep 1")
    assert "--pipeline-layout" not in r.err


def test_the_gradient_format_is_a_job_option_priced_and_exported(cli) -> None:  # type: ignore[no-untyped-def]
    """Megatron-LM's default keeps an fp32 main_grad; the megatron-core stack runs Megatron-Bridge's
    --grad-reduce-in-bf16. --gradient-dtype had no option (a review, 2026-12-07: JobSpec.gradient_dtype
    was library-only), so a Megatron-LM user's 8B on one DGX H100 was priced with half its gradients."""
    args = ("--model", "llama3-8b", "--cluster", "dgx-h100x1", "--dp", "8")
    bf16, fp32 = (cli("estimate", *args, *extra, "--json").json() for extra in ((), ("--gradient-dtype", "fp32")))
    params = 8_030_261_248
    assert bf16["memory_breakdown_bytes"]["gradients"] == 2 * params
    assert fp32["memory_breakdown_bytes"]["gradients"] == 4 * params
    assert "--grad-reduce-in-bf16" in cli("export", "-f", "megatron", *args).out
    assert "--grad-reduce-in-bf16" not in cli("export", "-f", "megatron", *args, "--gradient-dtype", "fp32").out


def test_each_target_keeps_the_gradients_in_the_format_the_plan_priced() -> None:
    # a review (2026-12-08): fp32 gradients of an fp16 model went out as Megatron's fp16 default, fp16
    # ones of a bf16 model as its fp32, and DeepSpeed's JSON dropped the format altogether
    config = mesh(tp=8, pp=2, dp=8)

    def megatron(**job: Any) -> list[str]:
        return shlex.split(export("megatron", LLAMA70B, JOB.model_copy(update=job), config).replace("\\\n", " "))

    assert "--accumulate-allreduce-grads-in-fp32" in megatron(dtype="fp16", gradient_dtype="fp32")
    fp16 = megatron(dtype="fp16")  # the stack's 16-bit reduce runs in the fp16 parameters' format
    assert JOB.model_copy(update={"dtype": "fp16"}).gradient_format == "fp16"
    assert "--grad-reduce-in-bf16" not in fp16 and "--accumulate-allreduce-grads-in-fp32" not in fp16
    assert "--grad-reduce-in-bf16" in megatron()  # the Megatron-Core stack's bf16 reduce
    assert "--grad-reduce-in-bf16" not in megatron(gradient_dtype="fp32")  # --bf16's own default
    for job, said in (
        ({"gradient_dtype": "fp16"}, "fp16 gradients of a bf16 model"),
        ({"dtype": "fp16", "gradient_dtype": "bf16"}, "bf16 gradients of an fp16 model"),
    ):
        with pytest.raises(ExportRefusalError, match=said):
            megatron(**job)
    fsdp = mesh(tp=8, pp=1, dp=16, zero_stage=3)
    text = export("megatron", LLAMA70B, JOB.model_copy(update={"dtype": "fp16", "gradient_dtype": "bf16"}), fsdp)
    assert "--grad-reduce-in-bf16" in text  # Megatron-FSDP's grad_comm_dtype

    ds_mesh = mesh(dp=128, zero_stage=2)
    doc = json.loads(export("deepspeed", LLAMA70B, DS_JOB.model_copy(update={"gradient_dtype": "fp32"}), ds_mesh))
    assert doc["communication_data_type"] == "fp32" and doc["data_types"] == {"grad_accum_dtype": "fp32"}
    assert "communication_data_type" not in json.loads(export("deepspeed", LLAMA70B, DS_JOB, ds_mesh))
    with pytest.raises(ExportRefusalError, match="fp32 gradients of a bf16 model without ZeRO"):
        export("deepspeed", LLAMA70B, DS_JOB.model_copy(update={"gradient_dtype": "fp32"}), mesh(dp=128, zero_stage=0))
    with pytest.raises(ExportRefusalError, match="fp16 gradients of a bf16 model"):
        export("deepspeed", LLAMA70B, DS_JOB.model_copy(update={"gradient_dtype": "fp16"}), ds_mesh)

    with pytest.raises(ExportRefusalError, match="accepts only float32"):
        export("torchtitan-0.2", LLAMA70B, TITAN_JOB.model_copy(update={"gradient_dtype": "bf16"}), ds_mesh)
