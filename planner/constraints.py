"""Feasibility rules of a mesh for a model, cluster and job (ARCHITECTURE 8.8).

Each rule is a vectorised check over ``MeshArrays`` (True where the mesh passes) plus a
one-line message for a single mesh. ``plan estimate`` refuses a mesh that breaks a hard rule;
the search prunes with the same functions and counts the rejections per rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.cost.comm import crosses_domains
from planner.cost.flops import mtp_layers
from planner.cost.layout import check_layout, parse_layout, placement_notes
from planner.cost.pipeline import (
    is_dual,
    largest_chunk_layers,
    mesh_batch_size,
    needs_pp_multiple,
    num_microbatches,
    recomputable_layers,
    round_up,
    smallest_chunk_layers,
)
from planner.cost.recompute import inapplicable
from planner.errors import PlannerError
from planner.mesh import (
    DUALPIPE,
    INTERLEAVED,
    ONE_F_ONE_B,
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE,
    SCHEDULES,
    MeshArrays,
    shards_nothing,
)
from planner.schemas.hardware import ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig

Check = Callable[[ModelSpec, ClusterSpec, JobSpec, MeshArrays], np.ndarray]
Message = Callable[[ModelSpec, ClusterSpec, JobSpec, ParallelConfig], str]


Applies = Callable[[ModelSpec, ClusterSpec, JobSpec, MeshArrays], np.ndarray | bool]


@dataclass(frozen=True)
class Rule:
    """A named feasibility rule. ``hard`` rules make a mesh impossible; soft ones only unwise.

    ``applies`` (where given) says which meshes the rule constrains at all, every other mesh
    passing it: DualPipe's rules only DualPipe meshes, the Mamba rules only hybrid models. The
    check then runs only where some mesh needs it (the search's default schedules have no
    DualPipe, so its four rules cost nothing there), with the same answer as checking every mesh."""

    name: str
    check: Check
    message: Message
    hard: bool = True
    applies: Applies | None = None
    degrees_only: bool = False  # reads only tp, cp, pp, dp, ep and expert_tp of a mesh (``DegreeRows``)

    def passes(self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
        """One bool per mesh: True where it passes the rule."""
        n = len(mesh)
        if self.applies is None:
            return np.broadcast_to(self.check(model, cluster, job, mesh), (n,))
        constrained = np.broadcast_to(self.applies(model, cluster, job, mesh), (n,))
        if not constrained.any():
            return np.ones(n, dtype=bool)
        return ~constrained | self.check(model, cluster, job, mesh)


def _cp_divisor(mesh: MeshArrays) -> np.ndarray:
    """Load-balanced causal CP splits the sequence into 2c chunks (Megatron-Core context
    parallelism, chunks i and 2c-1-i on rank i), so s must divide by 2c; c = 1 needs nothing."""
    return np.where(mesh.cp > 1, 2 * mesh.cp, 1)


def _growth_hint(job: JobSpec, unit: int, least: int = 0) -> str:
    """How far the batch would have to grow for a mesh whose batch unit does not divide it (and, for
    Megatron-Core's interleaving, to at least ``least`` sequences: pp micro-batches)."""
    divisible = round_up(job.batch_size, unit)
    grown = max(divisible, least)
    # where interleaving's pp micro-batches set it, say so: a batch of 6 over dp 4 'runs 16', not 8
    # (a review, 2026-12-07, read the bare figure as an arithmetic error)
    why = f" (interleaved-1f1b runs at least pp micro-batches: {least})" if least > divisible else ""
    return (
        f"; the nearest batch it runs is {grown}{why} (+{grown / job.batch_size - 1:.1%}), "
        f"allowed up to {job.max_batch_size} by max_batch_growth {job.max_batch_growth:g}"
    )


def _interleaved_least(job: JobSpec, config: ParallelConfig) -> int:
    """The fewest sequences an interleaved mesh runs on a stack with micro-batch groups: pp
    micro-batches (0 where that does not apply)."""
    if config.schedule != "interleaved-1f1b" or needs_pp_multiple(job):
        return 0
    return config.dp * config.micro_batch_size * config.pp


def _schedule_stacks(schedule: str, stack: str) -> str:
    """Where a refused schedule runs ('; torchtitan runs it: --stack torchtitan'), or that no
    shipped stack does."""
    from planner.catalog import load_stack, stack_names

    others = [n for n in stack_names() if n != stack and schedule in (load_stack(n).pipeline_schedules or ())]
    if others:
        return f"; {', '.join(others)} run{'s' if len(others) == 1 else ''} it: --stack {others[0]}"
    return "; no shipped stack runs it: a stack file may list it in pipeline_schedules"


def _dual_microbatches(job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """Micro-batches per step of each mesh's batch."""
    return num_microbatches(mesh_batch_size(job, mesh, interleaved_rule=False), mesh)


def _kv_ok(model: ModelSpec, mesh: MeshArrays) -> np.ndarray:
    """TP divides the KV heads: training frameworks split the query groups over the TP ranks and
    never replicate them (Megatron-Core ``Attention.__init__``: num_query_groups_per_partition =
    divide(num_query_groups, tp), an assertion; torchtitan's TP plan shards wk / wv column-wise and
    views each rank's share as whole heads). Serving engines replicate KV heads beyond their count
    (``serving.kv.kv_heads_per_rank``); training had allowed a multiple too, so Qwen3-235B-A22B (4
    KV heads) ranked and exported TP 8, which Megatron refuses at model build (a review, 2026-12-07)."""
    return model.num_kv_heads % mesh.tp == 0


AXES = ("tp", "pp", "cp", "ep")
"""The model-parallel axes a stack may or may not run (``Stack.parallelisms``)."""


def _axes_run(job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """True where every axis above 1 (expert TP counting as 'ep') is one the stack runs."""
    ok = np.ones(len(mesh), dtype=bool)
    for axis in AXES:
        if axis not in job.software.parallelisms:
            degree = getattr(mesh, axis) * (mesh.expert_tp if axis == "ep" else 1)
            ok &= degree == 1
    return ok


def _axes_missing(job: JobSpec, p: ParallelConfig) -> str:
    """The axes above 1 of ``p`` that the stack does not run, as 'tp 2, cp 4'."""
    degrees = {"tp": p.tp, "pp": p.pp, "cp": p.cp, "ep": p.ep * p.expert_tp}
    return ", ".join(f"{a} {degrees[a]}" for a in AXES if a not in job.software.parallelisms and degrees[a] > 1)


def _recomputable(model: ModelSpec, job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """``pipeline.recomputable_layers`` of each mesh's ``recompute_layers``, on its smallest chunk
    (``pipeline.smallest_chunk_layers``), the one a stack recomputing every n-th layer fixes n by."""
    smallest = smallest_chunk_layers(model, job, mesh)
    return recomputable_layers(job.software.partial_recompute, smallest, mesh.recompute_layers)


def _partial_recompute_message(model: ModelSpec, job: JobSpec, p: ParallelConfig) -> str:
    """Why a stack cannot recompute ``p.recompute_layers`` layers of each chunk."""
    r, name = p.recompute_layers, job.software.name
    if job.software.partial_recompute is None:
        return (
            f"recompute_layers {r}: stack {name} recomputes every layer or none; use recompute full without "
            "recompute_layers"
        )
    mesh = MeshArrays.from_configs([p])
    chunk = int(smallest_chunk_layers(model, job, mesh)[0])
    head = (
        f"recompute_layers {r}: stack {name} recomputes every n-th layer, floor({chunk}/n) of its smallest chunk's "
        f"{chunk}"
    )
    if r is not None and r > chunk:
        return f"{head}, so at most {chunk} (recompute full without recompute_layers recomputes them all)"
    nearest = int(_recomputable(model, job, mesh)[0])
    every = " (n = 1, every layer: recompute full without recompute_layers)" if nearest == chunk else ""
    return f"{head}; the nearest count at or above {r} is {nearest}{every}"


def _offload_message(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, p: ParallelConfig) -> str:
    """Why a mesh cannot offload activations (Megatron-Core transformer_config.py's rules, and what
    the plan needs to price it)."""
    if not job.software.activation_offloading:
        return f"offload_layers: stack {job.software.name} offloads no activations (Megatron-Core stacks do)"
    if cluster.gpu.host_link_bytes_per_s is None:
        return f"offload_layers: profile {cluster.profile.name} states no host_link_gb_per_s to price the transfers at"
    if p.pp > 1 or p.recompute != "none":
        return f"offload_layers needs pp 1 and recompute 'none' (got pp {p.pp}, recompute '{p.recompute}')"
    return (
        f"offload_layers {p.offload_layers}: Megatron-Core offloads fewer than the model's "
        f"{model.num_hidden_layers} layers"
    )


def format_runs(cluster: ClusterSpec, job: JobSpec) -> bool:
    """Whether the job's format runs on the cluster's GPU: fp8 and fp4 need a GPU that lists a peak
    in that format (its tensor cores), as fp8 and fp4 training kernels (Transformer Engine, torchao)
    need, and block-scaled fp8 an architecture whose tensor cores run it (``GPU.runs_fp8_scaling``)."""
    if job.dtype not in ("fp8", "fp4"):
        return True
    listed = job.dtype in cluster.gpu.peak_tflops
    return listed and (job.dtype != "fp8" or cluster.gpu.runs_fp8_scaling(job.fp8_scaling))


def format_message(cluster: ClusterSpec, job: JobSpec) -> str:
    """Why a GPU cannot train in the job's ``dtype`` (fp8 or fp4) at its ``fp8_scaling``; the
    scalings offered instead are those the job's stack runs (``Stack.fp8_scalings``)."""
    dtype, fp8_scaling = job.dtype, job.fp8_scaling
    listed = ", ".join(cluster.gpu.peak_tflops)
    if dtype == "fp8" and "fp8" in cluster.gpu.peak_tflops:
        others = [s for s in job.software.fp8_scalings if s != "block"] or ["tensor"]
        return (
            f"fp8 scaling '{fp8_scaling}' needs block-scaled fp8 tensor cores: {cluster.gpu.name} "
            f"({cluster.gpu.architecture}) has none (Transformer Engine's Float8BlockScaling needs Hopper or "
            f"Blackwell, SM90 and later; MXFP8 data-centre Blackwell); use --fp8-scaling {' or '.join(others)}"
        )
    if dtype == "fp8":
        return (
            f"dtype fp8 needs FP8 tensor cores: {cluster.gpu.name} lists {listed}, no fp8 peak (Transformer Engine's "
            "and torchao's fp8 training run on Ada, Hopper and Blackwell: SM89 and later); use bf16"
        )
    return (
        f"dtype fp4 (NVFP4) needs FP4 tensor cores: {cluster.gpu.name} lists {listed}, no fp4 peak (NVFP4 "
        "training, Transformer Engine's or torchao's, runs on data-centre Blackwell: SM100/SM103)"
    )


RULES: tuple[Rule, ...] = (
    Rule(
        "format_tensor_cores",
        lambda m, c, j, x: np.asarray(format_runs(c, j)),
        lambda m, c, j, p: format_message(c, j),
    ),
    Rule(
        "chunked_attention_cp",
        # a chunked layer (Llama 4) attends only its own chunk: the planner prices it as one causal
        # call per chunk (compute.attention_core_forward_s); split over CP ranks, a ring that skips
        # the other chunks' keys is not what it prices
        lambda m, c, j, x: (not m.num_chunked_layers or j.seq_len <= (m.attention_chunk_size or 0)) | (x.cp == 1),
        lambda m, c, j, p: (
            f"cp {p.cp} with {m.name}'s chunked attention over {j.seq_len} tokens ({m.attention_chunk_size}-token "
            "chunks): context parallelism across chunks is not priced; use cp 1, or a sequence of one chunk"
        ),
        degrees_only=True,
    ),
    Rule(
        "mamba_cp",
        # Megatron-Core splits a Mamba-2 layer over CP ranks by heads with all-to-alls
        # (megatron/core/ssm/mamba_context_parallel.py), not the K/V ring the planner prices
        lambda m, c, j, x: x.cp == 1,
        lambda m, c, j, p: (
            f"cp {p.cp} with {m.name}'s {m.blocks_of('M')} Mamba-2 layers: context parallelism of Mamba layers (an "
            "all-to-all over heads) is not priced; use cp 1"
        ),
        applies=lambda m, c, j, x: m.blocks_of("M") > 0,
        degrees_only=True,
    ),
    Rule(
        "mamba_tp",
        # Megatron-Core MambaMixer: "assert self.nheads % self.tp_size == 0" and the same for ngroups
        lambda m, c, j, x: ((m.mamba_num_heads or 1) % x.tp == 0) & ((m.mamba_n_groups or 1) % x.tp == 0),
        lambda m, c, j, p: (
            f"tp {p.tp} must divide {m.name}'s {m.mamba_num_heads} Mamba-2 heads and {m.mamba_n_groups} groups "
            "(Megatron-Core MambaMixer splits both over TP ranks)"
        ),
        applies=lambda m, c, j, x: m.blocks_of("M") > 0,
        degrees_only=True,
    ),
    Rule(
        "hybrid_pipeline",
        # Megatron-LM core_v0.17.0 takes a hybrid's pipeline split as '|' segments of
        # --hybrid-layer-pattern, p x v of them for virtual stages (validate_args; mamba_hybrid_layer_allocation.py
        # select_pipeline_segment), each a MambaStack of its blocks: the plan's split, every segment holding
        # one block at least; a layout string (--pipeline-model-parallel-layout) is refused beside the pattern,
        # and no framework runs a Mamba-2 model under DualPipe
        lambda m, c, j, x: (
            (x.pp == 1) | ((m.num_hidden_layers >= x.pp * x.virtual_stages) & (x.layout_last < 0) & ~is_dual(x))
        ),
        lambda m, c, j, p: (
            f"pp {p.pp} with virtual_stages {p.virtual_stages}, schedule {p.schedule}"
            + (f" and layout {p.pipeline_layout}" if p.pipeline_layout else "")
            + f" for {m.name}'s {m.num_hidden_layers} hybrid layers: Megatron-LM splits a hybrid pattern into "
            "pp x virtual_stages segments of one block or more, without a layout string or DualPipe; use "
            f"pp x virtual_stages <= {m.num_hidden_layers}, no --pipeline-layout and a 1f1b schedule"
        ),
        applies=lambda m, c, j, x: m.is_hybrid,
    ),
    Rule(
        "bf16_last_layers",
        # every layer in bf16 is a bf16 job: priced so it had read its MFU against the fp8 peak, half
        # the bf16 run's, and exported fp8 flags (a review, 2026-12-07)
        lambda m, c, j, x: np.asarray(j.bf16_last_layers < m.num_hidden_layers),
        lambda m, c, j, p: (
            f"bf16_last_layers {j.bf16_last_layers}: {m.name} has {m.num_hidden_layers} transformer layers, so at "
            f"most {m.num_hidden_layers - 1} stay bf16 (all of them is --dtype bf16)"
        ),
    ),
    Rule(
        "bf16_last_layers_dualpipe",
        # step.bf16_layer_costs counts the tail back through 1F1B's chunks; DualPipe runs the last
        # stage on two ranks, one per direction
        lambda m, c, j, x: np.asarray(j.bf16_last_layers == 0),
        lambda m, c, j, p: (
            f"bf16_last_layers {j.bf16_last_layers} with schedule {p.schedule}: the planner prices a bf16 tail "
            "only on 1f1b-family schedules"
        ),
        applies=lambda m, c, j, x: is_dual(x),
    ),
    Rule(
        "gpu_count",
        lambda m, c, j, x: x.num_gpus == c.num_gpus,
        lambda m, c, j, p: (
            f"tp*pp*dp*cp = {p.tp}*{p.pp}*{p.dp}*{p.cp} = {p.num_gpus}, but cluster {c.name} has {c.num_gpus} GPUs"
        ),
        degrees_only=True,
    ),
    Rule(
        "schedule_matches_virtual_stages",
        lambda m, c, j, x: (x.schedule == INTERLEAVED) == (x.virtual_stages > 1),
        lambda m, c, j, p: "virtual_stages > 1 goes with schedule interleaved-1f1b, and only with it",
    ),
    Rule(
        "schedule_needs_pp",
        # A schedule orders the micro-batches of a pipeline; with one stage there is none, and every
        # mesh of pp 1 runs as 1f1b (a pin of another, --schedule gpipe --pp 1, says something else)
        lambda m, c, j, x: (x.schedule == ONE_F_ONE_B) | (x.pp >= 2),
        lambda m, c, j, p: f"{p.schedule} needs pp >= 2",
    ),
    Rule(
        "dualpipe_ranks",
        # deepseek-ai/DualPipe dualpipe.py step(): "assert num_ranks % 2 == 0"; both need a pipeline
        lambda m, c, j, x: (x.pp >= 2) & ((x.schedule != DUALPIPE) | (x.pp % 2 == 0)),
        lambda m, c, j, p: f"{p.schedule} needs pp >= 2" + (", even" if p.schedule == "dualpipe" else ""),
        applies=lambda m, c, j, x: is_dual(x),
    ),
    Rule(
        "dualpipe_microbatches",
        # dualpipe.py: "num_chunks > 0 and num_chunks % 2 == 0 and num_chunks >= num_ranks * 2";
        # dualpipev.py: "num_chunks > 0 and num_chunks >= num_ranks * 2"
        lambda m, c, j, x: (
            (_dual_microbatches(j, x) >= 2 * x.pp) & ((x.schedule != DUALPIPE) | (_dual_microbatches(j, x) % 2 == 0))
        ),
        lambda m, c, j, p: (
            f"{p.schedule} needs at least 2*pp = {2 * p.pp} micro-batches"
            + (", an even number," if p.schedule == "dualpipe" else "")
            + f" (this mesh runs {j.batch_size // (p.dp * p.micro_batch_size)})"
        ),
        applies=lambda m, c, j, x: is_dual(x),
    ),
    Rule(
        "dualpipe_stages",
        # DeepSeek's reference implementation takes one module per stage, a layer at least; the
        # planner prices its busiest stage on every rank and takes no Megatron layout for it
        lambda m, c, j, x: (m.num_hidden_layers >= x.pp * x.chunks_per_rank) & (x.layout_last < 0),
        lambda m, c, j, p: (
            f"{p.schedule} runs {p.pp * p.chunks_per_rank} stages of at least one layer "
            f"each ({m.num_hidden_layers} layers) and takes no --pipeline-layout"
        ),
        applies=lambda m, c, j, x: is_dual(x),
    ),
    Rule(
        "attention_sinks_run",
        # Stack.sink_attention: flash kernels take no sink logit (Transformer Engine 2.9
        # get_attention_backend disables FlashAttention for softmax_type 'learnable')
        lambda m, c, j, x: np.full(len(x), (not m.attention_sinks) or j.software.sink_attention is not None),
        lambda m, c, j, p: (
            f"{m.name} has attention sinks, and the planner prices no sink attention for stack {j.software.name} "
            "(its kernel takes no sink logit or runs at a rate no profile measures: the stack's sink_attention "
            "source); megatron-core runs them (Transformer Engine >= 2.8)"
        ),
    ),
    Rule(
        "attention_sinks_without_cp",
        # Transformer Engine 2.9 get_attention_backend: with context parallelism and a non-vanilla
        # softmax only FusedAttention with cp_comm_type 'a2a' remains; the planner prices ring CP
        lambda m, c, j, x: (not m.attention_sinks) | (x.cp == 1),
        lambda m, c, j, p: (
            f"cp {p.cp} with {m.name}'s attention sinks: Transformer Engine runs sinks under context parallelism "
            "only with cp_comm_type a2a, which the planner does not price; use cp 1"
        ),
        degrees_only=True,
    ),
    Rule(
        "sliding_window_without_ring_cp",
        # Transformer Engine's attn_forward_func_with_cp: 'assert not sliding_window_attn or cp_comm_type in
        # ["a2a", "all_gather"]' ('The context parallel running configs cannot support sliding window
        # attention'); the planner prices the ring (Megatron's default --cp-comm-type p2p), so a windowed
        # model's cp > 1 on Transformer Engine's fused attention would fail at its first step (a review,
        # 2026-12-07: Mistral-7B at cp 4 exported --window-size with the ring)
        lambda m, c, j, x: (m.num_sliding_layers == 0) | (j.software.attention_kernel != "fused") | (x.cp == 1),
        lambda m, c, j, p: (
            f"cp {p.cp} with {m.name}'s sliding-window layers on {j.software.name}: Transformer Engine runs a window "
            "under context parallelism only with cp_comm_type a2a or all_gather, not the ring the planner prices; "
            "use cp 1"
        ),
        degrees_only=True,
    ),
    Rule(
        "sequence_parallel_needs_tp",
        lambda m, c, j, x: ~x.sequence_parallel | (x.tp > 1),
        lambda m, c, j, p: "sequence_parallel needs tp > 1",
    ),
    Rule(
        "experts_fold_into_stage",
        lambda m, c, j, x: (x.tp * x.cp * x.dp) % (x.ep * x.expert_tp) == 0,
        lambda m, c, j, p: f"ep x expert_tp = {p.ep * p.expert_tp} does not divide tp*cp*dp = {p.tp * p.cp * p.dp}",
        degrees_only=True,
    ),
    Rule(
        "heads_divisible_by_tp",
        lambda m, c, j, x: m.num_attention_heads % x.tp == 0,
        lambda m, c, j, p: f"num_attention_heads {m.num_attention_heads} is not divisible by tp {p.tp}",
        degrees_only=True,
    ),
    Rule(
        "kv_heads_vs_tp",
        lambda m, c, j, x: _kv_ok(m, x),
        lambda m, c, j, p: (
            f"tp {p.tp} must divide num_key_value_heads {m.num_kv_heads} (training splits the KV heads over tp "
            "and does not replicate them)"
        ),
        degrees_only=True,
    ),
    Rule(
        "ffn_divisible_by_tp",
        lambda m, c, j, x: m.intermediate_size % x.tp == 0,
        lambda m, c, j, p: f"intermediate_size {m.intermediate_size} is not divisible by tp {p.tp}",
        degrees_only=True,
    ),
    Rule(
        "layers_per_stage",
        # a stack that takes layouts may give the embedding and the loss a chunk of their own
        # (Megatron's account-for-embedding/loss splits, e.g. Qwen3-235B's 94 layers on 96 chunks)
        lambda m, c, j, x: (
            (m.num_hidden_layers + (2 if j.software.pipeline_layouts else 0) >= x.pp * x.virtual_stages)
            | (x.layout_last >= 0)
        ),
        lambda m, c, j, p: (
            f"{m.num_hidden_layers} layers cannot fill pp*virtual_stages = {p.pp * p.virtual_stages} stages"
            + (" (the embedding and the loss filling one each)" if j.software.pipeline_layouts else "")
        ),
    ),
    Rule(
        "stack_parallelisms",
        # Stack.parallelisms: the model-parallel axes the framework has (torchtitan's ParallelDims,
        # Megatron-LM 2021's tp and pp only, DeepSpeed without ring context parallelism)
        lambda m, c, j, x: _axes_run(j, x),
        lambda m, c, j, p: (
            f"stack {j.software.name} runs no {_axes_missing(j, p)} (it runs "
            f"{', '.join(j.software.parallelisms) or 'data parallelism only'}); use 1"
        ),
        degrees_only=True,
    ),
    Rule(
        "stack_sequence_parallel",
        # Stack.sequence_parallel: DeepSpeed's sequence parallelism is Ulysses' head all-to-all, not
        # Megatron's sharding of what TP replicates
        lambda m, c, j, x: ~x.sequence_parallel | j.software.sequence_parallel,
        lambda m, c, j, p: f"stack {j.software.name} has no Megatron sequence parallelism; use --no-sequence-parallel",
    ),
    Rule(
        "stack_zero_stages",
        # Stack.zero_stages: FSDP has no optimizer-only sharding (torchtitan, llm-foundry), Megatron-LM
        # 2021 no ZeRO-2/3; a mesh with nothing to shard over (``shards_nothing``) is moot
        lambda m, c, j, x: shards_nothing(m.is_moe, x) | np.isin(x.zero_stage, j.software.zero_stages),
        lambda m, c, j, p: (
            f"stack {j.software.name} runs no ZeRO-{p.zero_stage} (it runs "
            f"{', '.join(f'ZeRO-{z}' for z in j.software.zero_stages)})"
        ),
    ),
    Rule(
        "stack_interleaving",
        # Stack.interleaved_min_pp: DeepSpeed's PipelineEngine runs 1F1B only; Megatron-LM 2021
        # interleaved only with pp > 2
        lambda m, c, j, x: (x.schedule != INTERLEAVED) | (x.pp >= (j.software.interleaved_min_pp or 2**62)),
        lambda m, c, j, p: (
            f"stack {j.software.name} runs no interleaved pipeline"
            if j.software.interleaved_min_pp is None
            else f"stack {j.software.name} interleaves only with pp >= {j.software.interleaved_min_pp} (got pp {p.pp})"
        ),
    ),
    Rule(
        "stack_schedule",
        # Stack.pipeline_schedules: the schedules the framework's code runs (Megatron-Core 1F1B and
        # interleaved, torchtitan torch.distributed.pipelining's, DeepSpeed 1F1B)
        lambda m, c, j, x: (
            np.ones(len(x), dtype=bool)
            if j.software.pipeline_schedules is None
            else (x.pp < 2) | np.isin(x.schedule, [SCHEDULES.index(s) for s in j.software.pipeline_schedules])
        ),
        lambda m, c, j, p: (
            f"stack {j.software.name} runs no {p.schedule} pipeline schedule (it runs "
            f"{', '.join(j.software.pipeline_schedules or ()) or 'no pipeline'}"
            f"{_schedule_stacks(p.schedule, j.software.name)})"
        ),
    ),
    Rule(
        "batch_divisible",
        lambda m, c, j, x: mesh_batch_size(j, x, interleaved_rule=False) <= j.max_batch_size,
        lambda m, c, j, p: (
            f"global batch {j.batch_size} is not divisible by dp*micro_batch_size = {p.dp}*{p.micro_batch_size}"
            + _growth_hint(j, p.dp * p.micro_batch_size, _interleaved_least(j, p))
        ),
    ),
    Rule(
        "interleaved_microbatches",
        # Megatron-LM 2021 and torchtitan: the interleaved schedule needs the number of micro-batches
        # divisible by pp; Megatron-Core's micro-batch group size (schedules.microbatch_group_size)
        # needs only pp of them
        lambda m, c, j, x: (
            (x.schedule != INTERLEAVED)
            | (
                (mesh_batch_size(j, x) <= j.max_batch_size)
                & (needs_pp_multiple(j) | (num_microbatches(mesh_batch_size(j, x), x) >= x.pp))
            )
        ),
        lambda m, c, j, p: (
            f"interleaved-1f1b needs micro-batches ({j.batch_size // (p.dp * p.micro_batch_size)}) "
            f"divisible by pp {p.pp}" + _growth_hint(j, p.dp * p.micro_batch_size * p.pp)
            if needs_pp_multiple(j)
            else f"interleaved-1f1b needs at least pp {p.pp} micro-batches (got "
            f"{j.batch_size // (p.dp * p.micro_batch_size)}): Megatron-Core's micro-batch group size is at least pp "
            "and at most their number" + _growth_hint(j, p.dp * p.micro_batch_size * p.pp)
        ),
    ),
    Rule(
        "seq_divisible_by_cp",
        lambda m, c, j, x: j.seq_len % _cp_divisor(x) == 0,
        lambda m, c, j, p: f"seq_len {j.seq_len} is not divisible by 2*cp = {2 * p.cp} (load-balanced causal CP)",
        degrees_only=True,
    ),
    Rule(
        "seq_divisible_by_sequence_parallel",
        # Megatron-Core tensor_parallel/mappings.py _reduce_scatter_along_first_dim: "First
        # dimension of the tensor should be divisible by tensor parallel size"; the first dimension
        # of a sequence-parallel activation [s/cp, b, h] is the rank's share of the sequence
        lambda m, c, j, x: ~x.sequence_parallel | ((j.seq_len // x.cp) % x.tp == 0),
        lambda m, c, j, p: (
            f"sequence_parallel splits each rank's {j.seq_len // p.cp} tokens (seq_len {j.seq_len} / cp {p.cp}) "
            f"over tp {p.tp}, which does not divide them"
        ),
    ),
    Rule(
        "ep_needs_experts",
        lambda m, c, j, x: ((x.ep == 1) & (x.expert_tp == 1)) | (m.num_experts_total > 0),
        lambda m, c, j, p: (
            (f"ep {p.ep} > 1" if p.ep > 1 else f"expert_tp {p.expert_tp} > 1")
            + f" but {m.name} is a dense model (no experts)"
        ),
        degrees_only=True,
    ),
    Rule(
        "stack_trains_moe",
        # Stack.moe_dispatchers: a stack that lists no token dispatcher has no MoE layer at all
        # (Megatron-LM 2021)
        lambda m, c, j, x: np.asarray(not m.is_moe or bool(j.software.moe_dispatchers)),
        lambda m, c, j, p: (
            f"{m.name} is a mixture-of-experts model and stack {j.software.name} trains none (it lists no MoE token "
            "dispatcher); use a stack that does, such as megatron-core"
        ),
        degrees_only=True,
    ),
    Rule(
        "stack_trains_mtp",
        # Stack.trains_mtp: torchtitan's, DeepSpeed's and llm-foundry's models build no MTP module
        lambda m, c, j, x: np.asarray(not mtp_layers(m, j) or j.software.trains_mtp),
        lambda m, c, j, p: (
            f"{mtp_layers(m, j)} MTP layer(s) (--mtp-layers): stack {j.software.name} builds no multi-token-prediction "
            "module; use --mtp-layers 0 or a stack that does, such as megatron-core"
        ),
        degrees_only=True,
    ),
    Rule(
        "experts_divisible_by_ep",
        lambda m, c, j, x: (m.num_experts_total == 0) | (m.num_experts_total % x.ep == 0),
        lambda m, c, j, p: f"{m.num_experts_total} experts are not divisible by ep {p.ep}",
        degrees_only=True,
    ),
    Rule(
        "expert_ffn_divisible_by_expert_tp",
        lambda m, c, j, x: m.expert_intermediate_size % x.expert_tp == 0,
        lambda m, c, j, p: f"expert width {m.expert_intermediate_size} is not divisible by expert_tp {p.expert_tp}",
        degrees_only=True,
    ),
    Rule(
        "ep_overlap_schedule",
        # Megatron-LM arguments.py: "moe a2a overlap is only supported with vpp or dualpipev" and
        # "disable full recomputation when enabling overlap_moe_expert_parallel_comm".
        # DualPipe and DualPipeV pair one micro-batch's forward with another's backward by design
        # (DeepSeek-V3 section 3.2.1), the pairing the overlap needs.
        # Megatron-Core 0.17 transformer_config.py: "disable moe in recompute_modules when enabling
        # overlap_moe_expert_parallel_comm" (the MoE recompute re-runs the dispatch).
        lambda m, c, j, x: (
            (not j.ep_comm_overlap)
            | ((x.pp == 1) | (x.schedule == INTERLEAVED) | is_dual(x))
            & (x.recompute != RECOMPUTE_FULL)
            & ((x.recompute != RECOMPUTE_SELECTIVE) | ("moe" not in (j.recompute_modules or ())))
        ),
        lambda m, c, j, p: (
            "ep_comm_overlap (Megatron --overlap-moe-expert-parallel-comm) needs an interleaved pipeline, DualPipe(V) "
            "(or pp 1), no full recompute and no 'moe' among the selective recompute modules; this mesh has "
            f"pp {p.pp} {p.schedule}, recompute {p.recompute}"
            + (f" of {', '.join(j.recompute_modules)}" if p.recompute == "selective" and j.recompute_modules else "")
        ),
    ),
    Rule(
        "ep_overlap_job",
        # Megatron-Core 0.17 transformer_config.py, with overlap_moe_expert_parallel_comm:
        # "overlap_moe_expert_parallel_comm is supported with alltoall/flex token dispatcher" and "MTP
        # layernum only supports 1 when enabling overlap_moe_expert_parallel_comm"
        lambda m, c, j, x: np.asarray(
            not j.ep_comm_overlap or (j.moe_dispatcher in ("alltoall", "flex") and mtp_layers(m, j) <= 1)
        ),
        lambda m, c, j, p: (
            "ep_comm_overlap (Megatron --overlap-moe-expert-parallel-comm) runs with the alltoall or flex dispatcher "
            f"and at most 1 MTP layer; this job has the {j.moe_dispatcher} dispatcher and {mtp_layers(m, j)} MTP layers"
        ),
        degrees_only=True,
    ),
    Rule(
        "ep_overlap_mtp_pipeline",
        # Megatron-Core 0.17 transformer_config.py: "Pipeline model parallel size must be larger
        # than 1 when enabling overlap_moe_expert_parallel_comm with MTP layer"
        lambda m, c, j, x: (not j.ep_comm_overlap or not mtp_layers(m, j)) | (x.pp > 1),
        lambda m, c, j, p: (
            f"ep_comm_overlap (Megatron --overlap-moe-expert-parallel-comm) with {mtp_layers(m, j)} MTP layer needs "
            "pp > 1 (Megatron-Core 0.17); use pp 2 or more, or --mtp-layers 0"
        ),
        degrees_only=True,
    ),
    Rule(
        "moe_bias_expert_tp",
        # Megatron-Core transformer_config.py: "Bias in Moe is only supported when ETP==1"
        # (num_moe_experts with add_bias_linear, which a model with MLP biases sets)
        lambda m, c, j, x: (
            (not (m.is_moe and m.mlp_bias and j.software.export_format == "megatron")) | (x.expert_tp == 1)
        ),
        lambda m, c, j, p: (
            f"expert_tp {p.expert_tp} with {m.name}'s MLP biases: Megatron-Core runs biased experts only with "
            "expert_tp 1 ('Bias in Moe is only supported when ETP==1')"
        ),
        degrees_only=True,
    ),
    Rule(
        "zero_with_pipeline",
        # Stack.zero_with_pipeline: Megatron-FSDP and DeepSpeed's pipeline engine run no ZeRO-2/3
        # with pp > 1; a stage with nothing to shard over (``shards_nothing``) is moot
        lambda m, c, j, x: (x.pp == 1) | shards_nothing(m.is_moe, x) | (x.zero_stage <= j.software.zero_with_pipeline),
        lambda m, c, j, p: (
            f"{j.software.name} runs at most ZeRO-{j.software.zero_with_pipeline} with pipeline parallelism; "
            f"this mesh has zero_stage {p.zero_stage} with pp {p.pp}"
        ),
    ),
    Rule(
        "stack_bf16_pipeline_zero",
        # Stack.bf16_pipeline_min_zero: DeepSpeed trains a bf16 pipeline without ZeRO through its
        # BF16_Optimizer, sharded over dp, not the replicated optimizer ZeRO-0 would price
        lambda m, c, j, x: (
            (x.pp == 1)
            | (j.dtype != "bf16")
            | shards_nothing(m.is_moe, x)
            | (x.zero_stage >= j.software.bf16_pipeline_min_zero)
        ),
        lambda m, c, j, p: (
            f"stack {j.software.name} trains a bf16 pipeline at ZeRO-{j.software.bf16_pipeline_min_zero} or above "
            f"(DeepSpeed's BF16_Optimizer shards the optimizer over dp without ZeRO); this mesh has zero_stage "
            f"{p.zero_stage} with pp {p.pp}"
        ),
    ),
    Rule(
        "stack_amp_through_sharding",
        # Stack.amp_through_sharding: torchtitan's maybe_enable_amp runs 16-bit training through FSDP's
        # policy only, and a TP or PP mesh without FSDP or CP trains in fp32
        lambda m, c, j, x: ((x.tp == 1) & (x.pp == 1)) | (x.cp > 1) | ((x.zero_stage >= 2) & (x.dp > 1)),
        lambda m, c, j, p: (
            f"stack {j.software.name} trains {j.dtype} with tp or pp only under FSDP or CP (torchtitan "
            "maybe_enable_amp: 'Mixed precision training with TP or PP is only supported when FSDP/HSDP/CP is "
            f"enabled', else fp32); this mesh has tp {p.tp}, pp {p.pp}, cp {p.cp} and dp {p.dp} at zero_stage "
            f"{p.zero_stage}: shard over dp > 1 (zero_stage 2 or 3) or use cp > 1"
        ),
        applies=lambda m, c, j, x: j.software.amp_through_sharding,
    ),
    Rule(
        "moe_tp_needs_sequence_parallel",
        lambda m, c, j, x: (x.tp == 1) | x.sequence_parallel,
        lambda m, c, j, p: (
            f"{m.name} is MoE and tp {p.tp} runs without sequence parallelism, which stack {j.software.name} refuses "
            "in training (Megatron-Core MoELayer.forward: 'performance may degrade if MoE and tensor parallelism are "
            "enabled without also enabling sequence parallelism'); use sequence parallelism or tp 1"
        ),
        applies=lambda m, c, j, x: m.is_moe and j.software.moe_tp_needs_sequence_parallel,
    ),
    Rule(
        "stack_partial_recompute",
        # Stack.partial_recompute: Megatron any first r layers, torchtitan every n-th layer
        lambda m, c, j, x: (j.software.partial_recompute is not None) & (x.recompute_layers == _recomputable(m, j, x)),
        lambda m, c, j, p: _partial_recompute_message(m, j, p),
        applies=lambda m, c, j, x: x.recompute_layers != 0,
    ),
    Rule(
        "stack_even_layer_split",
        # Stack.even_layer_split: Megatron-LM 2021's ParallelTransformer asserts num_layers % pp == 0
        # and builds num_layers / (pp*v) layers per chunk
        lambda m, c, j, x: m.num_hidden_layers % (x.pp * x.virtual_stages) == 0,
        lambda m, c, j, p: (
            f"stack {j.software.name} splits layers evenly only: {m.num_hidden_layers} layers do not divide over "
            f"pp*virtual_stages = {p.pp * p.virtual_stages} chunks"
        ),
        applies=lambda m, c, j, x: j.software.even_layer_split,
    ),
    Rule(
        "recompute_modules_apply",
        lambda m, c, j, x: not inapplicable(m, j),
        lambda m, c, j, p: f"recompute_modules: {', '.join(inapplicable(m, j))}, which {m.name} has not",
    ),
    Rule(
        "recompute_modules_need_selective",
        lambda m, c, j, x: (j.recompute_modules is None) | (x.recompute == RECOMPUTE_SELECTIVE),
        lambda m, c, j, p: (
            f"recompute_modules {', '.join(j.recompute_modules or ())} are what selective recompute runs again "
            f"(Megatron --recompute-granularity selective); this mesh has recompute {p.recompute}"
        ),
    ),
    Rule(
        "recompute_layers_within_chunk",
        # Megatron's block method recomputes the first r layers of each model chunk
        # (--recompute-num-layers r): more than the largest chunk holds is every chunk whole, i.e. plain full
        lambda m, c, j, x: x.recompute_layers <= largest_chunk_layers(m, j, x),
        lambda m, c, j, p: (
            f"recompute_layers {p.recompute_layers}: the largest of the {p.pp * p.virtual_stages} model chunks holds "
            f"{int(largest_chunk_layers(m, j, MeshArrays.from_configs([p]))[0])} layers (recompute full without "
            "recompute_layers recomputes them all)"
        ),
        applies=lambda m, c, j, x: x.recompute_layers != 0,
    ),
    Rule(
        "activation_offloading",
        lambda m, c, j, x: (
            j.software.activation_offloading
            & (c.gpu.host_link_bytes_per_s is not None)
            & (x.pp == 1)
            & (x.recompute == RECOMPUTE_NONE)
            & (x.offload_layers < m.num_hidden_layers)
        ),
        lambda m, c, j, p: _offload_message(m, c, j, p),
        applies=lambda m, c, j, x: x.offload_layers != 0,
    ),
    Rule(
        "tp_within_fast_domain",
        lambda m, c, j, x: ~crosses_domains(c, x.tp, x.stride("tp")),
        lambda m, c, j, p: (
            f"tp {p.tp} groups cross the {c.fast_domain_gpus}-GPU fast domains of {c.name} (rank order "
            f"{p.order}): every layer's all-reduces go over the slow inter-node network"
        ),
        hard=False,
        degrees_only=True,
    ),
)


@dataclass(frozen=True)
class DegreeRows:
    """The search's meshes by their degrees: one mesh per (tp, cp, pp, dp, ep, expert_tp) tuple
    (``mesh``, its knobs any) and each searched mesh's row in it (``row``). A rule that reads only
    the degrees (``Rule.degrees_only``) is checked once per tuple, not once per knob setting:
    the search crosses each tuple with hundreds of them."""

    mesh: MeshArrays
    row: np.ndarray


def rule_masks(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, mesh: MeshArrays, degrees: DegreeRows | None = None
) -> dict[str, np.ndarray]:
    """Rule name -> boolean mask of meshes that pass it (``degrees``: the meshes' degree tuples,
    for the rules that read nothing else)."""
    masks = {}
    for rule in RULES:
        if degrees is not None and rule.degrees_only:
            masks[rule.name] = rule.passes(model, cluster, job, degrees.mesh)[degrees.row]
        else:
            masks[rule.name] = rule.passes(model, cluster, job, mesh)
    return masks


def check_config(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, config: ParallelConfig) -> list[str]:
    """Raise PlannerError on the first hard rule ``config`` breaks; return soft-rule messages."""
    soft: list[str] = []
    if config.pipeline_layout is not None:
        stages = parse_layout(config.pipeline_layout)
        try:
            check_layout(stages, model.num_hidden_layers, config.pp, mtp_layers(model, job))
        except PlannerError as err:
            raise PlannerError(f"impossible mesh: {err}") from None
        soft += placement_notes(stages)
    mesh = MeshArrays.from_configs([config])
    for rule in RULES:
        if bool(np.all(rule.passes(model, cluster, job, mesh))):
            continue
        message = rule.message(model, cluster, job, config)
        if rule.hard:
            raise PlannerError(f"impossible mesh: {message}")
        soft.append(message)
    return soft
