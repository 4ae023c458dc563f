"""Megatron-LM command-line arguments for a mesh (``pretrain_gpt.py`` and friends).

Every flag below was checked against NVIDIA/Megatron-LM ``megatron/training/arguments.py`` as
stored at commit 000c4ac24f61159c138b0975def722c65245983c (2025): the group that defines it is
named next to each mapping. Hybrid Mamba-2 models and LatentMoE are written for the first release
that trains them (``HYBRID_RELEASE``); tests/test_frameworks.py runs every export through that
release's own parse_args and validate_args. What the planner decides maps to flags; the model's architecture
(hidden size, heads, GQA groups, RoPE, SwiGLU, norms, untied embeddings, experts, MLA) is written
out too (``_model_args``), so the arguments build the model the plan priced; the vocabulary comes
from the user's tokenizer.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np

from planner.cost.comm import mesh_links
from planner.cost.flops import attended_keys, attention_kernel_for, chunked_keys, flash_attention_runs, mtp_layers
from planner.cost.layout import check_layout, format_layout, parse_layout, rank_layer_counts
from planner.cost.memory import fp8_parameters
from planner.cost.pipeline import plan_layout, split_stages
from planner.export.common import (
    check_adam_state,
    effective_zero_stage,
    is_default_order,
    num_microbatches,
    refuse,
    render_flags,
    routing_note,
    zero_note,
)
from planner.hf_config import LLAMA4_TYPES
from planner.mesh import MeshArrays, shards_nothing
from planner.schedules import microbatch_group_size
from planner.schemas.job import ADAM_STATE_BYTES_PER_PARAM, JobSpec, check_positions
from planner.schemas.model import MAMBA_CHUNK_SIZE, MAMBA_CONV_KERNEL, ModelSpec
from planner.schemas.parallel import DUAL_SCHEDULES, ParallelConfig

if TYPE_CHECKING:
    from planner.schemas.hardware import ClusterSpec

TARGET = "megatron"

FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}
"""ZeRO stage -> Megatron-FSDP ``--data-parallel-sharding-strategy`` (arguments.py
_add_distributed_args: choices no_shard, optim, optim_grads, optim_grads_params; the Megatron-FSDP
README, megatron/core/distributed/fsdp/src/README.md, equates them with ZeRO 0-3)."""


def _check(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> None:
    """Refuse what Megatron-LM cannot run as planned."""
    check_adam_state(TARGET, job, bf16_moments=True)
    check_positions(model, job)  # learned positions: validate_args asserts max_position_embeddings >= seq_length
    if config.pp > 1 and config.schedule == "gpipe":
        # arguments.py has no schedule flag: pipeline runs are 1F1B, interleaved when a virtual
        # pipeline size is set (megatron/core/pipeline_parallel/schedules.py).
        raise refuse(TARGET, "--schedule gpipe", "Megatron-LM pipelines run 1F1B (interleaved with virtual stages)")
    if config.pp > 1 and config.schedule in ("zb-h1", *DUAL_SCHEDULES):
        raise refuse(
            TARGET,
            f"--schedule {config.schedule}",
            "Megatron-LM has no zero-bubble or DualPipe schedule flag; use 1f1b or interleaved-1f1b",
        )
    if not is_default_order(config) and config.order != "tp-cp-pp-dp":
        # Megatron-LM's rank order is tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping
        # (arguments.py _add_distributed_args).
        raise refuse(TARGET, f"--order {config.order}", "Megatron-LM places ranks tp-cp-dp-pp or tp-cp-pp-dp")
    if model.is_moe and config.order == "tp-cp-pp-dp" and config.ep * config.expert_tp != config.tp * config.cp:
        # megatron/core/parallel_state.py initialize_model_parallel: "When not using pp-last rank
        # ordering, the data parallel size of the attention and moe layers must be the same"
        # (checked with Megatron-Core 0.16.1 itself, tests/test_frameworks.py)
        raise refuse(
            TARGET,
            f"--order tp-cp-pp-dp with ep {config.ep} x expert_tp {config.expert_tp}",
            f"Megatron-Core's pp-before-dp placement needs the expert layers' data-parallel size to equal the "
            f"attention layers' (ep x expert_tp = tp x cp = {config.tp * config.cp}); use --order tp-cp-dp-pp",
        )
    zero = effective_zero_stage(config, model.is_moe)
    if zero >= 2 and config.pp > 1:
        # ZeRO-2/3 is Megatron-FSDP here; it does not run with pipeline parallelism
        # (NVIDIA/Megatron-LM issue #1455, open; PR #6081: "FSDP and PP are mutually exclusive in
        # Megatron's standard path"). --use-torch-fsdp2 asserts pipeline_model_parallel_size == 1.
        raise refuse(
            TARGET,
            f"--zero-stage {zero} with pp {config.pp}",
            "Megatron-FSDP (ZeRO-2/3) does not run with pipeline parallelism; use --zero-stage 1 or --pp 1",
        )
    if config.cp > 1 and job.seq_len % (2 * config.cp):
        # arguments.py validate_args: "seq-length should be a multiple of 2 * context-parallel-size".
        raise refuse(TARGET, f"seq_len {job.seq_len} with cp {config.cp}", "Megatron-LM needs seq_len % (2*cp) == 0")
    if job.dtype == "fp8" and job.fp8_scaling not in FP8_RECIPES:
        raise refuse(TARGET, f"fp8 scaling '{job.fp8_scaling}'", "Megatron-LM's fp8 recipes scale per tensor or "
                     "per MXFP8 block", mesh_bound=False)  # fmt: skip
    if (
        effective_zero_stage(config, model.is_moe) == 0
        and config.dp * config.cp > 1
        and (job.optimizer_state_bytes_per_param == ADAM_STATE_BYTES_PER_PARAM["bf16"])
    ):
        # megatron/core/optimizer/optimizer_config.py: "--use-precision-aware-optimizer only
        # supported with distributed optimizer"
        raise refuse(TARGET, "Adam moments in bf16 with --zero-stage 0", "Megatron-LM keeps them in bf16 only in "
                     "its distributed optimizer: --zero-stage 1")  # fmt: skip
    if config.ep > 1 and not model.is_moe:
        raise refuse(TARGET, f"--ep {config.ep}", f"{model.name} has no experts")
    if config.ep > 1 and job.dtype == "fp16":
        # arguments.py validate_args: "Expert parallelism is not supported with fp16 training."
        raise refuse(TARGET, "--ep > 1 with --dtype fp16", "Megatron-LM runs expert parallelism in bf16 or fp8 only")
    if config.ep > 1 and config.tp > 1 and not config.sequence_parallel:
        # megatron/core/transformer/transformer_config.py __post_init__: "When using expert
        # parallelism and tensor parallelism, sequence parallelism must be used".
        raise refuse(TARGET, "tp > 1 with ep > 1 and no sequence parallelism", "add --sequence-parallel")
    if model.num_hidden_layers < config.pp * config.virtual_stages and (
        model.is_hybrid or config.pp == 1 or pipeline_layout(model, job, config) is None
    ):
        # more chunks than layers only through a layout whose embedding and loss fill chunks of their own
        # (Megatron-Core's validate_layer_layout takes an 'E' or 'L' stage: 'E|(t|)*126L' on 128 chunks)
        raise refuse(TARGET, f"pp*virtual_stages = {config.pp * config.virtual_stages}", "at most one per layer")
    num_microbatches(TARGET, job, config)


def pipeline_layout(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> str | None:
    """The layout string Megatron must be given for the split the plan priced: the config's own
    layout, else the plan's split where it is not the even one (``cost.pipeline.plan_layout``),
    checked against Megatron's rules before it is written; None for the even split."""
    if config.pipeline_layout is not None:
        text = format_layout(parse_layout(config.pipeline_layout))
    else:
        text = plan_layout(model, job, config.pp, config.virtual_stages)
    if text is not None:
        check_layout(parse_layout(text), model.num_hidden_layers, config.pp, mtp_layers(model, job))
    return text


