"""Every option of the ``plan`` command line, declared once; the commands take them from here."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

import typer

from planner.schemas.parallel import Schedule

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        metavar="NAME|PATH",
        help="Catalog name or alias (llama70b), a model YAML, or a Hugging Face config.json.",
    ),
]
ClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        "-c",
        metavar="NAME|PATH",
        help="<profile> (one node), <profile>x<N> (N nodes, e.g. dgx-h100x16), or a YAML path.",
    ),
]
NodesOpt = Annotated[
    int | None, typer.Option("--nodes", min=1, metavar="N", help="Override the node count of --cluster.")
]
GpusOpt = Annotated[
    int | None,
    typer.Option("--gpus", min=1, metavar="N", help="Override the GPU count (the last node may be partly used)."),
]
BatchOpt = Annotated[
    int | None,
    typer.Option(
        "--global-batch-size",
        "-B",
        min=1,
        metavar="N",
        help="Global batch in sequences (default: model card, else 4 Mi tokens).",
    ),
]
BatchTokensOpt = Annotated[
    int | None,
    typer.Option("--global-batch-tokens", min=1, metavar="N", help="Global batch in tokens (instead of sequences)."),
]
SeqOpt = Annotated[
    int | None,
    typer.Option("--seq-len", "-s", min=1, metavar="N", help="Sequence length (default: model card, else 4096)."),
]


def finite(value: float | None) -> float | None:
    """Option callback: a float option takes finite numbers only (click's float accepts 'inf' and
    'nan'; no price, deadline or fraction of a plan is infinite, and JSON cannot print them)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def positive_finite(value: float | None) -> float | None:
    """Option callback: a finite number > 0 (a price of 0 ranks every mesh at no cost)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value} is not a finite number > 0")
    return value


GrowthOpt = Annotated[
    float,
    typer.Option(
        "--max-batch-growth",
        min=0.0,
        callback=finite,
        metavar="FRACTION",
        help="Let the global batch grow by up to this fraction (0.05 = 5%) to divide into dp*micro-batch.",
    ),
]
PlotOpt = Annotated[
    str | None,
    typer.Option("--plot", metavar="FILE.png", help="Also draw the plan (needs the plot extra: matplotlib)."),
]
PriceOpt = Annotated[
    float | None,
    typer.Option(
        "--price",
        callback=positive_finite,
        metavar="USD",
        help="Price per GPU-hour (default: the profile's list price).",
    ),
]
TokensOpt = Annotated[
    str | None,
    typer.Option(
        "--training-tokens",
        metavar="N",
        help="Token budget for time-to-train and cost: 15T, 300B, 2.5e12.",
    ),
]
DtypeOpt = Annotated[Literal["bf16", "fp16", "fp8"], typer.Option("--dtype", help="Matmul precision.")]
FlashOpt = Annotated[
    bool,
    typer.Option("--flash-attention/--no-flash-attention", help="Fused attention (no s x s scores in HBM)."),
]
DropoutOpt = Annotated[bool, typer.Option("--dropout/--no-dropout", help="Dropout layers (GPT-3-era training).")]
StackOpt = Annotated[
    str | None,
    typer.Option(
        "--stack",
        metavar="NAME",
        help="Software stack (default megatron-core; see `plan list stacks`): kernels, overlap, gradient format.",
    ),
]
TpOverlapOpt = Annotated[
    bool | None,
    typer.Option(
        "--tp-comm-overlap/--no-tp-comm-overlap",
        help="Overlap TP collectives with GEMMs (Megatron --tp-comm-overlap, torchtitan async TP); "
        "default: the stack's.",
    ),
]
CompileOpt = Annotated[bool | None, typer.Option("--compile/--no-compile", help="torch.compile; default: the stack's.")]
EpOverlapOpt = Annotated[
    bool | None,
    typer.Option(
        "--ep-comm-overlap/--no-ep-comm-overlap",
        help="Overlap expert-parallel dispatch/combine with another micro-batch's compute (Megatron "
        "--overlap-moe-expert-parallel-comm; interleaved pipeline or pp 1, no full recompute). Default off.",
    ),
]
MoeDispatcherOpt = Annotated[
    str | None,
    typer.Option(
        "--moe-dispatcher",
        metavar="alltoall|allgather|flex",
        help="MoE token dispatcher (Megatron --moe-token-dispatcher-type; flex is DeepEP/HybridEP): alltoall "
        "(default), allgather, or flex, among those the stack runs.",
    ),
]
AdamMomentsOpt = Annotated[
    str | None,
    typer.Option(
        "--adam-moments",
        metavar="fp32|bf16",
        help="Format of Adam's two moments: fp32 (12 bytes of state per parameter with the fp32 master weight; "
        "default) or bf16 (8; Megatron --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16).",
    ),
]
MoeRoutingOpt = Annotated[
    str | None,
    typer.Option(
        "--moe-routing",
        metavar="natural|balanced|drop:C|imbalance:R",
        help="MoE token routing: natural (dropless, the busiest expert-parallel rank gets the measured natural "
        "imbalance; default), balanced (force-balanced, as benchmarks run), drop:C (token drop padded to "
        "capacity factor C), imbalance:R (dropless, busiest rank R x the mean).",
    ),
]
MtpOpt = Annotated[
    int | None,
    typer.Option(
        "--mtp-layers",
        min=0,
        metavar="N",
        help="Multi-token-prediction layers trained (Megatron --mtp-num-layers): priced on the last pipeline "
        "stage with their LM head passes. Default: the model's num_nextn_predict_layers (DeepSeek-V3: 1); 0: none.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object (SI units) instead of tables.")]
TpOpt = Annotated[int | None, typer.Option("--tp", min=1, metavar="N", help="Tensor-parallel degree.")]
PpOpt = Annotated[int | None, typer.Option("--pp", min=1, metavar="N", help="Pipeline-parallel degree (stages).")]
DpOpt = Annotated[int | None, typer.Option("--dp", min=1, metavar="N", help="Data-parallel degree.")]
CpOpt = Annotated[int | None, typer.Option("--cp", min=1, metavar="N", help="Context-parallel degree.")]
EpOpt = Annotated[
    int | None, typer.Option("--ep", min=1, metavar="N", help="Expert-parallel degree (folds into tp*cp*dp).")
]
EtpOpt = Annotated[
    int | None, typer.Option("--expert-tp", min=1, metavar="N", help="Tensor-parallel degree of expert layers.")
]
MbsOpt = Annotated[
    int | None, typer.Option("--micro-batch-size", "-b", min=1, metavar="N", help="Micro-batch size (sequences).")
]
VOpt = Annotated[
    int | None,
    typer.Option(
        "--virtual-stages", "-v", min=1, metavar="N", help="Model chunks per pipeline rank (interleaved 1F1B)."
    ),
]
ZeroOpt = Annotated[
    int | None, typer.Option("--zero-stage", "-z", min=0, metavar="N", max=3, help="ZeRO stage 0-3 (3 = FSDP).")
]
RecomputeOpt = Annotated[
    Literal["none", "selective", "full"] | None, typer.Option("--recompute", help="Activation recomputation.")
]
RecomputeLayersOpt = Annotated[
    int | None,
    typer.Option(
        "--recompute-layers",
        min=1,
        metavar="N",
        help="Full recompute of only the first N layers of each model chunk (Megatron --recompute-method block).",
    ),
]
SpOpt = Annotated[
    bool | None,
    typer.Option("--sequence-parallel/--no-sequence-parallel", help="Megatron sequence parallelism (needs tp > 1)."),
]
ScheduleOpt = Annotated[
    Schedule | None,
    typer.Option("--schedule", help="Pipeline schedule."),
]
LayoutOpt = Annotated[
    str | None,
    typer.Option(
        "--pipeline-layout",
        metavar="LAYOUT",
        help="Megatron-LM's --pipeline-model-parallel-layout for the mesh, e.g. 'Et*3|(t*4|)*14t*2L' (E embedding, "
        "t decoder layer, L loss, '|' between model chunks); sets the virtual stages. Estimate and export only.",
    ),
]
OverlapOpt = Annotated[
    bool | None,
    typer.Option(
        "--overlap-grad-reduce/--no-overlap-grad-reduce",
        help="Overlap DP gradient reduction with backward (default on).",
    ),
]
OrderOpt = Annotated[
    str | None,
    typer.Option("--order", metavar="AXES", help="Rank placement, innermost axis first (default tp-cp-dp-pp)."),
]
TopOpt = Annotated[int, typer.Option("--top", "-k", min=1, metavar="N", help="How many candidates to show.")]
ObjectiveOpt = Annotated[
    Literal["time", "cost", "memory"],
    typer.Option("--objective", help="Rank by step time, by cost (needs a price) or by memory per GPU."),
]

# ---- plan export
FormatOpt = Annotated[
    Literal["megatron", "torchtitan", "deepspeed"],
    typer.Option(
        "--format",
        "-f",
        help="Target: Megatron-LM arguments, a torchtitan TOML job file, or a DeepSpeed JSON config.",
    ),
]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", "-o", metavar="FILE", help="Write to FILE (atomically) instead of stdout."),
]


# ---- plan validate and plan validate sweep
BackendOpt = Annotated[
    Literal["gloo", "nccl"], typer.Option("--backend", help="gloo (CPU, laptops, CI) or nccl (GPUs, under torchrun).")
]
LocalRanksOpt = Annotated[
    int | None,
    typer.Option(
        "--local-ranks", min=1, metavar="N", help="Spawn N local ranks (gloo) instead of running under torchrun."
    ),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        metavar="NAME|PATH",
        help="Hardware profile of the machine the replay runs on, which prices every prediction "
        "(default: localhost-cpu with gloo, the --cluster's own with nccl).",
    ),
]
RepeatsOpt = Annotated[
    int | None, typer.Option("--repeats", min=1, metavar="N", help="Timed repeats per term (default 5 gloo, 20 nccl).")
]
WarmupOpt = Annotated[
    int | None, typer.Option("--warmup", min=0, metavar="N", help="Untimed calls per term (default 1 gloo, 5 nccl).")
]
TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--timeout", min=1.0, callback=finite, metavar="S", help="Process-group and per-collective timeout, seconds."
    ),
]
MaxMessageOpt = Annotated[
    str | None,
    typer.Option(
        "--max-message-bytes",
        metavar="SIZE",
        help="Replay larger messages at this size, counted as buckets (default 8MiB with gloo, none with nccl).",
    ),
]
MaxGemmOpt = Annotated[
    float | None,
    typer.Option(
        "--max-gemm-flops",
        min=1.0,
        metavar="FLOP",
        help="Replay larger GEMMs with fewer rows (default 2e9 with gloo, none with nccl).",
    ),
]

LayerShardOpt = Annotated[
    bool | None,
    typer.Option(
        "--layer-shard/--no-layer-shard",
        help="Also replay one transformer layer shard forward+backward per layer kind "
        "(default: on with nccl, off with gloo, where it runs in fp32 at CPU speed).",
    ),
]
