"""One mesh in, one Estimate out: feasibility, the cost engine, and the advice a person needs."""

from __future__ import annotations

import functools
import math

import numpy as np
from pydantic import ValidationError

from planner.constraints import check_config
from planner.cost.comm import TIER_NAMES
from planner.cost.flops import flash_attention_runs, mtp_layers
from planner.cost.layout import layout_rank_layers
from planner.cost.memory import (
    MEMORY_UNDERCOUNT,
    headroom_clause,
    host_offload_capacity_bytes,
    undercount_safe_bytes,
    usable_memory_bytes,
)
from planner.cost.pipeline import (
    batch_choices,
    dual_rank_layers,
    last_rank_extra_layers,
    microbatches_in_flight,
    needs_pp_multiple,
    plan_layout,
    stage_layer_counts,
)
from planner.cost.recompute import CHEAP_MODULES, applicable
from planner.cost.step import Columns, evaluate
from planner.error_bar import beyond_calibration, error_bar, interval, pooled_stack_errors, relative_band
from planner.errors import PlannerError, SchemaError, validate_as
from planner.figures import rate
from planner.figures import seconds as seconds_text
from planner.hf_config import unfamiliar_type_note
from planner.mesh import MeshArrays, pipeline_holds_fsdp_state
from planner.schedules import microbatch_group_size
from planner.schemas.base import GIB_BYTES
from planner.schemas.estimate import (
    CommBytes,
    Estimate,
    EstimateConfig,
    GroupLinks,
    HiddenComm,
    MemoryBreakdown,
    TimeBreakdown,
)
from planner.schemas.hardware import ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import DUAL_SCHEDULES, ParallelConfig

MICROBATCHES_PER_STAGE_ADVICE = 4
"""Rule of thumb m >= 4p (shared/reference strategy notes; Narayanan et al. 2021 section 3.3):
below it the 1F1B bubble (p-1)/(m+p-1) exceeds about 20%."""


OVERLAP_ADVICE_SHARE = 0.5
"""Warn when the communication a plan hides exceeds half its compute time: a judgement call (the
shared/reference notes: 'check that overlap really happens; it often silently does not')."""


STAGE_IMBALANCE_ADVICE = 0.05
"""Warn when the LM head leaves the other pipeline stages idle more than 5% of each slot: a
judgement call (shared/reference: stages must be balanced; embedding and LM head unbalance them)."""


ZERO3_ADVICE_SHARE = 0.05
"""Warn when ZeRO-3's exposed traffic exceeds 5% of the step: a judgement call (the shared/reference
failure modes: 'ZeRO-3 communication may cost more than expected; on small models it may not pay')."""


def last_stage_imbalance(
    model: ModelSpec, job: JobSpec, layers_per_stage: list[int], last_sets_pace: bool | None = None
) -> tuple[float, float, list[float]]:
    """(share of each pipeline slot the stages idle on average, what the last stage runs beside its
    decoder layers, in layers: ``cost.pipeline.last_rank_extra_layers``, the LM head and the MTP
    layers by forward FLOPs, and each stage's work in layers) for a split of ``layers_per_stage``
    decoder layers. The slot is set
    by the busiest stage (ARCHITECTURE 8.7), so the idle share is 1 - mean(work) / max(work). The
    embedding on the first stage is a gather, no FLOPs. A FLOP ratio, not a timing: the head's
    GEMM is large and efficient, its fp32 softmax is memory-bound. Where the step's own slots have
    another rank set the pace (``last_sets_pace`` False, ``Estimate.last_rank_sets_pace``), the last
    stage's work is taken as at most the busiest other's: by FLOPs DeepSeek-V3's last rank at pp 16
    (2 MoE layers, the head and an MTP layer, 4.6 layers' worth) had looked the busiest and the
    stages 12% idle, where its other ranks' 4 MoE layers and their all-to-alls set the step (a
    review, 2026-12-08)."""
    extra = last_rank_extra_layers(model, job)
    work = [float(n) for n in layers_per_stage]
    work[-1] += extra
    if last_sets_pace is False and len(work) > 1:
        work[-1] = min(work[-1], max(work[:-1]))
    return 1.0 - sum(work) / len(work) / max(work), extra, work


