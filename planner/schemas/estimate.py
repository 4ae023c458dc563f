"""Estimate: what the cost engine predicts for one mesh, with its breakdowns (SI units).

Key names are those ``plan estimate --json`` prints; ``Estimate.model_validate_json`` reads them
back (tests round-trip them). With ``--compare-best`` the object holds one key more,
``compared_with_best`` (the search's #1 as a ``RankedEstimate`` under ``best``, and the
``explanation``), which an Estimate does not read: pop it first.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveInt

from planner.schemas.base import Frozen
from planner.schemas.job import JobSpec
from planner.schemas.parallel import ParallelConfig


class MemoryBreakdown(Frozen):
    """Bytes on the most loaded GPU, by kind."""

    weights: NonNegativeFloat
    gradients: NonNegativeFloat
    optimizer: NonNegativeFloat
    activations: NonNegativeFloat
    logits: NonNegativeFloat
    overhead: NonNegativeFloat


class TimeBreakdown(Frozen):
    """Seconds per step, by term. ``*_comm`` is the exposed (not overlapped) part."""

    compute: NonNegativeFloat
    tp_comm: NonNegativeFloat
    pp_comm: NonNegativeFloat
    dp_comm: NonNegativeFloat
    cp_comm: NonNegativeFloat
    ep_comm: NonNegativeFloat
    bubble: NonNegativeFloat
    optimizer: NonNegativeFloat
    layer_overhead: NonNegativeFloat = Field(
        0.0, description="Fixed per-layer time: launch gaps and framework hooks (the stack's layer_overhead_us)"
    )
    overlap_slowdown: NonNegativeFloat = Field(
        0.0, description="Compute slowed while hidden communication runs beside it (the stack's overlap_slowdown)"
    )
    offload: NonNegativeFloat = Field(
        0.0,
        description="Activation offloading's host transfers not hidden behind the layers' compute "
        "(``ParallelConfig.offload_layers``)",
    )


class CommBytes(Frozen):
    """Bytes a GPU sends per step, by parallel dimension: for TP, CP and EP the busiest pipeline rank's
    (the last rank with the LM head, or the busiest other), which need not be the rank that sets
    the step's pace."""

    tp: NonNegativeFloat
    pp: NonNegativeFloat
    dp: NonNegativeFloat
    cp: NonNegativeFloat
    ep: NonNegativeFloat


class HiddenComm(Frozen):
    """Seconds per step of communication the model counts as hidden behind compute: the overlap
    a plan relies on, and what the step would grow by if it were lost."""

    dp: NonNegativeFloat
    cp: NonNegativeFloat
    tp: NonNegativeFloat = 0.0
    ep: NonNegativeFloat = 0.0
    pp: NonNegativeFloat = 0.0


Tier = Literal["intra_node", "inter_node", "none"]


class GroupLinks(Frozen):
    """The slowest link tier each process group crosses ('none' for a group of one)."""

    tp: Tier
    cp: Tier
    dp: Tier
    pp: Tier
    ep: Tier
    etp: Tier = Field(
        "none",
        description="The expert-TP group's (expert layers' TP, --expert-tp), whose traffic "
        "CommBytes.tp holds beside the dense layers' TP",
    )


class EstimateConfig(Frozen):
    """What was estimated, echoed back: model and cluster names, the job and the mesh."""

    model: str
    cluster: str
    num_gpus: PositiveInt
    job: JobSpec
    parallel: ParallelConfig


class Estimate(Frozen):
    """Predicted step time, throughput, utilisation and memory of one mesh.

    ``mfu`` counts model FLOPs only (6 * active params * tokens + attention, the way papers
    report MFU); ``hfu`` adds recomputed FLOPs. ``memory_per_gpu_bytes`` is the most loaded GPU
    and ``fits`` compares it with the profile's usable HBM.
    """

    step_time_s: NonNegativeFloat
    tokens_per_s: NonNegativeFloat
    tokens_per_s_per_gpu: NonNegativeFloat
    tokens_per_s_per_gpu_interval: tuple[NonNegativeFloat, NonNegativeFloat] | None = Field(
        None,
        description="Central 80% of what published runs measured where the planner predicted this, from the "
        "cross-validated errors of the matching profile and stack (None: no calibrated runs match)",
    )
    interval_basis: str = Field("", description="Which cross-validated runs the interval comes from")
    model_flops_per_step: NonNegativeFloat
    hardware_flops_per_step: NonNegativeFloat
    model_tflops_per_gpu: NonNegativeFloat
    mfu: NonNegativeFloat = Field(
        description="Model FLOPs per second over the cluster's dense peak in the job's dtype (an fp8 job's against "
        "the fp8 peak, twice bf16's on Hopper and Blackwell: compare MFU across dtypes by tokens/s instead)"
    )
    hfu: NonNegativeFloat = Field(description="As mfu, with the recomputed FLOPs counted")
    flops_count: Literal["causal", "full_square"] = Field(
        "full_square",
        description="How model_flops_per_step, model_tflops_per_gpu, mfu and hfu count a causal layer's attention, "
        "as the stack's own log does (Stack.causal_model_flops): 'causal', the half of the s x s square the mask "
        "keeps (Megatron-LM); 'full_square', all of it (PaLM, torchtitan, llm-foundry)",
    )
    bubble_fraction: float = Field(ge=0, lt=1)
    num_microbatches: PositiveInt
    layers_per_stage: list[int] = Field(
        description="Transformer layers on each pipeline rank (first: +embedding, last: +LM head)"
    )
    memory_per_gpu_bytes: NonNegativeFloat
    memory_usable_bytes: NonNegativeFloat
    host_offload_bytes_per_gpu: NonNegativeFloat = Field(
        0.0, description="Host memory the offloaded activations fill per GPU (ParallelConfig.offload_layers)"
    )
    memory_breakdown_bytes: MemoryBreakdown
    last_rank_sets_pace: bool | None = Field(
        None,
        description="Whether the last pipeline rank (its layers with the LM head, loss and MTP layers) sets the "
        "step's pace, else the busiest other rank; None without a pipeline",
    )
    memory_peak_rank: int | None = Field(
        None,
        ge=0,
        description="The pipeline rank whose memory memory_per_gpu_bytes is (0 the first, with the embedding and "
        "the most micro-batches in flight); None where it bounds an explicit layout's ranks between the first and "
        "the last (their busiest counted at rank 1's micro-batches)",
    )
    time_breakdown_s: TimeBreakdown
    comm_bytes_per_gpu: CommBytes
    hidden_comm_s: HiddenComm
    links: GroupLinks
    fits: bool
    price_per_gpu_hour_usd: NonNegativeFloat | None = Field(None, description="From the profile or --price")
    cost_per_step_usd: NonNegativeFloat | None = Field(None, description="step_time_s * GPUs * price / 3600")
    time_to_train_s: NonNegativeFloat | None = Field(
        None, description="The whole steps of job.tokens_per_step that cover job.training_tokens, at tokens_per_s"
    )
    cost_to_train_usd: NonNegativeFloat | None = Field(None, description="time_to_train_s * GPUs * price / 3600")
    warnings: list[str]
    config: EstimateConfig
