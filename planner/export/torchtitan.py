"""torchtitan TOML job file sections ([model], [training], [parallelism], [activation_checkpoint],
[compile], fp8 converters) for a mesh.

The target is torchtitan 0.2.x, the last release that reads TOML job files (``--job.config_file``;
tests/test_frameworks.py parses every export with its ConfigManager and checks its ParallelDims).
The stack's knobs go with it: ``compile.enable`` (the job's or the stack's torch.compile) and
``parallelism.enable_async_tensor_parallel`` (TP overlap, written only with compile: torchtitan
raises without it); ``training.mixed_precision_reduce`` accepts only "float32" there.

Key names are those of torchtitan 0.2.2's ``torchtitan/config/job_config.py``, the JobConfig a
TOML job file fills: ``Model`` (name, flavor, converters), ``Training``, ``Parallelism``,
``ActivationCheckpoint``, ``Compile`` (``training.compile`` of earlier releases is refused there)
and the ``quantize.*`` converter sections. torchtitan 0.3 configures a run with a Python function
instead (``--module``/``--config``, with frozen ``--section.key`` flags and renamed keys): that is
``planner/export/torchtitan03.py``, ``--format torchtitan``; this one is ``--format torchtitan-0.2``.

Behaviour behind the mapping (same repository): ``torchtitan/distributed/parallel_dims.py``
(ParallelDims._validate, stored at 0119de15) for the degrees, ``torchtitan/models/llama3/infra/
parallelize.py`` (stored at 018740b7) for FSDP/DDP and sequence parallelism,
``torchtitan/distributed/pipeline_parallel.py`` (stored at 02ef790c) for the stage split and
micro-batches, ``torchtitan/train.py`` for gradient accumulation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from planner.cost.flops import mtp_layers
from planner.cost.layout import ends_placed, parse_layout
from planner.cost.pipeline import chunk_layer_counts, every_nth_stride, plan_layout, smallest_chunk_layers
from planner.export.common import (
    check_adam_state,
    check_dispatcher,
    effective_zero_stage,
    is_default_order,
    num_microbatches,
    refuse,
    routing_note,
    zero_note,
)
from planner.figures import ordinal
from planner.mesh import MeshArrays
from planner.schemas.hardware import ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig

TARGET = "torchtitan-0.2"
"""The format name (``plan export --format torchtitan-0.2``), which refusals start with."""

TomlValue = bool | int | str | list[str] | list[list[str]]
Sections = dict[str, dict[str, TomlValue]]

SCHEDULES = {"1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B", "gpipe": "GPipe", "dualpipev": "DualPipeV"}
"""Planner schedule -> ``pipeline_parallel_schedule``, the names torch's
``torch.distributed.pipelining.schedules.get_schedule_class`` accepts (pytorch/pytorch; also
LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, which are multi-stage schedules). DualPipeV is a
'V' schedule: torchtitan builds two stages per rank for it (pipeline_parallel.py, the schedule
class's stage placement), so the split below has 2p parts."""

RESHARD_AFTER_FORWARD = {2: "never", 3: "always"}
"""ZeRO stage -> ``fsdp_reshard_after_forward``. FSDP2 always shards optimizer states and
gradients; "always" also frees the gathered weights after forward (ZeRO-3), "never" keeps them
until backward (ZeRO-2-like). "default" would depend on pp (parallelize.py apply_fsdp:
``reshard_after_forward = not pp_enabled``), so the stage is spelt out."""


@dataclass(frozen=True)
class Flavor:
    """One model of torchtitan's registry (``[model] name`` and ``flavor``) by the shape it builds:
    layers, width, heads, KV heads (0 for MLA), dense FFN width, and experts (count, top-k, width)."""

    name: str
    flavor: str
    shape: tuple[int, ...]
    pipeline: bool = True  # the model's TrainSpec has a pipelining_fn
    flex_attention: bool = False  # attn_type "flex": no context parallelism

    @property
    def vocab_and_rope_theta(self) -> tuple[int, float]:
        """The vocabulary and RoPE base the flavor builds (``FAMILY_VOCAB_AND_ROPE_THETA``)."""
        return FAMILY_VOCAB_AND_ROPE_THETA[self.name]


FAMILY_VOCAB_AND_ROPE_THETA = {
    "llama3": (128256, 500000.0),
    "qwen3": (151936, 1000000.0),
    "deepseek_v3": (129280, 10000.0),
}
"""The vocabulary and RoPE base each torchtitan model family builds, whatever the checkpoint: the
llama3 flavors take TransformerModelArgs' vocab_size 128256 and set rope_theta 500000 (torchtitan
0.2.2 models/llama3/__init__.py, model/args.py; ``update_from_config`` changes only the sequence
length), qwen3's 151936 and 1000000 (models/qwen3/__init__.py), deepseek_v3's 671B 129280 and
DeepSeekV3ModelArgs' 10000 (models/deepseek_v3/__init__.py, model/args.py). None builds a sliding
window."""


FLAVORS = (
    # torchtitan/models/llama3/__init__.py llama3_configs: FFN from ffn_dim_multiplier and
    # multiple_of (8B: 1.3, 1024 -> 14336; 70B: 1.3, 4096 -> 28672; 405B: 1.2, 4096 -> 53248)
    Flavor("llama3", "8B", (32, 4096, 32, 8, 14336, 0, 0, 0)),
    Flavor("llama3", "70B", (80, 8192, 64, 8, 28672, 0, 0, 0)),
    Flavor("llama3", "405B", (126, 16384, 128, 8, 53248, 0, 0, 0)),
    # torchtitan/models/qwen3/__init__.py qwen3_args (dim, n_layers, n_heads, n_kv_heads, hidden_dim,
    # moe_inter_dim, MoEArgs num_experts / top_k); its TrainSpec has pipelining_fn=None (0.2.2)
    Flavor("qwen3", "0.6B", (28, 1024, 16, 8, 3072, 0, 0, 0), pipeline=False),
    Flavor("qwen3", "1.7B", (28, 2048, 16, 8, 6144, 0, 0, 0), pipeline=False),
    Flavor("qwen3", "4B", (36, 2560, 32, 8, 9728, 0, 0, 0), pipeline=False),
    Flavor("qwen3", "8B", (36, 4096, 32, 8, 12288, 0, 0, 0), pipeline=False),
    Flavor("qwen3", "14B", (40, 5120, 40, 8, 17408, 0, 0, 0), pipeline=False),
    Flavor("qwen3", "32B", (64, 5120, 64, 8, 25600, 0, 0, 0), pipeline=False),
    Flavor("qwen3", "30B-A3B", (48, 2048, 32, 4, 6144, 128, 8, 768), pipeline=False),
    Flavor("qwen3", "235B-A22B", (94, 4096, 64, 4, 12288, 128, 8, 1536), pipeline=False),
    # torchtitan/models/deepseek_v3/__init__.py deepseekv3_configs "671B": dim 7168, 61 layers,
    # 128 heads (MLA), inter_dim 18432, 256 experts top-8 of moe_inter_dim 2048, attn_type "flex"
    Flavor("deepseek_v3", "671B", (61, 7168, 128, 0, 18432, 256, 8, 2048), flex_attention=True),
)
"""The models torchtitan builds (pytorch/torchtitan, 2025 releases). A plan's model is matched by
shape, not by name; a model of no flavor here is refused (torchtitan would train another one)."""


def flavor_of(model: ModelSpec, target: str = TARGET) -> Flavor:
    """torchtitan's flavor of ``model``'s shape, or a refusal (by ``target``) naming those it has."""
    shape = (
        model.num_hidden_layers,
        model.hidden_size,
        model.num_attention_heads,
        0 if model.is_mla else model.num_kv_heads,
        model.intermediate_size,
        model.num_experts_total,
        model.num_experts_per_tok or 0,
        model.expert_intermediate_size if model.is_moe else 0,
    )
    for flavor in FLAVORS:
        if flavor.shape == shape:
            vocab, theta = flavor.vocab_and_rope_theta
            differs = [f"vocabulary {model.vocab_size:,} (it builds {vocab:,})"] if model.vocab_size != vocab else []
            if model.rope_theta is not None and model.rope_theta != theta:
                differs.append(f"RoPE base {model.rope_theta:g} ({theta:g})")
            if model.sliding_window is not None:
                differs.append(f"a {model.sliding_window}-token sliding window (full attention)")
            if differs:
                # a llama3 flavor of Mistral-7B's or Llama-2-70B's layers would train another model, at another cost
                raise refuse(
                    target,
                    f"model {model.name}",
                    f"torchtitan's {flavor.name} {flavor.flavor} has its layers but not its {', '.join(differs)}",
                    mesh_bound=False,
                )
            return flavor
    known = ", ".join(f"{f.name} {f.flavor}" for f in FLAVORS)
    raise refuse(
        target, f"model {model.name}", f"torchtitan builds no model of its shape (it has {known})", mesh_bound=False
    )


def _check(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> None:
    """Refuse what torchtitan cannot run as planned."""
    if job.bf16_last_layers and model.is_moe:
        # the grouped-GEMM converter's fqns name the experts modules of every layer alike
        raise refuse(
            TARGET,
            f"bf16_last_layers {job.bf16_last_layers} on a MoE model",
            "its fp8 grouped-GEMM converter converts the experts of every layer (fqns = experts), the bf16 ones too",
            mesh_bound=False,
        )
    flavor = flavor_of(model)
    if config.pp > 1 and not flavor.pipeline:
        raise refuse(TARGET, f"pp {config.pp} for {flavor.name}", "its TrainSpec has no pipelining function: use pp 1")
    if config.cp > 1 and flavor.flex_attention:
        # models/deepseek_v3/infra/parallelize.py: "Context Parallel only supports SDPA attention"
        raise refuse(TARGET, f"cp {config.cp} for {flavor.name} {flavor.flavor}", "its flex attention has no CP")
    if mtp_layers(model, job):
        # torchtitan's models (llama3, deepseek_v3, qwen3) build no multi-token-prediction module.
        raise refuse(
            TARGET, f"{mtp_layers(model, job)} MTP layer(s)", "torchtitan trains none: --mtp-layers 0", mesh_bound=False
        )
    if job.dtype == "fp4":
        # 0.2.2 holds no NVFP4 converter; 0.3.0 has one, set only by a config function
        # (torchtitan03.CONFIG_FUNCTIONS: llama3_8b_first_85_pct_layers_nvfp4)
        raise refuse(
            TARGET,
            "--dtype fp4",
            "torchtitan 0.2 has no NVFP4 converter (0.3 trains Llama-3 8B in NVFP4 as its "
            "llama3_8b_first_85_pct_layers_nvfp4 config function: plan export -f torchtitan)",
            mesh_bound=False,
        )
    check_shared(TARGET, job, config)
    if job.dtype == "fp8" and job.fp8_scaling != "block" and model.is_moe and (config.pp > 1 or config.cp > 1):
        # torchtitan 0.2.2 components/quantization/float8.py Float8GroupedMMConverter asserts pp and
        # cp degree 1 for the experts' float8 grouped GEMMs
        raise refuse(TARGET, f"float8 experts with pp {config.pp}, cp {config.cp}", "its float8 grouped-GEMM "
                     "converter runs with pp 1 and cp 1")  # fmt: skip
    zero = effective_zero_stage(config)
    if zero == 0 and config.dp > 1 and config.num_gpus != config.dp:
        # parallelize.py: DDP (data_parallel_replicate_degree) raises "DDP has not supported > 1D
        # parallelism" unless it spans every rank.
        raise refuse(
            TARGET,
            "--zero-stage 0 with tp, pp or cp > 1",
            "torchtitan's DDP runs only as the sole parallelism; use --zero-stage 2 or 3",
        )
    divisor = config.tp * 2 * config.cp
    if job.seq_len % divisor:
        # ParallelDims.seq_len_divisor = tp * (cp * 2), asserted in parallelize_llama.
        raise refuse(TARGET, f"seq_len {job.seq_len}", f"torchtitan needs it divisible by tp*2*cp = {divisor}")
    if config.ep > 1:
        _check_ep(model, config, shard=config.dp if zero >= 2 else 1)
    if model.num_hidden_layers < config.pp * config.virtual_stages:
        raise refuse(TARGET, f"pp*virtual_stages = {config.pp * config.virtual_stages}", "at most one per layer")
    num_microbatches(TARGET, job, config)


TORCHTITAN_LLAMA3_ROPE_FACTOR = 8.0
"""The RoPE scaling factor torchtitan's llama3 flavors apply, Llama 3.1's, whatever the model
(0.2.2 models/llama3/model/args.py ``rope_scaling_args`` on by default; 0.3 models/llama3
``ComplexRoPE(scaling="llama")`` with factor 8, low and high frequency factors 1 and 4, original
context 8192)."""


def shared_notes(
    model: ModelSpec, job: JobSpec, config: ParallelConfig, async_tp_refusal: str, left_off: str
) -> list[str]:
    """What both torchtitan releases do differently from the plan, alike: async TP only with
    compile (``async_tp_refusal``: the release's own words, from the code that raises them), so
    the export leaves it off (``left_off`` says where); and the llama3 flavors' RoPE, Llama 3.1's scaling
    for a Llama 3 model too (the same cost, another model)."""
    notes: list[str] = []
    scaling = model.rope_scaling or {}
    if flavor_of(model).name == "llama3" and scaling.get("factor") != TORCHTITAN_LLAMA3_ROPE_FACTOR:
        notes.append(
            f"torchtitan's llama3 flavors scale RoPE as Llama 3.1 does (factor {TORCHTITAN_LLAMA3_ROPE_FACTOR:g}), "
            f"which {model.name}'s card does not: the run trains Llama 3.1's positions, at the cost priced"
        )
    if config.tp > 1 and job.tp_overlap and not job.compiled:
        notes.append(f"async TP runs only with compile ({async_tp_refusal}): the plan priced it on, {left_off}")
    micro = num_microbatches(TARGET, job, config) if config.schedule == "interleaved-1f1b" else 0
    if micro % config.pp:
        notes.append(
            f"torch's Interleaved1F1B runs {micro} micro-batches over pp {config.pp} in "
            f"{max(1, micro // config.pp)} rounds; the plan priced Megatron-Core's micro-batch groups, whose bubble "
            "and activations in flight may differ from torch's"
        )
    return notes


def check_mx(target: str, job: JobSpec, cluster: ClusterSpec | None) -> None:
    """Block-scaled fp8 is torchao's MXFP8 in torchtitan (``quantize.linear.mx``), which needs
    MXFP8 tensor cores (SM100: ``schemas.hardware.MXFP8_ARCHITECTURES``); torchtitan has no
    converter for Hopper's 128-element tiles."""
    if job.dtype == "fp8" and job.fp8_scaling == "block" and cluster is not None and not cluster.gpu.has_mxfp8:
        raise refuse(
            target,
            f"fp8 scaling 'block' on {cluster.gpu.name}",
            "torchtitan's block scaling is torchao's MXFP8, which needs data-centre Blackwell (SM100); "
            "use --fp8-scaling tensor or row",
            mesh_bound=False,
        )


def check_shared(target: str, job: JobSpec, config: ParallelConfig) -> None:
    """What both torchtitan releases refuse alike (0.2.2's job_config.py and 0.3.0's
    config/configs.py agree on each): the MoE dispatcher and Adam state the stack runs, the rank
    order ParallelDims builds, bf16 or fp8 training, the pipeline schedules torch runs, and FSDP2's
    sharding (no ZeRO-1; weights always sharded over cp)."""
    if config.offload_layers is not None:
        raise refuse(target, f"--offload-layers {config.offload_layers}", "torchtitan offloads no activations by layer")
    check_dispatcher(target, "torchtitan", job, config)
    check_adam_state(target, job, bf16_moments=False)
    if job.gradient_dtype not in (None, "fp32"):
        # training.mixed_precision_reduce: Literal["float32"] (FSDP2's reduce_dtype); DDP reduces the fp32
        # parameters' gradients. Exported with a note until 2026-12-08 (a review). Another stack's
        # default is the CLI's stack-mismatch note's (cli.export._stack_mismatch)
        raise refuse(
            target,
            f"--gradient-dtype {job.gradient_format}",
            "torchtitan reduces gradients in float32 (training.mixed_precision_reduce accepts only float32)",
            mesh_bound=False,
        )
    if not is_default_order(config):
        # ParallelDims builds its mesh as pp, dp_replicate, dp_shard, cp, tp (outermost first). Every
        # mesh of a search shares one order, the pinned one: no other mesh would do
        raise refuse(
            target,
            f"--order {config.order}",
            "torchtitan places ranks tp-cp-dp-pp (innermost first)",
            mesh_bound=False,
        )
    if not job.flash_attention:
        # the models call scaled_dot_product_attention (or flex/varlen attention); no option runs the
        # materialised s x s scores the plan priced
        raise refuse(
            target,
            "--no-flash-attention",
            "torchtitan's attention is SDPA, flex or varlen attention, all fused; price it with flash attention",
            mesh_bound=False,
        )
    if not config.overlap_grad_reduce and config.dp * config.cp > 1:
        # FSDP2 prefetches the next gather and reduce-scatters behind backward by design; no option turns it off
        raise refuse(
            target,
            "--no-overlap-grad-reduce",
            "FSDP2 always overlaps its gathers and reduce-scatters with compute",
        )
    if job.dtype == "fp16":
        # Training.mixed_precision_param: Literal["bfloat16", "float32"].
        raise refuse(
            target,
            "--dtype fp16",
            "torchtitan trains in bf16 (mixed_precision_param) or fp8 (float8)",
            mesh_bound=False,
        )
    if config.pp > 1 and config.schedule == "zb-h1":
        raise refuse(
            target,
            "--schedule zb-h1",
            "torch's zero-bubble schedules (InterleavedZeroBubble, ZBVZeroBubble) need several stages per rank; "
            "use 1f1b or interleaved-1f1b",
        )
    if config.pp > 1 and config.schedule == "dualpipe":
        raise refuse(
            target, "--schedule dualpipe", "torch.distributed.pipelining runs DualPipeV (one copy of the weights)"
        )
    micro = num_microbatches(target, job, config) if config.schedule == "interleaved-1f1b" else 0
    rounds = max(1, micro // config.pp)
    if micro % config.pp and micro % rounds:
        # torch.distributed.pipelining ScheduleInterleaved1F1B (torch 2.13 schedules.py): number_of_rounds
        # = max(1, n_microbatches // pp_group_size), and n_microbatches must be a multiple of it
        raise refuse(
            target,
            f"interleaved-1f1b over {micro} micro-batches with pp {config.pp}",
            f"torch's Interleaved1F1B runs max(1, m // pp) = {rounds} rounds and needs m a multiple of them",
        )
    zero = effective_zero_stage(config)
    if zero == 1:
        raise refuse(
            target,
            "--zero-stage 1",
            "torchtitan's FSDP2 shards gradients too (no ZeRO-1); use --zero-stage 2 or 3 (FSDP), or 0 (DDP)",
        )
    if zero == 0 and config.cp > 1:
        # ParallelDims.fsdp_enabled = dp_shard > 1 or cp > 1: weights are FSDP-sharded over dp_shard*cp.
        raise refuse(
            target, "--zero-stage 0 with cp > 1", "torchtitan shards weights over the cp ranks; use --zero-stage 2 or 3"
        )


def _check_ep(model: ModelSpec, config: ParallelConfig, shard: int) -> None:
    """ParallelDims._validate: etp is tp or 1; with etp = tp, ep takes all of cp and part of
    dp_shard (ep % cp == 0, dp_shard*cp % ep == 0); with etp = 1 also all of tp."""
    if not model.is_moe:
        raise refuse(TARGET, f"--ep {config.ep}", f"{model.name} has no experts")
    etp, tp, cp = config.expert_tp, config.tp, config.cp
    if etp not in (1, tp):
        raise refuse(TARGET, f"--expert-tp {etp}", f"torchtitan supports expert_tp = tp ({tp}) or 1")
    borrowed = cp if etp == tp else cp * tp
    if config.ep % borrowed or (shard * borrowed) % config.ep:
        raise refuse(
            TARGET,
            f"--ep {config.ep}",
            f"torchtitan carves EP from dp_shard*{'cp' if etp == tp else 'cp*tp'}: ep must be a multiple of "
            f"{borrowed} dividing {shard * borrowed}",
        )


def _stage_split(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> dict[str, TomlValue]:
    """The plan's layer split. Even: ``pipeline_parallel_layers_per_stage`` = L/(p*v) with the
    first/last-stage weights at 0, so pipeline_llm makes ceil(L/lps) = p*v stages of equal size
    (its default weights 1 count the embedding and the LM head as layers). Any other split (a
    layout given, or the plan's own: ``cost.pipeline.plan_layout``): the chunks spelt out as
    ``module_fqns_per_model_part`` (module names of torchtitan 0.2's decoder models:
    tok_embeddings, layers.<i>, norm, output)."""
    parts = model_parts(model, job, config, head=["norm", "output"])
    if parts is None:
        return {
            "pipeline_parallel_layers_per_stage": model.num_hidden_layers // (config.pp * config.chunks_per_rank),
            "pipeline_parallel_first_stage_less_layers": 0,
            "pipeline_parallel_last_stage_less_layers": 0,
        }
    return {"module_fqns_per_model_part": parts}


def model_parts(model: ModelSpec, job: JobSpec, config: ParallelConfig, head: list[str]) -> list[list[str]] | None:
    """The plan's pipeline chunks as torchtitan module names (``tok_embeddings``, ``layers.<i>``
    and the ``head`` modules after the last layer), or None when the split is the even one.
    DualPipeV runs 2p half-stages split evenly (``cost.pipeline.chunk_layer_counts``); any other
    schedule the layout given (its embedding and head moved to the end chunks, where they are
    priced: ``cost.layout.ends_placed``) or the plan's own (``cost.pipeline.plan_layout``)."""
    if config.schedule == "dualpipev":
        sizes = chunk_layer_counts(model.num_hidden_layers, config.pp, 2)
        stages = None if len(set(sizes)) == 1 else [["t"] * n for n in sizes]
        if stages is not None:
            stages[0], stages[-1] = ["E", *stages[0]], [*stages[-1], "L"]
    else:
        text = config.pipeline_layout or plan_layout(model, job, config.pp, config.virtual_stages)
        stages = None if text is None else ends_placed(parse_layout(text))
    if stages is None:
        return None
    names = {"E": ["tok_embeddings"], "L": head}
    parts: list[list[str]] = []
    index = 0
    for stage in stages:
        part: list[str] = []
        for kind in stage:
            if kind == "t":
                part.append(f"layers.{index}")
                index += 1
            else:
                part += names[kind]
        parts.append(part)
    return parts


def torchtitan_config(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> Sections:
    """The job-file sections for ``config`` (section -> key -> value).

    Batch: torchtitan runs ``global_batch_size / (local_batch_size * dp)`` gradient-accumulation
    steps (train.py), and a pipeline splits ``local_batch_size`` into micro-batches of
    ``pipeline_parallel_microbatch_size`` (pipeline_parallel.py build_pipeline_schedule). So with
    pp = 1 the local batch is the micro-batch and accumulation runs the m micro-batches; with pp > 1
    the local batch is B/dp and the pipeline runs all m in one step.
    """
    _check(model, job, config)
    zero = effective_zero_stage(config)
    local = config.micro_batch_size if config.pp == 1 else job.batch_size // config.dp
    training: dict[str, TomlValue] = {
        "local_batch_size": local,
        "global_batch_size": job.batch_size,
        "seq_len": job.seq_len,
        "mixed_precision_param": "bfloat16",
    }
    # DDP replicates (ZeRO-0); FSDP2 shards (ZeRO-2/3); HSDP would set both.
    replicate, shard = (config.dp, 1) if zero == 0 else (1, config.dp)
    parallelism: dict[str, TomlValue] = {
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": shard,
    }
    if zero >= 2:
        parallelism["fsdp_reshard_after_forward"] = RESHARD_AFTER_FORWARD[zero]
    parallelism["tensor_parallel_degree"] = config.tp
    if config.tp > 1 and job.tp_overlap and job.compiled:
        # tensor_parallel.py maybe_enable_async_tp raises "Async TP requires 'model' in
        # --compile.components and --compile.enable" without compile: off then (a note says so)
        parallelism["enable_async_tensor_parallel"] = True
    parallelism["context_parallel_degree"] = config.cp
    parallelism["pipeline_parallel_degree"] = config.pp
    if config.pp > 1:
        parallelism["pipeline_parallel_schedule"] = SCHEDULES[config.schedule]
        parallelism["pipeline_parallel_microbatch_size"] = config.micro_batch_size
        parallelism.update(_stage_split(model, job, config))
    if model.is_moe:
        parallelism["expert_parallel_degree"] = config.ep
        parallelism["expert_tensor_parallel_degree"] = config.expert_tp
    checkpoint: dict[str, TomlValue] = {"mode": config.recompute}
    if config.recompute == "selective":
        checkpoint["selective_ac_option"] = "op"  # per-op SAC; an integer n would checkpoint every n-th layer
    elif config.recompute_layers is not None:
        # selective layer AC wraps every n-th block (activation_checkpoint.py, _count % ac_freq == 0)
        checkpoint = {"mode": "selective", "selective_ac_option": str(every_nth_layer(model, job, config))}
    flavor = flavor_of(model)
    sections: Sections = {
        "model": {"name": flavor.name, "flavor": flavor.flavor},
        "training": training,
        "parallelism": parallelism,
        "activation_checkpoint": checkpoint,
        # job_config.py Compile: enable, components (default model and loss; the model alone where
        # the job keeps the loss eager)
        "compile": {
            "enable": job.compiled,
            **({} if job.loss_compiled or not job.compiled else {"components": ["model"]}),
        },
    }
    if job.dtype == "fp8":
        fp8 = _fp8_sections(model, job)
        sections["model"].update(fp8.pop("model"))
        sections.update(fp8)
    return sections


def _fp8_sections(model: ModelSpec, job: JobSpec) -> Sections:
    """Model.converters by the job's fp8 scaling, as registered in torchtitan/components/
    quantization (float8.py: 'quantize.linear.float8', 'quantize.grouped_mm.float8'; mx.py:
    'quantize.linear.mx', 'quantize.grouped_mm.mx'): torchao's Float8Linear (tensor-wise by default,
    ``recipe_name = "rowwise"`` for row scaling) or MXFP8 for block scaling, and the grouped-GEMM
    converter for a MoE model's experts (``fqns``: the experts modules); ``filter_fqns`` keeps the
    job's bf16 last layers out of the linear converter."""
    kind = "mx" if job.fp8_scaling == "block" else "float8"
    converters = [f"quantize.linear.{kind}"] + ([f"quantize.grouped_mm.{kind}"] if model.is_moe else [])
    sections: Sections = {"model": {"converters": converters}}
    linear: dict[str, TomlValue] = {"recipe_name": "rowwise"} if job.fp8_scaling == "row" else {}
    if job.bf16_last_layers:
        # filter_fqns skips every linear whose FQN contains an entry (module_filter_fn's substring test):
        # the last layers' 'layers.<i>.' prefixes keep them in bf16, and 'output' the LM head as the
        # plan prices it (MX's default: "By default we always skip the output layer", job_config.py MX)
        first = model.num_hidden_layers - job.bf16_last_layers
        linear["filter_fqns"] = ["output"] + [f"layers.{i}." for i in range(first, model.num_hidden_layers)]
    elif kind == "float8":
        linear["filter_fqns"] = ["output"]  # as torchtitan's float8 train configs do; MX skips it by default
    if linear:
        sections[f"quantize.linear.{kind}"] = linear
    if model.is_moe:
        sections[f"quantize.grouped_mm.{kind}"] = {"fqns": ["experts"]}
    return sections


def chunk_sizes(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> list[int]:
    """Decoder layers of each of the p*v model chunks the job file gives torchtitan, in model
    order (``model_parts``, or the even split where it writes none)."""
    parts = model_parts(model, job, config, head=[])
    if parts is None:
        chunks = config.pp * config.chunks_per_rank
        return [model.num_hidden_layers // chunks] * chunks
    return [sum(name.startswith("layers.") for name in part) for part in parts]


def every_nth_layer(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> int:
    """torchtitan's selective layer AC checkpoints every n-th block a rank builds, counting on
    across the rank's chunks (activation_checkpoint.py: one module-global ``_layer_sac_count``):
    a chunk of c blocks then gets at least floor(c/n) of them wrapped wherever the count stands.
    So n is the largest with floor(c/n) >= r for the smallest chunk c of every rank: at least the
    plan's r recomputed layers in each chunk (a rank of 15 layers under n = 16 // 4 = 4 would
    recompute 3). The n the plan priced (``cost.pipeline.recompute_every``; tests check its
    smallest chunk against this file's module lists, ``chunk_sizes``), whichever stack priced it."""
    smallest = smallest_chunk_layers(model, job, MeshArrays.from_configs([config]))
    return int(every_nth_stride(smallest, config.recompute_layers or 1)[0])


def torchtitan_notes(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> list[str]:
    """Where torchtitan's behaviour differs from what the plan priced."""
    _check(model, job, config)
    notes = zero_note(config)
    if config.tp > 1 and not config.sequence_parallel:
        notes.append(
            "torchtitan applies sequence parallelism with every tp > 1 (parallelize.py); the plan priced it off, "
            "so it overestimates activation memory"
        )
    if config.recompute == "selective" and job.software.selective_recompute != "alternate_matmuls":
        notes.append(
            'selective_ac_option "op" saves matmul and attention outputs and recomputes the rest; the plan priced '
            f"recomputing the attention core ({job.software.name}'s selective recompute; --stack torchtitan prices the "
            "op policy), so memory and recompute time differ"
        )
    if config.recompute_layers is not None:
        n = every_nth_layer(model, job, config)
        notes.append(
            f"selective_ac_option {n} recomputes every {ordinal(n)} layer a rank builds, as the plan priced it: at "
            f"least {config.recompute_layers} of each chunk"
        )
    if job.dtype == "fp8":
        notes.append("the fp8 converters need torchao")
    refusal = "parallelize_llama: 'Async TP requires 'model' in --compile.components and --compile.enable'"
    notes += shared_notes(model, job, config, refusal, "the job file leaves it off")
    chunks = config.pp * config.virtual_stages
    if config.pp > 1 and model.num_hidden_layers % chunks:
        notes.append(f"{model.num_hidden_layers} layers do not divide into {chunks} stages: the chunks are spelt out")
    notes += routing_note(job, config, flags_written=False)
    notes.append("optimizer, data, tokenizer and checkpoint sections come from your own job file")
    notes.append(
        "written for torchtitan 0.2.x (--job.config_file, checked with 0.2.2's ConfigManager); torchtitan 0.3 "
        "takes no job file: --format torchtitan writes its --module/--config overrides"
    )
    return notes


def _toml_value(value: TomlValue) -> str:
    """A TOML literal: booleans and integers as is, strings as basic strings (JSON escapes are
    valid TOML escapes), arrays of strings, and arrays of arrays one inner array per line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if value and isinstance(value[0], list):
        rows = [f"  [{', '.join(json.dumps(s) for s in row)}]," for row in value]
        return "[\n" + "\n".join(rows) + "\n]"
    return "[" + ", ".join(json.dumps(s) for s in value) + "]"


def render_toml(sections: Sections, comments: list[str]) -> str:
    """``# comment`` lines, then each section as ``[name]`` and ``key = value`` lines."""
    lines = [f"# {c}" for c in comments]
    for name, table in sections.items():
        if lines:
            lines.append("")
        lines.append(f"[{name}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


def torchtitan_toml(model: ModelSpec, job: JobSpec, config: ParallelConfig, header: str | None = None) -> str:
    """The sections as TOML text, with a header comment and the notes as comments."""
    comments = ([header] if header else []) + [f"note: {n}" for n in torchtitan_notes(model, job, config)]
    return render_toml(torchtitan_config(model, job, config), comments)
