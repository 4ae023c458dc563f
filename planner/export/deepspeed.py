"""DeepSpeed JSON config (batch, ZeRO, precision, activation checkpointing) for a mesh.

Key names: deepspeedai/DeepSpeed ``docs/_pages/config-json.md`` as stored at commit
00376da49967bc6a15d70a550200ac67277b1fb4 (train_batch_size, train_micro_batch_size_per_gpu,
gradient_accumulation_steps; zero_optimization.stage and .overlap_comm (ZeRO-1 to 3); bf16.enabled,
fp16.enabled; activation_checkpointing), and ``deepspeed/runtime/config.py``
get_pipeline_config for ``pipeline.activation_checkpoint_interval``. A DeepSpeed config alone
covers data parallelism, ZeRO and the pipeline engine's batch: tensor, context and expert
parallelism live in model code (Megatron-DeepSpeed, Ulysses, deepspeed.moe), so those meshes are
refused rather than half-exported.
"""

from __future__ import annotations

import itertools
from typing import Any

from planner.cost.pipeline import split_stages
from planner.export.common import (
    axis_inside,
    check_adam_state,
    check_dispatcher,
    effective_zero_stage,
    num_microbatches,
    refuse,
    zero_note,
)
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig

TARGET = "deepspeed"

ACTIVATION_CHECKPOINTING = {
    "partition_activations": False,
    "cpu_checkpointing": False,
    "contiguous_memory_optimization": False,
}
"""config-json.md "Activation Checkpointing": these keys configure deepspeed.checkpointing (the
documented defaults, written out); the recomputation itself is switched on in code, or for a
PipelineModule by ``pipeline.activation_checkpoint_interval``."""


PARTITIONS = (
    ("type:<decoder layer class>", False, False),
    ("type:<embedding class>|<decoder layer class>", True, False),
    ("type:<decoder layer class>|<LM head class>", False, True),
    ("type:<embedding class>|<decoder layer class>|<LM head class>", True, True),
)
"""PipelineModule ``partition_method`` values that count decoder layers (module.py
``_partition_layers``: "type:<regex>" gives weight 1 to each layer spec whose class name the
regex matches, 0 to the others, and balances the weights), with whether the embedding and the
LM head count as a layer. "uniform" and "parameters" also weigh whatever else the user's layer
list holds (norms, lambdas; the weights' sizes), which the plan cannot see."""


def partition_balanced(weights: list[int], num_parts: int) -> list[int]:
    """deepspeed/runtime/utils.py ``partition_balanced`` (DeepSpeed 0.18; ties broken as there):
    the bounds of ``num_parts`` contiguous parts of ``weights`` minimising the heaviest part
    less the lightest, by dynamic programming; with no more items than parts,
    ``partition_uniform`` (one item each, then empty parts)."""
    n, m = len(weights), num_parts
    if n <= m:
        return [min(p, n) for p in range(m + 1)]
    inf = float("inf")
    prefix = [0.0] * (n + 1)
    for i, w in enumerate(weights):
        prefix[i + 1] = prefix[i] + w
    top = [[inf] * (m + 1) for _ in range(n + 1)]
    bottom = [[inf] * (m + 1) for _ in range(n + 1)]
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    position = [[0] * (m + 1) for _ in range(n + 1)]
    top[0][0] = 0.0
    cost[0][0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, min(i, m) + 1):
            for k in range(i):
                part = prefix[i] - prefix[k]
                high, low = max(top[k][j - 1], part), min(bottom[k][j - 1], part)
                if cost[i][j] >= high - low:
                    cost[i][j], top[i][j], bottom[i][j], position[i][j] = high - low, high, low, k
    bounds = [n]
    for j in reversed(range(1, m + 1)):
        bounds.append(position[bounds[-1]][j])
    return bounds[::-1]


