"""ParallelConfig: one mesh (how the job is split over GPUs) with its schedule and memory knobs.

Axis vocabulary and rank order follow ARCHITECTURE 8.1 and 8.6: ``tp`` tensor, ``cp`` context,
``dp`` data (with ZeRO stage), ``pp`` pipeline; ``ep`` experts, folded into the ``tp*cp*dp`` ranks
of a pipeline stage (Megatron-Core "MoE parallel folding": for expert layers those ranks are
re-split as expert_tp x ep x expert_dp). ``order`` lists axes innermost first: with the default
``tp-cp-dp-pp`` the ranks of a TP group are adjacent, as in Megatron-LM and torchtitan.

Checks that need only the mesh live here; checks against a model, cluster and job live in
``planner.constraints``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

from planner.cost.layout import check_layout, parse_layout
from planner.errors import PlannerError
from planner.schemas.base import Frozen

AXES = ("tp", "cp", "dp", "pp")
"""Axes that multiply to the GPU count. EP adds no GPUs."""

DEFAULT_ORDER = "tp-cp-dp-pp"
"""Innermost first, as Megatron-LM's default ``tp-cp-ep-dp-pp`` with EP folded into DP."""

Schedule = Literal["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "dualpipe", "dualpipev"]
"""Pipeline schedules, declared here once (``mesh.SCHEDULES``, the CLI and the exports read this).
gpipe: Huang et al. 2019; 1f1b: PipeDream-Flush, Narayanan et al. 2021; interleaved-1f1b:
Narayanan et al. 2021 section 2.2.2; zb-h1: Qi et al. 2024, 'Zero Bubble Pipeline Parallelism'
(ICLR), the variant with 1F1B's activation memory; dualpipe: DeepSeek-V3 (arXiv:2412.19437,
section 3.2.1), micro-batches fed from both ends of the pipeline, each rank holding two stages'
parameters (deepseek-ai/DualPipe dualpipe/dualpipe.py); dualpipev: the same schedule folded into
a V over p ranks of two stages each, one copy of the parameters (Sea AI Lab's 'cut-in-half',
deepseek-ai/DualPipe dualpipe/dualpipev.py; torch.distributed.pipelining ScheduleDualPipeV)."""

DUAL_SCHEDULES = ("dualpipe", "dualpipev")
"""The bidirectional schedules: the even split, rank 0 holding the embedding and the LM head, no
Megatron layout (``cost.pipeline.dual_rank_layers``)."""

Recompute = Literal["none", "selective", "full"]
"""Activation recomputation (Korthikanti et al. 2022): selective recomputes the attention core."""


class ParallelConfig(Frozen):
    """A mesh: degrees of each parallelism, micro-batch, schedule, ZeRO stage and recompute.

    ``virtual_stages`` (v) is the number of model chunks per pipeline rank (interleaved 1F1B
    only); ``expert_tp`` is the TP degree of expert layers (Megatron ``--expert-tensor-parallel-size``).
    """

    tp: PositiveInt = Field(1, description="Tensor-parallel degree")
    pp: PositiveInt = Field(1, description="Pipeline-parallel degree (stages)")
    dp: PositiveInt = Field(1, description="Data-parallel degree")
    cp: PositiveInt = Field(1, description="Context-parallel degree")
    ep: PositiveInt = Field(1, description="Expert-parallel degree (folds into tp*cp*dp)")
    expert_tp: PositiveInt = Field(
        1,
        description="Tensor-parallel degree of expert layers (Megatron --expert-tensor-parallel-size, whose own "
        "default is tp; exports write it); unset: 1",
    )
    micro_batch_size: PositiveInt = Field(1, description="Micro-batch size (sequences)")
    virtual_stages: PositiveInt = Field(1, description="Model chunks per pipeline rank (interleaved 1F1B)")
    zero_stage: int = Field(
        0, ge=0, le=3, description="ZeRO stage: 0 none, 1 optimizer state, 2 +gradients, 3 +weights (FSDP)"
    )
    recompute: Recompute = Field(
        "none",
        description="Activation recomputation (Korthikanti et al. 2022): selective recomputes the attention core, "
        "full each layer's forward",
    )
    recompute_layers: PositiveInt | None = Field(
        None,
        description="Full recompute of only the first N layers of each model chunk (each of a rank's virtual "
        "stages; Megatron-LM --recompute-method block --recompute-num-layers); the others keep all their "
        "activations. Unset: every layer",
    )
    offload_layers: PositiveInt | None = Field(
        None,
        description="Move the activations of the first N layers to host memory during forward and back for "
        "backward (Megatron-Core --cpu-offloading --cpu-offloading-num-layers; pp 1, no recompute, fewer than "
        "the model's layers). Unset: none",
    )
    sequence_parallel: bool = Field(
        False,
        description="Megatron sequence parallelism: shards what TP leaves replicated (needs tp > 1); unset, a plan "
        "or estimate runs it with tp > 1 where the stack has it (Megatron-LM's own default is off; exports write "
        "it)",
    )
    schedule: Schedule = Field("1f1b", description="Pipeline schedule")
    order: str = Field(DEFAULT_ORDER, description=f"Rank placement, innermost axis first (default {DEFAULT_ORDER})")
    overlap_grad_reduce: bool = Field(
        True,
        description="Overlap DP gradient reduction (and ZeRO gathers) with compute (Megatron-LM "
        "--overlap-grad-reduce; default on)",
    )
    pipeline_layout: str | None = Field(
        None,
        description="Megatron-LM's --pipeline-model-parallel-layout, e.g. 'Et*3|(t*4|)*14t*2L': the layers of each "
        "model chunk (E embedding, t decoder layer, L loss, '|' between chunks); it sets the virtual stages "
        "(stages / pp). Unset: the plan's own split (cost.pipeline.rank_layer_split): where the stack takes any "
        "split (Megatron-Core), the last stage's decoder layers balanced against the LM head and loss by forward "
        "FLOPs, as --decoder-last-pipeline-num-layers sets by hand, the rest as evenly as they go; else as evenly as "
        "they go, extra layers in the middle chunks",
    )

    @model_validator(mode="before")
    @classmethod
    def _virtual_stages_from_layout(cls, data: Any) -> Any:
        """Megatron derives the virtual stages from a layout (stages / pp), and so does the plan."""
        if not isinstance(data, dict) or not isinstance(data.get("pipeline_layout"), str):
            return data
        try:
            stages = len(parse_layout(data["pipeline_layout"]))
        except PlannerError as err:
            raise ValueError(str(err)) from None  # "pipeline_layout ...": the error is the whole mesh's
        pp = data.get("pp", 1)
        if isinstance(pp, int) and pp > 0 and stages % pp == 0 and data.get("virtual_stages") is None:
            v = stages // pp
            data = {**data, "virtual_stages": v}
            if v > 1 and data.get("schedule") is None:
                data["schedule"] = "interleaved-1f1b"
        return data

    @field_validator("order")
    @classmethod
    def _order_is_permutation(cls, value: str) -> str:
        parts = value.split("-")
        if sorted(parts) != sorted(AXES):
            raise ValueError(f"must be the four axes {'-'.join(AXES)} in some order, separated by '-'")
        return value

    @model_validator(mode="after")
    def _mesh_rules(self) -> ParallelConfig:
        if self.schedule == "interleaved-1f1b":
            if self.pp < 2:
                raise ValueError("interleaved-1f1b needs pp >= 2")
            if self.virtual_stages < 2:
                raise ValueError("interleaved-1f1b needs virtual_stages >= 2")
        elif self.virtual_stages != 1:
            raise ValueError(f"virtual_stages {self.virtual_stages} > 1 needs schedule interleaved-1f1b")
        if self.recompute_layers is not None and self.recompute != "full":
            raise ValueError(f"recompute_layers needs recompute 'full' (got '{self.recompute}')")
        if self.offload_layers is not None and (self.pp > 1 or self.recompute != "none"):
            # Megatron-Core transformer_config.py: "Currently there is no support for Pipeline
            # parallelism with CPU offloading"; "CPU offloading does not work when activation
            # recomputation is enabled"
            raise ValueError(
                f"offload_layers needs pp 1 and recompute 'none' (got pp {self.pp}, recompute '{self.recompute}')"
            )
        if self.pipeline_layout is not None:
            stages = parse_layout(self.pipeline_layout)
            if len(stages) != self.pp * self.virtual_stages:
                raise ValueError(
                    f"pipeline_layout has {len(stages)} stages, pp x virtual_stages = {self.pp * self.virtual_stages}"
                )
            flat = [kind for stage in stages for kind in stage]
            try:  # the rules that do not depend on the model (its layer counts are checked against the job)
                check_layout(stages, flat.count("t"), self.pp, flat.count("m"))
            except PlannerError as err:
                raise ValueError(str(err)) from None
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("sequence_parallel needs tp > 1 (it shards what TP leaves replicated)")
        fold = self.tp * self.cp * self.dp
        if fold % (self.ep * self.expert_tp):
            raise ValueError(
                f"ep x expert_tp = {self.ep} x {self.expert_tp} must divide tp*cp*dp = {fold} "
                "(expert layers re-split the ranks of one pipeline stage)"
            )
        return self

    @staticmethod
    def with_defaults(pins: dict[str, Any], num_gpus: int) -> dict[str, Any]:
        """The fields of the one mesh ``pins`` name on ``num_gpus`` GPUs, as torchtitan's
        ParallelDims resolves dp_shard = -1: unset degrees are 1 except dp, which takes the GPUs
        tp*pp*cp leave; virtual_stages > 1 implies interleaved 1F1B; sequence parallelism is on
        with tp > 1 unless pinned off (as Megatron-Core's recipes run TP). Validate the result
        by constructing the config."""
        fields = dict(pins)
        if "dp" not in fields:
            tp, pp, cp = fields.get("tp", 1), fields.get("pp", 1), fields.get("cp", 1)
            model_parallel = tp * pp * cp
            if num_gpus % model_parallel:
                raise PlannerError(
                    f"impossible mesh: tp*pp*cp = {tp}*{pp}*{cp} = {model_parallel} does not divide the {num_gpus} "
                    f"GPUs, so no dp fills them; choose degrees whose product divides {num_gpus}"
                )
            fields["dp"] = num_gpus // model_parallel
        if "schedule" not in fields and fields.get("virtual_stages", 1) > 1:
            fields["schedule"] = "interleaved-1f1b"
        if "sequence_parallel" not in fields:
            fields["sequence_parallel"] = fields.get("tp", 1) > 1
        return fields

    @property
    def num_gpus(self) -> int:
        """N = tp * pp * dp * cp (ARCHITECTURE 8.1)."""
        return self.tp * self.pp * self.dp * self.cp

    @property
    def expert_dp(self) -> int:
        """Data-parallel degree of expert weights: tp*cp*dp / (ep * expert_tp)."""
        return self.tp * self.cp * self.dp // (self.ep * self.expert_tp)

    @property
    def chunks_per_rank(self) -> int:
        """Model chunks each pipeline rank runs per micro-batch: v interleaved, DualPipeV's two
        half-stages, else one: ``MeshArrays.chunks_per_rank``, which reads ``planner.schedules``."""
        from planner.mesh import MeshArrays

        return int(MeshArrays.from_configs([self]).chunks_per_rank[0])

    @property
    def recompute_label(self) -> str:
        """'none', 'selective', 'full', 'full:N' when N layers of each chunk are recomputed, or
        'offload:N' when N layers' activations go to host memory instead."""
        if self.offload_layers is not None:
            return f"offload:{self.offload_layers}"
        return self.recompute if self.recompute_layers is None else f"full:{self.recompute_layers}"

    def short(self) -> str:
        """Compact label, e.g. 'tp8 pp2 dp8 cp1 ep1 mbs1 v1 z1 sel sp 1f1b'."""
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}", f"cp{self.cp}", f"ep{self.ep}"]
        if self.expert_tp > 1:
            parts.append(f"etp{self.expert_tp}")
        parts += [f"mbs{self.micro_batch_size}", f"v{self.virtual_stages}", f"z{self.zero_stage}", self.recompute_label]
        if self.sequence_parallel:
            parts.append("sp")
        parts.append(self.schedule)
        return " ".join(parts)


