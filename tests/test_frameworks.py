"""Issue 14: exports checked by the frameworks' own code (the `frameworks` extra).

Megatron: the sizes `plan export --format megatron` writes go through Megatron-Core's own
``parallel_state.initialize_model_parallel`` (on torch's fake process-group backend, in a
subprocess: tests/frameworks/megatron_groups.py), and every group a rank lands in (TP, PP, DP,
CP, DP x CP, EP, expert-TP, expert-DP) must be the group the planner priced for it: the rank
placement of ``planner.validate.worker`` (``mesh_rank_tensor``, ``expert_rank_groups``), which the
cost model's link tiers assume. A mesh Megatron refuses must be refused by the export first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("megatron.core", reason="the frameworks extra: pip install '.[frameworks]'")
pytest.importorskip("tyro", reason="torchtitan's dependencies (the frameworks extra)")
pytest.importorskip("deepspeed", reason="the frameworks extra")

from planner.catalog import load_model
from planner.cost.flops import mtp_layers
from planner.cost.layout import parse_layout
from planner.cost.pipeline import chunk_layer_counts
from planner.errors import PlannerError
from planner.export import megatron_args, render
from planner.export.common import effective_zero_stage
from planner.export.megatron import hybrid_layer_pattern
from planner.schemas import JobSpec, ParallelConfig
from planner.search import default_job
from planner.validate.schemas import ReplicaMesh
from planner.validate.worker import expert_rank_groups, mesh_rank_tensor

SCRIPT = Path(__file__).parent / "frameworks" / "megatron_groups.py"
MODEL_SCRIPT = Path(__file__).parent / "frameworks" / "megatron_model.py"
TORCHTITAN_SCRIPT = Path(__file__).parent / "frameworks" / "torchtitan_config.py"
DEEPSPEED_SCRIPT = Path(__file__).parent / "frameworks" / "deepspeed_config.py"

MESHES: list[tuple[str, dict[str, Any]]] = [
    ("llama3-70b", dict(tp=4, pp=2, dp=4)),
    ("llama3-70b", dict(tp=8, pp=4, dp=2, virtual_stages=5)),
    ("llama3-70b", dict(tp=2, pp=2, dp=2, cp=2)),
    ("llama3-70b", dict(tp=2, pp=4, dp=4, order="tp-cp-pp-dp")),
    ("llama3-8b", dict(tp=1, pp=1, dp=8, cp=2)),
    ("qwen3-30b-a3b", dict(tp=1, pp=2, dp=8, ep=8)),
    ("qwen3-30b-a3b", dict(tp=2, pp=2, dp=4, ep=4, expert_tp=2)),
    ("qwen3-30b-a3b", dict(tp=2, pp=2, dp=4, ep=8)),
    ("qwen3-235b-a22b", dict(tp=2, pp=4, dp=4, cp=2, ep=8, virtual_stages=2)),
    ("qwen3-235b-a22b", dict(tp=2, pp=2, dp=4, cp=2, ep=4, order="tp-cp-pp-dp")),
    ("deepseek-v3", dict(tp=1, pp=8, dp=8, ep=8, virtual_stages=2)),
]
"""Dense, MoE with EP (folded into TP x CP x DP, with and without expert-TP), CP, interleaved
pipelines, and both rank orders Megatron-LM has."""

REFUSED = [("qwen3-30b-a3b", dict(tp=2, pp=2, dp=4, ep=4, order="tp-cp-pp-dp"))]
"""MoE under --use-tp-pp-dp-mapping with ep x expert_tp != tp x cp: Megatron-Core asserts."""


def _config(pins: dict[str, Any]) -> ParallelConfig:
    schedule = {"schedule": "interleaved-1f1b"} if pins.get("virtual_stages", 1) > 1 else {}
    return ParallelConfig(**{"sequence_parallel": pins.get("tp", 1) > 1, **schedule, **pins})


def _flag(args: list[str], flag: str, default: int) -> int:
    return int(args[args.index(flag) + 1]) if flag in args else default


def _megatron_case(model_name: str, config: ParallelConfig) -> dict[str, Any]:
    """The sizes Megatron-LM reads from the exported argv (arguments.py defaults where the export
    writes none: expert-TP = TP, EP = 1; virtual stages from --num-layers-per-virtual-pipeline-stage
    or the layout), and the ranks to check: first, middle and last."""
    model = load_model(model_name)
    args = megatron_args(model, default_job(model, global_batch_size=config.dp * 64), config)
    tp = _flag(args, "--tensor-model-parallel-size", 1)
    world = config.num_gpus
    return {
        "world": world,
        "tp": tp,
        "pp": _flag(args, "--pipeline-model-parallel-size", 1),
        "vp": config.virtual_stages,
        "cp": _flag(args, "--context-parallel-size", 1),
        "ep": _flag(args, "--expert-model-parallel-size", 1),
        "expert_tp": _flag(args, "--expert-tensor-parallel-size", tp),
        "tp_pp_dp_mapping": "--use-tp-pp-dp-mapping" in args,
        "ranks": sorted({0, world // 2 + 1, world - 1}),
    }


def _planner_groups(config: ParallelConfig, rank: int) -> dict[str, list[int]]:
    mesh = ReplicaMesh(
        tp=config.tp, pp=config.pp, dp=config.dp, cp=config.cp, ep=config.ep, expert_tp=config.expert_tp,
        order=config.order,
    )  # fmt: skip
    ranks = mesh_rank_tensor(mesh)[0]  # (pp, dp, cp, tp)
    ((p, d, c, t),) = np.argwhere(ranks == rank)
    out = {
        "tp": ranks[p, d, c, :],
        "pp": ranks[:, d, c, t],
        "dp": ranks[p, :, c, t],
        "cp": ranks[p, d, :, t],
        "dp_cp": ranks[p, :, :, t].reshape(-1),
    }
    groups = {k: sorted(int(r) for r in v) for k, v in out.items()}
    for axis in ("ep", "etp", "edp"):
        groups[axis] = sorted(next(g for g in expert_rank_groups(mesh, axis) if rank in g))
    return groups


def _run_megatron(cases: list[dict[str, Any]], script: Path = SCRIPT) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, str(script)], input=json.dumps(cases), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def megatron() -> list[dict[str, Any]]:
    configs = [_config(pins) for _, pins in MESHES]
    cases = [_megatron_case(name, config) for (name, _), config in zip(MESHES, configs, strict=True)]
    refused = [dict(_megatron_case_unchecked(name, _config(pins))) for name, pins in REFUSED]
    return _run_megatron(cases + refused)


def _megatron_case_unchecked(model_name: str, config: ParallelConfig) -> dict[str, Any]:
    """The sizes of a mesh the export refuses, as a user would type them into Megatron-LM."""
    return {
        "world": config.num_gpus, "tp": config.tp, "pp": config.pp, "vp": config.virtual_stages, "cp": config.cp,
        "ep": config.ep, "expert_tp": config.expert_tp, "tp_pp_dp_mapping": config.order == "tp-cp-pp-dp",
        "ranks": [0],
    }  # fmt: skip


@pytest.mark.parametrize("index", range(len(MESHES)), ids=[f"{m}-{p}" for m, p in MESHES])
def test_megatron_places_every_rank_where_the_plan_priced_it(megatron, index: int) -> None:  # type: ignore[no-untyped-def]
    name, pins = MESHES[index]
    result = megatron[index]
    assert "error" not in result, f"Megatron-Core refused {name} {pins}: {result.get('error')}"
    config = _config(pins)
    # a dense model has no expert layers: Megatron's expert groups (expert-TP defaults to TP) are unused
    axes = ("tp", "pp", "dp", "cp", "dp_cp") + (("ep", "etp", "edp") if load_model(name).is_moe else ())
    for rank, groups in result.items():
        planned = _planner_groups(config, int(rank))
        assert {a: groups[a] for a in axes} == {a: planned[a] for a in axes}, f"rank {rank} of {name} {pins}"


@pytest.mark.parametrize("index", range(len(REFUSED)))
def test_a_placement_megatron_refuses_is_refused_by_the_export(megatron, index: int) -> None:  # type: ignore[no-untyped-def]
    name, pins = REFUSED[index]
    assert "data parallel size of the attention and moe layers" in megatron[len(MESHES) + index]["error"]
    model = load_model(name)
    with pytest.raises(PlannerError, match="expert"):
        megatron_args(model, default_job(model), _config(pins))


ARCHITECTURES = [
    "llama3-8b", "llama3-70b", "gpt3-175b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b",
]  # fmt: skip
"""GQA + SwiGLU + RMSNorm + RoPE, untied; GPT-3's MHA, GELU, LayerNorm with biases, learned positions,
tied; top-2 of 8 experts; Qwen3's 128 experts with q/k norms; DeepSeek-V3's MLA, shared expert,
three dense layers first (a config check: see megatron_model.py); GPT-OSS's biases everywhere (the
router's too), learnable sinks, a 128-token window on every second layer and its quick-GEGLU."""


