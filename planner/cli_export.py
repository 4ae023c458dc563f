"""``plan export --format megatron|torchtitan|deepspeed``: the best mesh, or a given one, as the
target framework's own settings on stdout (or ``--out FILE``), ready to pipe.

``planner.cli`` calls ``register(app)`` while it is itself being imported, so this module reaches
back to it (for the option declarations and the shared helpers) through ``_cli``, bound at the end
of the module: by then ``register`` exists whichever of the two modules Python imported first,
and Typer resolves the ``_cli.*Opt`` annotations only when a command line is parsed.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from planner.atomic import write_text_atomic
from planner.errors import PlannerError

if TYPE_CHECKING:
    from planner.export import Exported
    from planner.schemas.estimate import Estimate
    from planner.schemas.hardware import ClusterSpec
    from planner.schemas.job import JobSpec
    from planner.schemas.model import ModelSpec

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

CANDIDATES_TRIED = 25
"""How many of the search's best meshes to try, in rank order, before giving up on a target:
the fastest mesh may use what the target lacks (ZeRO-3 with pp > 1 in Megatron-LM, ZeRO-1 in
torchtitan); the next one it can express is exported, and stderr says which was skipped."""


def register(app: typer.Typer) -> None:
    """Add the ``export`` command to the ``plan`` app."""
    app.command("export")(export_cmd)


def export_cmd(
    ctx: typer.Context,
    fmt: FormatOpt,
    model: _cli.ModelOpt = None,
    cluster: _cli.ClusterOpt = None,
    nodes: _cli.NodesOpt = None,
    gpus: _cli.GpusOpt = None,
    global_batch_size: _cli.BatchOpt = None,
    global_batch_tokens: _cli.BatchTokensOpt = None,
    seq_len: _cli.SeqOpt = None,
    max_batch_growth: _cli.GrowthOpt = 0.0,
    price: _cli.PriceOpt = None,
    dtype: _cli.DtypeOpt = "bf16",
    flash_attention: _cli.FlashOpt = True,
    dropout: _cli.DropoutOpt = False,
    stack: _cli.StackOpt = None,
    tp_comm_overlap: _cli.TpOverlapOpt = None,
    compile: _cli.CompileOpt = None,
    ep_comm_overlap: _cli.EpOverlapOpt = None,
    moe_dispatcher: _cli.MoeDispatcherOpt = None,
    moe_routing: _cli.MoeRoutingOpt = None,
    adam_moments: _cli.AdamMomentsOpt = None,
    mtp_layers: _cli.MtpOpt = None,
    objective: _cli.ObjectiveOpt = "time",
    tp: _cli.TpOpt = None,
    pp: _cli.PpOpt = None,
    dp: _cli.DpOpt = None,
    cp: _cli.CpOpt = None,
    ep: _cli.EpOpt = None,
    expert_tp: _cli.EtpOpt = None,
    micro_batch_size: _cli.MbsOpt = None,
    virtual_stages: _cli.VOpt = None,
    zero_stage: _cli.ZeroOpt = None,
    recompute: _cli.RecomputeOpt = None,
    recompute_layers: _cli.RecomputeLayersOpt = None,
    sequence_parallel: _cli.SpOpt = None,
    schedule: _cli.ScheduleOpt = None,
    order: _cli.OrderOpt = None,
    overlap_grad_reduce: _cli.OverlapOpt = None,
    pipeline_layout: _cli.LayoutOpt = None,
    out: OutOpt = None,
) -> None:
    """Print the launch settings of the best mesh for MODEL on CLUSTER in a framework's terms.

    With --tp, --pp and --dp all given the mesh is exported as `plan estimate` prices it (other
    knobs at their defaults); otherwise the search runs with the given knobs pinned and the best
    mesh the target can express is exported. Targets refuse what they cannot run as planned.
    """
    if ctx.params.get("stack") is None:
        ctx.params["stack"] = _target_stack(fmt)
    spec, clus, job = _cli._model_cluster_job(ctx)
    pins = _cli._mesh_knobs(ctx)
    if all(axis in pins for axis in ("tp", "pp", "dp")):
        est, exported = _given_mesh(fmt, spec, clus, job, pins)
    else:
        est, exported = _best_mesh(fmt, spec, clus, job, pins, objective)
    config = est.config.parallel
    sys.stderr.write(f"plan export: {config.short()} for {spec.name} on {clus.name} ({clus.num_gpus} GPUs)\n")
    for warning in est.warnings:
        sys.stderr.write(f"warning: {warning}\n")
    if fmt == "deepspeed":  # JSON carries no comments: its caveats go to stderr
        for note in exported.notes:
            sys.stderr.write(f"note: {note}\n")
    if out is None:
        _cli.write_stdout(exported.text)
    else:
        write_atomically(out, exported.text)
        sys.stderr.write(f"wrote {out}\n")


def _target_stack(fmt: str) -> str:
    """The shipped stack a target launches (its ``export_format``): without --stack, an export is
    priced with the software it will run under."""
    from planner.catalog import DEFAULT_STACK, list_stacks

    return next((s.name for s in list_stacks() if s.export_format == fmt), DEFAULT_STACK)


def _header(fmt: str, model: ModelSpec, cluster: ClusterSpec, est: Estimate) -> str:
    """One line naming what was exported and what the plan predicts for it."""
    config, job = est.config.parallel, est.config.job
    return (
        f"plan export --format {fmt}: {model.name} on {cluster.name} ({cluster.num_gpus} GPUs), "
        f"{config.short()}, global batch {job.batch_size} x {job.seq_len}, stack {job.stack_name}; "
        f"predicted step {est.step_time_s:.3g} s, "
        f"MFU {est.mfu:.1%}, {est.memory_per_gpu_bytes / 2**30:.1f} GiB per GPU"
    )


def _given_mesh(
    fmt: str, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, pins: dict[str, Any]
) -> tuple[Estimate, Exported]:
    """The pinned mesh, checked and priced as `plan estimate` does."""
    from planner.export import render
    from planner.pricing import estimate_mesh
    from planner.search import pinned_mesh

    config = pinned_mesh(pins, cluster.num_gpus)  # tp, pp and dp are all given
    est = estimate_mesh(model, cluster, job, config)
    return est, render(fmt, model, est.config.job, config, _header(fmt, model, cluster, est))


def _best_mesh(
    fmt: str, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, pins: dict[str, Any], objective: str
) -> tuple[Estimate, Exported]:
    """The best-ranked mesh the target can express among the search's first candidates; if it
    can express none, the refusal of the best one."""
    from planner.export import render
    from planner.search import search

    ranking = search(model, cluster, job, pins, top=CANDIDATES_TRIED, objective=objective)
    first_refusal: PlannerError | None = None
    for est in ranking.candidates:
        try:
            exported = render(fmt, model, est.config.job, est.config.parallel, _header(fmt, model, cluster, est))
        except PlannerError as err:
            first_refusal = first_refusal or err
            continue
        if first_refusal is not None:
            sys.stderr.write(
                f"note: rank 1 ({ranking.candidates[0].config.parallel.short()}) skipped: {first_refusal}; "
                f"exporting rank {est.rank}\n"
            )
        return est, exported
    assert first_refusal is not None  # the search returns at least one candidate or raises
    tried = len(ranking.candidates)
    raise PlannerError(f"{first_refusal} (so do the other {tried - 1} best meshes; pin knobs {fmt} supports)")


def write_atomically(path: Path, text: str) -> None:
    """``write_text_atomic``, after checking the folder exists (an export does not create one)."""
    if not path.parent.is_dir():
        raise PlannerError(f"--out {path}: folder {path.parent} does not exist")
    write_text_atomic(path, text)


_cli = importlib.import_module("planner.cli")
