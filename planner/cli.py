"""The ``plan`` command line (typer). Parses options, calls the library, renders or prints JSON.

Every error a user can cause ends as ``error: <one line>`` on stderr with exit code 2: our own
PlannerError, and click's usage errors (unknown option, bad value), which ``main`` reformats.
"""

from __future__ import annotations

import errno
import json
import math
import os
import sys
from typing import Annotated, Any, Literal, Optional

import typer
from rich.console import Console

from planner import __version__
from planner.errors import PlannerError
from planner.schemas.parallel import Schedule

app = typer.Typer(
    name="plan",
    help=(
        "Plan distributed LLM training: rank every feasible TP/PP/DP/CP/EP mesh by predicted step time.\n\n"
        "Start with:  plan --model llama70b --cluster dgx-h100x16\n\n"
        "See the catalogs with `plan list models` and `plan list clusters`; price one mesh with "
        "`plan estimate --model llama70b --cluster dgx-h100x16 --tp 8 --pp 2 --dp 8`."
    ),
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=False,
    rich_markup_mode=None,
)
list_app = typer.Typer(help="List the bundled catalogs.", add_completion=False)
show_app = typer.Typer(help="Show one model or cluster with its derived figures.", add_completion=False)
app.add_typer(list_app, name="list")
app.add_typer(show_app, name="show")

# `plan export` lives in planner/cli_export.py, which reuses the options declared below.
from planner.cli_export import register as _register_export  # noqa: E402

_register_export(app)

# ---- options, declared once --------------------------------------------------------------------
ModelOpt = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        "-m",
        metavar="NAME|PATH",
        help="Catalog name or alias (llama70b), a model YAML, or a Hugging Face config.json.",
    ),
]
ClusterOpt = Annotated[
    Optional[str],
    typer.Option(
        "--cluster",
        "-c",
        metavar="NAME|PATH",
        help="<profile> (one node), <profile>x<N> (N nodes, e.g. dgx-h100x16), or a YAML path.",
    ),
]
NodesOpt = Annotated[
    Optional[int], typer.Option("--nodes", min=1, metavar="N", help="Override the node count of --cluster.")
]
GpusOpt = Annotated[
    Optional[int],
    typer.Option("--gpus", min=1, metavar="N", help="Override the GPU count (the last node may be partly used)."),
]
BatchOpt = Annotated[
    Optional[int],
    typer.Option(
        "--global-batch-size",
        "-B",
        min=1,
        metavar="N",
        help="Global batch in sequences (default: model card, else 4 Mi tokens).",
    ),
]
BatchTokensOpt = Annotated[
    Optional[int],
    typer.Option("--global-batch-tokens", min=1, metavar="N", help="Global batch in tokens (instead of sequences)."),
]
SeqOpt = Annotated[
    Optional[int],
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
    Optional[str],
    typer.Option("--plot", metavar="FILE.png", help="Also draw the plan (needs the plot extra: matplotlib)."),
]
PriceOpt = Annotated[
    Optional[float],
    typer.Option(
        "--price",
        callback=positive_finite,
        metavar="USD",
        help="Price per GPU-hour (default: the profile's list price).",
    ),
]
TokensOpt = Annotated[
    Optional[str],
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
    Optional[str],
    typer.Option(
        "--stack",
        metavar="NAME",
        help="Software stack (default megatron-core; see `plan list stacks`): kernels, overlap, gradient format.",
    ),
]
TpOverlapOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--tp-comm-overlap/--no-tp-comm-overlap",
        help="Overlap TP collectives with GEMMs (Megatron --tp-comm-overlap, torchtitan async TP); "
        "default: the stack's.",
    ),
]
CompileOpt = Annotated[
    Optional[bool], typer.Option("--compile/--no-compile", help="torch.compile; default: the stack's.")
]
EpOverlapOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--ep-comm-overlap/--no-ep-comm-overlap",
        help="Overlap expert-parallel dispatch/combine with another micro-batch's compute (Megatron "
        "--overlap-moe-expert-parallel-comm; interleaved pipeline or pp 1, no full recompute). Default off.",
    ),
]
MoeDispatcherOpt = Annotated[
    Optional[str],
    typer.Option(
        "--moe-dispatcher",
        metavar="alltoall|allgather|flex",
        help="MoE token dispatcher (Megatron --moe-token-dispatcher-type; flex is DeepEP/HybridEP): alltoall "
        "(default), allgather, or flex, among those the stack runs.",
    ),
]
AdamMomentsOpt = Annotated[
    Optional[str],
    typer.Option(
        "--adam-moments",
        metavar="fp32|bf16",
        help="Format of Adam's two moments: fp32 (12 bytes of state per parameter with the fp32 master weight; "
        "default) or bf16 (8; Megatron --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16).",
    ),
]
MoeRoutingOpt = Annotated[
    Optional[str],
    typer.Option(
        "--moe-routing",
        metavar="natural|balanced|drop:C|imbalance:R",
        help="MoE token routing: natural (dropless, the busiest expert-parallel rank gets the measured natural "
        "imbalance; default), balanced (force-balanced, as benchmarks run), drop:C (token drop padded to "
        "capacity factor C), imbalance:R (dropless, busiest rank R x the mean).",
    ),
]
MtpOpt = Annotated[
    Optional[int],
    typer.Option(
        "--mtp-layers",
        min=0,
        metavar="N",
        help="Multi-token-prediction layers trained (Megatron --mtp-num-layers): priced on the last pipeline "
        "stage with their LM head passes. Default: the model's num_nextn_predict_layers (DeepSeek-V3: 1); 0: none.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object (SI units) instead of tables.")]