def test_the_exported_architecture_builds_the_model_the_plan_priced() -> None:
    cases = []
    for name in ARCHITECTURES:
        model = load_model(name)
        config = _config(dict(dp=8, ep=8 if model.is_moe else 1))
        cases.append(
            {"argv": megatron_args(model, default_job(model, global_batch_size=8), config), "vocab": model.vocab_size}
        )
    built = _run_megatron(cases, MODEL_SCRIPT)
    for name, result in zip(ARCHITECTURES, built, strict=True):
        model = load_model(name)
        assert "error" not in result, f"Megatron-Core refused {name}'s architecture: {result['error']}"
        if model.is_mla:
            assert result == {"config": "checked"}
        else:  # the same parameters, to the last one
            assert result["params"] == model.parameter_counts.total, name


TORCHTITAN_MESHES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("llama3-70b", dict(tp=4, pp=2, dp=4, zero_stage=3), {}),
    ("llama3-70b", dict(tp=8, pp=4, dp=4, virtual_stages=2, zero_stage=3, recompute="selective"), {"dtype": "fp8"}),
    ("llama3-70b", dict(dp=32, cp=4, micro_batch_size=2, zero_stage=2, recompute="full"), {}),
    ("llama3-8b", dict(dp=64, zero_stage=0, micro_batch_size=4), {"stack": "torchtitan"}),
    ("llama3-405b", dict(tp=8, pp=8, dp=4, zero_stage=3, recompute="full", recompute_layers=4), {}),
    (
        "qwen3-30b-a3b",
        dict(tp=2, dp=8, ep=8, expert_tp=2, zero_stage=3),
        {"dtype": "fp8", "fp8_scaling": "row", "stack": "torchtitan"},
    ),
    ("qwen3-30b-a3b", dict(tp=2, dp=16, ep=8, zero_stage=2), {"dtype": "fp8", "fp8_scaling": "block"}),
    ("qwen3-235b-a22b", dict(dp=64, ep=16, zero_stage=3, recompute="full"), {}),
    ("deepseek-v3", dict(tp=8, pp=4, dp=4, ep=8, virtual_stages=2, zero_stage=3, recompute="full"), {"mtp_layers": 0}),
]
"""FSDP (ZeRO-2/3), DDP, TP, CP, interleaved and uneven pipelines, partial recompute, EP with and
without expert-TP, and fp8 at tensor, row and block (MXFP8) scaling; every model is also built by
torchtitan on the meta device and counted (llama3 8B/70B/405B, qwen3 30B-A3B and 235B-A22B exact;
deepseek_v3 does not build in 0.2.2)."""