def _pipeline_args(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> list[str]:
    """Virtual stages and uneven splits. An even split with v > 1 uses
    --num-layers-per-virtual-pipeline-stage L/(p*v) (accepted by old and new releases); any other
    split --pipeline-model-parallel-layout, which also sets v (arguments.py validate_args allows at
    most one of the two, and --num-virtual-stages-per-pipeline-rank). MTP layers: --mtp-num-layers
    (Megatron-Core places them on the last stage unless the layout says otherwise)."""
    mtp = mtp_layers(model, job)
    args = ["--mtp-num-layers", str(mtp)] if mtp else []
    if config.pp == 1 or model.is_hybrid:  # a hybrid's stages are its pattern's '|' segments
        return [*args, *_group_args(job, config)]
    layout = pipeline_layout(model, job, config)
    if layout is not None:
        return [*args, "--pipeline-model-parallel-layout", layout, *_group_args(job, config)]
    if config.virtual_stages > 1:
        args += [
            "--num-layers-per-virtual-pipeline-stage",
            str(model.num_hidden_layers // (config.pp * config.virtual_stages)),
        ]
    return [*args, *_group_args(job, config)]


def _group_args(job: JobSpec, config: ParallelConfig) -> list[str]:
    """--microbatch-group-size-per-virtual-pipeline-stage N where the interleaved schedule's
    micro-batch count is no multiple of pp (Megatron-LM's default N is pp;
    ``schedules.microbatch_group_size``)."""
    if config.virtual_stages == 1:
        return []
    m = num_microbatches(TARGET, job, config)
    group = int(microbatch_group_size(np.array(config.pp), np.array(m)))
    return [] if group == config.pp else ["--microbatch-group-size-per-virtual-pipeline-stage", str(group)]


def _recompute_args(config: ParallelConfig, job: JobSpec) -> list[str]:
    """arguments.py _add_training_args: --recompute-granularity {full, selective} (selective
    recomputes --recompute-modules, default core_attn: the attention core; the job's
    recompute_modules are written out, as the planner priced them);
    full with --recompute-method uniform --recompute-num-layers 1 recomputes every layer from its
    input; --recompute-method block --recompute-num-layers r recomputes the first r layers of each
    (virtual) pipeline stage and keeps the rest (selective takes no method: validate_args asserts
    recompute_method is None). A plan that offloads activations instead writes
    --cpu-offloading-num-layers N (the TransformerConfig field; arguments.py has no --cpu-offloading
    flag and turns offloading on where N > 0; pp 1, no recompute)."""
    if config.recompute == "selective":
        modules = ["--recompute-modules", *job.recompute_modules] if job.recompute_modules else []
        return ["--recompute-granularity", "selective", *modules]
    if config.recompute == "full" and config.recompute_layers is not None:
        return [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "block",
            "--recompute-num-layers",
            str(config.recompute_layers),
        ]
    if config.recompute == "full":
        return ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if config.offload_layers is not None:
        # TransformerConfig cpu_offloading_num_layers (activations by default); validate_args sets
        # cpu_offloading from it
        return ["--cpu-offloading-num-layers", str(config.offload_layers)]
    return []


def _data_parallel_args(config: ParallelConfig, moe: bool) -> list[str]:
    """ZeRO and overlap (arguments.py _add_distributed_args).

    ZeRO-1: --use-distributed-optimizer (optimizer states sharded over the DP x CP ranks).
    ZeRO-2/3: Megatron-FSDP, --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads |
    optim_grads_params, with the flags its guide pairs with it (docs: --use-distributed-optimizer,
    --no-gradient-accumulation-fusion) and --ckpt-format fsdp_dtensor, which validate_args asserts.
    Overlap: --overlap-grad-reduce; with a sharded optimizer also --overlap-param-gather
    (validate_args: it needs the distributed optimizer or Megatron-FSDP, and --overlap-grad-reduce).
    """
    zero = effective_zero_stage(config, moe)
    args: list[str] = []
    if zero == 1:
        args.append("--use-distributed-optimizer")
    elif zero >= 2:
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", FSDP_STRATEGY[zero]]
        args += ["--use-distributed-optimizer", "--no-gradient-accumulation-fusion", "--ckpt-format", "fsdp_dtensor"]
    if config.overlap_grad_reduce and not shards_nothing(moe, config):
        args.append("--overlap-grad-reduce")
        if zero >= 1:
            args.append("--overlap-param-gather")
    return args


FP8_RECIPES = {"tensor": "tensorwise", "block": "mxfp8"}
"""The job's fp8 scaling -> ``--fp8-recipe`` (arguments.py: delayed, tensorwise, mxfp8, blockwise):
per-tensor current scaling (Megatron-Bridge's FP8-CS) and MXFP8 blocks (FP8-MX), or, on a GPU
without MXFP8 tensor cores (``fp8_recipe``), the 128-element tiles of 'blockwise'. Left unset,
Megatron runs delayed scaling, which refuses the layernorm and moe_act recompute the plan may
choose (transformer_config.py); torchao's row-wise scaling has no Megatron recipe."""


def fp8_recipe(job: JobSpec, cluster: ClusterSpec | None) -> str:
    """``--fp8-recipe`` for the job on the cluster's GPU: block scaling is 'mxfp8' on data-centre
    Blackwell (or where the GPU is not known) and 'blockwise' (Transformer Engine's
    Float8BlockScaling, DeepSeek-V3's tiles) on Hopper and GB202, which have no MXFP8 tensor cores
    (``schemas.hardware.MXFP8_ARCHITECTURES``)."""
    if job.fp8_scaling == "block" and cluster is not None and not cluster.gpu.has_mxfp8:
        return "blockwise"
    return FP8_RECIPES[job.fp8_scaling]


ATTENTION_BACKENDS = {"fused": "fused", "fa2": "flash", "sdpa": "auto"}
"""The stack's attention kernel -> ``--attention-backend`` (AttnBackend: flash, fused, unfused,
local, auto): 'fused' is Transformer Engine's cuDNN fused attention, 'flash' FlashAttention."""


def tp_inside_nvlink(config: ParallelConfig, cluster: ClusterSpec | None) -> bool:
    """Whether the mesh's TP group stays inside one NVLink domain of ``cluster``, placed as the cost
    model places it (``cost.comm.mesh_links``: a group crossing the fast domain prices no TP overlap,
    ``cost.traffic.tp_per_microbatch``); without a cluster, taken as inside (the caller knows no
    placement)."""
    if cluster is None:
        return True
    return not bool(mesh_links(cluster, MeshArrays.from_configs([config]))["tp"].crosses[0])


def tp_overlap_runs(job: JobSpec, config: ParallelConfig, cluster: ClusterSpec | None) -> bool:
    """--tp-comm-overlap is written where the plan priced TP overlap: the job runs it, with tp > 1,
    sequence parallelism (validate_args refuses the flag without it) and the TP group inside one
    NVLink domain (Transformer Engine's userbuffers exchange through peer GPU memory over NVLink)."""
    return job.tp_overlap and config.tp > 1 and config.sequence_parallel and tp_inside_nvlink(config, cluster)


def _gradient_args(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> list[str]:
    """The format the plan keeps and reduces gradients in (``JobSpec.gradient_format``), as
    megatron/training/arguments.py resolves it: under --bf16 fp32 (accumulate_allreduce_grads_in_fp32
    is switched on) unless --grad-reduce-in-bf16; under --fp16 the parameters' fp16 unless
    --accumulate-allreduce-grads-in-fp32 (the fp16 branch reads neither that default nor
    --grad-reduce-in-bf16, which Megatron-FSDP alone reads, as its grad_comm_dtype). What it cannot
    keep is refused: fp16 gradients of a bf16 model, bf16 ones of an fp16 model outside
    Megatron-FSDP (a review, 2026-12-08: both had been exported with Megatron's default, twice or
    half the gradient bytes priced, and fp32 under --fp16 as fp16)."""
    fmt = job.gradient_format  # a stack's default is always one of the kept ones (fp16 under --fp16)
    fsdp = effective_zero_stage(config, model.is_moe) >= 2
    if job.dtype == "fp16":
        if fmt == "fp32":
            return ["--accumulate-allreduce-grads-in-fp32"]
        if fmt == "bf16" and fsdp:
            return ["--grad-reduce-in-bf16"]
        if fmt == "bf16":
            raise refuse(
                TARGET,
                "bf16 gradients of an fp16 model",
                "Megatron keeps them in fp16 or, with --accumulate-allreduce-grads-in-fp32, fp32 (bf16 only under "
                "Megatron-FSDP, --zero-stage 2 or 3); use --gradient-dtype fp16 or fp32",
                mesh_bound=False,
            )
        return []
    if fmt == "fp16":
        raise refuse(
            TARGET,
            f"fp16 gradients of a {job.dtype} model",
            "Megatron keeps a bf16 model's gradients in fp32 or, with --grad-reduce-in-bf16, bf16; "
            "use --gradient-dtype fp32 or bf16",
            mesh_bound=False,
        )
    return ["--grad-reduce-in-bf16"] if fmt == "bf16" else []


def _job_args(model: ModelSpec, job: JobSpec, config: ParallelConfig, cluster: ClusterSpec | None) -> list[str]:
    """Precision (_add_mixed_precision_args --bf16/--fp16; _add_transformer_engine_args
    --fp8-format {e4m3, hybrid}: hybrid is E4M3 forward, E5M2 backward, on bf16 weights), and the
    assumptions the plan priced: Megatron-LM defaults --attention-dropout and --hidden-dropout to
    0.1 (_add_regularization_args), so a job without dropout sets them to 0; the attention kernel
    the stack runs (--attention-backend; unfused without flash attention keeps the s x s scores
    the plan counted, and sinks a stack runs in Megatron's own attention go to 'local'); TP
    communication overlap (_add_training_args --tp-comm-overlap, which validate_args allows only
    with --sequence-parallel; ``tp_overlap_runs``); the gradients' format (``_gradient_args``); Adam's moments in bf16
    (--use-precision-aware-optimizer). fp4 is --fp4-format e2m1 --fp4-recipe nvfp4 (Transformer
    Engine's NVFP4BlockScaling); the layers kept in bf16 are --first-last-layers-bf16's."""
    args = {
        "bf16": ["--bf16"],
        "fp16": ["--fp16"],
        "fp8": ["--bf16", "--fp8-format", "hybrid"],
        "fp4": ["--bf16", "--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"],
    }[job.dtype]
    if job.dtype == "fp8":
        recipe = fp8_recipe(job, cluster)
        args += ["--fp8-recipe", recipe]
        if bool(fp8_parameters(job, MeshArrays.from_configs([config]), model.is_moe)[0]):
            # the fp8 weights the plan's memory and parameter all-gather priced (memory.fp8_parameters;
            # validate_args allows it with the distributed optimizer or Megatron-FSDP); MXFP8 gathers
            # them in bf16 through the gradient buffer, as priced and as Megatron-Bridge's
            # bf16_with_mxfp8_mixed sets it (validate_args turns it off under Megatron-FSDP)
            args.append("--fp8-param-gather")
            if recipe == "mxfp8" and effective_zero_stage(config, model.is_moe) == 1:
                args.append("--reuse-grad-buf-for-mxfp8-param-ag")
    if job.bf16_last_layers:
        # _add_transformer_engine_args: --first-last-layers-bf16 with --num-layers-at-start-in-bf16
        # and --num-layers-at-end-in-bf16 (both default 1)
        args += ["--first-last-layers-bf16", "--num-layers-at-start-in-bf16", "0"]
        args += ["--num-layers-at-end-in-bf16", str(job.bf16_last_layers)]
    if not job.dropout:
        args = [*args, "--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    backend = ATTENTION_BACKENDS[attention_kernel_for(model, job)] if flash_attention_runs(model, job) else "unfused"
    if model.attention_sinks and job.software.sink_attention == "local":
        # a release whose Transformer Engine predates sinks (< 2.8: TEDotProductAttention asserts it)
        # runs them in Megatron's own attention, as Megatron-Bridge's GPTOSSProvider falls back to
        backend = "local"
    args = [*args, "--attention-backend", backend]
    if tp_overlap_runs(job, config, cluster):
        args.append("--tp-comm-overlap")
    args += _gradient_args(model, job, config)
    if job.software.cross_entropy_fusion == "te":
        # the fused loss the stack's loss figures count (Stack.cross_entropy_fusion); Megatron's defaults are
        # off and native, the vocab-parallel loss on fp32 logits (model_parallel_config.py)
        args += ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te"]
    if model.is_moe and job.software.moe_permute_fusion:
        args.append("--moe-permute-fusion")  # the one read and write of the routed tokens priced
    if job.optimizer_state_bytes_per_param == ADAM_STATE_BYTES_PER_PARAM["bf16"]:
        # _add_training_args: TE FusedAdam keeping m and v in bf16, the master weight in fp32
        args += ["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
        if effective_zero_stage(config, model.is_moe) == 0:
            # optimizer_config.py: the precision-aware optimizer runs only in the distributed
            # optimizer; with dp*cp = 1 it shards over one rank, which is ZeRO-0 as priced
            args.append("--use-distributed-optimizer")
    return args


def megatron_args(
    model: ModelSpec, job: JobSpec, config: ParallelConfig, cluster: ClusterSpec | None = None
) -> list[str]:
    """The Megatron-LM arguments for ``config``, as a flat argv list (flags and their values).

    ``job`` is the job the mesh runs (its global batch may have grown, see JobSpec.max_batch_growth);
    ``cluster``, where given, places the TP group (``tp_overlap_runs``).
    Raises PlannerError when Megatron-LM cannot express the mesh (GPipe or ZB-H1 pipelines,
    ZeRO-2/3 with pp > 1, a rank order other than tp-cp-dp-pp or tp-cp-pp-dp, ...).
    """
    _check(model, job, config)
    # _add_distributed_args: sizes of each parallelism; _add_moe_args: expert sizes. Megatron
    # defaults --expert-tensor-parallel-size to the TP size, the planner to 1: always set it.
    args = [
        "--tensor-model-parallel-size",
        str(config.tp),
        "--pipeline-model-parallel-size",
        str(config.pp),
        "--context-parallel-size",
        str(config.cp),
    ]
    if model.is_moe:
        args += ["--expert-model-parallel-size", str(config.ep), "--expert-tensor-parallel-size", str(config.expert_tp)]
        args += _moe_routing_args(job) + _dispatcher_args(job, cluster)
        if job.ep_comm_overlap and config.ep > 1:
            args.append("--overlap-moe-expert-parallel-comm")  # _add_moe_args
    if config.order == "tp-cp-pp-dp":
        args.append("--use-tp-pp-dp-mapping")
    # _add_network_size_args --num-layers; _add_data_args --seq-length.
    args += ["--num-layers", str(model.num_hidden_layers), "--seq-length", str(job.seq_len)]
    args += _model_args(model, job, config)
    args += _pipeline_args(model, job, config)
    if config.sequence_parallel:
        args.append("--sequence-parallel")  # _add_training_args
    # _add_training_args: --micro-batch-size (per model instance), --global-batch-size (sequences).
    args += ["--micro-batch-size", str(config.micro_batch_size), "--global-batch-size", str(job.batch_size)]
    args += _recompute_args(config, job) + _data_parallel_args(config, model.is_moe)
    return args + _job_args(model, job, config, cluster)


def max_positions(model: ModelSpec, job: JobSpec) -> int:
    """--max-position-embeddings: the model's, raised to the sequence for RoPE. validate_args asserts
    "max_position_embeddings (...) must be greater than or equal to seq_length" whatever the
    position type (arguments.py at the commit above); with RoPE no table is sized by it
    (megatron/core/models/gpt/gpt_model.py: it goes to LanguageModelEmbedding, which builds a
    position table only for learned_absolute, and RotaryEmbedding takes the sequence from its
    input), so raising it changes nothing the plan priced. Learned positions keep the model's
    table (``schemas.job.check_positions`` refuses a longer sequence)."""
    if model.position_embedding_type == "learned":
        return model.max_position_embeddings
    return max(model.max_position_embeddings, job.seq_len)


def _model_args(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> list[str]:
    """The architecture the plan priced, as arguments.py reads it: _add_network_size_args
    (--hidden-size, --ffn-hidden-size, --num-attention-heads, --kv-channels, --group-query-attention
    --num-query-groups, --max-position-embeddings, --position-embedding-type, --normalization,
    --swiglu / --squared-relu, GPT-OSS's --quick-geglu, --untie-embeddings-and-output-weights,
    --qk-layernorm), the linear-bias flags (--disable-bias-linear, --add-qkv-bias), _add_moe_args (--num-experts,
    --moe-router-topk, --moe-ffn-hidden-size, --moe-router-num-groups and --moe-router-group-topk of
    group-limited routing, --moe-shared-expert-intermediate-size,
    --moe-layer-freq as a Python list expression), sliding windows and sinks (--window-size,
    --window-attn-skip-freq, --softmax-type learnable) and _add_mla_args (--multi-latent-attention,
    --q-lora-rank, --kv-lora-rank, --qk-head-dim, --qk-pos-emb-head-dim, --v-head-dim).
    Megatron's MLP activation is GELU unless --swiglu or --squared-relu; it has no gated GELU."""
    if model.position_embedding_type == "alibi":
        # arguments.py --position-embedding-type: learned_absolute, rope, mrope, relative, none
        raise refuse(
            TARGET, "ALiBi positions", "Megatron-LM has learned, RoPE and relative positions", mesh_bound=False
        )
    if model.is_gated_mlp and model.hidden_act.lower() not in ("silu", "swish", "swiglu"):
        raise refuse(
            TARGET, f"gated {model.hidden_act} MLP", "Megatron-LM gates only SiLU (--swiglu)", mesh_bound=False
        )
    h, a = model.hidden_size, model.num_attention_heads
    args = ["--hidden-size", str(h), "--ffn-hidden-size", str(model.intermediate_size), "--num-attention-heads", str(a)]
    if not model.is_mla:
        if model.head_dim_resolved * a != h:
            args += ["--kv-channels", str(model.head_dim_resolved)]
        if model.num_kv_heads < a:
            args += ["--group-query-attention", "--num-query-groups", str(model.num_kv_heads)]
    args += ["--max-position-embeddings", str(max_positions(model, job))]
    position = {"learned": "learned_absolute", "none": "none"}.get(model.position_embedding_type, "rope")
    args += ["--position-embedding-type", position, *rope_args(model)[0]]
    if model.is_hybrid:
        args += _hybrid_args(model, job, config)
    args += ["--normalization", "LayerNorm" if model.norm_type == "layernorm" else "RMSNorm"]
    if model.model_type == "gpt_oss":
        # its clamped SwiGLU, x*sigmoid(1.702x) of the gate times (up + 1), both clamped at 7: Megatron's
        # quick-GEGLU with a linear offset (Megatron-Bridge GPTOSSProvider: activation_func quick_gelu,
        # glu_linear_offset 1.0, activation_func_clamp_value 7.0), priced as SwiGLU
        args += ["--quick-geglu", "--glu-linear-offset", "1.0", "--activation-func-clamp-value", "7.0"]
    elif model.is_gated_mlp:
        args.append("--swiglu")
    elif model.hidden_act.lower() == "relu2":
        args.append("--squared-relu")
    if not model.tie_word_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not model.mlp_bias:
        args.append("--disable-bias-linear")
        if model.attention_bias:
            args.append("--add-qkv-bias")
    if model.qk_norm or model.is_mla:
        # Qwen3's per-head q/k norms; MLA's latent norms (DeepSeek's q_a_layernorm and kv_a_layernorm):
        # Megatron-Core's MLA spec builds q_layernorm and kv_layernorm only with qk_layernorm (gpt_layer_specs.py:
        # "q_layernorm=TENorm if qk_layernorm else IdentityOp"), as Megatron-Bridge's DeepSeek providers set it
        args.append("--qk-layernorm")
    if model.norm_eps is not None:
        args += ["--norm-epsilon", f"{model.norm_eps:g}"]
    if model.is_moe:
        args += ["--num-experts", str(model.num_experts_total), "--moe-router-topk", str(model.num_experts_per_tok)]
        # TEGroupedMLP, the grouped GEMMs the stack prices (without it, SequentialMLP loops over the
        # experts, and transformer_config.py refuses moe_act recompute)
        args.append("--moe-grouped-gemm")
        args += ["--moe-ffn-hidden-size", str(model.expert_intermediate_size)]
        args += _router_args(model)
        groups, per_token = model.routing_groups
        if groups > 1:  # the group-limited routing a flex dispatch was priced with (comm.domains_reached)
            args += ["--moe-router-num-groups", str(groups), "--moe-router-group-topk", str(per_token)]
        if model.shared_expert_width:
            args += ["--moe-shared-expert-intermediate-size", str(model.shared_expert_width)]
        if model.moe_latent_size:  # LatentMoE (Nemotron 3 Super): _add_moe_args at HYBRID_RELEASE
            args += ["--moe-latent-size", str(model.moe_latent_size)]
        pattern = [int(model.is_moe_layer(i)) for i in range(model.num_hidden_layers)]
        if not all(pattern) and not model.is_hybrid:  # a hybrid's pattern places its MoE blocks ('E')
            args += ["--moe-layer-freq", _list_expression(pattern)]
    if model.sliding_window is not None:
        # Megatron-Core's (left, right) window as Megatron-Bridge maps HF's sliding_window onto it
        # (GPTOSSProvider: window_size (128, 0) for sliding_window 128); --window-attn-skip-freq
        # when only some layers slide (``_window_pattern``)
        args += ["--window-size", f"{model.sliding_window},0"]
        if model.num_sliding_layers < model.num_hidden_layers:
            args += ["--window-attn-skip-freq", _window_pattern(model)]
    if model.attention_sinks:
        args += ["--softmax-type", "learnable"]
    if model.num_chunked_layers:
        # Llama 4: its chunked layers are its RoPE layers, the others NoPE (HF Llama4TextConfig: layer_types
        # 'chunked_attention' exactly where no_rope_layers is 1); Megatron's --no-rope-freq names the NoPE ones
        args += ["--no-rope-freq", _nope_pattern(model)]
    if model.is_mla:
        args.append("--multi-latent-attention")
        if model.q_lora_rank:
            args += ["--q-lora-rank", str(model.q_lora_rank)]
        args += ["--kv-lora-rank", str(model.kv_lora_rank), "--qk-head-dim", str(model.qk_nope_head_dim)]
        args += ["--qk-pos-emb-head-dim", str(model.qk_rope_head_dim), "--v-head-dim", str(model.v_head_dim)]
    return args


LLAMA3_ROPE_SCALING = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
"""The llama3 RoPE scaling Megatron-Core applies with --use-rope-scaling: only the factor is an
argument (--rope-scaling-factor), the rest fixed at Llama 3.1's values
(megatron/core/models/common/embeddings/rotary_pos_embedding.py ``_apply_scaling`` at
``HYBRID_RELEASE``; Megatron-Bridge's Llama31ModelProvider: 8, 1, 4, 8192)."""

MLA_YARN_FIXED = {"original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}
"""The YaRN settings MLATransformerConfig fixes at DeepSeek-V3's values (transformer_config.py at
``HYBRID_RELEASE``); the factor, mscale and mscale_all_dim are arguments (--rotary-scaling-factor,
--mscale, --mscale-all-dim, whose argparse defaults 1, 1 and 0 replace the config's own)."""


def rope_args(model: ModelSpec) -> tuple[list[str], str | None]:
    """(flags, note) for the checkpoint's RoPE, which decides which model trains, not its cost:
    --rotary-base from ``rope_theta`` (an int argument, _add_network_size_args; Megatron's default
    10000 otherwise), llama3 scaling as --use-rope-scaling --rope-scaling-factor where the rest is
    ``LLAMA3_ROPE_SCALING``, and an MLA model's YaRN as --rope-type yarn --rotary-scaling-factor
    --mscale --mscale-all-dim where the rest is ``MLA_YARN_FIXED``. The note says what the
    arguments leave out: an unstated base, a fractional one, or a scaling they cannot express
    (YaRN on standard attention, as GPT-OSS's, which Megatron-Bridge's GPTOSSProvider sets in code)."""
    if model.position_embedding_type != "rope":
        return [], None
    args: list[str] = []
    notes: list[str] = []
    theta = model.rope_theta
    if theta is None:
        notes.append(
            "RoPE's base and scaling are the checkpoint's (Hugging Face rope_theta, rope_scaling), which the model "
            "file does not state: set --rotary-base (Megatron's default is 10000) and, for Llama 3.1-style scaling, "
            "--use-rope-scaling --rope-scaling-factor to match"
        )
    elif theta != int(theta):
        notes.append(f"RoPE's base {theta:g} is not an integer, which --rotary-base takes: the run trains without it")
    else:
        args += ["--rotary-base", str(int(theta))]
    scaling = model.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = scaling.get("factor")
    if kind in (None, "default"):
        pass
    elif not isinstance(factor, int | float):
        notes.append(f"the checkpoint's RoPE scaling ({kind}) states no factor: the run trains without it")
    elif kind == "llama3" and all(scaling.get(k) == v for k, v in LLAMA3_ROPE_SCALING.items()):
        args += ["--use-rope-scaling", "--rope-scaling-factor", f"{factor:g}"]
    elif kind == "yarn" and model.is_mla and all(scaling.get(k, v) == v for k, v in MLA_YARN_FIXED.items()):
        args += ["--rope-type", "yarn", "--rotary-scaling-factor", f"{factor:g}"]
        args += [
            "--mscale",
            f"{scaling.get('mscale', 1.0):g}",
            "--mscale-all-dim",
            f"{scaling.get('mscale_all_dim', 0.0):g}",
        ]
    else:
        notes.append(
            f"the checkpoint's RoPE scaling ({kind}, factor {factor}) has no Megatron-LM argument for this attention "
            "(Megatron-Bridge's model providers set it in code): the run trains without it"
        )
    return args, "; ".join(notes) or None


ROUTER_SCORE_FUNCTIONS = ("softmax", "sigmoid")
"""The score functions Megatron-Core's router has (TransformerConfig moe_router_score_function;
moe_utils.topk_routing_with_score_function)."""


def _router_args(model: ModelSpec) -> list[str]:
    """The checkpoint's router, so that the run trains the model the plan names (not priced: the
    router's cost does not depend on it), as Megatron-Core's topk_routing_with_score_function
    computes it (moe_utils.py at ``HYBRID_RELEASE``; flags in _add_moe_args since 2025):
    --moe-router-score-function sigmoid; --moe-router-enable-expert-bias (aux-loss-free balancing:
    the bias joins the sigmoid scores for the top-k choice only; TransformerConfig refuses it with
    softmax); --moe-router-topk-scaling-factor; --moe-router-pre-softmax for a softmax over every
    expert before the top-k, left unnormalised (HF norm_topk_prob false, and a top-1 softmax router,
    which TransformerConfig refuses otherwise: a softmax over one logit has no gradient). Megatron
    renormalises sigmoid top-k weights always, and applies Llama 4's weight to the expert's input
    with --moe-apply-probs-on-input (Megatron-Bridge's Llama 4 provider sets it). A model balanced
    by an auxiliary loss gets its coefficient (--moe-router-load-balancing-type aux_loss
    --moe-aux-loss-coeff, ``ModelSpec.router_aux_loss_coef``)."""
    top_k = model.num_experts_per_tok or 1
    if model.scoring_func not in ROUTER_SCORE_FUNCTIONS:
        raise refuse(
            TARGET,
            f"{model.name}'s router score function '{model.scoring_func}'",
            f"Megatron-Core's router scores with {' or '.join(ROUTER_SCORE_FUNCTIONS)}",
            mesh_bound=False,
        )
    sigmoid = model.scoring_func == "sigmoid"
    if model.router_expert_bias and not sigmoid:
        raise refuse(
            TARGET,
            f"{model.name}'s expert bias on softmax scores",
            "Megatron-Core's aux-loss-free expert bias needs sigmoid scores (--moe-router-score-function sigmoid)",
            mesh_bound=False,
        )
    if sigmoid and model.norm_topk_prob is False and top_k > 1:
        raise refuse(
            TARGET,
            f"{model.name}'s unnormalised sigmoid top-{top_k} weights",
            "Megatron-Core renormalises a sigmoid router's top-k weights",
            mesh_bound=False,
        )
    args = ["--moe-router-score-function", "sigmoid"] if sigmoid else []
    if model.router_expert_bias:
        args.append("--moe-router-enable-expert-bias")
    if not sigmoid and (model.norm_topk_prob is False or top_k == 1):
        args.append("--moe-router-pre-softmax")
    if model.routed_scaling_factor is not None and model.routed_scaling_factor != 1.0:
        args += ["--moe-router-topk-scaling-factor", f"{model.routed_scaling_factor:g}"]
    if model.model_type in LLAMA4_TYPES:
        args.append("--moe-apply-probs-on-input")
    if model.router_aux_loss_coef and not model.router_expert_bias:
        # the model's load-balancing loss (Switch Transformer's, HF router_aux_loss_coef): Megatron-Core's
        # default coefficient is 0 (transformer_config.py moe_aux_loss_coeff), which balances nothing
        args += [
            "--moe-router-load-balancing-type",
            "aux_loss",
            "--moe-aux-loss-coeff",
            f"{model.router_aux_loss_coef:g}",
        ]
    return args


MAMBA_STACK_SPEC = ("megatron.core.models.mamba.mamba_layer_specs", "mamba_stack_spec")
"""The layer spec a hybrid model needs (--spec): mamba_builders.py raises "You must provide a valid
Mamba layer spec via --spec" without it; at ``HYBRID_RELEASE`` it holds the MoE block too
(mamba_layer_specs.py: ``moe_layer`` with grouped GEMMs)."""

HYBRID_RELEASE = "core_v0.17.0"
"""The Megatron-LM release hybrid exports are written for: its arguments.py (shipped in the
megatron-core 0.17.0 wheel as megatron/training) takes --hybrid-layer-pattern with '|' between
pipeline segments and '/' before each MTP depth (validate_args derives --num-layers, the virtual
stages and --mtp-num-layers from it, and refuses --num-layers-per-virtual-pipeline-stage and
--pipeline-model-parallel-layout beside it), MoE blocks under --spec, and --moe-latent-size. The
pinned commit above had none of these (its validate_args asserted "Model Spec must be None when
using MoEs"), and its --is-hybrid-model and --hybrid-override-pattern are gone or deprecated there."""


def hybrid_layer_pattern(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> str:
    """--hybrid-layer-pattern: the model's blocks in order with '|' between the p x v model chunks of
    the plan's split (``cost.pipeline.split_stages``, or the config's layout), in Megatron's segment
    order (megatron/core/ssm/mamba_hybrid_layer_allocation.py select_pipeline_segment at
    ``HYBRID_RELEASE``: segment vp_stage x p + pp_rank, as chunk c runs on rank c mod p), then '/'
    and the MTP module's blocks once per MTP layer (parse_hybrid_pattern: 'M*M*/MM/MM' is two MTP
    depths of 'MM'), which Megatron places after the last segment, where the plan prices them."""
    blocks = model.hybrid_override_pattern or ""
    if config.pp > 1:
        stages = (
            parse_layout(config.pipeline_layout)
            if config.pipeline_layout is not None
            else split_stages(model, job, config.pp, config.virtual_stages)
        )
        if any("m" in stage for stage in stages[:-1]):
            raise refuse(
                TARGET,
                "MTP layers before the last pipeline stage of a hybrid model",
                "Megatron-Core runs a hybrid's MTP depths after its last segment ('/' in --hybrid-layer-pattern)",
            )
        sizes = [stage.count("t") for stage in stages]
        ends = list(itertools.accumulate(sizes))
        blocks = "|".join(blocks[end - size : end] for size, end in zip(sizes, ends, strict=True))
    mtp = mtp_layers(model, job)
    return blocks + f"/{model.mtp_hybrid_override_pattern}" * mtp if mtp else blocks


def _hybrid_args(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> list[str]:
    """A hybrid Mamba-2 model for pretrain_mamba.py at ``HYBRID_RELEASE``: --spec
    (``MAMBA_STACK_SPEC``), --hybrid-layer-pattern (``hybrid_layer_pattern``: Megatron's Symbols
    are NemotronH's, M Mamba-2, * attention, - MLP, E MoE; the pattern alone marks the model as
    hybrid there), --mamba-num-heads, --mamba-head-dim, --mamba-state-dim, --mamba-num-groups
    (TransformerConfig fields, defaults 64, 128, 8: written anyway). MambaMixer's conv width (4) and
    SSD chunk (128) have no flag; another value is refused."""
    if model.mamba_conv_width != MAMBA_CONV_KERNEL or model.mamba_chunk != MAMBA_CHUNK_SIZE:
        raise refuse(
            TARGET,
            f"a Mamba-2 conv width {model.mamba_conv_width} and SSD chunk {model.mamba_chunk}",
            f"Megatron-Core's MambaMixer fixes them at {MAMBA_CONV_KERNEL} and {MAMBA_CHUNK_SIZE}",
            mesh_bound=False,
        )
    args = ["--spec", *MAMBA_STACK_SPEC, "--hybrid-layer-pattern", hybrid_layer_pattern(model, job, config)]
    if model.mamba_inner_size:
        args += ["--mamba-num-heads", str(model.mamba_num_heads), "--mamba-head-dim", str(model.mamba_head_dim)]
        args += ["--mamba-state-dim", str(model.ssm_state_size), "--mamba-num-groups", str(model.mamba_n_groups)]
    return args


def _window_pattern(model: ModelSpec) -> str:
    """--window-attn-skip-freq (arguments.py moe_freq_type): N where every N-th layer is a full one
    after N-1 sliding ones (GPT-OSS: 2), else the list expression, 1 a sliding layer."""
    return _period_or_list([int(kind == "sliding_attention") for kind in model.layer_types or ()])


def _nope_pattern(model: ModelSpec) -> str:
    """--no-rope-freq (arguments.py no_rope_freq_type): N where every N-th layer skips RoPE (Llama 4:
    4), else the list expression, 1 a NoPE layer: the layers that are not chunked."""
    return _period_or_list([int(kind != "chunked_attention") for kind in model.layer_types or ()], skipped=1)


def _period_or_list(pattern: list[int], skipped: int = 0) -> str:
    """N where ``pattern`` repeats N-1 layers of one kind and then one of the other (the last of each
    period is ``skipped``), as Megatron's moe_freq_type and no_rope_freq_type read an integer; else
    the list expression."""
    for period in range(2, len(pattern) + 1):
        unit = [1 - skipped] * (period - 1) + [skipped]
        if len(pattern) % period == 0 and pattern == unit * (len(pattern) // period):
            return str(period)
    return _list_expression(pattern)


def _list_expression(values: list[int]) -> str:
    """A 0/1 list as the run-length Python expression arguments.py's --moe-layer-freq evaluates,
    e.g. '([0]*3+[1]*58)', its shortest repeating unit once with the repeat count where it has one
    (Llama 4 Maverick's alternating layers: '([0]*1+[1]*1)*24')."""
    n = len(values)
    period = next((p for p in range(2, n) if n % p == 0 and values == values[:p] * (n // p)), n)
    runs: list[tuple[int, int]] = []
    for v in values[:period]:
        if runs and runs[-1][0] == v:
            runs[-1] = (v, runs[-1][1] + 1)
        else:
            runs.append((v, 1))
    unit = "(" + "+".join(f"[{v}]*{count}" for v, count in runs) + ")"
    return unit if period == n else f"{unit}*{n // period}"


def _moe_routing_args(job: JobSpec) -> list[str]:
    """_add_moe_args: token drop padded to capacity (--moe-expert-capacity-factor,
    --moe-pad-expert-input-to-capacity), or force-balanced routing where the plan priced an
    imbalance of 1 (--moe-router-force-load-balancing: Megatron's benchmarking switch); natural
    routing needs no flag."""
    if job.moe_capacity_factor is not None:
        return ["--moe-expert-capacity-factor", f"{job.moe_capacity_factor:g}", "--moe-pad-expert-input-to-capacity"]
    if job.moe_load_imbalance == 1.0:
        return ["--moe-router-force-load-balancing"]
    return []


def _dispatcher_args(job: JobSpec, cluster: ClusterSpec | None) -> list[str]:
    """_add_moe_args --moe-token-dispatcher-type, always written: Megatron's default is allgather,
    and the plan priced the job's (alltoall unless --moe-dispatcher says otherwise); flex runs
    DeepEP (--moe-flex-dispatcher-backend deepep, Megatron's default backend), or HybridEP where the
    NVLink domain spans nodes (GB200/GB300 NVL72; megatron-core 0.16 TransformerConfig
    moe_flex_dispatcher_backend: "Currently only 'hybridep' backend supports the MNNVL case"): the
    flex price sends a token over NVLink to every
    rank of the domain (``cost.traffic.ep_dispatch``), which HybridEP's kernels do across an NVL72
    rack, and Megatron-Bridge's GB200/GB300 performance recipes run it (e.g.
    qwen3_vl_235b_a22b_pretrain_64gpu_gb300_fp8cs_config: expert_model_parallel_size 64,
    moe_flex_dispatcher_backend "hybridep"), where DeepEP's normal kernels reach at most 8 NVLink
    peers (deepseek-ai/DeepEP csrc/kernels/configs.cuh NUM_MAX_NVL_PEERS 8) and the rest over RDMA.
    On AMD GPUs (``ROCM_FLEX_BACKEND``) neither runs: ROCm's fork takes MORI."""
    args = ["--moe-token-dispatcher-type", job.moe_dispatcher]
    if job.moe_dispatcher != "flex":
        return args
    if cluster is not None and on_rocm(cluster):
        return [*args, "--moe-flex-dispatcher-backend", ROCM_FLEX_BACKEND]
    wide = cluster is not None and cluster.fast_domain_gpus > DEEPEP_NVL_PEERS
    return [*args, "--moe-flex-dispatcher-backend", "hybridep" if wide else "deepep"]


ROCM_FLEX_BACKEND = "mori"
"""The flex dispatcher's backend on AMD GPUs: DeepEP and HybridEP are CUDA kernels over NVSHMEM, and
ROCm's Megatron-LM fork adds MORI EP (ROCm/mori) as a third (ROCm/Megatron-LM PR #135, 2026-05:
'--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend mori'; 'The flex dispatcher previously
only supported deepep and hybridep'). A review (2026-12-07) found the MI300X export writing deepep."""


def on_rocm(cluster: ClusterSpec) -> bool:
    """Whether the cluster's GPUs are AMD's (a CDNA architecture), which run ROCm builds."""
    return (cluster.gpu.architecture or "").startswith("cdna")


DEEPEP_NVL_PEERS = 8
"""NVLink peers DeepEP's normal kernels reach (deepseek-ai/DeepEP csrc/kernels/configs.cuh:
NUM_MAX_NVL_PEERS 8): a wider NVLink domain is HybridEP's (``_dispatcher_args``)."""


def megatron_environment(config: ParallelConfig, architecture: str | None = None) -> dict[str, str]:
    """The environment Megatron asks for: ``CUDA_DEVICE_MAX_CONNECTIONS=1`` with tp or cp > 1,
    so that a TP/SP collective is scheduled before the GEMM it overlaps with (megatron/core/
    tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication: "Use of this
    module requires that the environment variable CUDA_DEVICE_MAX_CONNECTIONS=1"; Megatron-LM's
    validate_args raises without it for tp or cp > 1 before Blackwell), except under
    Megatron-FSDP (ZeRO-2/3), where validate_args asserts it is not 1, and on Blackwell GPUs
    (``architecture`` blackwell*, compute capability 10+: validate_args, "CUDA_DEVICE_MAX_CONNECTIONS
    requirement no longer exists since the Blackwell architecture"), where one connection would
    only serialise the streams; None: a GPU before Blackwell."""
    blackwell = architecture is not None and architecture.startswith("blackwell")
    if not blackwell and effective_zero_stage(config) < 2 and (config.tp > 1 or config.cp > 1):
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    return {}


def megatron_notes(
    model: ModelSpec, job: JobSpec, config: ParallelConfig, cluster: ClusterSpec | None = None
) -> list[str]:
    """What the arguments cannot say: environment, the recipe's own flags, the layer split."""
    _check(model, job, config)
    notes = zero_note(config, model.is_moe)
    if effective_zero_stage(config, model.is_moe) >= 2:
        notes.append("Megatron-FSDP: leave CUDA_DEVICE_MAX_CONNECTIONS unset (validate_args asserts it is not 1)")
    architecture = cluster.gpu.architecture if cluster is not None else None  # no cluster: the note stays
    notes += [f"export {k}={v} (Megatron-LM asserts it for tp or cp > 1 before Blackwell)"
              for k, v in megatron_environment(config, architecture).items()]  # fmt: skip
    layout = pipeline_layout(model, job, config) if config.pp > 1 and config.pipeline_layout is None else None
    if layout is not None:
        sizes = rank_layer_counts(parse_layout(layout), config.pp)
        notes.append(
            f"the layout splits the {model.num_hidden_layers} layers {sizes} over the pipeline ranks: the last rank "
            "also runs the LM head and loss (and the MTP layers), balanced by forward FLOPs"
        )
    if job.tp_overlap and config.tp > 1 and not config.sequence_parallel:
        notes.append("the plan priced TP overlap, which Megatron-LM runs only with --sequence-parallel: it is left off")
    if tp_overlap_runs(job, config, cluster):
        notes.append("--tp-comm-overlap needs Transformer Engine userbuffers (TP inside one NVLink domain)")
    elif job.tp_overlap and config.tp > 1 and config.sequence_parallel:
        notes.append(
            f"the TP group of {config.tp} spans NVLink domains, where Transformer Engine's userbuffers do not reach: "
            "the plan priced its collectives exposed but for the weight-gradient input all-gathers, which "
            "Megatron-Core runs behind the data-gradient GEMM without it, and --tp-comm-overlap is left off"
        )
    if max_positions(model, job) > model.max_position_embeddings:
        notes.append(
            f"--max-position-embeddings {max_positions(model, job)} is the sequence length, above the model's "
            f"{model.max_position_embeddings} (validate_args asserts it is at least --seq-length; RoPE sizes no "
            "table by it): training longer than the checkpoint's context, set its RoPE scaling to match"
        )
    notes += routing_note(job, config, flags_written=True)
    if model.is_moe and "--moe-router-force-load-balancing" in _moe_routing_args(job):
        notes.append(
            "--moe-router-force-load-balancing routes by random logits (Megatron: 'only for benchmark'): it "
            "measures the step the plan priced but trains no model; drop it, and the natural routing's busiest rank "
            "then takes more tokens (plan with --moe-routing natural)"
        )
    if model.is_moe and not model.router_expert_bias and not model.router_aux_loss_coef:
        notes.append(
            f"load balancing: Megatron-Core's default --moe-aux-loss-coeff is 0, which balances nothing, and "
            f"{model.name} states no coefficient; the plan priced natural routing near a balanced model's "
            "(--moe-routing), so set the auxiliary loss the model trained with (--moe-router-load-balancing-type "
            "aux_loss --moe-aux-loss-coeff; Megatron's MoE guide starts from 1e-2)"
        )
    if job.moe_dispatcher == "flex" and cluster is not None and on_rocm(cluster):
        notes.append(
            f"--moe-flex-dispatcher-backend {ROCM_FLEX_BACKEND}: ROCm/Megatron-LM (its PR #135) with MORI installed; "
            "NVIDIA's Megatron-LM runs no flex backend on AMD GPUs (use --moe-dispatcher alltoall there)"
        )
    if model.is_hybrid:
        notes.append(
            f"a hybrid Mamba-2 model: launch pretrain_mamba.py of Megatron-LM {HYBRID_RELEASE} or later (earlier "
            "releases have no --hybrid-layer-pattern; mamba_builders.py needs the --spec written here), with mamba_ssm "
            "and causal_conv1d installed"
        )
    notes.append("the vocabulary comes from your tokenizer (--tokenizer-type/--tokenizer-model, or --vocab-size)")
    rope_note = rope_args(model)[1]
    if rope_note is not None:
        notes.append(rope_note)
    if model.attention_sinks:
        notes.append(
            "attention sinks (--softmax-type learnable) need Transformer Engine >= 2.8; cuDNN fused attention runs "
            "them from cuDNN 9.13.1, older cuDNN leaves Transformer Engine's unfused attention"
        )
    if model.num_chunked_layers:
        chunk = model.attention_chunk_size or job.seq_len
        share = chunked_keys(job.seq_len, chunk) / attended_keys(job.seq_len, None)
        mask = (
            "that is the causal mask Megatron runs, as priced"
            if job.seq_len <= chunk
            else f"the plan priced them chunked ({share:.2f}x a causal layer's attention): run them chunked, a causal "
            "mask over the sequence costs more"
        )
        notes.append(
            f"the {model.num_chunked_layers} chunked-attention layers attend within {chunk}-token chunks: at "
            f"--seq-length {job.seq_len} {mask}"
        )
    return notes


def megatron_text(
    model: ModelSpec,
    job: JobSpec,
    config: ParallelConfig,
    header: str | None = None,
    cluster: ClusterSpec | None = None,
) -> str:
    """The arguments as text: a header comment, the notes, then the flags."""
    comments = ([header] if header else []) + [f"note: {n}" for n in megatron_notes(model, job, config, cluster)]
    return render_flags(megatron_args(model, job, config, cluster), comments)