HYBRID_KNOWN_MISS = (
    "known miss: Megatron-Bridge's published runs of hybrid Mamba-2 models, none of them fitted (the held-out "
    "files, NeMo 26.02-26.08), measured below the planner: Nemotron 3 Nano 11-21% on B200, B300, GB200 and GB300 "
    "and 21-24% on H100, Nemotron 3 Super 22-37% on GB200 and GB300; the Mamba-2 kernels' time is counted, not "
    "measured: expect a hybrid to run below this throughput, unless the price's dropless host synchronisation is "
    "read far beyond its fitted range (Super on B200 and B300, 64 local experts per rank: 24-55% above) "
    "(ARCHITECTURE.md section 8.10)"
)
"""What a plan of a hybrid Mamba-2 model on Megatron-Core says about its price: the held-out
Megatron-Bridge rows of Nemotron 3 Nano and Super as `benchmarks/accuracy.py --runs
benchmarks/data/heldout_blackwell_megatron.yaml` (and the H100 file) priced them on 2026-12-05
(Nano +12..+26% and +26..+31%, Super +29..+60% and -35..-19%, predicted over published), each
error e of the prediction read as the published run 1 - 1/(1 + e) below it. A report of those
checks, not a fitted figure."""


def moe_routing_asked(job: JobSpec) -> dict[str, bool]:
    """Which MoE routing flags the job sets away from their defaults (the dispatcher beside
    alltoall, token drop or a load imbalance beside natural routing): said to route nothing on a
    dense model, as --ep-comm-overlap is said to overlap nothing."""
    return {
        "--moe-dispatcher": job.moe_dispatcher != "alltoall",
        "--moe-routing": job.moe_capacity_factor is not None or job.moe_load_imbalance is not None,
    }


def tight_memory_note(memory_per_gpu_bytes: float, cluster: ClusterSpec) -> str | None:
    """Where a fitting mesh's predicted peak leaves less than ``MEMORY_UNDERCOUNT`` of the GPU
    free, the warning that it may run out of memory, else None."""
    if memory_per_gpu_bytes <= undercount_safe_bytes(cluster.gpu.hbm_capacity_bytes):
        return None
    worst_peak = memory_per_gpu_bytes / (1.0 - MEMORY_UNDERCOUNT)
    return (
        f"tight memory: {memory_per_gpu_bytes / GIB_BYTES:.1f} of {cluster.gpu.hbm_capacity_gib:.1f} "
        f"GiB per GPU; the planner's count has fallen up to {MEMORY_UNDERCOUNT:.1%} short of measured peaks "
        f"(cost.memory.MEMORY_UNDERCOUNT), which would need {worst_peak / GIB_BYTES:.1f} GiB: it may run out of "
        f"memory; --memory-headroom {MEMORY_UNDERCOUNT:g} ranks only meshes with that margin"
    )


def low_precision_slower_note(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, config: ParallelConfig, est: Estimate
) -> str | None:
    """Where an fp8 or fp4 job is priced slower than the same mesh in bf16, say so: its casts, scale
    passes and the stack's fitted rate of the format's GEMMs (``fp8_rowwise_gemm_fraction`` 0.55 for
    torchao's row-scaled kernels on H100, fitted over 5 rows) can outweigh the faster tensor cores,
    and a user who asked for the format should hear that the plan prices bf16 faster (a review,
    2026-12-07: Llama-3 8B on 32 H100 under torchtitan, the plan's tp1 dp32 ZeRO-3 at micro-batch 2
    recomputing 5 layers, fp8 row scaling 17.754 s a step against bf16's 16.888). Priced once more
    in bf16 on the same mesh (its step alone: no rules or advice of its own);
    None where that is not slower or cannot be priced."""
    if not job.low_precision:
        return None
    try:
        bf16_job = validate_as(
            JobSpec, job.model_dump(exclude={"fp8_scaling", "bf16_last_layers"}) | {"dtype": "bf16"}, "job"
        )
        cols = evaluate(model, cluster, bf16_job, MeshArrays.from_configs([config]))
        bf16 = row_estimate(cols, 0, model, cluster, bf16_job, config)
    except PlannerError:
        return None
    if bf16.step_time_s >= est.step_time_s:
        return None
    scaling = f" ({job.fp8_scaling} scaling)" if job.dtype == "fp8" else ""
    return (
        f"{job.dtype}{scaling} is priced slower than bf16 on this mesh: {est.step_time_s:.3f} s a step against "
        f"{bf16.step_time_s:.3f} s ({est.step_time_s / bf16.step_time_s - 1:.1%}); the format's casts and its "
        f"GEMMs' fitted rate on {job.software.name} outweigh its tensor cores here"
    )


