"""torchtitan 0.3 command-line overrides (``--module``, ``--config`` and ``--section.key`` flags)
for a mesh: ``plan export --format torchtitan``.

torchtitan 0.3 reads no job file. ``torchtitan/config/manager.py`` ConfigManager.parse_args takes
``--module <model>`` (a package under ``torchtitan/models`` with a ``config_registry``) and
``--config <function>`` (a function of that registry returning a ``Trainer.Config``), calls the
function, and parses every other argument with tyro as an override of the returned config
(``tyro.cli(config_cls, args=args, default=loaded_config)``). The command-line surface is frozen
(``torchtitan/config/configs.py`` module docstring), and ``Trainer.Config.model_spec`` is
``tyro.conf.Suppress``-ed (``torchtitan/trainer.py``): the model, its flavor and its converters
(fp8, MXFP8) are whatever the config function builds, never an override. So the model and its
precision choose the config function (``CONFIG_FUNCTIONS``), and what no function and no flag
says is refused.

Flags written, by field of ``torchtitan/config/configs.py`` (TrainingConfig, ParallelismConfig,
CompileConfig) and ``torchtitan/trainer.py`` (Trainer.Config): the spelling is torchtitan's own
(``--parallelism.tensor_parallel_degree 8``; booleans are tyro flags, ``--compile.enable`` or
``--compile.no_enable``; a ``list[str]`` is one comma-joined value, ConfigManager's
``list_str_rule``). Activation checkpointing is a tyro subcommand
(``torchtitan/distributed/activation_checkpoint.py`` ActivationCheckpointingConfig:
``activation_checkpoint:{selective,full,memory-budget,none}``), written last since tyro gives the
arguments after a subcommand to it. Every degree and the compile switches are written even at
their defaults: the config functions set their own (``llama3_70b`` tp 8, ``deepseek_v3_671b``
ep 2 and Interleaved1F1B, ``llama3_405b`` compile with async TP).

tests/test_frameworks.py parses every export with torchtitan 0.3.0's own ConfigManager
(tests/frameworks/torchtitan03_config.py) and checks the parsed degrees, batch and model.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost.flops import mtp_layers
from planner.export.common import (
    effective_zero_stage,
    num_microbatches,
    refuse,
    render_flags,
    routing_note,
    zero_note,
)
from planner.export.torchtitan import (
    RESHARD_AFTER_FORWARD,
    SCHEDULES,
    Flavor,
    check_shared,
    flavor_of,
    model_parts,
    shared_notes,
)
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig

TARGET = "torchtitan"
"""The format name (``plan export --format torchtitan``: the current release, 0.3)."""

VERSION = "0.3"


@dataclass(frozen=True)
class ConfigFunction:
    """One function of a torchtitan 0.3 ``config_registry``: the module (``--module``), the
    function (``--config``), the flavor it builds and the precision of its converters
    ("bf16": none; "fp8-row": torchao Float8Linear, whose 0.3 ``recipe_name`` defaults to
    "rowwise"; "fp8-block": MXFP8; "fp4": NVFP4), and how many of the last decoder layers its
    converter leaves in bf16 (its ``fqns``)."""

    module: str
    function: str
    flavor: str
    precision: str
    bf16_last_layers: int = 0


CONFIG_FUNCTIONS = (
    # torchtitan/models/llama3/config_registry.py: llama3_8b (model_registry("8B"), no converters),
    # llama3_8b_mxfp8 (MXFP8LinearConverter), llama3_70b, llama3_405b (Float8LinearConverter with
    # filter_fqns ["lm_head"]: the only 405B function, so 405B trains fp8 in 0.3)
    ConfigFunction("llama3", "llama3_8b", "8B", "bf16"),
    ConfigFunction("llama3", "llama3_8b_mxfp8", "8B", "fp8-block"),
    # llama3_8b_first_85_pct_layers_nvfp4: NVFP4LinearConverter over the layers that
    # components/quantization/nvfp4.py nvfp4_bf16_tail_fqns(32, 0.15) lists, keeping the last
    # ceil(32 x 0.15) = 5 and the lm_head in bf16 (qwen3's NVFP4 function is a fine-tuning one)
    ConfigFunction("llama3", "llama3_8b_first_85_pct_layers_nvfp4", "8B", "fp4", bf16_last_layers=5),
    ConfigFunction("llama3", "llama3_70b", "70B", "bf16"),
    ConfigFunction("llama3", "llama3_405b", "405B", "fp8-row"),
    # torchtitan/models/qwen3/config_registry.py: qwen3_0_6b, qwen3_1_7b, qwen3_14b, qwen3_32b,
    # qwen3_30b_a3b (4B, 8B and 235B-A22B have no pre-training function there)
    ConfigFunction("qwen3", "qwen3_0_6b", "0.6B", "bf16"),
    ConfigFunction("qwen3", "qwen3_1_7b", "1.7B", "bf16"),
    ConfigFunction("qwen3", "qwen3_14b", "14B", "bf16"),
    ConfigFunction("qwen3", "qwen3_32b", "32B", "bf16"),
    ConfigFunction("qwen3", "qwen3_30b_a3b", "30B-A3B", "bf16"),
    # torchtitan/models/deepseek_v3/config_registry.py: deepseek_v3_671b (attn_backend "flex"),
    # deepseek_v3_671b_float8 (Float8LinearConverter and Float8GroupedExpertsConverter)
    ConfigFunction("deepseek_v3", "deepseek_v3_671b", "671B", "bf16"),
    ConfigFunction("deepseek_v3", "deepseek_v3_671b_float8", "671B", "fp8-row"),
)
"""The pre-training config functions of torchtitan 0.3.0 for the flavors the planner matches by
shape (``planner.export.torchtitan.FLAVORS``, the same model_registry flavors in 0.3)."""


def precision_of(job: JobSpec) -> str:
    """The job's precision in ``ConfigFunction.precision`` terms."""
    return job.dtype if job.dtype != "fp8" else f"fp8-{job.fp8_scaling}"


