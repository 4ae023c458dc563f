"""``plan`` (rank every feasible mesh), ``plan estimate`` (price one) and ``plan capacity`` (how
many nodes meet a deadline)."""

from __future__ import annotations

from typing import Annotated

import typer

from planner import __version__
from planner.cli.app import app, console, emit_json
from planner.cli.inputs import mesh_knobs, model_cluster_job, require
from planner.cli.options import (
    AdamMomentsOpt,
    BatchOpt,
    BatchTokensOpt,
    ClusterOpt,
    CompileOpt,
    CpOpt,
    DpOpt,
    DropoutOpt,
    DtypeOpt,
    EpOpt,
    EpOverlapOpt,
    EtpOpt,
    FlashOpt,
    GpusOpt,
    GrowthOpt,
    JsonOpt,
    LayoutOpt,
    MbsOpt,
    ModelOpt,
    MoeDispatcherOpt,
    MoeRoutingOpt,
    MtpOpt,
    NodesOpt,
    ObjectiveOpt,
    OrderOpt,
    OverlapOpt,
    PlotOpt,
    PpOpt,
    PriceOpt,
    RecomputeLayersOpt,
    RecomputeOpt,
    ScheduleOpt,
    SeqOpt,
    SpOpt,
    StackOpt,
    TokensOpt,
    TopOpt,
    TpOpt,
    TpOverlapOpt,
    VOpt,
    ZeroOpt,
    finite,
)
from planner.errors import PlannerError


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

    spec, clus, job = model_cluster_job(ctx)
    pins = mesh_knobs(ctx)
    ranking, times, memory = search_with_points(spec, clus, job, pins, top=top, objective=objective)
    if plot is not None:
        from planner.plots import plot_ranking

        front = [(pt.step_time_s, pt.memory_per_gpu_bytes) for pt in ranking.pareto]
        title = f"{ranking.model} on {ranking.cluster_description}"
        plot_ranking(list(ranking.candidates[: min(top, 6)]), times, memory, front, title, plot)
    if as_json:
        emit_json(ranking.model_dump(mode="json"))
    else:
        from planner.render import print_ranking

        print_ranking(console(), ranking)


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

    spec, clus, job = model_cluster_job(ctx)
    config = pinned_mesh(mesh_knobs(ctx), clus.num_gpus)
    est = estimate_mesh(spec, clus, job, config)
    if plot is not None:
        from planner.plots import plot_estimate

        plot_estimate(est, plot)
    if as_json:
        emit_json(est.model_dump(mode="json"))
    else:
        from planner.render import print_estimate

        print_estimate(console(), est, clus)


@app.command("capacity")
def capacity_cmd(
    ctx: typer.Context,
    model: ModelOpt = None,
    cluster: ClusterOpt = None,
    training_tokens: TokensOpt = None,
    days: Annotated[
        float | None,
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

    require(training_tokens, "--training-tokens")
    if days is None:
        raise PlannerError("--days is required (the deadline in days)")
    ctx.params.update(nodes=None, gpus=None)
    spec, node, job = model_cluster_job(ctx)
    node = node.model_copy(update={"num_nodes": 1, "num_gpus": node.gpus_per_node})
    report = capacity(spec, node, job, days * SECONDS_PER_DAY, max_nodes)
    if as_json:
        emit_json(report.model_dump(mode="json"))
    else:
        from planner.render import print_capacity

        print_capacity(console(), report, job)
