"""``plan validate`` and ``plan validate sweep`` (ARCHITECTURE section 7): replay the plan's
meshes, or collectives alone, as torch.distributed microbenchmarks, with a progress bar, and write
the report. The replays themselves are library calls (``planner.validate.run``), which import
torch only when they run, so ``plan`` itself stays torch-free."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from planner.atomic import make_parent
from planner.cli.app import app, console, emit_json
from planner.cli.inputs import mesh_pins, model_cluster_job
from planner.cli.options import (
    Caps,
    Job,
    JsonOpt,
    Mesh,
    OpsOpt,
    Replay,
    ReportOpt,
    SizeOpt,
    SizesOpt,
    SweepOutOpt,
    SweepPlotOpt,
    Target,
    TopOpt,
    command,
)
from planner.errors import PlannerError

if TYPE_CHECKING:
    from collections.abc import Callable

    from planner.validate.launch import Event
    from planner.validate.run import Outcome, SweepReplay, ValidationReplay
    from planner.validate.settings import ReplaySettings, ValidationSettings

validate_app = typer.Typer(
    help=(
        "Replay the top candidates as torch.distributed microbenchmarks and report measured vs predicted.\n\n"
        "Locally:  plan validate --local-ranks 4 --backend gloo --model gpt2 --cluster localhost-cpu --top 3\n\n"
        "On GPUs:  torchrun --nproc-per-node 8 -m planner validate --backend nccl --model M --cluster C"
    ),
    add_completion=False,
    rich_markup_mode=None,
)
app.add_typer(validate_app, name="validate")


def _replay_settings(replay: Replay) -> ReplaySettings:
    """The replay options as the library's settings."""
    from planner.errors import validate_as
    from planner.validate.settings import ReplaySettings

    return validate_as(ReplaySettings, replay.values(), "replay")


def _validation_settings(replay: Replay, caps: Caps) -> ValidationSettings:
    """The replay options and the caps as the library's settings; --max-message-bytes is read as a
    size (8MiB)."""
    from planner.errors import validate_as
    from planner.validate.settings import ValidationSettings
    from planner.validate.sweep import parse_size

    text = caps.max_message_bytes
    size = None if text is None else parse_size(text, "--max-message-bytes")
    return validate_as(ValidationSettings, {**replay.values(), **caps.values(), "max_message_bytes": size}, "replay")