TpOpt = Annotated[Optional[int], typer.Option("--tp", min=1, metavar="N", help="Tensor-parallel degree.")]
PpOpt = Annotated[Optional[int], typer.Option("--pp", min=1, metavar="N", help="Pipeline-parallel degree (stages).")]
DpOpt = Annotated[Optional[int], typer.Option("--dp", min=1, metavar="N", help="Data-parallel degree.")]
CpOpt = Annotated[Optional[int], typer.Option("--cp", min=1, metavar="N", help="Context-parallel degree.")]
EpOpt = Annotated[
    Optional[int], typer.Option("--ep", min=1, metavar="N", help="Expert-parallel degree (folds into tp*cp*dp).")
]
EtpOpt = Annotated[
    Optional[int], typer.Option("--expert-tp", min=1, metavar="N", help="Tensor-parallel degree of expert layers.")
]
MbsOpt = Annotated[
    Optional[int], typer.Option("--micro-batch-size", "-b", min=1, metavar="N", help="Micro-batch size (sequences).")
]
VOpt = Annotated[
    Optional[int],
    typer.Option(
        "--virtual-stages", "-v", min=1, metavar="N", help="Model chunks per pipeline rank (interleaved 1F1B)."
    ),
]
ZeroOpt = Annotated[
    Optional[int], typer.Option("--zero-stage", "-z", min=0, metavar="N", max=3, help="ZeRO stage 0-3 (3 = FSDP).")
]
RecomputeOpt = Annotated[
    Optional[Literal["none", "selective", "full"]], typer.Option("--recompute", help="Activation recomputation.")
]
RecomputeLayersOpt = Annotated[
    Optional[int],
    typer.Option(
        "--recompute-layers",
        min=1,
        metavar="N",
        help="Full recompute of only the first N layers of each model chunk (Megatron --recompute-method block).",
    ),
]
SpOpt = Annotated[
    Optional[bool],
    typer.Option("--sequence-parallel/--no-sequence-parallel", help="Megatron sequence parallelism (needs tp > 1)."),
]
ScheduleOpt = Annotated[
    Optional[Schedule],
    typer.Option("--schedule", help="Pipeline schedule."),
]
LayoutOpt = Annotated[
    Optional[str],
    typer.Option(
        "--pipeline-layout",
        metavar="LAYOUT",
        help="Megatron-LM's --pipeline-model-parallel-layout for the mesh, e.g. 'Et*3|(t*4|)*14t*2L' (E embedding, "
        "t decoder layer, L loss, '|' between model chunks); sets the virtual stages. Estimate and export only.",
    ),
]
OverlapOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--overlap-grad-reduce/--no-overlap-grad-reduce",
        help="Overlap DP gradient reduction with backward (default on).",
    ),
]
OrderOpt = Annotated[
    Optional[str],
    typer.Option("--order", metavar="AXES", help="Rank placement, innermost axis first (default tp-cp-dp-pp)."),
]
TopOpt = Annotated[int, typer.Option("--top", "-k", min=1, metavar="N", help="How many candidates to show.")]
ObjectiveOpt = Annotated[
    Literal["time", "cost", "memory"],
    typer.Option("--objective", help="Rank by step time, by cost (needs a price) or by memory per GPU."),
]


