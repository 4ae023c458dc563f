"""DeepSpeed JSON config (batch, ZeRO, precision, activation checkpointing) for a mesh.

Key names: deepspeedai/DeepSpeed ``docs/_pages/config-json.md`` as stored at commit
00376da49967bc6a15d70a550200ac67277b1fb4 (train_batch_size, train_micro_batch_size_per_gpu,
gradient_accumulation_steps; zero_optimization.stage and .overlap_comm; bf16.enabled,
fp16.enabled; activation_checkpointing), and ``deepspeed/runtime/config.py``
get_pipeline_config for ``pipeline.activation_checkpoint_interval``. A DeepSpeed config alone
covers data parallelism, ZeRO and the pipeline engine's batch: tensor, context and expert
parallelism live in model code (Megatron-DeepSpeed, Ulysses, deepspeed.moe), so those meshes are
refused rather than half-exported.
"""

from __future__ import annotations

from typing import Any

from planner.cost.pipeline import chunk_layer_counts
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


def _check(job: JobSpec, config: ParallelConfig) -> None:
    """Refuse what a DeepSpeed config cannot carry."""
    check_dispatcher(TARGET, "deepspeed", job, config)
    check_adam_state(TARGET, job, bf16_moments=False)
    if config.pipeline_layout is not None:
        raise refuse(
            TARGET, "--pipeline-layout", "a Megatron layout string; DeepSpeed's PipelineModule partitions in code"
        )
    if config.tp > 1:
        raise refuse(
            TARGET,
            f"--tp {config.tp}",
            "a DeepSpeed config trains data and pipeline parallel only (TP needs Megatron-DeepSpeed); use --tp 1",
        )
    if config.cp > 1:
        raise refuse(TARGET, f"--cp {config.cp}", "DeepSpeed has no ring context parallelism; use --cp 1")
    if config.ep > 1:
        raise refuse(
            TARGET,
            f"--ep {config.ep}",
            "DeepSpeed-MoE sets ep_size in model code (deepspeed.moe.layer.MoE); use --ep 1",
        )
    if config.recompute == "selective":
        raise refuse(TARGET, "--recompute selective", "DeepSpeed recomputes whole layers; use --recompute full or none")
    if config.recompute_layers is not None:
        raise refuse(
            TARGET,
            f"--recompute-layers {config.recompute_layers}",
            "DeepSpeed's activation checkpointing recomputes every layer; use --recompute full without it",
        )
    if job.dtype == "fp8":
        raise refuse(
            TARGET,
            "--dtype fp8",
            "the DeepSpeed config switches bf16 or fp16 (FP8 is Transformer Engine code)",
            mesh_bound=False,
        )
    zero = effective_zero_stage(config)
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
    num_microbatches(TARGET, job, config)


def deepspeed_config(job: JobSpec, config: ParallelConfig) -> dict[str, Any]:
    """The DeepSpeed config dict for ``config``.

    config-json.md: train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps
    * data-parallel GPUs, so gradient_accumulation_steps = B / (b * dp) = m; the pipeline engine
    runs those m micro-batches through its stages (engine.py: micro_batches =
    gradient_accumulation_steps, and asserts the same product with the grid's data-parallel size).
    """
    _check(job, config)
    zero = effective_zero_stage(config)
    zero_section: dict[str, Any] = {"stage": zero}
    if zero >= 2:
        # overlap_comm: "Attempts to overlap the reduction of the gradients with backward computation".
        zero_section["overlap_comm"] = config.overlap_grad_reduce
    ds: dict[str, Any] = {
        "train_batch_size": job.batch_size,
        "train_micro_batch_size_per_gpu": config.micro_batch_size,
        "gradient_accumulation_steps": num_microbatches(TARGET, job, config),
        "zero_optimization": zero_section,
        "bf16": {"enabled": job.dtype == "bf16"},
        "fp16": {"enabled": job.dtype == "fp16"},
    }
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
    [19, 21, 21, 19]); "type:<regex>" balances the layers whose class name matches, the decoder
    layers, which is the split the plan priced (``cost.pipeline.chunk_layer_counts``)."""
    _check(job, config)
    notes = zero_note(config)
    if config.pp > 1:
        split = chunk_layer_counts(model.num_hidden_layers, config.pp, 1)
        odd = "" if model.num_hidden_layers % config.pp == 0 else " up to where its balancer puts the odd layers"
        notes.append(
            f"pipeline parallelism is set in code: PipelineModule(layers, num_stages={config.pp}, "
            f'partition_method="type:<your decoder layer class>") splits the decoder layers by count, {split} '
            f"as planned{odd}"
            '; the default "parameters" counts the embedding and LM head and moves layers off the end stages; '
            f"DeepSpeed then takes dp = world size / pp = {config.dp}"
        )
    if config.recompute == "full" and config.pp == 1:
        notes.append(
            "recomputation is switched on in model code (deepspeed.checkpointing.checkpoint around each layer, or "
            "the model's gradient checkpointing); activation_checkpointing only configures it"
        )
    zero = effective_zero_stage(config)
    if config.overlap_grad_reduce and zero < 2 and config.dp > 1:
        notes.append(
            f"zero_optimization.overlap_comm is exported for ZeRO-2/3 only; check that stage {zero} overlaps the "
            "gradient reduction as the plan assumed"
        )
    return notes