def _plans(meshes: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> list[tuple[Any, JobSpec, ParallelConfig]]:
    """(model, job, mesh) of each (model name, mesh pins, job fields): 8 micro-batches per step."""
    plans = []
    for name, pins, job_fields in meshes:
        config = _config(pins)
        job = JobSpec(global_batch_size=config.dp * config.micro_batch_size * 8, seq_len=4096, **job_fields)
        plans.append((load_model(name), job, config))
    return plans


def test_torchtitan_reads_every_export_as_planned() -> None:
    plans = _plans(TORCHTITAN_MESHES)
    cases = [{"toml": render("torchtitan-0.2", *plan).text, "world": plan[2].num_gpus} for plan in plans]
    for (name, pins, _), (model, job, config), read in zip(
        TORCHTITAN_MESHES, plans, _run_megatron(cases, TORCHTITAN_SCRIPT), strict=True
    ):
        assert "error" not in read, f"torchtitan 0.2.2 refused the export of {name} {pins}: {read['error']}"
        replicate, shard, cp, tp, pp, ep, etp = read["dims"]
        assert (replicate * shard, cp, tp, pp, ep, etp) == (config.dp, config.cp, config.tp, config.pp, config.ep,
                                                            config.expert_tp), name  # fmt: skip
        assert read["training"][1:] == [job.batch_size, job.seq_len]
        assert read["model"][:2] != ["llama3", "debugmodel"]  # the job file names the model it plans
        parts = read["pipeline"][2]
        if config.pp > 1 and parts is not None:
            assert len(parts) == config.pp * config.virtual_stages
            assert sum(p.startswith("layers.") for part in parts for p in part) == model.num_hidden_layers
        if job.dtype == "fp8":
            assert read["model"][2][0] == (
                "quantize.linear.mx" if job.fp8_scaling == "block" else "quantize.linear.float8"
            )
        assert read["checkpoint"][0] == ("selective" if config.recompute_layers else config.recompute)
        # the model the job file names, built by torchtitan: the parameters the plan priced
        if read["model"][0] == "deepseek_v3":
            assert read["params"] is None and "moe_impl" in read["build_error"]  # 0.2.2's own bug
        else:
            assert read["params"] == model.parameter_counts.total, name


DEEPSPEED_MESHES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("llama3-8b", dict(dp=64, zero_stage=1), {}),
    ("llama3-8b", dict(dp=32, micro_batch_size=2, zero_stage=2), {"dtype": "fp16"}),
    ("llama3-70b", dict(dp=64, zero_stage=3, recompute="full"), {}),
    ("llama3-70b", dict(pp=4, dp=16, zero_stage=1, recompute="full"), {}),
    # ZeRO-0 with a pipeline in fp16 (bf16 there runs the BF16_Optimizer, sharded: refused by the export)
    ("llama3-70b", dict(pp=8, dp=4, micro_batch_size=2, zero_stage=0), {"dtype": "fp16"}),
    ("deepseek-v3", dict(pp=4, dp=16, zero_stage=1), {"mtp_layers": 0}),
    ("deepseek-v3", dict(pp=8, dp=8, zero_stage=1), {"mtp_layers": 0}),
    ("llama3-405b", dict(pp=8, dp=8, zero_stage=1), {}),
    ("deepseek-v3", dict(dp=64, zero_stage=3, recompute="full"), {"mtp_layers": 0}),
]
"""ZeRO 0-3, bf16 and fp16, with and without a pipeline (DeepSpeed's own grid: dp = world / pp), and
PipelineModule's partition of 80, 61 and 126 layers (even and odd splits), on the deepspeed stack
(what ``plan export --format deepspeed`` plans with), and DeepSeek-V3 under ZeRO-3 (its MoE block a
leaf module)."""

HF_MOE_BLOCKS = {"deepseek-v3": "transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3MoE"}
"""The block each MoE model's Hugging Face code routes through (transformers 4.57.1): the class a
ZeRO-3 export must make a leaf module."""

DEEPSPEED_CLASSES = {
    "<embedding class>": "Embedding", "<decoder layer class>": "DecoderLayer", "<LM head class>": "Head",
}  # fmt: skip
"""The export's partition_method placeholders -> the stand-in classes of deepspeed_config.py."""


def _deepspeed_method(method: str) -> str:
    for placeholder, name in DEEPSPEED_CLASSES.items():
        method = method.replace(placeholder, name)
    return method


Plan = tuple[Any, JobSpec, ParallelConfig]


def _deepspeed_plans(meshes: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> list[Plan]:
    return _plans([(name, pins, {**fields, "stack": "deepspeed"}) for name, pins, fields in meshes])


def test_deepspeed_accepts_every_export_on_its_own_grid() -> None:
    """DeepSpeedConfig on DeepSpeed's pipeline grid; with pp > 1, PipelineModule with the note's
    partition_method gives every stage the plan's decoder layers, in order."""
    from planner.export.deepspeed import pipeline_partition

    plans = _deepspeed_plans(DEEPSPEED_MESHES)
    methods = [_deepspeed_method(pipeline_partition(*plan)) if plan[2].pp > 1 else None for plan in plans]
    cases = [
        {"config": json.loads(render("deepspeed", *plan).text), "pp": plan[2].pp, "dp": plan[2].dp,
         "layers": plan[0].num_hidden_layers, "partitions": [method] if method else [],
         "blocks": [HF_MOE_BLOCKS[name]] if name in HF_MOE_BLOCKS else []}
        for (name, _, _), plan, method in zip(DEEPSPEED_MESHES, plans, methods, strict=True)
    ]  # fmt: skip
    for (name, pins, _), (model, job, config), method, read in zip(
        DEEPSPEED_MESHES, plans, methods, _run_megatron(cases, DEEPSPEED_SCRIPT), strict=True
    ):
        assert "error" not in read, f"DeepSpeed refused the export of {name} {pins}: {read['error']}"
        accumulation = job.batch_size // (config.dp * config.micro_batch_size)
        assert read["batch"] == [job.batch_size, config.micro_batch_size, accumulation], name
        assert read["data_parallel"] == config.dp and read["zero_stage"] == config.zero_stage
        assert (read["bf16"], read["fp16"]) == (job.dtype == "bf16", job.dtype == "fp16")
        if name in HF_MOE_BLOCKS:  # DeepSpeed's own leaf-module matching flags the HF block under ZeRO-3
            assert read["leaf_blocks"] == ([HF_MOE_BLOCKS[name]] if config.zero_stage == 3 else []), f"{name} {pins}"
        if method is not None:  # DeepSpeed's own partition: the plan's split, stage by stage
            from planner.cost.pipeline import split_stages

            planned = [stage.count("t") for stage in split_stages(model, job, config.pp, 1)]
            assert read["stage_layers"] == {method: planned}, f"{name} {pins}"


def test_deepspeed_61_layers_on_4_stages_need_the_embedding_counted() -> None:
    """deepseek-v3 without MTP on 4 stages: the plan splits 61 layers [15, 16, 15, 15] (odd layer
    in the middle); DeepSpeed's type partition over the decoder layers alone gives [16, 15, 15,
    15], counting the embedding too gives the plan's split, which the note names."""
    ((model, job, config),) = _deepspeed_plans([DEEPSPEED_MESHES[5]])
    assert chunk_layer_counts(61, 4, 1) == [15, 16, 15, 15]
    case = {"config": json.loads(render("deepspeed", model, job, config).text), "pp": 4, "dp": 16, "layers": 61,
            "partitions": ["type:DecoderLayer", "type:Embedding|DecoderLayer"]}  # fmt: skip
    (read,) = _run_megatron([case], DEEPSPEED_SCRIPT)
    assert read["stage_layers"] == {
        "type:DecoderLayer": [16, 15, 15, 15], "type:Embedding|DecoderLayer": [15, 16, 15, 15],
    }  # fmt: skip
    assert 'partition_method="type:<embedding class>|<decoder layer class>"' in " ".join(
        render("deepspeed", model, job, config).notes
    )


def test_a_split_no_deepspeed_partition_reproduces_is_refused() -> None:
    """deepseek-v3 on 5 stages: the plan splits 61 layers [12, 12, 13, 12, 12]; every type
    partition DeepSpeed has puts the odd layer elsewhere (DeepSpeed's own PipelineModule, each
    method), so the export refuses, naming both."""
    from planner.export.deepspeed import PARTITIONS

    ((model, job, config),) = _deepspeed_plans([("deepseek-v3", dict(pp=5, dp=4, zero_stage=1), {"mtp_layers": 0})])
    planned = chunk_layer_counts(61, 5, 1)
    assert planned == [12, 12, 13, 12, 12]
    refusal = r"deepspeed cannot express pp 5 over 61 layers: the plan splits the decoder layers \[12, 12, 13, 12, 12\]"
    with pytest.raises(PlannerError, match=refusal):
        render("deepspeed", model, job, config)
    config_only = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8}
    methods = [_deepspeed_method(method) for method, _, _ in PARTITIONS]
    (read,) = _run_megatron([{"config": config_only, "pp": 5, "dp": 4, "layers": 61, "partitions": methods}],
                            DEEPSPEED_SCRIPT)  # fmt: skip
    assert all(split != planned for split in read["stage_layers"].values()), read["stage_layers"]
    assert sorted(read["stage_layers"]) == sorted(methods)