GROWN_BATCH_NOTE = "global batch grown"
"""How ``advice``'s note of a batch grown past the job's begins (``capacity`` keeps it on its rows)."""


def advice(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, config: ParallelConfig, est: Estimate) -> list[str]:
    """Warnings from the field for one estimated mesh (beyond the soft feasibility rules);
    ``job`` is the job as asked, ``est`` may run a grown batch."""
    notes: list[str] = []
    ran = est.config.job.batch_size
    if ran > job.batch_size:
        interleaved = config.virtual_stages > 1
        unit = "dp*micro_batch_size" + ("*pp" if interleaved and needs_pp_multiple(job) else "")
        least = " and interleaving has at least pp micro-batches" if interleaved and not needs_pp_multiple(job) else ""
        notes.append(
            f"{GROWN_BATCH_NOTE} from {job.batch_size} to {ran} sequences (+{ran / job.batch_size - 1:.1%}) so that "
            f"{unit} divides it{least}; a larger batch changes "
            "the optimisation (learning rate, critical batch size): re-tune it, or pin a mesh that divides "
            f"{job.batch_size}"
        )
    if job.seq_len > model.max_position_embeddings:
        notes.append(
            f"sequence length {job.seq_len:,} is {job.seq_len / model.max_position_embeddings:.3g}x {model.name}'s "
            f"context of {model.max_position_embeddings:,} (max_position_embeddings): positions past it were never "
            "trained; run it as a context extension, from a card whose RoPE scaling reaches it"
            + (" (its rope_scaling does not)" if model.rope_scaling else "")
        )
    if config.zero_stage == 2 and pipeline_holds_fsdp_state(job, config):
        # the table's Z column names the stage torchtitan is given, the legend what it shards alone
        # (a review, 2026-12-07, read equal ZeRO-1 and ZeRO-2 figures as a mispricing); ZeRO-3's own
        # note is below
        notes.append(
            f"ZeRO-2 with pp {config.pp} on {job.software.name}: its pipeline runtime "
            "(torch.distributed.pipelining) holds each stage's gradients unsharded from the first backward to the "
            "step's end and reduce-scatters them once, so memory holds them whole as ZeRO-1 does "
            "(Stack.pipeline_holds_fsdp_state)"
        )
    host_cap = host_offload_capacity_bytes(cluster)
    if config.offload_layers is not None and est.host_offload_bytes_per_gpu > host_cap:
        notes.append(
            f"does not fit in host memory: {config.offload_layers} offloaded layers' activations fill "
            f"{est.host_offload_bytes_per_gpu / GIB_BYTES:.1f} GiB per GPU, {host_cap / GIB_BYTES:.1f} GiB usable of "
            f"the {cluster.gpu.host_memory_gib or 0:g} GiB per GPU (cost.memory.HOST_MEMORY_RESERVE kept for the "
            "rest); offload fewer layers or recompute"
        )
    elif not est.fits:
        notes.append(
            f"does not fit: needs {est.memory_per_gpu_bytes / GIB_BYTES:.1f} GiB per GPU, "
            f"{est.memory_usable_bytes / GIB_BYTES:.1f} GiB usable on a {cluster.gpu.name}{headroom_clause(job)}; "
            f"try {memory_remedies(job, config)}"
        )
        notes += module_recompute_hint(model, cluster, job, config)
        notes += group_size_memory_hint(model, cluster, job, config, est)
    elif (tight := tight_memory_note(est.memory_per_gpu_bytes, cluster)) is not None:
        notes.append(tight)
    beyond = beyond_calibration(est.config.num_gpus, model.is_moe)
    if beyond is not None and est.tokens_per_s_per_gpu_interval is not None:
        notes.append(beyond)
    if (slower := low_precision_slower_note(model, cluster, job, config, est)) is not None:
        notes.append(slower)
    if (unfamiliar := unfamiliar_type_note(model)) is not None:
        notes.append(unfamiliar)
    m, p = est.num_microbatches, config.pp
    if p > 1 and m < MICROBATCHES_PER_STAGE_ADVICE * p:
        notes.append(
            f"only {m} micro-batches for {p} pipeline stages: bubble {est.bubble_fraction:.0%}; "
            f"aim for m >= {MICROBATCHES_PER_STAGE_ADVICE}p = {MICROBATCHES_PER_STAGE_ADVICE * p}"
        )
    idle, head_layers, work = last_stage_imbalance(model, job, est.layers_per_stage, est.last_rank_sets_pace)
    if config.pp > 1 and idle > STAGE_IMBALANCE_ADVICE and config.schedule not in DUAL_SCHEDULES:
        mtp = mtp_layers(model, job)
        notes.append(
            f"pipeline stages are unbalanced: the busiest stage runs the work of {max(work):.1f} layers by FLOPs, "
            f"the average {sum(work) / len(work):.1f} (the last runs the LM head, {model.vocab_size:,} x "
            f"{model.hidden_size}{f' and {mtp} MTP layer(s)' if mtp else ''}, the work of {head_layers:.1f} "
            f"layers, beside its {est.layers_per_stage[-1]}), so the stages idle {idle:.0%} of each slot on "
            "average; "
            + (
                f"{job.software.name} takes no split of the planner's choosing (--pipeline-layout needs a stack "
                "that runs one: megatron-core or torchtitan)"
                if not job.software.pipeline_layouts
                else (
                    "no split of these layers over these stages does better"
                    if est.layers_per_stage[-1] > config.virtual_stages - 1 or job.software.export_format != "megatron"
                    else f"the last rank already holds the fewest layers a split without empty chunks leaves it, "
                    f"{est.layers_per_stage[-1]}: one in each of its model chunks but the one that runs the LM head "
                    "and loss; a --pipeline-layout with empty chunks, which Megatron-Core takes, could move more to "
                    "the others (each empty chunk still costs its pipeline hops)"
                )
                if config.pipeline_layout is None and not job.low_precision
                else f"its bf16 GEMM runs slower per FLOP than the {job.dtype} layers, which the split's FLOP count "
                "does not see: compare splits with --pipeline-layout"
                if job.low_precision
                else "give it fewer layers (--pipeline-layout"
                + (
                    "; Megatron-LM --pipeline-model-parallel-layout or --decoder-last-pipeline-num-layers)"
                    if job.software.export_format == "megatron"
                    else ")"
                )
            )
        )
    asked = [flag for flag, given in moe_routing_asked(job).items() if given]
    if asked and not model.is_moe:
        verb = "route" if len(asked) > 1 else "routes"
        notes.append(f"{' and '.join(asked)} {verb} nothing: {model.name} has no experts")
    if job.ep_comm_overlap and (not model.is_moe or config.ep == 1):
        notes.append(
            "--ep-comm-overlap has nothing to overlap: "
            + (f"{model.name} has no experts" if not model.is_moe else "this mesh runs no expert parallelism (ep 1)")
        )
    if job.tp_comm_overlap and config.tp == 1:  # asked for, not the stack's default
        notes.append("--tp-comm-overlap has nothing to overlap: this mesh runs no tensor parallelism (tp 1)")
    if model.attention_sinks and not flash_attention_runs(model, job):
        notes.append(
            f"{model.name}'s attention sinks run on {job.software.name}'s unfused attention (every s x s score "
            "through HBM; its flash kernels take no sink): Transformer Engine >= 2.8 with cuDNN >= 9.13.1 runs them "
            "fused (--stack megatron-core)"
        )
    elif model.attention_sinks and job.software.export_format == "megatron":
        notes.append(
            f"known miss: Megatron-Bridge's published runs of a model like {model.name} (GPT-OSS-120B: attention "
            "sinks, biased experts, a clamped activation) measured from 4% above to 15% below the planner on H100 "
            "(NeMo 25.11-26.04) and 12-24% below on GB200, GB300, B200 and B300 (25.11-26.04.01; 36% below on "
            "B300 at EP 64 across nodes, 44% on the 25.11 B200 row as stated, which ran the EP-64 figure): on "
            "Megatron-Core expect 10-25% below this throughput (ARCHITECTURE.md sections 4 and 6)"
        )
    if model.is_hybrid and job.software.export_format == "megatron":
        notes.append(HYBRID_KNOWN_MISS)
    notes += biased_band_note(est)
    if config.tp > 1 and not config.sequence_parallel:
        notes.append("tp > 1 without --sequence-parallel: norm and dropout activations are replicated on every TP rank")
    # the rate the planner runs a large GEMM at: benchmark efficiency x what a long run sustains
    gpu = cluster.gpu
    ceiling = gpu.gemm_efficiency * gpu.gemm_efficiency_ratio(job.dtype, job.fp8_scaling) * gpu.sustained
    # in the full-square count (PaLM's, which torchtitan and llm-foundry log) a causal layer's model
    # FLOPs are twice what its kernels run; in Megatron-LM's causal count they are not
    if est.hfu > ceiling and not job.software.causal_model_flops:  # HFU >= MFU: recompute only adds FLOPs
        which = f"MFU {est.mfu:.0%}" if est.mfu > ceiling else f"HFU {est.hfu:.0%} (MFU {est.mfu:.0%})"
        notes.append(
            f"{which} exceeds the GPU's sustained GEMM rate ({ceiling:.0%} of peak): model FLOPs count the full "
            f"s x s attention square (the PaLM convention, which {job.software.name} logs) while causal kernels run "
            "half" + (", and recomputed attention counts it again" if est.hfu > est.mfu else "")
        )
    hidden, compute = est.hidden_comm_s.dp + est.hidden_comm_s.cp, est.time_breakdown_s.compute
    if hidden > OVERLAP_ADVICE_SHARE * compute:
        notes.append(
            f"counts on hiding {seconds_text(hidden)} of DP/ZeRO and CP communication behind "
            f"{seconds_text(compute)} "
            f"of compute; overlap is often partly lost in practice (SMs shared with NCCL kernels, bucket "
            f"timing): without it the step takes {seconds_text(est.step_time_s + hidden)}"
        )
    exposed_dp = est.time_breakdown_s.dp_comm
    if config.zero_stage == 3 and pipeline_holds_fsdp_state(job, config):
        notes.append(
            f"with a pipeline, {job.software.name}'s runtime keeps the stage's weights gathered and its gradients "
            "whole from the first backward to the step's end (torch.distributed.pipelining), so ZeRO-3 holds what "
            "ZeRO-2 does and gathers the weights again for every backward: --zero-stage 2 sends less for the same "
            "memory"
        )
    elif config.zero_stage == 3 and exposed_dp > ZERO3_ADVICE_SHARE * est.step_time_s:
        stack = job.software
        lower = [z for z in stack.zero_stages if z in (1, 2)]
        notes.append(
            f"ZeRO-3 gathers weights for every micro-batch ({est.num_microbatches} per step) and exposes "
            f"{seconds_text(exposed_dp)} ({exposed_dp / est.step_time_s:.0%} of the step); ZeRO-1/2 gather once "
            "per step"
            + (f": try --zero-stage {min(lower)} if memory allows" if lower else f" ({stack.name} runs neither)")
        )
    return notes