class PipelineSplit(Frozen):
    """Megatron-LM's other ways to split layers over pipeline ranks, besides a written layout
    (megatron/training/arguments.py; TransformerConfig num_layers_in_first/last_pipeline_stage,
    account_for_embedding/loss_in_pipeline_split). The plan turns them into the layout they build
    (``cost.layout.split_layout``): they need the model's layer count, which a mesh does not carry."""

    decoder_first_pipeline_num_layers: PositiveInt | None = Field(
        None,
        description="Decoder layers on the first pipeline rank, over all its virtual stages (Megatron-LM "
        "--decoder-first-pipeline-num-layers); the ranks without a count split the rest evenly. Read as the "
        "--pipeline-layout it builds",
    )
    decoder_last_pipeline_num_layers: PositiveInt | None = Field(
        None,
        description="Decoder layers on the last pipeline rank, over all its virtual stages (Megatron-LM "
        "--decoder-last-pipeline-num-layers). Read as the --pipeline-layout it builds",
    )
    account_for_embedding_in_pipeline_split: bool = Field(
        False,
        description="Count the embedding as one layer of the even split, so the first model chunk holds one "
        "decoder layer fewer (Megatron-LM --account-for-embedding-in-pipeline-split). Read as the "
        "--pipeline-layout it builds",
    )
    account_for_loss_in_pipeline_split: bool = Field(
        False,
        description="Count the LM head and loss as one layer of the even split, so the last model chunk holds "
        "one decoder layer fewer (Megatron-LM --account-for-loss-in-pipeline-split). Read as the "
        "--pipeline-layout it builds",
    )

    @property
    def given(self) -> bool:
        """Whether any of the four asks for a split."""
        return (
            self.decoder_first_pipeline_num_layers is not None
            or self.decoder_last_pipeline_num_layers is not None
            or self.account_for_embedding_in_pipeline_split
            or self.account_for_loss_in_pipeline_split
        )