def config_function(model: ModelSpec, job: JobSpec) -> ConfigFunction:
    """The config function that builds ``model``'s flavor at the job's precision, or a refusal
    naming those torchtitan 0.3 has for the flavor."""
    flavor: Flavor = flavor_of(model, TARGET)
    same = [f for f in CONFIG_FUNCTIONS if (f.module, f.flavor) == (flavor.name, flavor.flavor)]
    precision = precision_of(job)
    for function in same:
        if function.precision == precision:
            return function
    has = ", ".join(f"{f.function} ({f.precision})" for f in same) or "none"
    raise refuse(
        TARGET,
        f"{flavor.name} {flavor.flavor} in {precision}",
        f"torchtitan {VERSION}'s config_registry has {has} for it (the model and its fp8 converters come only "
        "from a config function: model_spec is no override)",
        mesh_bound=False,
    )


def _check(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> ConfigFunction:
    """Refuse what torchtitan 0.3 cannot run as planned; the config function otherwise."""
    function = config_function(model, job)
    if job.bf16_last_layers != function.bf16_last_layers:
        # the converters, and which linears they skip, are the config function's
        kept = function.bf16_last_layers
        raise refuse(
            TARGET,
            f"bf16_last_layers {job.bf16_last_layers}",
            f"{function.function} converts the linears its config function lists"
            + (f" (all but the last {kept} layers' and the lm_head's)" if kept else "")
            + f" and model_spec is no override: use --bf16-last-layers {kept}",
            mesh_bound=False,
        )
    if mtp_layers(model, job):
        # deepseek_v3's MTP is a model_registry argument (num_mtp_layers), set only by debug functions
        raise refuse(
            TARGET,
            f"{mtp_layers(model, job)} MTP layer(s)",
            f"{function.function} builds none and model_spec is no override: --mtp-layers 0",
            mesh_bound=False,
        )
    if config.recompute_layers is not None:
        raise refuse(
            TARGET,
            f"--recompute-layers {config.recompute_layers}",
            f"torchtitan {VERSION}'s activation_checkpoint is selective (per op), full, memory-budget or none, "
            "with no every-n-th-layer option",
        )
    check_shared(TARGET, job, config)
    divisor = seq_len_divisor(config)
    if job.seq_len % divisor:
        raise refuse(TARGET, f"seq_len {job.seq_len}", f"torchtitan {VERSION} needs it divisible by {divisor}")
    if config.ep > 1:
        _check_ep(model, config)
    if model.num_hidden_layers < config.pp * config.virtual_stages:
        raise refuse(TARGET, f"pp*virtual_stages = {config.pp * config.virtual_stages}", "at most one per layer")
    num_microbatches(TARGET, job, config)
    return function


def seq_len_divisor(config: ParallelConfig) -> int:
    """torchtitan/trainer.py Trainer.__init__: seq_len must divide by (tp if sequence parallel
    else 1) * (2 cp if cp > 1 else 1)."""
    return (config.tp if config.sequence_parallel else 1) * (2 * config.cp if config.cp > 1 else 1)


def _shard(config: ParallelConfig) -> int:
    """``data_parallel_shard_degree``: dp under FSDP (ZeRO-2/3), 1 when dp replicates (ZeRO-0)."""
    return config.dp if effective_zero_stage(config) >= 2 else 1


def _check_ep(model: ModelSpec, config: ParallelConfig) -> None:
    """torchtitan/distributed/parallel_dims.py (0.3): no expert tensor parallelism (ParallelismConfig
    has no expert_tensor_parallel_degree); the sparse mesh is (pp, dp_replicate, efsdp, ep) over the
    dense (dp_shard, cp, tp) ranks, efsdp = dp_shard*cp*tp / ep, so ep divides dp_shard*cp*tp."""
    if not model.is_moe:
        raise refuse(TARGET, f"--ep {config.ep}", f"{model.name} has no experts")
    if config.expert_tp != 1:
        raise refuse(
            TARGET, f"--expert-tp {config.expert_tp}", f"torchtitan {VERSION} has no expert tensor parallelism: use 1"
        )
    dense = _shard(config) * config.cp * config.tp
    if dense % config.ep:
        allowed = f"torchtitan {VERSION} takes EP from dp_shard*cp*tp = {dense}: ep must divide it"
        raise refuse(TARGET, f"--ep {config.ep}", allowed)


def _training(job: JobSpec, config: ParallelConfig) -> list[str]:
    """TrainingConfig: the batch as 0.2's (local = micro-batch without a pipeline, B/dp with one:
    the trainer runs global / (local * dp) accumulation steps and the pipeline splits local into
    micro-batches), seq_len, bf16 parameters; ``disable_cuda_graphs`` where Trainer.Config's
    _validate_cuda_graphs raises without it (pp > 1; ep > 1 with torchtitan's default
    dispatcher, which synchronises with the host)."""
    local = config.micro_batch_size if config.pp == 1 else job.batch_size // config.dp
    args = [
        "--training.local_batch_size", str(local),
        "--training.global_batch_size", str(job.batch_size),
        "--training.seq_len", str(job.seq_len),
        "--training.mixed_precision_param", "bfloat16",
    ]  # fmt: skip
    if config.pp > 1 or config.ep > 1:
        args.append("--training.disable_cuda_graphs")
    return args


def _parallelism(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> list[str]:
    """ParallelismConfig: replicate/shard degrees (ZeRO-0: dp replicas over FSDP's shard degree 1,
    HSDP's replicate axis; ZeRO-2/3: dp shards, resharded after forward or not), tp with sequence
    parallelism on or off (``enable_sequence_parallel``), cp, pp with its schedule, micro-batch
    and split, and ep, on the ``partial_dtensor`` SPMD backend. 0.3.0's default, ``spmd_types``,
    keeps parameters as plain tensors and hands FSDP its data-parallel mesh dims
    (torchtitan/distributed/full_dtensor.py resolve_fsdp_mesh), which torch 2.13's fully_shard
    refuses for every mesh ("When dp_mesh_dims is provided, all parameters must be DTensors on the
    full SPMD mesh", torch/distributed/fsdp/_fully_shard/_fsdp_param.py; tests/test_frameworks.py
    runs both), and its validate_config refuses CP with SDPA; ``partial_dtensor`` runs every mesh
    of the tests' spread on that torch, CP on SDPA included (parallelize_llama applies CP to the
    attention)."""
    zero = effective_zero_stage(config)
    p = "--parallelism."
    args = [
        f"{p}data_parallel_replicate_degree", str(config.dp if zero == 0 else 1),
        f"{p}data_parallel_shard_degree", str(_shard(config)),
    ]  # fmt: skip
    if zero >= 2:
        args += [f"{p}fsdp_reshard_after_forward", RESHARD_AFTER_FORWARD[zero]]
    args += [f"{p}tensor_parallel_degree", str(config.tp)]
    if config.tp > 1:
        args.append(f"{p}{'' if config.sequence_parallel else 'no_'}enable_sequence_parallel")
    args += [f"{p}context_parallel_degree", str(config.cp), f"{p}spmd_backend", "partial_dtensor"]
    args += [f"{p}pipeline_parallel_degree", str(config.pp)]
    if config.pp > 1:
        args += [
            f"{p}pipeline_parallel_schedule", SCHEDULES[config.schedule],
            f"{p}pipeline_parallel_microbatch_size", str(config.micro_batch_size),
        ]  # fmt: skip
        args += _split(model, job, config)
    return [*args, f"{p}expert_parallel_degree", str(config.ep)]


def _split(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> list[str]:
    """torchtitan/distributed/pipeline_parallel.py (0.3): even, ``pipeline_parallel_layers_per_stage``
    L/(p*v) with the first/last-stage weights at 0 (ceil(L/lps) = p*v stages); otherwise
    ``module_fqns_per_model_part``, one comma-joined value per chunk, with 0.3's module names
    (torchtitan/models/common/decoder.py: tok_embeddings, layers.<i>, norm, lm_head)."""
    p = "--parallelism."
    parts = model_parts(model, job, config, head=["norm", "lm_head"])
    if parts is None:
        per_stage = model.num_hidden_layers // (config.pp * config.chunks_per_rank)
        return [
            f"{p}pipeline_parallel_layers_per_stage", str(per_stage),
            f"{p}pipeline_parallel_first_stage_less_layers", "0",
            f"{p}pipeline_parallel_last_stage_less_layers", "0",
        ]  # fmt: skip
    return [f"{p}module_fqns_per_model_part", *(",".join(part) for part in parts)]


def _compile(job: JobSpec, config: ParallelConfig) -> list[str]:
    """CompileConfig: ``enable`` (the model, and the loss unless the job keeps it eager,
    ``JobSpec.loss_compiled``: the components, written since deepseek_v3_671b compiles only the
    loss) and ``enable_async_tensor_parallel`` (TP overlap; CompileConfig.__post_init__ raises
    unless the model is compiled), both always written."""
    if not job.compiled:
        return ["--compile.no_enable", "--compile.no_enable_async_tensor_parallel"]
    overlap = config.tp > 1 and job.tp_overlap
    asynchronous = "--compile.enable_async_tensor_parallel" if overlap else "--compile.no_enable_async_tensor_parallel"
    components = "model,loss" if job.loss_compiled else "model"
    return ["--compile.enable", "--compile.components", components, asynchronous]


CHECKPOINT_SUBCOMMANDS = {"none": "none", "full": "full", "selective": "selective"}
"""Planner recompute -> ActivationCheckpointingConfig subcommand: SelectiveAC is per-op (it saves
compute and communication outputs and recomputes every second matmul)."""


def torchtitan_args(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> list[str]:
    """The argv torchtitan 0.3's ``-m torchtitan.train`` parses for ``config``."""
    function = _check(model, job, config)
    return [
        "--module", function.module,
        "--config", function.function,
        *_training(job, config),
        *_parallelism(model, job, config),
        *_compile(job, config),
        f"activation_checkpoint:{CHECKPOINT_SUBCOMMANDS[config.recompute]}",
    ]  # fmt: skip


def torchtitan_args_notes(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> list[str]:
    """Where torchtitan 0.3 differs from what the plan priced, and what the overrides leave to
    the config function."""
    function = _check(model, job, config)
    notes = zero_note(config)
    if config.recompute == "selective" and job.software.selective_recompute != "alternate_matmuls":
        notes.append(
            "activation_checkpoint:selective saves matmul and communication outputs and recomputes the rest and "
            f"every second matmul; the plan priced recomputing the attention core ({job.software.name}'s selective "
            "recompute; --stack torchtitan prices the op policy), so memory and recompute differ"
        )
    if function.precision != "bf16":
        notes.append(f"{function.function} builds its {function.precision} converters: they need torchao")
    notes += shared_notes(
        model, job, config, "CompileConfig: 'Async TP requires model in --compile.components and --compile.enable'",
        "the overrides leave it off",
    )  # fmt: skip
    notes.append(
        "torchtitan 0.3 runs its language models' attention as FlexAttention with per-document masks (its SDPA "
        "path is gone: models/common/config_utils.py), context parallelism over it as a K/V all-gather, and the step "
        "as a CUDA graph where pp and ep are 1; the plan priced the fused SDPA kernel, a K/V ring and eager "
        "launches, as the 0.2-era runs its torchtitan calibration rests on measured"
    )
    if config.pp > 1 or config.ep > 1:
        notes.append("CUDA graphs are off (--training.disable_cuda_graphs): torchtitan refuses them with pp or ep > 1")
    notes += routing_note(job, config, flags_written=False)
    notes.append(
        f"optimizer, data, tokenizer and checkpoint settings are {function.function}'s (add --optimizer.lr and "
        "the like to change them)"
    )
    return notes


def torchtitan_args_text(model: ModelSpec, job: JobSpec, config: ParallelConfig, header: str | None = None) -> str:
    """The overrides as text: a header comment, the notes, then the flags."""
    comments = ([header] if header else []) + [f"note: {n}" for n in torchtitan_args_notes(model, job, config)]
    return render_flags(torchtitan_args(model, job, config), comments, subcommands=True)