TORCHTITAN03_SCRIPT = Path(__file__).parent / "frameworks" / "torchtitan03_config.py"
TORCHTITAN03_PACKAGES = ("torchtitan==0.3.0", "spmd_types==0.2.3", "torch_checkpointing==0.1.1")
"""torchtitan 0.3.0 and the two pure-Python packages its config path imports that 0.2.2 does not
(its METADATA: spmd_types==0.2.3, torch_checkpointing>=0.1.0), installed beside the `frameworks`
extra's 0.2.2 in a folder of their own."""


@pytest.fixture(scope="session")
def torchtitan03(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding torchtitan 0.3.0 (``pip install --no-deps --target``), or a skip saying
    why pip could not install it."""
    folder = tmp_path_factory.mktemp("torchtitan03")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(folder),
         *TORCHTITAN03_PACKAGES],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"pip could not install {', '.join(TORCHTITAN03_PACKAGES)}: {done.stderr.strip()[-300:]}")
    return folder


TORCHTITAN03_MESHES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("llama3-70b", dict(tp=4, pp=2, dp=4, zero_stage=3), {}),
    ("llama3-70b", dict(tp=8, pp=4, dp=4, virtual_stages=2, zero_stage=3, recompute="selective"), {}),
    ("llama3-70b", dict(dp=32, cp=4, micro_batch_size=2, zero_stage=2, recompute="full"), {}),
    ("llama3-8b", dict(dp=64, zero_stage=0, micro_batch_size=4), {"stack": "torchtitan"}),
    ("llama3-8b", dict(tp=2, pp=2, dp=4, zero_stage=0, sequence_parallel=False), {"stack": "torchtitan"}),
    ("qwen3-30b-a3b", dict(tp=2, dp=8, ep=8, zero_stage=3), {}),
    ("qwen3-30b-a3b", dict(pp=2, dp=8, ep=4, zero_stage=2, schedule="dualpipev"), {}),
    ("deepseek-v3", dict(pp=8, dp=8, ep=8, zero_stage=3, recompute="full"), {"mtp_layers": 0}),
    (
        "deepseek-v3",
        dict(pp=8, dp=8, ep=8, zero_stage=3),
        {"mtp_layers": 0, "dtype": "fp8", "fp8_scaling": "row", "stack": "torchtitan"},
    ),
    (
        "llama3-405b",
        dict(tp=8, pp=8, dp=4, zero_stage=3, recompute="full"),
        {"dtype": "fp8", "fp8_scaling": "row", "stack": "torchtitan"},
    ),
    ("llama3-8b", dict(dp=64, zero_stage=3), {"dtype": "fp8", "fp8_scaling": "block"}),
    ("llama3-8b", dict(dp=64, zero_stage=3), {"dtype": "fp4", "bf16_last_layers": 5, "stack": "torchtitan"}),
]
"""FSDP (ZeRO-2/3), replicas (ZeRO-0), TP with and without sequence parallelism, CP (on the
partial_dtensor backend), even, uneven, interleaved and DualPipeV pipelines, EP, compile, and the
low-precision config functions (row-scaled Float8 for 405B and 671B, MXFP8 and NVFP4 for 8B)."""


def test_torchtitan_03_reads_every_export_as_planned(torchtitan03: Path) -> None:
    from planner.export import torchtitan_args

    plans = _plans(TORCHTITAN03_MESHES)
    cases = [{"argv": torchtitan_args(*plan), "world": plan[2].num_gpus} for plan in plans]
    done = subprocess.run(
        [sys.executable, str(TORCHTITAN03_SCRIPT), str(torchtitan03)],
        input=json.dumps(cases), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    for (name, pins, _), (model, job, config), read in zip(TORCHTITAN03_MESHES, plans, json.loads(done.stdout),
                                                           strict=True):  # fmt: skip
        if job.low_precision:  # the config function's converter is built, and refuses this machine
            converter = "nvfp4" if job.dtype == "fp4" else "mxfp8" if job.fp8_scaling == "block" else "float8"
            assert converter in read.get("error", "").lower(), f"{name} {pins}: {read}"
            continue
        assert "error" not in read, f"torchtitan 0.3.0 refused the export of {name} {pins}: {read['error']}"
        replicate, shard, cp, tp, pp, ep = read["dims"]
        assert (replicate * shard, cp, tp, pp, ep) == (config.dp, config.cp, config.tp, config.pp, config.ep), name
        assert replicate == (config.dp if config.zero_stage == 0 else 1)
        assert read["training"][1:] == [job.batch_size, job.seq_len]
        local = read["training"][0]
        micro = read["pipeline"][1] if config.pp > 1 else local
        assert job.batch_size // (local * config.dp) * (local // micro) == job.batch_size // (config.dp * micro)
        assert micro == config.micro_batch_size
        assert read["sequence_parallel"] == (config.sequence_parallel or config.tp == 1)
        assert read["spmd_backend"] == "partial_dtensor"
        assert read["checkpoint"] == config.recompute
        assert read["compile"][0] == job.compiled
        parts = read["pipeline"][2]
        if config.pp > 1 and parts is not None:
            chunks = 2 if config.schedule == "dualpipev" else config.virtual_stages
            assert len(parts) == config.pp * chunks
            assert sum(p.startswith("layers.") for part in parts for p in part) == model.num_hidden_layers
            assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"]
        # the model the config function builds, on the meta device: the parameters the plan priced
        assert read["params"] == model.parameter_counts.total, name


TORCHTITAN_PARALLELIZE_SCRIPT = Path(__file__).parent / "frameworks" / "torchtitan_parallelize.py"

TORCHTITAN_DENSE_MESHES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("llama3-8b", dict(dp=8, zero_stage=3, recompute="full"), {}),
    ("llama3-8b", dict(dp=8, zero_stage=0), {}),
    ("llama3-70b", dict(tp=4, dp=4, zero_stage=2, recompute="selective"), {}),
    ("llama3-8b", dict(tp=2, pp=4, dp=2, zero_stage=3), {}),
    ("llama3-70b", dict(tp=2, pp=3, dp=2, virtual_stages=2, zero_stage=3, recompute="full"), {}),
    ("llama3-8b", dict(dp=4, cp=2, zero_stage=2, recompute="full"), {}),
]
"""The dense meshes both torchtitan releases' parallelize checks run: FSDP alone, DDP, FSDP + TP,
1F1B and interleaved uneven pipelines, CP."""

TORCHTITAN_PARALLEL_MESHES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    *TORCHTITAN_DENSE_MESHES,
    ("llama3-405b", dict(tp=2, pp=8, dp=2, zero_stage=3, recompute="full", recompute_layers=4), {}),
    ("qwen3-30b-a3b", dict(tp=2, dp=4, ep=4, expert_tp=2, zero_stage=3), {}),
    ("qwen3-30b-a3b", dict(dp=8, ep=8, zero_stage=3, recompute="full"), {}),
]
"""FSDP alone, DDP, FSDP + TP, pipelines (1F1B, even and uneven; interleaved and uneven), partial
layer recompute, CP, and qwen3's MoE with EP, with and without expert-TP."""


def _parallelize_cases(meshes: list[tuple[str, dict[str, Any], dict[str, Any]]], render_case: Any) -> list[Any]:
    """(plan, case) of each mesh: the export, its world and the ranks to check (first, middle, last)."""
    out = []
    for plan in _plans(meshes):
        world = plan[2].num_gpus
        out.append((plan, {**render_case(plan), "world": world, "ranks": sorted({0, world // 2 + 1, world - 1})}))
    return out


def _planned_meshes(config: ParallelConfig, rank: int) -> dict[str, list[int]]:
    """The one-dimensional meshes of more than one rank torchtitan builds for ``rank``, with the
    ranks the plan priced in each (``_planner_groups``): pp, tp and cp alike; FSDP shards over
    dp x cp (``fsdp``) and DDP replicates over dp (``dp_replicate``); the experts' EP and
    expert-TP groups, and their FSDP over the expert-DP group (``efsdp``, kept whenever ep > 1)."""
    planned = _planner_groups(config, rank)
    zero = effective_zero_stage(config)
    out: dict[str, list[int]] = {}
    for axis in ("pp", "tp", "cp"):
        if getattr(config, axis) > 1:
            out[axis] = planned[axis]
    if zero == 0 and config.dp > 1:
        out["dp_replicate"] = planned["dp"]
    if zero and config.dp * config.cp > 1:
        out["fsdp"] = planned["dp_cp"]
    if config.ep > 1:
        out.update(ep=planned["ep"], efsdp=planned["edp"])
        if config.expert_tp > 1:
            out["etp"] = planned["etp"]
    return out


def _planned_stages(model: Any, job: JobSpec, config: ParallelConfig, rank: int) -> list[tuple[int, list[int]]]:
    """(stage index, decoder layers) of each model chunk ``rank`` runs, by the plan's split
    (``cost.pipeline.split_stages``): looped schedules put chunk c on pipeline rank c mod p."""
    from planner.cost.pipeline import split_stages

    counts = [stage.count("t") for stage in split_stages(model, job, config.pp, config.virtual_stages)]
    starts = np.cumsum([0, *counts])
    p = int(np.argwhere(mesh_rank_tensor(_replica_mesh(config))[0] == rank)[0][0])
    return [(c, list(range(int(starts[c]), int(starts[c + 1])))) for c in range(p, len(counts), config.pp)]


def _replica_mesh(config: ParallelConfig) -> ReplicaMesh:
    return ReplicaMesh(
        tp=config.tp, pp=config.pp, dp=config.dp, cp=config.cp, ep=config.ep, expert_tp=config.expert_tp,
        order=config.order,
    )  # fmt: skip


def _check_parallelized(name: str, model: Any, job: JobSpec, config: ParallelConfig, ranks: dict[str, Any]) -> None:
    """Every checked rank of torchtitan's parallelized model against the plan: its meshes, the
    stages and layers it holds, which blocks are wrapped for recompute, where the embedding and
    head are, how TP and EP shard the weights, and the parameters each stage keeps after them
    (``_tp_drift``)."""
    for rank, got in ranks.items():
        where = f"{name} rank {rank}"
        assert "error" not in got, f"torchtitan refused {where}: {got['error']}"
        assert got["meshes"] == _planned_meshes(config, int(rank)), where
        stages = _planned_stages(model, job, config, int(rank))
        assert [(part["stage"], part["layers"]) for part in got["parts"]] == stages, where
        last = config.pp * config.virtual_stages - 1
        for part in got["parts"]:
            assert (part["embedding"], part["head"]) == (part["stage"] == 0, part["stage"] == last), where
            assert _tp_drift(model, config, part) == pytest.approx(0, abs=TP_DRIFT if model.is_moe else 0), where
            wrapped = part["checkpointed"]
            if config.recompute_layers is not None:  # every n-th block: at least the plan's r per chunk
                assert len(wrapped) >= config.recompute_layers and set(wrapped) <= set(part["layers"]), where
            else:
                assert wrapped == (part["layers"] if config.recompute != "none" else []), where
            zero = effective_zero_stage(config)
            if zero >= 2:  # FSDP wraps every block; ZeRO-3 frees the gathered weights after forward, ZeRO-2 not
                assert part["sharded"] == part["layers"], where
                assert part["resharded"] == (part["layers"] if zero == 3 else []), where
            if config.tp > 1:
                assert "tp:S(0)" in part["wq"], where  # column-parallel query projection
            if config.ep > 1:
                assert "ep:S(0)" in part["experts"], where  # experts split over EP
                assert ("etp:S(1)" in part["experts"]) == (config.expert_tp > 1), where


TP_DRIFT = 2e-3
"""How far (relative) a MoE rank's parameters after TP and EP may sit from the plan's beyond the
norms: torchtitan also replicates each layer's router gate and q/k norms over TP, which the
plan's ``rank_params`` divides by t (qwen3-30b-a3b at tp 2: 1.5e-3)."""


def _tp_drift(model: Any, config: ParallelConfig, part: dict[str, Any]) -> float:
    """(the part's parameters on its rank before data-parallel sharding, as torchtitan shards
    them over TP and EP) / (the plan's: ``cost.memory.rank_params`` for its layers, embedding and
    head, plus the RMSNorm weights TP replicates, which the plan divides by t) - 1."""
    from planner.cost.memory import rank_params
    from planner.mesh import MeshArrays

    layers = len(part["layers"])
    first_moe = model.num_hidden_layers - model.num_moe_layers  # dense layers come first (DeepSeek-V3: 3)
    moe = sum(index >= first_moe for index in part["layers"])
    flag = np.array([part["embedding"]]), np.array([part["head"]])
    params = rank_params(model, MeshArrays.from_configs([config]), np.array([layers]), np.array([moe]), 0, *flag)
    replicated = layers * model.parameter_counts.norms_per_layer * (1 - 1 / config.tp)
    planned = float(params.dense[0] + params.expert[0]) + replicated
    return part["model_parallel_elements"] / planned - 1


def test_torchtitan_parallelizes_every_export_as_planned() -> None:
    """torchtitan 0.2.2's ParallelDims, parallelize and pipeline functions on the meta device
    (tests/frameworks/torchtitan_parallelize.py), for first, middle and last ranks."""
    cases = _parallelize_cases(TORCHTITAN_PARALLEL_MESHES, lambda plan: {"toml": render("torchtitan-0.2", *plan).text})
    results = _run_megatron([case for _, case in cases], TORCHTITAN_PARALLELIZE_SCRIPT)
    for (name, _, _), ((model, job, config), _), ranks in zip(TORCHTITAN_PARALLEL_MESHES, cases, results, strict=True):
        _check_parallelized(name, model, job, config, ranks)


TORCHTITAN03_PARALLELIZE_SCRIPT = Path(__file__).parent / "frameworks" / "torchtitan03_parallelize.py"

TORCHTITAN03_PARALLEL_MESHES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    *TORCHTITAN_DENSE_MESHES,
    ("qwen3-30b-a3b", dict(tp=2, dp=4, ep=8, zero_stage=3), {}),
    ("qwen3-30b-a3b", dict(dp=8, ep=8, zero_stage=3, recompute="full"), {}),
    ("deepseek-v3", dict(pp=8, dp=8, ep=8, zero_stage=3, recompute="full"), {"mtp_layers": 0}),
    ("deepseek-v3", dict(pp=8, dp=4, cp=2, ep=8, zero_stage=3, recompute="full"), {"mtp_layers": 0}),
]
"""The 0.2.2 spread in 0.3.0's terms: no every-n-th-layer recompute and no expert-TP there (the
export refuses both), so EP over tp x dp instead; and DeepSeek-V3 (MLA, a shared expert, three
dense layers first; 61 layers on 8 stages, with and without CP on its flex attention), which 0.3.0
builds and 0.2.2 does not."""


def test_torchtitan_03_parallelizes_every_export_as_planned(torchtitan03: Path) -> None:
    """torchtitan 0.3.0's ParallelDims, parallelize and pipeline functions on the meta device
    (tests/frameworks/torchtitan03_parallelize.py), for first, middle and last ranks.

    The export runs torchtitan on its ``partial_dtensor`` SPMD backend: every checked rank of
    every mesh is compared with the plan as exported. 0.3.0's default backend, ``spmd_types``,
    keeps parameters as plain tensors carrying spmd_types annotations and hands FSDP their data-
    parallel mesh dims (``full_dtensor.resolve_fsdp_mesh``); the ``fully_shard`` of the torch
    installed here (2.13) takes mesh dims only with DTensor parameters and refuses, for every
    mesh and rank alike: the same exports with the backend switched back to it are refused on
    their first rank, which is why the export does not leave the default in place. The refusal is
    torch 2.13's, which CI and the README install: under torch 2.14.1 the default backend
    parallelized llama3-8b's rank 0 (seen 2026-12-05, when an unpinned install pulled it), and
    this test fails there by design."""
    from planner.export import torchtitan_args

    def run(backend: str | None) -> tuple[list[Any], list[dict[str, Any]]]:
        cases = _parallelize_cases(
            TORCHTITAN03_PARALLEL_MESHES, lambda plan: {"argv": torchtitan_args(*plan), "spmd_backend": backend}
        )
        if backend is not None:  # the default backend: rank 0 (its refusal is every rank's)
            cases = [(plan, {**case, "ranks": [0]}) for plan, case in cases]
        done = subprocess.run(
            [sys.executable, str(TORCHTITAN03_PARALLELIZE_SCRIPT), str(torchtitan03)],
            input=json.dumps([case for _, case in cases]), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return cases, json.loads(done.stdout)

    cases, exported = run(None)
    for (name, _, _), ((model, job, config), _), ranks in zip(TORCHTITAN03_PARALLEL_MESHES, cases, exported,
                                                              strict=True):  # fmt: skip
        _check_parallelized(name, model, job, config, ranks)
    cases, default = run("spmd_types")
    for (name, _, _), ((_, _, config), _), ranks in zip(TORCHTITAN03_PARALLEL_MESHES, cases, default, strict=True):
        for rank, got in ranks.items():
            assert "error" in got and (config.cp > 1 or got["error"] == SPMD_TYPES_REFUSAL), f"{name} {rank}: {got}"


SPMD_TYPES_REFUSAL = (
    "ValueError: When dp_mesh_dims is provided, all parameters must be DTensors on the full SPMD mesh (e.g. via "
    "distribute_module). Got plain tensor for parameter 'weight'."
)
"""torch 2.13's fully_shard (torch/distributed/fsdp/_fully_shard/_fsdp_param.py) on the first
parameter torchtitan 0.3.0's spmd_types backend gives it."""


MEGATRON_LM_SCRIPT = Path(__file__).parent / "frameworks" / "megatron_arguments.py"
MEGATRON_LM_WHEEL = "megatron-core==0.17.0"
"""The first megatron-core release on the registry whose wheel ships Megatron-LM's
``megatron/training`` (arguments.py: parse_args, validate_args); 0.16.1 and earlier wheels and
sdists ship ``megatron/core`` alone, and no ``megatron-lm`` distribution is published. Its wheels
are tagged cp312 (Requires-Python >= 3.12); arguments.py and the megatron.core it imports are
Python that this interpreter runs, so the wheel is downloaded for 3.12 and unpacked, not
installed."""


@pytest.fixture(scope="session")
def megatron_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the unpacked ``MEGATRON_LM_WHEEL``, or a skip saying why pip could not
    fetch it."""
    import zipfile

    wheels = tmp_path_factory.mktemp("megatron_lm_wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
         "--python-version", "3.12", "--dest", str(wheels), MEGATRON_LM_WHEEL],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    found = sorted(wheels.glob("megatron_core-*.whl"))
    if done.returncode != 0 or not found:
        pytest.skip(f"pip could not download {MEGATRON_LM_WHEEL}: {done.stderr.strip()[-300:]}")
    folder = tmp_path_factory.mktemp("megatron_lm")
    with zipfile.ZipFile(found[0]) as wheel:
        wheel.extractall(folder)
    return folder


MEGATRON_FEATURES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("llama3-70b", dict(tp=8, pp=4, dp=2, recompute="full", recompute_layers=2), {}),
    ("llama3-70b", dict(tp=4, pp=2, dp=4, recompute="selective"), {"dtype": "fp8"}),
    ("llama3-405b", dict(tp=8, pp=8, dp=4, virtual_stages=2), {}),
    ("deepseek-v3", dict(tp=1, pp=8, dp=8, ep=8), {}),
    ("llama3-70b", dict(tp=4, pp=1, dp=2, offload_layers=20), {}),
    ("gpt-oss-120b", dict(tp=1, pp=1, dp=8, ep=8, recompute="selective"), {"recompute_modules": ("moe_act",)}),
    ("llama3-8b", dict(tp=1, pp=1, dp=8, recompute="selective"), {"dtype": "fp8", "recompute_modules": ("layernorm",)}),
    ("llama3-8b", dict(tp=8, pp=1, dp=1), {"optimizer_state_bytes_per_param": 8.0}),
    ("llama4-scout", dict(tp=1, pp=1, dp=8, ep=8), {}),
    ("nemotron-h-8b", dict(tp=2, pp=4, dp=1), {}),
    ("nemotron-h-8b", dict(tp=2, pp=4, dp=1, virtual_stages=2, schedule="interleaved-1f1b"), {}),
    ("nemotron-3-nano-30b-a3b", dict(tp=1, pp=1, dp=8, ep=8), {}),
    ("nemotron-3-nano-30b-a3b", dict(tp=2, pp=2, dp=2, ep=4, sequence_parallel=True), {"dtype": "fp8"}),
    (
        "nemotron-3-super-120b-a12b",
        dict(tp=1, pp=4, dp=2, ep=2, recompute="selective"),
        {"recompute_modules": ("core_attn", "moe_act", "layernorm")},
    ),
]
"""Megatron exports beyond MESHES and ARCHITECTURES: partial full recompute, selective recompute
with fp8, an uneven interleaved split (126 layers), DeepSeek-V3 with its MTP layer, activation
offloading (--cpu-offloading-num-layers), GPT-OSS recomputing moe_act (needs --moe-grouped-gemm),
fp8 recomputing layernorm (needs a current-scaling --fp8-recipe), Adam's moments in bf16 at
dp 1 (the precision-aware optimizer needs the distributed one), Llama 4's top-1 sigmoid router on
the experts' input, and the hybrid Mamba-2 models: a dense one on four pipeline ranks, with and
without two virtual stages each, Nemotron 3 Nano's MoE blocks (with TP, SP and fp8 on two
segments), Nemotron 3 Super's LatentMoE with its two MTP depths on four, recomputing what its plan
on 64 GB200 recomputes."""


def expected_router(model: Any) -> list[Any]:
    """The router Megatron-Core should build for ``model``'s checkpoint, from the model's own fields:
    [score function, expert bias, top-k scaling, pre-softmax, probabilities on the input]."""
    if not model.is_moe:
        return ["softmax", False, None, False, False]
    softmax = model.scoring_func == "softmax"
    pre_softmax = softmax and (model.norm_topk_prob is False or model.num_experts_per_tok == 1)
    scale = model.routed_scaling_factor if model.routed_scaling_factor != 1.0 else None
    return [model.scoring_func, model.router_expert_bias, scale, pre_softmax, model.model_type == "llama4_text"]


def expected_rope(model: Any) -> list[Any]:
    """The RoPE Megatron-LM should build for ``model``'s checkpoint, from the model's own fields:
    [base, llama3 scaling on, its factor, an MLA model's (rope type, YaRN factor, mscale, mscale_all_dim)]."""
    scaling = model.rope_scaling or {}
    fixed = (
        scaling.get("low_freq_factor"),
        scaling.get("high_freq_factor"),
        scaling.get("original_max_position_embeddings"),
    )
    llama3 = scaling.get("rope_type") == "llama3" and fixed == (1.0, 4.0, 8192)  # Megatron's _apply_scaling
    mla = None
    if model.is_mla:
        mla = ["yarn", scaling["factor"], scaling["mscale"], scaling["mscale_all_dim"]]
    return [int(model.rope_theta or 10000), llama3, scaling["factor"] if llama3 else None, mla]


def test_megatron_lm_parses_and_validates_every_export(megatron_lm: Path) -> None:
    """Every Megatron export of this file (MESHES, ARCHITECTURES, MEGATRON_FEATURES) through
    Megatron-LM's own parse_args + validate_args (tests/frameworks/megatron_arguments.py), with
    the environment the export's launcher sets: accepted, with the plan's sizes, batch and shape."""
    from planner.export.launch import environment

    plans: list[tuple[str, Any, JobSpec, ParallelConfig]] = []
    for name, pins in MESHES:
        model = load_model(name)
        config = _config(pins)
        plans.append((name, model, default_job(model, global_batch_size=config.dp * 64), config))
    for name in ARCHITECTURES:
        model = load_model(name)
        config = _config(dict(dp=8, ep=8 if model.is_moe else 1))
        plans.append((name, model, default_job(model, global_batch_size=8), config))
    for (name, _, _), (model, job, config) in zip(MEGATRON_FEATURES, _plans(MEGATRON_FEATURES), strict=True):
        plans.append((name, model, job, config))
    cases = [
        {"argv": megatron_args(model, job, config), "env": environment("megatron", config), "world": config.num_gpus}
        for _, model, job, config in plans
    ]
    # the parser is Megatron-LM's own: an unknown flag, or TP without the launcher's environment, is refused
    refused = [{**cases[0], "argv": [*cases[0]["argv"], "--no-such-flag"]}, {**cases[0], "env": {}}]
    done = subprocess.run(
        [sys.executable, str(MEGATRON_LM_SCRIPT), str(megatron_lm)],
        input=json.dumps(cases + refused), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)
    assert "unrecognized arguments: --no-such-flag" in results[-2]["error"]
    assert results[-1]["error"].endswith("require setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1")
    for (name, model, job, config), case, read in zip(plans, cases, results[: len(cases)], strict=True):
        where = f"{name} {config.short()}"
        assert "error" not in read, f"Megatron-LM refused {where}: {read['error']}\n{' '.join(case['argv'])}"
        assert read["config"] in ("TransformerConfig", "MLATransformerConfig"), where
        expert_tp = config.expert_tp if model.is_moe else config.tp
        vp = config.virtual_stages if config.virtual_stages > 1 else None
        assert read["sizes"] == [config.tp, config.pp, config.dp, config.cp, config.ep, expert_tp, vp], where
        assert read["batch"] == [job.batch_size, config.micro_batch_size, job.seq_len], where
        heads = model.num_attention_heads
        groups = heads if model.is_mla else model.num_kv_heads
        assert read["shape"][:5] == [model.num_hidden_layers, model.hidden_size, model.intermediate_size, heads,
                                     groups], where  # fmt: skip
        assert read["shape"][5] == (model.num_experts_total if model.is_moe else None), where
        assert read["sequence_parallel"] == (config.sequence_parallel and config.tp > 1), where
        argv = case["argv"]
        assert read["fp8"] == (argv[argv.index("--fp8-format") + 1] if job.dtype == "fp8" else None), where
        assert read["bf16"] == (job.dtype != "fp16"), where
        granularity = None if config.recompute == "none" else config.recompute
        assert read["recompute"][0] == granularity and read["recompute"][2] == config.recompute_layers, where
        mtp = mtp_layers(model, job) or None
        if model.is_hybrid:  # the pattern as the plan split it, its MTP depths and latent size, read back
            assert read["hybrid"] == [hybrid_layer_pattern(model, job, config), mtp, model.moe_latent_size, True], where
            assert read["hybrid"][0].count("|") == config.pp * config.virtual_stages - 1, where
        else:
            assert read["hybrid"] == [None, mtp, None, False], where
        assert read["router"] == expected_router(model), where
        assert read["rope"] == expected_rope(model), where


SPLITS = [
    (94, 16, 3, None, None, True, True),  # Qwen3-235B on 48 chunks
    (61, 16, 1, 4, 1, False, False),  # DeepSeek-V3, uneven first and last
    (36, 4, 2, 8, 8, False, False),
    (61, 8, 1, 5, None, False, False),
    (126, 16, 1, None, None, True, True),  # Llama-3.1-405B
    (80, 4, 2, None, None, False, True),
    (61, 16, 1, 5, None, False, False),  # refused: 56 over 15 middle ranks
    (80, 4, 2, None, None, True, False),  # refused: 81 over 8 chunks
    (61, 16, 2, 3, None, False, False),  # refused: 3 over 2 virtual stages
    (61, 16, 1, 3, None, True, False),  # refused: both kinds at once
    (10, 2, 1, 4, 4, False, False),  # refused: 2 layers, no middle rank
]
"""(layers, pp, vp, first, last, embedding, loss) of Megatron-LM's split options."""


@pytest.mark.parametrize("split", SPLITS)
def test_megatron_split_options_build_the_layout_megatron_builds(split: tuple[Any, ...]) -> None:
    # Megatron-Core's own TransformerConfig checks and transformer_block.get_num_layers_to_build,
    # chunk by chunk, against the layout the planner reads the same options as
    from types import SimpleNamespace

    import torch
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_config import TransformerConfig

    from planner.cost.layout import split_layout

    layers, pp, vp, first, last, embedding, loss = split
    options = dict(
        num_layers=layers,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vp if vp > 1 else None,
        num_layers_in_first_pipeline_stage=first,
        num_layers_in_last_pipeline_stage=last,
        account_for_embedding_in_pipeline_split=embedding,
        account_for_loss_in_pipeline_split=loss,
    )
    try:
        TransformerConfig(hidden_size=64, num_attention_heads=4, pipeline_dtype=torch.bfloat16, **options)
    except (ValueError, AssertionError):
        with pytest.raises(PlannerError):
            split_layout(layers, pp, vp, 0, first, last, embedding, loss)
        return
    config = SimpleNamespace(pipeline_model_parallel_layout=None, **options)
    built = [
        get_num_layers_to_build(config, vp_stage=c // pp if vp > 1 else None, pp_rank=c % pp) for c in range(pp * vp)
    ]
    stages = parse_layout(split_layout(layers, pp, vp, 0, first, last, embedding, loss))
    assert [stage.count("t") for stage in stages] == built