def memory_remedies(job: JobSpec, config: ParallelConfig) -> str:
    """What a mesh that does not fit could change, of what its stack runs and it does not use yet:
    a higher ZeRO stage (where the stack has one for this pp), full recompute, a smaller
    micro-batch; more tp/pp where the stack runs them, more GPUs or a shorter sequence always; no full
    recompute under EP overlap, which refuses it."""
    stack = job.software
    most = stack.zero_with_pipeline if config.pp > 1 else 3
    remedies = []
    higher = [z for z in stack.zero_stages if config.zero_stage < z <= most]
    if higher:
        remedies.append(f"--zero-stage {higher[-1]}" if len(higher) == 1 else "a higher --zero-stage")
    if not (config.recompute == "full" and config.recompute_layers is None) and not job.ep_comm_overlap:
        remedies.append("--recompute full")  # EP overlap runs without full recompute (rule ep_overlap_schedule)
    axes = [axis for axis in ("tp", "pp") if axis in stack.parallelisms]
    if axes:
        remedies.append(f"more {'/'.join(axes)}")
    if config.micro_batch_size > 1:
        remedies.append("a smaller --micro-batch-size")
    remedies += ["more GPUs", "a shorter --seq-len"]
    return ", ".join(remedies[:-1]) + ", or " + remedies[-1]


