"""What the validator replays and what it reports (SI units), as frozen pydantic models.

A ``ReplayBlock`` is one process-group layout (a candidate's scaled replica, or the sweep's
groups of the first w ranks) with the ``TermSpec`` s to time on it; a worker turns each TermSpec
into a ``Measurement``. ``ValidationReport`` (``plan validate``) and ``SweepReport`` (``plan
validate sweep``) are the JSON files ``plan calibrate --from`` reads back.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveInt, model_validator

from planner.schemas.base import Frozen
from planner.schemas.estimate import Tier
from planner.schemas.hardware import BYTES_PER_ELEMENT
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import DEFAULT_ORDER, ParallelConfig

Op = Literal["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv", "ring_exchange", "gemm", "layer"]
"""Replayed operations. ``send_recv``: every rank of a pipeline group sends to the next stage and
receives from the previous one (no wrap-around); ``ring_exchange``: the same with wrap-around (one
step of the CP K/V ring); ``gemm``: one (M x K) @ (K x N) matmul on each rank; ``layer``: one
transformer layer's shard, forward and backward (``planner.validate.layer``)."""

COLLECTIVE_OPS: tuple[str, ...] = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")
"""Ops the sweep can time (``--ops`` spells them with dashes)."""


class ReplicaMesh(Frozen):
    """The mesh a replay builds: degrees per axis (one replica), how many replicas fill the world,
    and the rank order (innermost axis first, as ParallelConfig.order)."""

    tp: PositiveInt = 1
    pp: PositiveInt = 1
    dp: PositiveInt = 1
    cp: PositiveInt = 1
    ep: PositiveInt = 1
    expert_tp: PositiveInt = 1
    order: str = DEFAULT_ORDER
    replicas: PositiveInt = 1

    @property
    def ranks_per_replica(self) -> int:
        return self.tp * self.pp * self.dp * self.cp


class LayerShard(Frozen):
    """One transformer layer of ``model`` as one rank of ``plan`` runs it for one micro-batch of
    ``job`` (its GEMMs are ``planner.cost.compute.layer_gemms``): a MoE layer when ``moe``."""

    model: ModelSpec
    job: JobSpec
    plan: ParallelConfig
    moe: bool = False


MAX_MESSAGE_BYTES = 2**40
"""The largest message a replay sends or a replayed term may state: 1 TiB. Not a measurement but
a sanity bound: a replay allocates the message in one device's memory (the largest shipped
profile, GB300, holds 277.55 GiB). ``plan validate sweep --sizes`` had accepted 1e15 bytes, and a
report's term of 1e200 bytes (broken or hand-edited) overflowed ``plan calibrate --from``'s fit;
the plan's own message (``plan_message_bytes``) is not bounded."""


class TermSpec(Frozen):
    """One operation to time and its prediction on the replay's own hardware profile.

    ``group`` names the process group: an axis of the replica mesh (tp, cp, pp, dp_cp, ep, etp,
    edp), ``first:<w>`` (ranks 0..w-1, the sweep) or ``self`` (a GEMM or a layer shard, ``layer``,
    on each rank). ``tier`` and
    ``per_domain`` say where the group sits on the replay profile (``planner.cost.comm``), so that
    ``plan calibrate`` can price the same group on a refitted profile. ``message_bytes`` is what is
    replayed, ``plan_message_bytes`` what the plan sends (larger when ``--max-message-bytes`` or
    ``--max-gemm-flops`` capped it); ``calls_per_step`` counts one step of the plan in replayed
    calls (a capped message counts as plan/replayed buckets).
    """

    name: str
    op: Op
    group: str
    group_size: PositiveInt
    plan_group_size: PositiveInt
    tier: Tier = "none"
    per_domain: PositiveInt = 1
    message_bytes: NonNegativeFloat = Field(0.0, le=MAX_MESSAGE_BYTES)
    plan_message_bytes: NonNegativeFloat = 0.0
    gemm_mnk: tuple[int, int, int] | None = None
    plan_gemm_mnk: tuple[int, int, int] | None = None
    dtype: str = "fp32"
    layer: LayerShard | None = None
    calls_per_step: NonNegativeFloat = 1.0
    in_step_sum: bool = Field(
        True,
        description="Counted in the candidate's replay time per step; False for a layer's GEMMs when "
        "the layer shard that contains them is replayed too",
    )
    predicted_s: NonNegativeFloat

    @model_validator(mode="after")
    def _fields_of_its_op(self) -> TermSpec:
        """A GEMM names its shape and a format the planner prices, a layer shard its layer, and a
        collective a group of two or more (a report edited by hand had reached the fit as an
        AssertionError, a KeyError or a non-finite residual)."""
        if self.op == "gemm" and self.gemm_mnk is None:
            raise ValueError(f"term '{self.name}': op gemm needs gemm_mnk, its M, N and K")
        if self.op == "layer" and self.layer is None:
            raise ValueError(f"term '{self.name}': op layer needs layer, the shard it times")
        if self.op in ("gemm", "layer") and self.dtype not in BYTES_PER_ELEMENT:
            raise ValueError(f"term '{self.name}': dtype {self.dtype!r}; allowed: {', '.join(BYTES_PER_ELEMENT)}")
        if self.op not in ("gemm", "layer") and self.group_size < 2:
            raise ValueError(f"term '{self.name}': a {self.op} needs a group of at least 2, got group_size 1")
        return self