class _Console(Console):
    """Rich's console, except that a reader closing the pipe (``plan ... | head``) ends the run
    the way ``main`` ends every closed pipe, quietly (rich's own handler exits with status 1)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def _console() -> Console:
    """Rich console; when output is piped, 120 columns instead of rich's default 80 so the
    ranking table is not truncated."""
    console = _Console()
    return console if console.is_terminal else _Console(width=120)


OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)
"""Write failures of the output device itself (full disk, quota, file too large, I/O error): a
run whose output cannot be written ends with one line, not a traceback."""


def _quiet_stdout() -> None:
    """Point stdout at /dev/null after its reader went away, so the interpreter's final flush
    does not fail again (Python docs, 'Note on SIGPIPE')."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _emit_json(payload: Any) -> None:
    write_stdout(json.dumps(payload, indent=2) + "\n")


def write_stdout(text: str) -> None:
    """Write and flush ``text`` to stdout. A closed pipe is re-raised as a bare BrokenPipeError:
    click turns an OSError with errno EPIPE into exit status 1 on its own (Command.main), while
    ``main`` ends every closed pipe quietly."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise BrokenPipeError from None


def _require(value: str | None, flag: str) -> str:
    if value is None:
        raise PlannerError(f"{flag} is required (see `plan --help`)")
    return value


def _model_cluster_job(ctx: typer.Context) -> tuple[Any, Any, Any]:
    """The model, cluster and job the command line names (shared by `plan` and `plan estimate`)."""
    from planner.catalog import load_cluster, load_model
    from planner.search import default_job

    p = ctx.params
    model = load_model(_require(p["model"], "--model"))
    cluster = load_cluster(_require(p["cluster"], "--cluster"), nodes=p["nodes"], gpus=p["gpus"])
    cluster = cluster.with_price(p.get("price"))
    tokens = p.get("training_tokens")
    job = default_job(
        model,
        p["seq_len"],
        p["global_batch_size"],
        p["global_batch_tokens"],
        dtype=p["dtype"],
        flash_attention=p["flash_attention"],
        dropout=p["dropout"],
        stack=_stack_choice(p.get("stack")),
        tp_comm_overlap=p.get("tp_comm_overlap"),
        compile=p.get("compile"),
        ep_comm_overlap=p.get("ep_comm_overlap"),
        moe_dispatcher=p.get("moe_dispatcher"),
        **moe_routing_fields(p.get("moe_routing")),
        **adam_fields(p.get("adam_moments")),
        mtp_layers=p.get("mtp_layers"),
        max_batch_growth=p.get("max_batch_growth", 0.0),
        training_tokens=None if tokens is None else parse_count(tokens, "--training-tokens"),
    )
    return model, cluster, job


def adam_fields(text: str | None) -> dict[str, float]:
    """``--adam-moments`` as the JobSpec field it sets (``ADAM_STATE_BYTES_PER_PARAM``)."""
    from planner.schemas.job import ADAM_STATE_BYTES_PER_PARAM

    if text is None:
        return {}
    if text not in ADAM_STATE_BYTES_PER_PARAM:
        raise PlannerError(f"--adam-moments '{text}': allowed {', '.join(ADAM_STATE_BYTES_PER_PARAM)}")
    return {"optimizer_state_bytes_per_param": ADAM_STATE_BYTES_PER_PARAM[text]}


def moe_routing_fields(text: str | None) -> dict[str, float]:
    """``--moe-routing`` as JobSpec fields: natural (none), balanced (imbalance 1), drop:C
    (capacity factor C), imbalance:R."""
    if text is None or text.strip().lower() == "natural":
        return {}
    kind, _, value = text.strip().lower().partition(":")
    if kind == "balanced" and not value:
        return {"moe_load_imbalance": 1.0}
    fields = {"drop": "moe_capacity_factor", "imbalance": "moe_load_imbalance"}
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if kind not in fields or not math.isfinite(number) or number <= 0 or (kind == "imbalance" and number < 1):
        raise PlannerError(
            f"--moe-routing '{text}': allowed natural, balanced, drop:C (capacity factor C > 0) or imbalance:R (R >= 1)"
        )
    return {fields[kind]: number}


def _stack_choice(text: str | None) -> Any:
    """``--stack``: a catalog name stays a name (short JSON); a YAML path becomes the loaded Stack.
    Unknown names fail here, with the list."""
    from planner.catalog import DEFAULT_STACK, load_stack, stack_names

    name = text or DEFAULT_STACK
    loaded = load_stack(name)
    return name.lower() if name.lower() in stack_names() else loaded


SUFFIXES = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def parse_count(text: str, flag: str) -> float:
    """'15T' -> 1.5e13, '300B' -> 3e11, '2.5e12' -> 2.5e12 (decimal suffixes K, M, B/G, T)."""
    raw = text.strip().upper()
    scale = SUFFIXES.get(raw[-1:], 1.0)
    number = raw[:-1] if raw[-1:] in SUFFIXES else raw
    try:
        value = float(number) * scale
    except ValueError:
        raise PlannerError(f"{flag} '{text}' is not a count: give a number with an optional K, M, B or T") from None
    if not math.isfinite(value) or not value > 0:
        raise PlannerError(f"{flag} must be a finite number > 0, got '{text}'")
    return value


def _mesh_knobs(ctx: typer.Context) -> dict[str, Any]:
    """The ParallelConfig knobs the user set on the command line (--tp, --zero-stage, ...)."""
    from planner.schemas.parallel import ParallelConfig
    from planner.search import pins_from_config_fields

    return pins_from_config_fields(**{k: v for k, v in ctx.params.items() if k in ParallelConfig.model_fields})


def _version(value: bool) -> None:
    if value:
        typer.echo(f"plan {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def plan_main(
    ctx: typer.Context,
    model: ModelOpt = None,
    cluster: ClusterOpt = None,
    nodes: NodesOpt = None,
    gpus: GpusOpt = None,
    global_batch_size: BatchOpt = None,
    global_batch_tokens: BatchTokensOpt = None,
    seq_len: SeqOpt = None,
    price: PriceOpt = None,
    training_tokens: TokensOpt = None,
    max_batch_growth: GrowthOpt = 0.0,
    dtype: DtypeOpt = "bf16",
    flash_attention: FlashOpt = True,
    dropout: DropoutOpt = False,
    stack: StackOpt = None,
    tp_comm_overlap: TpOverlapOpt = None,
    compile: CompileOpt = None,
    ep_comm_overlap: EpOverlapOpt = None,
    moe_dispatcher: MoeDispatcherOpt = None,
    moe_routing: MoeRoutingOpt = None,
    adam_moments: AdamMomentsOpt = None,
    mtp_layers: MtpOpt = None,
    top: TopOpt = 10,
    objective: ObjectiveOpt = "time",
    tp: TpOpt = None,
    pp: PpOpt = None,
    dp: DpOpt = None,
    cp: CpOpt = None,
    ep: EpOpt = None,
    expert_tp: EtpOpt = None,
    micro_batch_size: MbsOpt = None,
    virtual_stages: VOpt = None,
    zero_stage: ZeroOpt = None,
    recompute: RecomputeOpt = None,
    recompute_layers: RecomputeLayersOpt = None,
    sequence_parallel: SpOpt = None,
    schedule: ScheduleOpt = None,
    order: OrderOpt = None,
    overlap_grad_reduce: OverlapOpt = None,
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Rank every feasible mesh for MODEL on CLUSTER (pins like --tp 8 fix a knob)."""
    if ctx.invoked_subcommand is not None:
        return
    if model is None and cluster is None:
        typer.echo(ctx.get_help())
        return
    from planner.search import search_with_points

    spec, clus, job = _model_cluster_job(ctx)
    pins = _mesh_knobs(ctx)
    ranking, times, memory = search_with_points(spec, clus, job, pins, top=top, objective=objective)
    if plot is not None:
        from planner.plots import plot_ranking

        front = [(pt.step_time_s, pt.memory_per_gpu_bytes) for pt in ranking.pareto]
        title = f"{ranking.model} on {ranking.cluster_description}"
        plot_ranking(list(ranking.candidates[: min(top, 6)]), times, memory, front, title, plot)
    if as_json:
        _emit_json(ranking.model_dump(mode="json"))
    else:
        from planner.render import print_ranking

        print_ranking(_console(), ranking)


