"""``plan`` (rank every feasible mesh), ``plan estimate`` (price one) and ``plan capacity`` (how
many nodes meet a deadline)."""

from __future__ import annotations

import typer

from planner.cli.app import app, console, emit_json
from planner.cli.inputs import mesh_pins, model_cluster_job, one_mesh_pins
from planner.cli.options import (
    CompareBestOpt,
    DaysOpt,
    Job,
    JsonOpt,
    MaxNodesOpt,
    Mesh,
    ObjectiveOpt,
    PlotOpt,
    Split,
    Target,
    TopOpt,
    VersionOpt,
    command,
)
from planner.errors import PlannerError


@app.callback(invoke_without_command=True)
@command(without=["pipeline_layout"])
def plan_main(
    *,
    ctx: typer.Context,
    target: Target,
    job: Job,
    top: TopOpt = 10,
    objective: ObjectiveOpt = "time",
    mesh: Mesh,
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
    version: VersionOpt = False,
) -> None:
    """Rank every feasible mesh for MODEL on CLUSTER (pins like --tp 8 fix a knob)."""
    if ctx.invoked_subcommand is not None:
        return
    if target.model is None and target.cluster is None and not _any_option_given(ctx):
        typer.echo(ctx.get_help())  # bare `plan`; `plan --tp 8` is a plan without its model, an error
        return
    from planner.search import search_with_points

    spec, clus, work = model_cluster_job(target, job)
    ranking, times, memory = search_with_points(
        spec, clus, work, mesh_pins(mesh), top=top, objective=objective, try_fewer_gpus=True, with_margin=True
    )
    if plot is not None:
        from planner.plots import plot_ranking

        front = [(pt.step_time_s, pt.memory_per_gpu_bytes) for pt in ranking.pareto]
        title = f"{ranking.model} on {ranking.cluster_description}"
        plot_ranking(list(ranking.candidates[: min(top, 6)]), times, memory, front, title, plot, spec)
    if as_json:
        emit_json(ranking.model_dump(mode="json"))
    else:
        from planner.render import print_ranking

        print_ranking(console(), ranking)


def _any_option_given(ctx: typer.Context) -> bool:
    """Whether the command line (not a default) set any of the command's options."""
    sources = (ctx.get_parameter_source(param.name) for param in ctx.command.params if param.name)
    return any(source is not None and source.name == "COMMANDLINE" for source in sources)


@app.command("estimate")
@command
def estimate_cmd(
    target: Target,
    mesh: Mesh,
    split: Split,
    job: Job,
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
    compare_best: CompareBestOpt = False,
) -> None:
    """Price one mesh: step time, MFU, memory and communication, term by term.

    Unset degrees default to 1, except --dp, which defaults to the GPUs left over by tp*pp*cp;
    an unset --zero-stage is the stack's (`plan show stack`), as `plan export` writes it.
    """
    from planner.pricing import estimate_mesh
    from planner.search import pinned_mesh

    spec, clus, work = model_cluster_job(target, job)
    config = pinned_mesh(one_mesh_pins(mesh, split, spec, work), clus.num_gpus, work)
    est = estimate_mesh(spec, clus, work, config)
    versus = None
    if compare_best:
        from planner.explain import versus_best
        from planner.search import search

        best = search(spec, clus, work, {}, top=1).candidates[0]
        versus = (best, versus_best(best, est))
    if plot is not None:
        from planner.plots import plot_estimate

        plot_estimate(est, plot, spec)
    if as_json:
        out = est.model_dump(mode="json")
        if versus is not None:
            out["compared_with_best"] = {"best": versus[0].model_dump(mode="json"), "explanation": versus[1]}
        emit_json(out)
    else:
        from planner.render import print_estimate

        print_estimate(console(), est, clus)
        if versus is not None:
            console().print(versus[1])


@app.command("capacity")
@command(without=["nodes", "gpus"])
def capacity_cmd(
    target: Target, job: Job, days: DaysOpt = None, max_nodes: MaxNodesOpt = 1024, as_json: JsonOpt = False
) -> None:
    """How many nodes of CLUSTER's profile train MODEL on --training-tokens within --days, and the cost.

    Tries 1, 2, 3, 4, 6, 8, 12, ... nodes up to --max-nodes, each with a full search, then the counts
    between the last that misses the deadline and the first that meets it, halving the gap, so the
    answer is the fewest nodes that meet it (and again for the slow end of the error band)."""
    from planner.capacity import capacity, check_one_node, deadline_seconds

    if job.training_tokens is None:
        raise PlannerError("--training-tokens is required: the token budget to train on (15T, 300B, 2.5e12)")
    if days is None:
        raise PlannerError("--days is required (the deadline in days)")
    deadline_s = deadline_seconds(days)
    spec, node, work = model_cluster_job(target, job)
    check_one_node(node, f"--cluster {target.cluster}")
    report = capacity(spec, node, work, deadline_s, max_nodes)
    if as_json:
        emit_json(report.model_dump(mode="json"))
    else:
        from planner.render import print_capacity

        print_capacity(console(), report, work)
