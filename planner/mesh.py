"""MeshArrays: many ParallelConfigs as numpy columns, so one set of cost formulas serves both
``plan estimate`` (one row) and the search (thousands of rows).

Categorical knobs become small integer codes (``SCHEDULES``, ``RECOMPUTES``); every cost
function reads these columns with numpy arithmetic and ``np.where``, never a Python branch on a
per-mesh value. The rank ``order`` is shared by all rows of one MeshArrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, get_args

import numpy as np

from planner.cost.layout import parse_layout, rank_layer_counts
from planner.schedules import per_schedule
from planner.schemas.parallel import DEFAULT_ORDER, ParallelConfig, Recompute, Schedule

if TYPE_CHECKING:
    from planner.schemas.job import JobSpec

SCHEDULES: tuple[str, ...] = get_args(Schedule)
RECOMPUTES: tuple[str, ...] = get_args(Recompute)
GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1, DUALPIPE, DUALPIPE_V = range(6)
RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL = range(3)

FORWARD_PASSES = {"none": 3.0, "selective": 3.0, "full": 4.0}
"""A layer's training work per micro-batch in forward passes: forward 1 + backward 2 (Kaplan et
al. 2020, section 2.1), plus a recomputed forward under full recompute (selective recompute adds
only the attention core, priced separately). A stage that recomputes only some of its layers
(``recompute_layers``) averages: ``MeshArrays.forward_passes``."""


LAYOUT_COLUMNS = (
    "layout_body",
    "layout_body_mtp",
    "layout_last",
    "layout_last_mtp",
    "layout_first",
    "layout_first_mtp",
    "layout_smallest_chunk",
    "layout_largest_chunk",
    "layout_middle",
    "layout_middle_mtp",
    "layout_second",
    "layout_second_mtp",
    "layout_first_chunk",
    "layout_first_next_start",
)


def _layout_ranks(config: ParallelConfig) -> tuple[int, ...]:
    """A config's explicit layout as (decoder, MTP) layers on its busiest rank other than the
    last (by their sum), on the last rank, then on the first, the decoder layers of its smallest
    chunk that holds any and of its largest, and (decoder, MTP) layers on the busiest of ranks 1 to p-2 and on rank 1
    (0 where p <= 2: no such rank), the decoder layers of the first chunk, and the decoder layers of
    the chunks before the first rank's second (where its second chunk starts in the model):
    ``LAYOUT_COLUMNS``; -1 each without a layout."""
    if config.pipeline_layout is None:
        return (-1,) * len(LAYOUT_COLUMNS)
    stages = parse_layout(config.pipeline_layout)
    t, m = rank_layer_counts(stages, config.pp, "t"), rank_layer_counts(stages, config.pp, "m")
    others = [(t[r] + m[r], t[r], m[r]) for r in range(config.pp - 1)] or [(0, 0, 0)]
    _, body, body_mtp = max(others)
    _, middle, middle_mtp = max(others[1:], default=(0, 0, 0))
    first = (t[0], m[0]) if config.pp > 1 else (0, 0)
    second = (t[1], m[1]) if config.pp > 2 else (0, 0)
    chunks = [stage.count("t") for stage in stages]
    smallest = min((n for n in chunks if n > 0), default=0)
    next_start = sum(chunks[: config.pp])
    return (
        body,
        body_mtp,
        t[-1],
        m[-1],
        *first,
        smallest,
        max(chunks),
        middle,
        middle_mtp,
        *second,
        chunks[0],
        next_start,
    )


def _layout_columns(configs: Sequence[ParallelConfig]) -> np.ndarray:
    """``_layout_ranks`` of every config as int64 columns (rows of ``LAYOUT_COLUMNS``)."""
    width = len(LAYOUT_COLUMNS)
    return np.array([_layout_ranks(c) for c in configs], dtype=np.int64).reshape(-1, width).T


def shards_nothing(moe: bool, x: Any) -> Any:
    """Whether a mesh (``ParallelConfig`` or ``MeshArrays``) has nothing for ZeRO to shard over:
    dp*cp = 1 and, for a MoE model (``moe``), expert-DP = 1 too (Megatron's distributed optimizer shards the
    experts' state over the expert-data-parallel group, tp*cp*dp / (ep*expert_tp), which exceeds 1
    at dp*cp = 1 where the experts are not split over every tp rank). Every ZeRO stage prices the
    same there, so rules on the stage do not apply."""
    alone = x.dp * x.cp == 1
    return alone & (x.expert_dp == 1) if moe else alone


def pipeline_holds_fsdp_state(job: JobSpec, x: Any) -> Any:
    """Whether a mesh (``ParallelConfig``, or ``MeshArrays`` column by column) has its FSDP stage
    kept whole through the step by the job's stack's pipeline runtime
    (``Stack.pipeline_holds_fsdp_state``: torch.distributed.pipelining under torchtitan), pp > 1 and
    ZeRO-2/3. From the first backward to the step's end such a rank holds its stage's weights
    gathered and its gradients unsharded, as ZeRO-1 does, and reduce-scatters them once, after the
    last backward; ZeRO-2 (torchtitan's default reshard_after_forward with a pipeline: never)
    gathers the weights once per step, ZeRO-3 (always) gathers them again for every backward and for
    the forwards before the first one."""
    return job.software.pipeline_holds_fsdp_state & (x.pp > 1) & (x.zero_stage >= 2)


def constant_column(value: int | bool, n: int) -> np.ndarray:
    """A read-only column of ``n`` meshes that all hold ``value`` (int64, or bool for a bool):
    one element broadcast, so ``MeshArrays.take`` selects it without copying. Columns are never
    written in place; a write to one of these raises."""
    dtype = bool if isinstance(value, bool) else np.int64
    return np.broadcast_to(np.array(value, dtype=dtype), (n,))


@dataclass(frozen=True)
class MeshArrays:
    """Columns of mesh degrees and knobs (int64 unless noted), one row per candidate."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    expert_tp: np.ndarray
    micro_batch_size: np.ndarray
    virtual_stages: np.ndarray
    zero_stage: np.ndarray
    recompute: np.ndarray
    sequence_parallel: np.ndarray  # bool
    schedule: np.ndarray
    overlap_grad_reduce: np.ndarray  # bool
    recompute_layers: np.ndarray | None = None  # per chunk under full recompute; 0 (or None): every layer
    # how a stack that checkpoints every n-th layer runs recompute_layers: n (counting the layers a
    # rank builds, ``cost.pipeline.with_recompute_every``); 0: the first recompute_layers of each chunk
    recompute_every: np.ndarray | None = None
    offload_layers: np.ndarray | None = None  # layers whose activations go to host memory; 0 (or None): none
    # the global batch in sequences the mesh runs where the search chose it within the job's growth
    # (``cost.pipeline.batch_choices``); 0 (or None): the job's, grown to the mesh's unit
    batch_size: np.ndarray | None = None
    # an explicit layout's decoder and MTP layers on the busiest rank but the last, on the last
    # rank and on the first (``cost.pipeline.rank_layers``); -1: none, the plan's own split
    layout_body: np.ndarray | None = None
    layout_body_mtp: np.ndarray | None = None
    layout_last: np.ndarray | None = None
    layout_last_mtp: np.ndarray | None = None
    layout_first: np.ndarray | None = None  # the first rank's (with the embedding)
    layout_first_mtp: np.ndarray | None = None
    layout_smallest_chunk: np.ndarray | None = None  # the decoder layers of its smallest chunk that holds any
    layout_largest_chunk: np.ndarray | None = None  # the decoder layers of its largest chunk
    layout_middle: np.ndarray | None = None  # the busiest of ranks 1..p-2: decoder and MTP layers
    layout_middle_mtp: np.ndarray | None = None
    layout_second: np.ndarray | None = None  # rank 1's decoder and MTP layers (0 where p <= 2)
    layout_second_mtp: np.ndarray | None = None
    layout_first_chunk: np.ndarray | None = None  # the decoder layers of its first chunk (rank 0's)
    layout_first_next_start: np.ndarray | None = None  # where rank 0's second chunk starts, in decoder layers
    order: str = DEFAULT_ORDER

    def __post_init__(self) -> None:
        for name in ("recompute_layers", "recompute_every", "offload_layers", "batch_size"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, constant_column(0, len(self.tp)))
        for name in LAYOUT_COLUMNS:
            if getattr(self, name) is None:
                object.__setattr__(self, name, constant_column(-1, len(self.tp)))

    @classmethod
    def from_configs(cls, configs: Sequence[ParallelConfig]) -> MeshArrays:
        """Stack configs (which must share one ``order``) into columns."""
        orders = {c.order for c in configs}
        if len(orders) > 1:
            raise ValueError(f"one MeshArrays holds one rank order, got {sorted(orders)}")

        def col(name: str) -> np.ndarray:
            return np.array([getattr(c, name) for c in configs], dtype=np.int64)

        return cls(
            tp=col("tp"),
            pp=col("pp"),
            dp=col("dp"),
            cp=col("cp"),
            ep=col("ep"),
            expert_tp=col("expert_tp"),
            micro_batch_size=col("micro_batch_size"),
            virtual_stages=col("virtual_stages"),
            zero_stage=col("zero_stage"),
            recompute=np.array([RECOMPUTES.index(c.recompute) for c in configs], dtype=np.int64),
            sequence_parallel=np.array([c.sequence_parallel for c in configs], dtype=bool),
            schedule=np.array([SCHEDULES.index(c.schedule) for c in configs], dtype=np.int64),
            overlap_grad_reduce=np.array([c.overlap_grad_reduce for c in configs], dtype=bool),
            recompute_layers=np.array([c.recompute_layers or 0 for c in configs], dtype=np.int64),
            offload_layers=np.array([c.offload_layers or 0 for c in configs], dtype=np.int64),
            **dict(zip(LAYOUT_COLUMNS, _layout_columns(configs), strict=True)),
            order=orders.pop() if orders else DEFAULT_ORDER,
        )

    def __len__(self) -> int:
        return len(self.tp)

    def row(self, i: int, validate: bool = True) -> ParallelConfig:
        """Row ``i`` back as a ParallelConfig (validated unless ``validate`` is False, for
        describing a mesh that breaks ParallelConfig's own rules)."""
        build = ParallelConfig if validate else ParallelConfig.model_construct
        return build(
            tp=int(self.tp[i]),
            pp=int(self.pp[i]),
            dp=int(self.dp[i]),
            cp=int(self.cp[i]),
            ep=int(self.ep[i]),
            expert_tp=int(self.expert_tp[i]),
            micro_batch_size=int(self.micro_batch_size[i]),
            virtual_stages=int(self.virtual_stages[i]),
            zero_stage=int(self.zero_stage[i]),
            recompute=RECOMPUTES[int(self.recompute[i])],  # type: ignore[arg-type]
            sequence_parallel=bool(self.sequence_parallel[i]),
            schedule=SCHEDULES[int(self.schedule[i])],  # type: ignore[arg-type]
            overlap_grad_reduce=bool(self.overlap_grad_reduce[i]),
            recompute_layers=int(self.recompute_layers[i]) or None,  # type: ignore[index]
            offload_layers=int(self.offload_layers[i]) or None,  # type: ignore[index]
            order=self.order,
        )

    def take(self, rows: np.ndarray) -> MeshArrays:
        """The meshes selected by a boolean mask or index array, in the same order. A column that
        holds one value for every mesh (``constant_column``) stays one, at the new length."""
        rows = np.asarray(rows)
        n = int(np.count_nonzero(rows)) if rows.dtype == bool else len(rows)

        def pick(column: np.ndarray) -> np.ndarray:
            if column.strides == (0,) and len(column):
                return np.broadcast_to(column[:1], (n,))
            return column[rows]

        fields = {k: pick(getattr(self, k)) for k in self.__dataclass_fields__ if k != "order"}
        return MeshArrays(**fields, order=self.order)

    @classmethod
    def concat(cls, a: MeshArrays, b: MeshArrays) -> MeshArrays:
        """The rows of ``a`` then those of ``b`` (one rank order)."""
        fields = {k: np.concatenate([getattr(a, k), getattr(b, k)]) for k in a.__dataclass_fields__ if k != "order"}
        return cls(**fields, order=a.order)

    def with_batch_size(self, batch: np.ndarray) -> MeshArrays:
        """The same meshes running a global batch of ``batch`` sequences."""
        return replace(self, batch_size=np.asarray(batch, dtype=np.int64))

    def with_offload_layers(self, layers: np.ndarray) -> MeshArrays:
        """The same meshes moving the activations of ``layers`` layers to host memory."""
        return replace(self, offload_layers=np.asarray(layers, dtype=np.int64))

    def with_recompute_every(self, every: np.ndarray) -> MeshArrays:
        """The same meshes recomputing every ``every``-th layer a rank builds where they recompute
        some layers (0: the first ``recompute_layers`` of each chunk)."""
        return replace(self, recompute_every=np.asarray(every, dtype=np.int64))

    def with_recompute_layers(self, layers: np.ndarray) -> MeshArrays:
        """The same meshes recomputing the first ``layers`` of each chunk (full recompute); an
        every-n-th stride derived for other counts is dropped (the cost entry points derive it
        again: ``cost.pipeline.with_recompute_every``)."""
        column = np.asarray(layers, dtype=np.int64)
        return replace(self, recompute_layers=column, recompute_every=constant_column(0, len(column)))

    @property
    def num_gpus(self) -> np.ndarray:
        return self.tp * self.pp * self.dp * self.cp

    def recomputed_share(self, layers: np.ndarray | int) -> np.ndarray:
        """Share of a stage's ``layers`` (v chunks of layers/v) whose forward full recompute runs
        again: 1 when every layer is (``recompute_layers`` 0), r / (layers per chunk) when the
        first r of each chunk are (Megatron-LM's block method), floor(layers / n) / layers when
        every n-th layer the rank builds is (``recompute_every`` n: torchtitan's selective layer
        checkpointing counts on across a rank's chunks, activation_checkpoint.py
        ``_layer_sac_count``), 0 without full recompute."""
        stage = np.asarray(layers, dtype=float)
        per_chunk = np.maximum(stage / self.virtual_stages, 1.0)
        r, every = np.asarray(self.recompute_layers), np.asarray(self.recompute_every)
        nth = np.minimum(np.floor(stage / np.maximum(every, 1)) / np.maximum(stage, 1.0), 1.0)
        share = np.where(r > 0, np.where(every > 0, nth, np.minimum(r, per_chunk) / per_chunk), 1.0)
        return np.where(self.recompute == RECOMPUTE_FULL, share, 0.0)

    @property
    def chunks_per_rank(self) -> np.ndarray:
        """Model chunks each pipeline rank runs per micro-batch: v interleaved, DualPipeV's two
        half-stages, else one (``planner.schedules``)."""
        return per_schedule(self.schedule, self.pp, self.virtual_stages, 0, lambda s: s.chunks_per_rank)

    def forward_passes(self, layers: np.ndarray | int) -> np.ndarray:
        """Forward passes per micro-batch of a stage's ``layers``, on average: forward 1 +
        backward 2 (``FORWARD_PASSES``), plus the share of them full recompute runs again."""
        return FORWARD_PASSES["none"] + self.recomputed_share(layers)

    def tokens_per_rank(self, seq_len: int) -> np.ndarray:
        """Tokens of one micro-batch a rank works on: b * s / c (CP splits the sequence)."""
        return seq_len * self.micro_batch_size / self.cp

    @cached_property
    def expert_dp(self) -> np.ndarray:
        """Data-parallel degree of expert weights: tp*cp*dp / (ep * expert_tp) (ARCHITECTURE 8.1).
        Computed once per MeshArrays (its columns never change; ``take`` and ``replace`` build new ones)."""
        return self.tp * self.cp * self.dp // (self.ep * self.expert_tp)

    def axis_size(self, axis: str) -> np.ndarray:
        return getattr(self, axis)

    def stride(self, axis: str) -> np.ndarray:
        """Rank distance between neighbours of ``axis``: product of the axes inside it in ``order``.

        With order tp-cp-dp-pp, TP neighbours are adjacent (stride 1), DP neighbours are tp*cp
        apart, PP neighbours tp*cp*dp apart (ARCHITECTURE 8.6).
        """
        stride = np.ones_like(self.tp)
        for inner in self.order.split("-"):
            if inner == axis:
                return stride
            stride = stride * self.axis_size(inner)
        raise KeyError(axis)