@app.command("estimate")
def estimate_cmd(
    ctx: typer.Context,
    model: ModelOpt = None,
    cluster: ClusterOpt = None,
    nodes: NodesOpt = None,
    gpus: GpusOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    dp: DpOpt = None,
    cp: CpOpt = None,
    ep: EpOpt = None,
    expert_tp: EtpOpt = None,
    micro_batch_size: MbsOpt = None,
    global_batch_size: BatchOpt = None,
    global_batch_tokens: BatchTokensOpt = None,
    seq_len: SeqOpt = None,
    price: PriceOpt = None,
    training_tokens: TokensOpt = None,
    max_batch_growth: GrowthOpt = 0.0,
    virtual_stages: VOpt = None,
    zero_stage: ZeroOpt = None,
    recompute: RecomputeOpt = None,
    recompute_layers: RecomputeLayersOpt = None,
    sequence_parallel: SpOpt = None,
    schedule: ScheduleOpt = None,
    order: OrderOpt = None,
    overlap_grad_reduce: OverlapOpt = None,
    pipeline_layout: LayoutOpt = None,
    dtype: DtypeOpt = "bf16",
    flash_attention: FlashOpt = True,
    dropout: DropoutOpt = False,
    stack: StackOpt = None,
    tp_comm_overlap: TpOverlapOpt = None,
    compile: CompileOpt = None,
    ep_comm_overlap: EpOverlapOpt = None,
    moe_dispatcher: MoeDispatcherOpt = None,
    moe_routing: MoeRoutingOpt = None,
    adam_moments: AdamMomentsOpt = None,
    mtp_layers: MtpOpt = None,
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Price one mesh: step time, MFU, memory and communication, term by term.

    Unset degrees default to 1, except --dp, which defaults to the GPUs left over by tp*pp*cp.
    """
    from planner.pricing import estimate_mesh
    from planner.search import pinned_mesh

    spec, clus, job = _model_cluster_job(ctx)
    config = pinned_mesh(_mesh_knobs(ctx), clus.num_gpus)
    est = estimate_mesh(spec, clus, job, config)
    if plot is not None:
        from planner.plots import plot_estimate

        plot_estimate(est, plot)
    if as_json:
        _emit_json(est.model_dump(mode="json"))
    else:
        from planner.render import print_estimate

        print_estimate(_console(), est, clus)


@app.command("capacity")
def capacity_cmd(
    ctx: typer.Context,
    model: ModelOpt = None,
    cluster: ClusterOpt = None,
    training_tokens: TokensOpt = None,
    days: Annotated[
        Optional[float],
        typer.Option("--days", callback=finite, metavar="D", help="Deadline in days of wall time (required)."),
    ] = None,
    max_nodes: Annotated[
        int, typer.Option("--max-nodes", min=1, metavar="N", help="Largest node count to try.")
    ] = 1024,
    price: PriceOpt = None,
    global_batch_size: BatchOpt = None,
    global_batch_tokens: BatchTokensOpt = None,
    seq_len: SeqOpt = None,
    max_batch_growth: GrowthOpt = 0.0,
    dtype: DtypeOpt = "bf16",
    flash_attention: FlashOpt = True,
    dropout: DropoutOpt = False,
    stack: StackOpt = None,
    tp_comm_overlap: TpOverlapOpt = None,
    compile: CompileOpt = None,
    ep_comm_overlap: EpOverlapOpt = None,
    moe_dispatcher: MoeDispatcherOpt = None,
    moe_routing: MoeRoutingOpt = None,
    adam_moments: AdamMomentsOpt = None,
    mtp_layers: MtpOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """How many nodes of CLUSTER's profile train MODEL on --training-tokens within --days, and the cost.

    Tries 1, 2, 3, 4, 6, 8, 12, ... nodes up to --max-nodes, each with a full search."""
    from planner.capacity import SECONDS_PER_DAY, capacity

    _require(training_tokens, "--training-tokens")
    if days is None:
        raise PlannerError("--days is required (the deadline in days)")
    ctx.params.update(nodes=None, gpus=None)
    spec, node, job = _model_cluster_job(ctx)
    node = node.model_copy(update={"num_nodes": 1, "num_gpus": node.gpus_per_node})
    report = capacity(spec, node, job, days * SECONDS_PER_DAY, max_nodes)
    if as_json:
        _emit_json(report.model_dump(mode="json"))
    else:
        from planner.render import print_capacity

        print_capacity(_console(), report, job)


@list_app.command("models")
def list_models_cmd(as_json: JsonOpt = False) -> None:
    """Bundled models with parameter counts."""
    from planner.catalog import list_models

    models = list_models()
    if as_json:
        _emit_json([_model_json(m) for m in models])
        return
    from planner.render import print_models

    print_models(_console(), models)


@list_app.command("clusters")
def list_clusters_cmd(as_json: JsonOpt = False) -> None:
    """Bundled hardware profiles; a cluster is <profile> or <profile>x<nodes>."""
    from planner.catalog import list_profiles

    profiles = list_profiles()
    if as_json:
        _emit_json([p.model_dump(mode="json") for p in profiles])
        return
    from planner.render import print_profiles

    print_profiles(_console(), profiles)


@list_app.command("stacks")
def list_stacks_cmd(as_json: JsonOpt = False) -> None:
    """Software stacks (--stack): attention kernel, TP overlap, gradient format, calibration."""
    from planner.catalog import list_stacks

    stacks = list_stacks()
    if as_json:
        _emit_json([s.model_dump(mode="json") for s in stacks])
        return
    for s in stacks:
        fitted = f"{s.layer_overhead_us:.3g} us/layer" if s.layer_overhead_us is not None else "not calibrated"
        typer.echo(
            f"{s.name:18} {s.attention_kernel:5} attention, TP overlap {'on' if s.tp_comm_overlap else 'off'}, "
            f"grads {s.grad_reduce_dtype}, ZeRO {s.default_zero_stage}, {fitted}: {s.description}"
        )


@show_app.command("stack")
def show_stack_cmd(
    name: Annotated[str, typer.Argument(help="Stack name or YAML path.")], as_json: JsonOpt = False
) -> None:
    """Every value of a software stack with its source."""
    from planner.catalog import load_stack

    stack = load_stack(name)
    if as_json:
        _emit_json(stack.model_dump(mode="json"))
        return
    typer.echo(f"{stack.name}: {stack.description}")
    for key, value in stack.model_dump(exclude={"name", "description", "sources", "calibration"}).items():
        source = " ".join(stack.sources.get(key, "").split())
        if value is None and not source:
            source = "not calibrated: no fit determines it (see plan calibrate --from-runs); priced as neutral"
        typer.echo(f"  {key} = {value}" + (f"  [{source[:160]}]" if source else ""))
    if stack.calibration is not None:
        typer.echo(f"  calibrated by `{stack.calibration.command}` over {len(stack.calibration.rows)} rows")


def _model_json(model: Any, seq_len: int | None = None) -> dict[str, Any]:
    from planner.cost.flops import model_flops_per_token

    s = seq_len or model.default_seq_len or 4096
    return {
        "name": model.name,
        "aliases": model.aliases,
        "spec": model.model_dump(mode="json"),
        "parameters": model.parameter_counts.model_dump(mode="json"),
        "gated_mlp": model.is_gated_mlp,
        "is_moe": model.is_moe,
        "num_moe_layers": model.num_moe_layers,
        "seq_len": s,
        "training_flops_per_token": model_flops_per_token(model, s),
    }


@show_app.command("model")
def show_model_cmd(
    name: Annotated[str, typer.Argument(help="Catalog name, alias, YAML or config.json path.")],
    seq_len: SeqOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Parameters (total, active, per layer, embedding, LM head) and FLOPs per token."""
    from planner.catalog import load_model

    model = load_model(name)
    info = _model_json(model, seq_len)
    if as_json:
        _emit_json(info)
        return
    from planner.render import print_model

    print_model(_console(), model, info["training_flops_per_token"], info["seq_len"])


@show_app.command("cluster")
def show_cluster_cmd(
    name: Annotated[str, typer.Argument(help="<profile>, <profile>x<N>, or a YAML path.")],
    nodes: NodesOpt = None,
    gpus: GpusOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """GPUs, peak FLOP/s, memory and link bandwidths of a cluster."""
    from planner.catalog import load_cluster

    cluster = load_cluster(name, nodes=nodes, gpus=gpus)
    if as_json:
        _emit_json(
            {
                "name": cluster.name,
                "description": cluster.describe(),
                "num_nodes": cluster.num_nodes,
                "num_gpus": cluster.num_gpus,
                "gpus_per_node": cluster.gpus_per_node,
                "fast_domain_gpus": cluster.fast_domain_gpus,
                "peak_bf16_flops_per_s": cluster.num_gpus * cluster.gpu.peak_flops_per_s("bf16"),
                "hbm_capacity_bytes_per_gpu": cluster.gpu.hbm_capacity_bytes,
                "intra_node_bus_bandwidth_bytes_per_s": cluster.intra_node.bus_bandwidth_bytes_per_s,
                "inter_node_bus_bandwidth_bytes_per_s": cluster.inter_node.bus_bandwidth_bytes_per_s,
                "profile": cluster.profile.model_dump(mode="json"),
            }
        )
        return
    from planner.render import print_cluster

    print_cluster(_console(), cluster)


def _is_a(err: BaseException, class_name: str) -> bool:
    """Whether ``err`` is a click-style ``class_name`` error. Typer >= 0.25 vendors click
    (typer._click), older releases use click itself: match on the class hierarchy's names."""
    return any(cls.__name__ == class_name for cls in type(err).__mro__)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the app, turning user errors into one line and exit code 2."""
    try:
        result = app(args=argv, standalone_mode=False, prog_name="plan")
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
    except PlannerError as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    except BrokenPipeError:  # the reader closed the pipe (plan ... | head): end quietly, as git does
        _quiet_stdout()
        return 0
    except OSError as err:
        if err.errno not in OUTPUT_ERRNOS:
            raise
        # stdout's device failed (plan ... > /dev/full): say so in one line; the interpreter's
        # last flush must not fail again
        _quiet_stdout()
        sys.stderr.write(f"error: cannot write the output: {err.strerror or err}\n")
        return 1
    except Exception as err:
        if _is_a(err, "UsageError"):
            ctx = getattr(err, "ctx", None)
            where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            message = " ".join(err.format_message().split())  # type: ignore[attr-defined]
            sys.stderr.write(f"error: {message}{where}\n")
            return 2
        if _is_a(err, "Abort"):  # click's Ctrl-C: 130 = 128 + SIGINT, the shell's convention
            sys.stderr.write("aborted\n")
            return 130
        raise
    return int(result) if isinstance(result, int) else 0


def entry() -> None:
    sys.exit(main())


# `plan validate` (with `sweep`) and `plan calibrate` register themselves on `app` when imported;
# imported last because they reuse the options above. torch loads only when they run.
from planner import cli_validate as _cli_validate  # noqa: E402, F401