def module_recompute_hint(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, config: ParallelConfig) -> list[str]:
    """For a mesh that does not fit, on a stack with Megatron's per-module recompute: whether
    selective recompute of the cheap modules the model has (``cost.recompute``: MLA's
    up-projections, the experts' activation, the norms' outputs, with the attention core) makes it
    fit, and at what step time. Megatron-Bridge's DeepSeek recipes recompute mla_up_proj so."""
    if config.recompute == "full" or not job.software.per_module_recompute:
        return []
    cheap = applicable(model, CHEAP_MODULES)
    if job.recompute_modules is not None and set(cheap) <= set(job.recompute_modules):
        return []
    trial_job = job.model_copy(update={"recompute_modules": cheap})
    trial = config.model_copy(update={"recompute": "selective"})
    cols = evaluate(model, cluster, trial_job, MeshArrays.from_configs([trial]))
    if not bool(cols.fits[0]):
        return []
    return [
        f"fits with --recompute selective --recompute-modules {','.join(cheap)} (Megatron's per-module recompute): "
        f"{float(cols.memory.total[0]) / GIB_BYTES:.1f} GiB per GPU, step {float(cols.step_time_s[0]):.3g} s"
    ]


def group_size_memory_hint(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, config: ParallelConfig, est: Estimate
) -> list[str]:
    """For an interleaved mesh that does not fit while its micro-batch count m is no multiple of
    pp: Megatron-Core then runs each model chunk's micro-batches in groups of N > p
    (``schedules.microbatch_group_size``), and its first rank holds more micro-batches'
    activations at the warm-up's end (``pipeline.microbatches_in_flight``). Names the nearest
    global batches whose m pp divides, and whether each fits (priced, not guessed)."""
    p, m = config.pp, est.num_microbatches
    if config.virtual_stages < 2 or needs_pp_multiple(job) or m <= p or m % p == 0:
        return []
    mesh = MeshArrays.from_configs([config])
    group = int(microbatch_group_size(np.array([p]), np.array([m]))[0])
    per_microbatch = est.config.job.batch_size // m  # dp * micro_batch_size sequences
    trials = []
    for count in sorted({(m // p) * p, -(-m // p) * p}):
        trial_job = job.model_copy(update={"global_batch_size": count * per_microbatch, "global_batch_tokens": None})
        cols = evaluate(model, cluster, trial_job, mesh)
        held = float(microbatches_in_flight(np.array([count]), mesh)[0])
        need = f"{float(cols.memory.total[0]) / GIB_BYTES:.1f} GiB"
        trials.append(
            f"-B {count * per_microbatch} ({count} micro-batches, {held:.3g} held) "
            + (f"fits ({need})" if bool(cols.fits[0]) else f"needs {need}")
        )
    held = float(microbatches_in_flight(np.array([m]), mesh)[0])
    return [
        f"{m} micro-batches over pp {p} run in groups of {group} per model chunk (Megatron-Core's "
        f"--microbatch-group-size-per-virtual-pipeline-stage), so the first rank holds {held:.3g} micro-batches' "
        "activations: " + "; ".join(trials)
    ]


def gpu_hours_usd(cluster: ClusterSpec, seconds: float) -> float | None:
    """What ``seconds`` of the whole cluster cost at the profile's price per GPU-hour (None
    when the profile has no price and none was given)."""
    price = cluster.profile.price_per_gpu_hour_usd
    return None if price is None else seconds * cluster.num_gpus * price / 3600.0


def time_to_train_s(job: JobSpec, tokens_per_s: float) -> float | None:
    """Wall time to train on ``job.training_tokens`` at a steady ``tokens_per_s``, in whole
    optimizer steps of ``job.tokens_per_step`` (a budget below one step still takes one); no
    restarts, evaluation or checkpoint stalls: a lower bound. None without a token budget."""
    if job.training_tokens is None:
        return None
    steps = max(1, math.ceil(job.training_tokens / job.tokens_per_step - 1e-9))
    return steps * job.tokens_per_step / tokens_per_s


def biased_band_note(est: Estimate) -> list[str]:
    """A warning where the error bar lies wholly below (or above) the prediction: the published runs
    priced like this one all measured slower (faster) than the planner said, so the band, not the
    point figure, is what to plan with."""
    band = est.tokens_per_s_per_gpu_interval
    if band is None or est.tokens_per_s_per_gpu <= 0:
        return []
    low, high = relative_band(est.tokens_per_s_per_gpu, band)
    if low < 0.0 < high:
        return []
    side, near, far = ("below", -high, -low) if high <= 0.0 else ("above", low, high)
    return [
        f"biased prediction: the published runs it is read from ({est.interval_basis}) measured {near:.0f}-{far:.0f}% "
        f"{side} what the planner predicted for them; plan with {rate(band[0])} .. {rate(band[1])} tokens/s per GPU, "
        f"not {rate(est.tokens_per_s_per_gpu)}"
    ]


def out_of_range(err: ValidationError) -> str:
    """One line for an estimate whose numbers came out unrepresentable (infinite or NaN): which
    quantity, and the inputs that can drive it there (a price, or a profile's memory, peak or
    bandwidth far outside any real GPU's)."""
    first = err.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return (
        f"the estimate's {where} came out {first.get('input')!r}: an input is out of range (--price, or a hardware "
        "profile's memory, peak TFLOP/s or bandwidth)"
    )


@functools.cache
def _calibrated_stack_errors() -> dict[str, list[float]]:
    """``error_bar.pooled_stack_errors`` of the shipped stacks, read once per process."""
    from planner.catalog import list_stacks

    return pooled_stack_errors([s.calibration for s in list_stacks()])


def row_estimate(
    cols: Columns, i: int, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, config: ParallelConfig
) -> Estimate:
    """Row ``i`` of evaluated columns as an Estimate (without advice). A pipeline split the
    framework must be told (``cost.pipeline.plan_layout``) is written into the config's
    ``pipeline_layout``, so the export runs what was priced; not for a stack that takes no layout
    (``Stack.pipeline_layouts``: DeepSpeed partitions its own split in code, and its export had
    refused the search's best meshes for a layout nobody asked for)."""
    if config.pipeline_layout is None and config.schedule not in DUAL_SCHEDULES and job.software.pipeline_layouts:
        layout = plan_layout(model, job, config.pp, config.virtual_stages)
        if layout is not None:
            config = config.model_copy(update={"pipeline_layout": layout})
    step = float(cols.step_time_s[i])
    batch = int(cols.batch_size[i])
    if batch != job.batch_size:
        job = job.model_copy(update={"global_batch_size": batch, "global_batch_tokens": batch * job.seq_len})
    tokens_per_s = job.tokens_per_step / step
    per_gpu = tokens_per_s / cluster.num_gpus
    stack = job.software
    profile = cluster.profile
    errors, basis = error_bar(
        profile.calibration,
        stack.calibration,
        profile.calibrated_like or profile.name,
        stack.name,
        model.is_moe,
        None if stack.calibration and stack.calibration.cv_error_pct else _calibrated_stack_errors(),
    )
    if profile.calibrated_like:
        basis += f" ({profile.name} is calibrated like {profile.calibrated_like})"
    model_flops = float(cols.model_flops_per_step[i])
    price = cluster.profile.price_per_gpu_hour_usd
    days = time_to_train_s(job, tokens_per_s)
    mem = cols.memory
    fields = dict(
        step_time_s=step,
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=per_gpu,
        tokens_per_s_per_gpu_interval=interval(per_gpu, errors),
        interval_basis=basis,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=float(cols.hardware_flops_per_step[i]),
        model_tflops_per_gpu=model_flops / step / cluster.num_gpus / 1e12,
        mfu=float(cols.mfu[i]),
        hfu=float(cols.hfu[i]),
        flops_count="causal" if job.software.causal_model_flops else "full_square",
        bubble_fraction=float(cols.bubble_fraction[i]),
        num_microbatches=int(cols.num_microbatches[i]),
        layers_per_stage=(
            layout_rank_layers(config.pipeline_layout, config.pp)
            if config.pipeline_layout
            else dual_rank_layers(model.num_hidden_layers, config.pp, config.schedule)
            or stage_layer_counts(model.num_hidden_layers, config.pp, config.virtual_stages)
        ),
        memory_per_gpu_bytes=float(mem.total[i]),
        memory_usable_bytes=usable_memory_bytes(cluster, job),
        host_offload_bytes_per_gpu=float(cols.host_offload_bytes[i]),
        memory_breakdown_bytes=MemoryBreakdown(**{k: float(getattr(mem, k)[i]) for k in MemoryBreakdown.model_fields}),
        memory_peak_rank=None if (peak_rank := int(mem.rank[i])) < 0 else peak_rank,
        last_rank_sets_pace=bool(cols.last_is_slowest[i]) if config.pp > 1 else None,
        time_breakdown_s=TimeBreakdown(**{k: float(np.asarray(v)[i]) for k, v in cols.time.items()}),
        hidden_comm_s=HiddenComm(**{k: float(np.asarray(v)[i]) for k, v in cols.hidden.items()}),
        comm_bytes_per_gpu=CommBytes(**{k: float(np.asarray(v)[i]) for k, v in cols.comm_bytes.items()}),
        links=GroupLinks(**{k: TIER_NAMES[int(cols.links[k].tier[i])] for k in GroupLinks.model_fields}),
        fits=bool(cols.fits[i]),
        price_per_gpu_hour_usd=price,
        cost_per_step_usd=gpu_hours_usd(cluster, step),
        time_to_train_s=days,
        cost_to_train_usd=None if days is None else gpu_hours_usd(cluster, days),
        warnings=[],
        config=EstimateConfig(
            model=model.name, cluster=cluster.name, num_gpus=cluster.num_gpus, job=job, parallel=config
        ),
    )
    try:
        return Estimate(**fields)
    except SchemaError as err:
        raise PlannerError(out_of_range(err.validation)) from None


def estimate_row(
    cols: Columns,
    i: int,
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    config: ParallelConfig,
    soft: list[str] | None = None,
) -> Estimate:
    """Row ``i`` of evaluated columns as an Estimate with every warning: the soft feasibility
    rules the mesh breaks (``soft``, checked here unless the caller already has them), then the
    advice. The search and ``estimate_mesh`` both end here."""
    est = row_estimate(cols, i, model, cluster, job, config)
    if soft is None:
        soft = check_config(model, cluster, job, config)
    return est.model_copy(update={"warnings": soft + advice(model, cluster, job, config, est)})


def estimate_mesh(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, config: ParallelConfig) -> Estimate:
    """Check ``config`` against the model, cluster and job, price it, and attach warnings.

    Raises PlannerError when a hard rule fails (product of degrees vs GPUs, divisibility, ...).
    Where the job lets the batch grow, the mesh runs the first batch of ``batch_choices`` that
    fits, as the search picks it (the next multiple where none fits).
    """
    soft = check_config(model, cluster, job, config)
    mesh = MeshArrays.from_configs([own_split_as_planned(model, job, config)])
    if job.max_batch_growth > 0:
        mesh, _ = batch_choices(job, mesh)
    cols = evaluate(model, cluster, job, mesh)
    best = int(np.argmax(cols.fits)) if cols.fits.any() else 0
    return estimate_row(cols, best, model, cluster, job, config, soft)


def own_split_as_planned(model: ModelSpec, job: JobSpec, config: ParallelConfig) -> ParallelConfig:
    """``config`` without its ``pipeline_layout`` where that is the plan's own split
    (``plan_layout``, which ``row_estimate`` writes into every candidate): priced as the search
    priced it, each pipeline rank at its own layers and micro-batches, where an explicit layout is
    priced with bounds (its middle ranks at rank 1's micro-batches). A candidate's mesh given back
    to ``estimate`` had come out otherwise: Llama-3-8B on a GB200 rack 61.6 -> 64.4 GiB (a review)."""
    if config.pipeline_layout is None or config.schedule in DUAL_SCHEDULES:
        return config
    if config.pipeline_layout != plan_layout(model, job, config.pp, config.virtual_stages):
        return config
    return config.model_copy(update={"pipeline_layout": None})