class ReplayBlock(Frozen):
    """A group layout and its terms: ``mesh`` for a candidate, None for the sweep's prefix groups."""

    label: str
    mesh: ReplicaMesh | None = None
    terms: list[TermSpec]


class ReplayJob(Frozen):
    """Everything a rank needs to run a replay (picklable, identical on every rank)."""

    backend: Literal["gloo", "nccl"]
    blocks: list[ReplayBlock]
    warmup: int = Field(ge=0)
    repeats: PositiveInt
    timeout_s: float = Field(gt=0, description="Process-group and per-collective timeout")
    gemm_on_all_ranks: bool = Field(
        description="Time GEMMs on every rank at once (one device per rank); False: rank 0 only, "
        "while the others wait, because more ranks than CPU cores would share cores"
    )


class Measurement(Frozen):
    """Seconds of one call of a term: per repeat the slowest rank (barrier-aligned start), then the
    median and the 10th/90th percentiles over repeats."""

    block: int
    term: int
    median_s: NonNegativeFloat
    p10_s: NonNegativeFloat
    p90_s: NonNegativeFloat
    repeats: PositiveInt


class TermResult(Frozen):
    """A term with its measurement and measured/predicted ratio."""

    spec: TermSpec
    measured_s: NonNegativeFloat
    p10_s: NonNegativeFloat
    p90_s: NonNegativeFloat
    repeats: PositiveInt
    ratio: float | None = Field(description="measured / predicted; None when predicted is 0")


class CandidateReport(Frozen):
    """One ranked mesh of the plan, replayed: its terms, and per step (every term times its
    calls per step, summed, serially: no overlap or bubble) predicted and measured."""

    rank: PositiveInt
    mesh: str
    plan_step_time_s: NonNegativeFloat = Field(description="The plan's step time on the plan's cluster")
    replica: ReplicaMesh
    replica_notes: list[str]
    terms: list[TermResult]
    predicted_replay_s_per_step: NonNegativeFloat
    measured_replay_s_per_step: NonNegativeFloat | None
    ratio: float | None
    complete: bool


class ReplayContext(Frozen):
    """Where and how a report was measured, and which profile priced what."""

    host: str
    created_at: str
    backend: Literal["gloo", "nccl"]
    device: str
    device_name: str | None = Field(None, description="GPU or CPU model of the measuring rank 0")
    torch_version: str | None = None
    world_size: PositiveInt
    replay_profile: str = Field(description="Profile that priced every predicted_s (the replay's hardware)")
    replay_profile_path: str | None = None
    warmup: int
    repeats: int
    timeout_s: float
    max_message_bytes: float | None
    max_gemm_flops: float | None
    notes: list[str]


class ValidationReport(Frozen):
    """``plan validate``'s JSON: the plan's candidates replayed, and whether their order held."""

    kind: Literal["validation"] = "validation"
    status: Literal["complete", "failed"]
    error: str | None = None
    model: str
    plan_cluster: str = Field(description="Cluster the plan was ranked on (priced plan_step_time_s)")
    context: ReplayContext
    candidates: list[CandidateReport]
    kendall_tau: float | None = Field(
        description="Kendall tau of predicted vs measured replay time per step over the complete candidates' "
        "distinct replays (candidates replaying the same terms count once; report.distinct_replays)"
    )


class SweepPoint(Frozen):
    """One sweep measurement: ``series`` 'world' varies the group size at a fixed message, 'size'
    the message at the full world."""

    series: Literal["world", "size"]
    result: TermResult


class SweepReport(Frozen):
    """``plan validate sweep``'s JSON."""

    kind: Literal["sweep"] = "sweep"
    status: Literal["complete", "failed"]
    error: str | None = None
    context: ReplayContext
    points: list[SweepPoint]