def pipeline_partition(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> str:
    """The first ``PARTITIONS`` method whose partition of [embedding, decoder layers..., LM head]
    into pp stages gives each stage the decoder layers of the plan's split
    (``cost.pipeline.split_stages``), or a refusal naming both splits."""
    layers = model.num_hidden_layers
    planned = [stage.count("t") for stage in split_stages(model, job, config.pp, 1)]
    got = {}
    for method, embedding, head in PARTITIONS:
        bounds = partition_balanced([int(embedding), *[1] * layers, int(head)], config.pp)
        counts = [max(min(b, layers + 1) - max(a, 1), 0) for a, b in itertools.pairwise(bounds)]
        if counts == planned:
            return method
        got[method] = counts
    tried = "; ".join(f'"{method}" {counts}' for method, counts in got.items())
    raise refuse(
        TARGET,
        f"pp {config.pp} over {layers} layers",
        f"the plan splits the decoder layers {planned}, which no PipelineModule partition_method reproduces "
        f"({tried}); pin another --pp",
    )


ZERO3_LEAF_MODULES: dict[str, str] = {
    "mixtral": "transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock",
    "qwen2_moe": "transformers.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock",
    "qwen3_moe": "transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock",
    "deepseek_v2": "transformers.models.deepseek_v2.modeling_deepseek_v2.DeepseekV2MoE",
    "deepseek_v3": "transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3MoE",
}
"""Hugging Face MoE blocks (transformers 4.57.1's modeling files) that call only the experts their
tokens were routed to: Mixtral's and the Qwen-MoE blocks loop over ``expert_hit``, DeepSeek-V2's
and V3's skip an expert whose token count is 0. ZeRO-3 installs a fetch hook on every module and
prefetches in the order it traced (deepspeed/utils/z3_leaf_module.py ``set_z3_leaf_modules``: "the
computation order of experts varies across forward passes ... By designating a module as a 'leaf'
node, ZeRO3 will prefetch parameters for all child modules upon entering the module"), so each
block must be a leaf: one gather of the whole block, which is what the plan prices. DeepSpeed
0.19.8's own default list (runtime/zero/leaf_module_config.py ``DEFAULT_LEAF_MODULE_CLASSES``)
holds the first three; the export writes the class anyway, since a list it writes replaces the
default."""

EXPERTS_CALLED_ALIKE = frozenset({"gpt_oss", "llama4_text", "llama4", "olmoe"})
"""MoE model types whose Hugging Face block runs the same modules every step (transformers
4.57.1): GPT-OSS's ``GptOssExperts`` and Llama 4's ``Llama4TextExperts`` hold every expert's
weights in one parameter, OLMoE's block calls every expert, routed tokens or none; ZeRO-3's
traced order holds without a leaf module."""


def zero3_leaf_module(model: ModelSpec) -> str | None:
    """The ``ZERO3_LEAF_MODULES`` class of a MoE model, or None (dense, or not a known type)."""
    return ZERO3_LEAF_MODULES.get(model.model_type or "") if model.is_moe else None


DEGREES_OF_ONE: dict[str, str] = {
    "tp": "a DeepSpeed config trains data and pipeline parallel only (TP needs Megatron-DeepSpeed); use --tp 1",
    "cp": "DeepSpeed has no ring context parallelism; use --cp 1",
    "ep": "DeepSpeed-MoE sets ep_size in model code (deepspeed.moe.layer.MoE); use --ep 1",
}
"""Degrees a DeepSpeed config cannot set (the module docstring): each must be 1, and why."""


def check_degree(knob: str, degree: int) -> None:
    """Refuse a degree above 1 of a knob in ``DEGREES_OF_ONE``: '--ep 8', and why."""
    if knob in DEGREES_OF_ONE and degree > 1:
        raise refuse(TARGET, f"--{knob} {degree}", DEGREES_OF_ONE[knob])


def _check(job: JobSpec, config: ParallelConfig) -> None:
    """Refuse what a DeepSpeed config cannot carry."""
    check_dispatcher(TARGET, "deepspeed", job, config)
    check_adam_state(TARGET, job, bf16_moments=False)
    if config.pipeline_layout is not None:
        raise refuse(
            TARGET, "--pipeline-layout", "a Megatron layout string; DeepSpeed's PipelineModule partitions in code"
        )
    for knob in DEGREES_OF_ONE:
        check_degree(knob, getattr(config, knob))
    if config.recompute == "selective":
        raise refuse(TARGET, "--recompute selective", "DeepSpeed recomputes whole layers; use --recompute full or none")
    if config.offload_layers is not None:
        raise refuse(
            TARGET,
            f"--offload-layers {config.offload_layers}",
            "DeepSpeed offloads no activations by layer count; use recompute",
        )
    if config.recompute_layers is not None:
        raise refuse(
            TARGET,
            f"--recompute-layers {config.recompute_layers}",
            "DeepSpeed's activation checkpointing recomputes every layer; use --recompute full without it",
        )
    if job.low_precision:
        raise refuse(
            TARGET,
            f"--dtype {job.dtype}",
            "the DeepSpeed config switches bf16 or fp16 (FP8 and NVFP4 are Transformer Engine or torchao code)",
            mesh_bound=False,
        )
    zero = effective_zero_stage(config)
    pinned = job.gradient_dtype
    if pinned not in (None, job.dtype) and (pinned != "fp32" or zero == 0):
        # runtime/engine.py _do_optimizer_sanity_check: without ZeRO the gradients accumulate in the
        # model's dtype (another raises NotImplementedError); ZeRO takes fp32 beside a 16-bit model
        fp32 = pinned == "fp32"
        raise refuse(
            TARGET,
            f"{pinned} gradients of a {job.dtype} model" + (" without ZeRO" if fp32 else ""),
            f"DeepSpeed keeps them in the model's {job.dtype} or, under ZeRO (--zero-stage 1 to 3), fp32",
            mesh_bound=fp32,
        )
    if config.pp > 1:
        # deepspeed/runtime/pipe/engine.py PipelineEngine.__init__ (stored at 03f6f75c): assert
        # zero_optimization_stage() < ZeroStageEnum.gradients, "ZeRO-2 and ZeRO-3 are incompatible
        # with pipeline parallelism".
        if zero >= 2:
            raise refuse(
                TARGET,
                f"--zero-stage {zero} with pp {config.pp}",
                "DeepSpeed's pipeline engine allows ZeRO 0 or 1; use --zero-stage 1",
            )
        # deepspeed/runtime/pipe/schedule.py: the engine trains with TrainSchedule, a 1F1B schedule.
        if config.schedule != "1f1b":
            raise refuse(TARGET, f"--schedule {config.schedule}", "DeepSpeed's pipeline engine runs 1F1B only")
        # deepspeed/runtime/pipe/topology.py PipeDataParallelTopology: axes ['pipe', 'data'], data
        # parallelism on the last (innermost) dimension.
        if config.dp > 1 and not axis_inside(config, "dp", "pp"):
            raise refuse(TARGET, f"--order {config.order}", "DeepSpeed's pipeline topology keeps dp inside pp")
        # deepspeed/runtime/engine.py _do_optimizer_sanity_check: without ZeRO, a bf16 model whose
        # gradients accumulate in bf16 under pipeline parallelism gets the BF16_Optimizer, which
        # shards the fp32 master weights and Adam moments over dp (as ZeRO-1 does) and keeps fp32
        # gradients: not the replicated optimizer a ZeRO-0 plan priced.
        if zero == 0 and job.dtype == "bf16" and config.dp > 1:
            raise refuse(
                TARGET,
                f"--zero-stage 0 with pp {config.pp} in bf16",
                "DeepSpeed trains a bf16 pipeline without ZeRO through its BF16_Optimizer, which shards the optimizer "
                "states over dp as ZeRO-1 does; use --zero-stage 1",
            )
    num_microbatches(TARGET, job, config)


def deepspeed_config(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> dict[str, Any]:
    """The DeepSpeed config dict for ``config``; under ZeRO-3 a MoE model's block of
    ``ZERO3_LEAF_MODULES`` is named in ``zero_optimization.leaf_module.classes``.

    config-json.md: train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps
    * data-parallel GPUs, so gradient_accumulation_steps = B / (b * dp) = m; the pipeline engine
    runs those m micro-batches through its stages (engine.py: micro_batches =
    gradient_accumulation_steps, and asserts the same product with the grid's data-parallel size).
    """
    _check(job, config)
    zero = effective_zero_stage(config)
    zero_section: dict[str, Any] = {"stage": zero}
    if zero >= 1:
        # overlap_comm: "Attempts to overlap the reduction of the gradients with backward computation";
        # its default is stage == 3 (zero/config.py overlap_comm_valid); ZeRO-1 and 2 run it alike
        # (zero/stage_1_and_2.py installs the reduce hooks when overlap_comm is set)
        zero_section["overlap_comm"] = config.overlap_grad_reduce
    leaf = zero3_leaf_module(model)
    if zero == 3 and leaf is not None:
        # runtime/zero/config.py: zero_optimization.leaf_module (DeepSpeedZeroLeafModuleConfig);
        # utils/z3_leaf_module.py matches a class by its name or its module-qualified name
        zero_section["leaf_module"] = {"classes": [leaf]}
    ds: dict[str, Any] = {
        "train_batch_size": job.batch_size,
        "train_micro_batch_size_per_gpu": config.micro_batch_size,
        "gradient_accumulation_steps": num_microbatches(TARGET, job, config),
        "zero_optimization": zero_section,
        "bf16": {"enabled": job.dtype == "bf16"},
        "fp16": {"enabled": job.dtype == "fp16"},
    }
    if job.gradient_format == "fp32" and zero >= 1:
        # fp32 gradients under ZeRO (``_check``; another stack's fp32 default without ZeRO is the CLI's
        # stack-mismatch note's, cli.export._stack_mismatch): reduced (engine.py communication_data_type, else the
        # model's 16-bit dtype) and accumulated (data_types.grad_accum_dtype, else the model's) in fp32;
        # left to the defaults the plan's fp32 gradients had run in bf16 (a review, 2026-12-08)
        ds["communication_data_type"] = job.gradient_format
        ds["data_types"] = {"grad_accum_dtype": job.gradient_format}
    if config.recompute == "full":
        ds["activation_checkpointing"] = dict(ACTIVATION_CHECKPOINTING)
        if config.pp > 1:
            # engine.py: pipeline.activation_checkpoint_interval > 0 sets the PipelineModule's
            # interval; 1 recomputes every layer from its input.
            ds["pipeline"] = {"activation_checkpoint_interval": 1}
    return ds


def deepspeed_notes(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> list[str]:
    """What the JSON cannot say (JSON has no comments: the CLI prints these on stderr).

    Pipeline split: deepspeed/runtime/pipe/module.py ``PipelineModule._partition_layers`` balances
    by ``partition_method``: "parameters" (the default) counts the embedding's and LM head's
    weights, which moves decoder layers off the first and last stages (llama3-70b on 4 stages:
    [19, 21, 21, 19]); "type:<regex>" balances the layers whose class name matches. Which classes
    to match for the plan's split (``pipeline_partition``): the decoder layers alone put an odd
    layer first (61 on 4 stages: [16, 15, 15, 15]), the embedding with them reproduces the plan's
    [15, 16, 15, 15]."""
    _check(job, config)
    notes = zero_note(config)
    if not job.flash_attention:
        notes.append(
            "the plan priced unfused attention (--no-flash-attention, the s x s scores through HBM); the attention "
            "kernel is your model code's, which the JSON does not choose"
        )
    if config.pp > 1:
        split = [stage.count("t") for stage in split_stages(model, job, config.pp, 1)]
        method = pipeline_partition(model, job, config)
        notes.append(
            f"pipeline parallelism is set in code: PipelineModule(layers=[<embedding>, *<decoder layers>, <LM head>], "
            f'num_stages={config.pp}, partition_method="{method}") splits the decoder layers {split} as planned '
            '(the regex names your classes; other specs in the list weigh nothing); the default "parameters" '
            f"counts the embedding and LM head and moves layers off the end stages; DeepSpeed then takes dp = "
            f"world size / pp = {config.dp}"
        )
    if config.recompute == "full" and config.pp == 1:
        notes.append(
            "recomputation is switched on in model code (deepspeed.checkpointing.checkpoint around each layer, or "
            "the model's gradient checkpointing); activation_checkpointing only configures it"
        )
    zero = effective_zero_stage(config)
    if zero == 3 and model.is_moe and zero3_leaf_module(model) is None and model.model_type not in EXPERTS_CALLED_ALIKE:
        kind = f"model type '{model.model_type}'" if model.model_type else "no model type"
        notes.append(
            f"name your MoE block in zero_optimization.leaf_module.classes: {model.name} ({kind}) has no Hugging "
            "Face block the export knows, and a block that calls only the experts its tokens chose changes ZeRO-3's "
            "traced fetch order every step; as a leaf it is gathered whole, as the plan priced"
        )
    if config.overlap_grad_reduce and zero == 0 and config.dp > 1:
        notes.append(
            "zero_optimization.overlap_comm is a ZeRO setting; without ZeRO check that the engine overlaps the "
            "gradient reduction as the plan assumed"
        )
    return notes