@contextmanager
def _progress(replay: ValidationReplay | SweepReplay) -> Iterator[Callable[[Event], None]]:
    """A progress bar on stderr (on the leading rank) for ``replay.run``'s events. Only on a terminal:
    rich ends a live display on any other stream with a newline, which put a blank line on stderr
    before an error or a redirected log's first line."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    blocks = replay.job.blocks
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    stderr = Console(stderr=True)
    shown = replay.machine.lead and stderr.is_terminal
    with Progress(*columns, console=stderr, disable=not shown, transient=True) as progress:
        task = progress.add_task("starting ranks", total=replay.total)

        def on_event(event: Event) -> None:
            if event.rank == 0 and event.kind == "enter" and event.position is not None:
                block, term = event.position
                progress.update(task, description=f"{blocks[block].label}: {blocks[block].terms[term].name}")
            elif event.rank == 0 and event.kind == "leave":
                progress.advance(task)

        yield on_event


def _write(outcome: Outcome[Any], out: Path) -> None:
    """Write the report (also a partial one); after a Ctrl-C end with status 130 (128 + SIGINT,
    the shell's convention), after a failure with its one-line error. A partial report does not
    replace a complete one already at ``out``: it goes beside it, as <name>.partial<suffix> (a failed
    re-run had replaced a complete sweep with an empty failed one; a review, 2026-12-08)."""
    from planner.validate.report import write_json_atomic

    report = outcome.report
    partial = outcome.interrupted or bool(report.error)
    where = out.with_name(f"{out.stem}.partial{out.suffix}") if partial and _holds_complete_report(out) else out
    write_json_atomic(where, report)
    kept = f"; {out} keeps the complete report it held" if where != out else ""
    if outcome.interrupted:
        typer.echo(
            f"interrupted: {outcome.measured} of {outcome.total} terms measured; partial report in {where}{kept}",
            err=True,
        )
        raise typer.Exit(130)
    if report.error:
        raise PlannerError(f"{report.error} (results so far in {where}{kept})")


def _holds_complete_report(path: Path) -> bool:
    """Whether ``path`` holds a validate or sweep report that completed."""
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8")).get("status") == "complete"
    except (OSError, ValueError, AttributeError):
        return False


@validate_app.callback(invoke_without_command=True)
# the replay runs its own torch layers, not a stack's: no --stack, so no --compile, nor --compile-loss,
# which needs compile (a review, 2026-12-07: validate took --compile-loss and always refused it)
@command(
    without=["price", "training_tokens", "max_batch_growth", "stack", "tp_comm_overlap", "compile", "compile_loss"]
)
def validate_main(
    *,
    ctx: typer.Context,
    target: Target,
    job: Job,
    top: TopOpt = 3,
    mesh: Mesh,
    replay: Replay,
    out: ReportOpt = Path("validate-report.json"),
    caps: Caps,
    as_json: JsonOpt = False,
) -> None:
    """Replay the plan's top candidates (or the one mesh its pins name) and compare with predictions."""
    if ctx.invoked_subcommand is not None:
        return
    from planner.validate.run import build_validation
    from planner.validate.runtime import check_backend

    settings = _validation_settings(replay, caps)
    check_backend(settings.backend)
    make_parent(out)  # an output that cannot be written fails now, not after the replay
    spec, clus, work = model_cluster_job(target, job)
    planned = build_validation(spec, clus, work, mesh_pins(mesh), settings, top)
    with _progress(planned) as on_event:
        outcome = planned.run(on_event)
    if outcome.report is None:  # a rank that does not lead
        return
    _write(outcome, out)
    if as_json:
        emit_json(outcome.report.model_dump(mode="json"))
    else:
        from planner.validate.report import print_validation

        print_validation(console(), outcome.report)
        typer.echo(f"report: {out}")


@validate_app.command("sweep")
@command
def sweep_cmd(
    *,
    ops: OpsOpt = "all",
    sizes: SizesOpt = "64KiB,256KiB,1MiB,4MiB",
    size: SizeOpt = "1MiB",
    replay: Replay,
    out: SweepOutOpt = Path("sweep.json"),
    plot: SweepPlotOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Each collective at a fixed message over 2..N ranks, and at N ranks over message sizes:
    measured vs the alpha-beta prediction. Shows why scaling is not linear."""
    from planner.validate.report import print_sweep
    from planner.validate.run import build_sweep
    from planner.validate.sweep import parse_ops, parse_size, parse_sizes

    op_names = parse_ops(ops)
    size_list = parse_sizes(sizes, "--sizes")
    fixed = parse_size(size, "--size")
    make_parent(out)  # outputs that cannot be written fail now, not after the sweep
    if plot is not None:
        from planner.validate.plot import require_pyplot

        require_pyplot()  # fail before the run, not after it
        make_parent(plot, "--plot")
    settings = _replay_settings(replay)
    planned = build_sweep(op_names, size_list, fixed, settings)
    with _progress(planned) as on_event:
        outcome = planned.run(on_event)
    if outcome.report is None:  # a rank that does not lead
        return
    _write(outcome, out)
    report = outcome.report
    if plot is not None:
        from planner.validate.plot import plot_sweep

        where = f"{settings.backend} sweep on {report.context.host}, {planned.machine.world} ranks"
        plot_sweep(report.points, plot, f"{where}, predicted on {planned.machine.profile_name}")
    if as_json:
        emit_json(report.model_dump(mode="json"))
    else:
        print_sweep(console(), report.points)
        typer.echo(f"sweep: {out}" + (f", plot: {plot}" if plot else ""))
