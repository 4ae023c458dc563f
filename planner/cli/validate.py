"""``plan validate`` and ``plan validate sweep`` (ARCHITECTURE section 7): replay the plan's
meshes, or collectives alone, as torch.distributed microbenchmarks. torch is imported only inside
the commands, through ``planner.validate.runtime``, so ``plan`` itself stays torch-free."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from planner.atomic import make_parent
from planner.cli.app import app, console, emit_json
from planner.cli.inputs import mesh_pins, model_cluster_job
from planner.cli.options import (
    Job,
    JsonOpt,
    LayerShardOpt,
    MaxGemmOpt,
    MaxMessageOpt,
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

GLOO_DEFAULTS = {"repeats": 5, "warmup": 1, "max_message_bytes": 8 * 2**20, "max_gemm_flops": 2e9}
"""CPU defaults: a 8 MiB gloo all-reduce takes ~10-20 ms and a 2 GFLOP fp32 GEMM ~30 ms on one
core (hardware_profiles/localhost-cpu.yaml), so a candidate replays in seconds."""

NCCL_DEFAULTS: dict[str, Any] = {"repeats": 20, "warmup": 5, "max_message_bytes": None, "max_gemm_flops": None}


def _setting(backend: str, name: str, given: Any) -> Any:
    return given if given is not None else (GLOO_DEFAULTS if backend == "gloo" else NCCL_DEFAULTS)[name]


def _world(local_ranks: int | None, backend: str) -> tuple[int, bool]:
    """(world size, whether this process leads: writes the report and prints)."""
    from planner.validate.runtime import torchrun_world

    if local_ranks is not None:
        if backend == "nccl":
            raise PlannerError(
                "--local-ranks spawns gloo ranks on this machine; with --backend nccl run under torchrun"
            )
        return local_ranks, True
    world = torchrun_world()
    if world is None:
        raise PlannerError("give --local-ranks N to spawn N local ranks, or run under torchrun (RANK/WORLD_SIZE unset)")
    return world[1], world[0] == 0


def _replay_cluster(profile: str | None, backend: str, plan_cluster: Any, world: int) -> tuple[Any, str, str | None]:
    """The replay machine as a cluster of ``world`` ranks, its profile's name and file (if a path)."""
    from planner.catalog import load_cluster, load_profile

    if profile is None:
        node = load_profile("localhost-cpu") if backend == "gloo" else plan_cluster.profile
        path = None
    else:
        node = load_profile(profile)
        path = str(Path(profile).resolve()) if Path(profile).is_file() else None
    return load_cluster(node.name if path is None else path, gpus=world), node.name, path


def _candidates(target: Target, job: Job, mesh: Mesh, top: int) -> tuple[Any, Any, Any, list[tuple[int, Any, float]]]:
    """Model, cluster, job and (rank, ParallelConfig, plan step time) of the meshes to replay:
    the one mesh that the degree pins name (as ``plan estimate`` reads them), else the top K."""
    from planner.pricing import estimate_mesh
    from planner.search import pinned_mesh, search

    spec, clus, work = model_cluster_job(target, job)
    pins = mesh_pins(mesh)
    if any(axis in pins for axis in ("tp", "pp", "dp", "cp", "ep")):
        config = pinned_mesh(pins, clus.num_gpus)
        return spec, clus, work, [(1, config, estimate_mesh(spec, clus, work, config).step_time_s)]
    ranking = search(spec, clus, work, pins, top=top)
    return spec, clus, work, [(c.rank, c.config.parallel, c.step_time_s) for c in ranking.candidates]


def _run_with_progress(job: Any, local_ranks: int | None, lead: bool) -> tuple[list[Any], str | None, bool]:
    """Run the replay with a progress bar on stderr; (measurements, error or None, whether the
    user interrupted it)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from planner.validate.launch import Event, ReplayFailedError, ReplayInterruptedError, run_local, run_torchrun

    total = sum(len(b.terms) for b in job.blocks)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), disable=not lead, transient=True) as progress:
        task = progress.add_task("starting ranks", total=total)

        def on_event(event: Event) -> None:
            if event.rank == 0 and event.kind == "enter" and event.position is not None:
                block, term = event.position
                progress.update(task, description=f"{job.blocks[block].label}: {job.blocks[block].terms[term].name}")
            elif event.rank == 0 and event.kind == "leave":
                progress.advance(task)

        try:
            if local_ranks is not None:
                return run_local(job, local_ranks, on_event), None, False
            return run_torchrun(job, on_event), None, False
        except ReplayFailedError as err:
            return err.partial, str(err), isinstance(err, ReplayInterruptedError)


def _stop_if_interrupted(interrupted: bool, measured: int, total: int, out: Path) -> None:
    """After a Ctrl-C the partial report is written: say so and end with status 130 (128 + SIGINT,
    the shell's convention)."""
    if interrupted:
        typer.echo(f"interrupted: {measured} of {total} terms measured; partial report in {out}", err=True)
        raise typer.Exit(130)


def _context(
    backend: str, world: int, profile_name: str, profile_path: str | None, job: Any, caps: tuple, notes: list[str]
) -> Any:
    from planner.validate.report import device_identity, host_and_time
    from planner.validate.schemas import ReplayContext

    host, when = host_and_time()
    device_name, torch_version = device_identity(backend)
    return ReplayContext(
        host=host,
        created_at=when,
        backend=backend,
        device="cuda" if backend == "nccl" else "cpu",
        device_name=device_name,
        torch_version=torch_version,
        world_size=world,
        replay_profile=profile_name,
        replay_profile_path=profile_path,
        warmup=job.warmup,
        repeats=job.repeats,
        timeout_s=job.timeout_s,
        max_message_bytes=caps[0],
        max_gemm_flops=caps[1],
        notes=notes,
    )


def _layer_terms(spec: Any, job: Any, config: Any, replay_cluster: Any, on_gpu: bool, timeout: float) -> list[Any]:
    """The candidate's layer-shard terms, refused in one line when one call would outlast half
    the per-call timeout (a llama-size layer on a CPU core takes minutes)."""
    from planner.validate.shard import layer_terms

    terms = layer_terms(spec, job, config, replay_cluster, on_gpu)
    for term in terms:
        if term.predicted_s > timeout / 2:
            raise PlannerError(
                f"--layer-shard: one {term.name} shard of {spec.name} at {config.short()} is predicted at "
                f"{term.predicted_s:.3g} s per call on {replay_cluster.profile.name}, over half the --timeout of "
                f"{timeout:g} s; raise --timeout or replay without it (--no-layer-shard)"
            )
    return terms


@validate_app.callback(invoke_without_command=True)
@command(without=["price", "training_tokens", "max_batch_growth", "stack", "tp_comm_overlap", "compile"])
def validate_main(
    *,
    ctx: typer.Context,
    target: Target,
    job: Job,
    top: TopOpt = 3,
    mesh: Mesh,
    replay: Replay,
    out: ReportOpt = Path("validate-report.json"),
    max_message_bytes: MaxMessageOpt = None,
    max_gemm_flops: MaxGemmOpt = None,
    layer_shard: LayerShardOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay the plan's top candidates (or the one mesh its pins name) and compare with predictions."""
    if ctx.invoked_subcommand is not None:
        return
    from planner.validate.gemms import gemm_terms
    from planner.validate.replica import fit_replica, replica_config
    from planner.validate.report import CandidateInfo, by_block, candidate_report, kendall_tau, write_json_atomic
    from planner.validate.runtime import check_backend
    from planner.validate.schemas import ReplayBlock, ReplayJob, ValidationReport
    from planner.validate.shard import counted_once
    from planner.validate.sweep import parse_size
    from planner.validate.terms import comm_terms

    check_backend(replay.backend)
    make_parent(out)  # an output that cannot be written fails now, not after the replay
    world, lead = _world(replay.local_ranks, replay.backend)
    spec, clus, job_spec, candidates = _candidates(target, job, mesh, top)
    replay_cluster, profile_name, profile_path = _replay_cluster(replay.profile, replay.backend, clus, world)
    cap_text = _setting(replay.backend, "max_message_bytes", max_message_bytes)
    cap_bytes = parse_size(cap_text, "--max-message-bytes") if isinstance(cap_text, str) else cap_text
    cap_flops = _setting(replay.backend, "max_gemm_flops", max_gemm_flops)
    on_gpu = replay.backend == "nccl"
    with_layers = on_gpu if layer_shard is None else layer_shard
    blocks, infos = [], []
    for rank, config, step_s in candidates:
        replica_mesh, notes = fit_replica(config, world)
        replica = replica_config(config, replica_mesh)
        terms = comm_terms(spec, job_spec, config, replica, replay_cluster, cap_bytes)
        terms += gemm_terms(spec, job_spec, config, replay_cluster, on_gpu, cap_flops)
        if with_layers:
            terms = counted_once(terms + _layer_terms(spec, job_spec, config, replay_cluster, on_gpu, replay.timeout))
        blocks.append(ReplayBlock(label=f"#{rank} {config.short()}", mesh=replica_mesh, terms=terms))
        infos.append(
            CandidateInfo(rank=rank, mesh=config.short(), plan_step_time_s=step_s, replica=replica_mesh, notes=notes)
        )
    import os

    cores = os.cpu_count() or 1
    replay_job = ReplayJob(
        backend=replay.backend,
        blocks=blocks,
        warmup=_setting(replay.backend, "warmup", replay.warmup),
        repeats=_setting(replay.backend, "repeats", replay.repeats),
        timeout_s=replay.timeout,
        gemm_on_all_ranks=on_gpu or world <= cores,
    )
    notes = [f"every predicted_s is priced on {profile_name}, the replay's hardware; plan_step_time_s on {clus.name}"]
    if not replay_job.gemm_on_all_ranks:
        notes.append(f"{world} ranks share {cores} CPU cores: GEMMs are timed on rank 0 alone, the others waiting")
    if with_layers:
        notes.append(
            "layer.* terms replay one layer shard forward+backward each; the GEMMs inside it (*) are "
            "reported but counted once, through the layer"
        )
    capped = [
        t.name
        for b in blocks
        for t in b.terms
        if t.plan_message_bytes > t.message_bytes or t.plan_gemm_mnk != t.gemm_mnk
    ]
    if capped:
        notes.append(
            f"{len(capped)} terms capped (--max-message-bytes {cap_bytes}, --max-gemm-flops {cap_flops}); "
            "calls per step count the buckets"
        )
    measurements, error, interrupted = _run_with_progress(replay_job, replay.local_ranks, lead)
    if not lead:
        return
    measured = by_block(measurements)
    reports = [
        candidate_report(info, block, measured.get(i, {}))
        for i, (info, block) in enumerate(zip(infos, blocks, strict=True))
    ]
    report = ValidationReport(
        status="failed" if error else "complete",
        error=error,
        model=spec.name,
        plan_cluster=clus.name,
        context=_context(replay.backend, world, profile_name, profile_path, replay_job, (cap_bytes, cap_flops), notes),
        candidates=reports,
        kendall_tau=kendall_tau(reports),
    )
    write_json_atomic(out, report)
    _stop_if_interrupted(interrupted, len(measurements), sum(len(b.terms) for b in replay_job.blocks), out)
    if error:
        raise PlannerError(f"{error} (results so far in {out})")
    if as_json:
        emit_json(report.model_dump(mode="json"))
    else:
        from planner.validate.report import print_validation

        print_validation(console(), report)
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
    from planner.validate.report import print_sweep, term_result, write_json_atomic
    from planner.validate.runtime import check_backend
    from planner.validate.schemas import ReplayBlock, ReplayJob, SweepPoint, SweepReport
    from planner.validate.sweep import parse_ops, parse_size, parse_sizes, sweep_terms

    op_names = parse_ops(ops)
    size_list = parse_sizes(sizes, "--sizes")
    fixed = parse_size(size, "--size")
    make_parent(out)  # outputs that cannot be written fail now, not after the sweep
    if plot is not None:
        from planner.validate.plot import require_pyplot

        require_pyplot()  # fail before the run, not after it
        make_parent(plot, "--plot")
    check_backend(replay.backend)
    world, lead = _world(replay.local_ranks, replay.backend)
    if replay.backend == "nccl" and replay.profile is None:
        raise PlannerError("--profile is required with --backend nccl (the profile of the GPUs the sweep runs on)")
    replay_cluster, profile_name, profile_path = _replay_cluster(replay.profile, replay.backend, None, world)
    terms, series = sweep_terms(op_names, size_list, fixed, world, replay_cluster)
    job = ReplayJob(
        backend=replay.backend,
        blocks=[ReplayBlock(label="sweep", terms=terms)],
        warmup=_setting(replay.backend, "warmup", replay.warmup),
        repeats=_setting(replay.backend, "repeats", replay.repeats),
        timeout_s=replay.timeout,
        gemm_on_all_ranks=True,
    )
    measurements, error, interrupted = _run_with_progress(job, replay.local_ranks, lead)
    if not lead:
        return
    points = [SweepPoint(series=series[m.term], result=term_result(terms[m.term], m)) for m in measurements]  # type: ignore[arg-type]
    notes = [f"groups are ranks 0..n-1 of the world; predictions priced on {profile_name}"]
    report = SweepReport(
        status="failed" if error else "complete",
        error=error,
        context=_context(replay.backend, world, profile_name, profile_path, job, (None, None), notes),
        points=points,
    )
    write_json_atomic(out, report)
    _stop_if_interrupted(interrupted, len(measurements), len(terms), out)
    if error:
        raise PlannerError(f"{error} (results so far in {out})")
    if plot is not None:
        from planner.validate.plot import plot_sweep

        plot_sweep(
            points, plot, f"{replay.backend} sweep on {report.context.host}, {world} ranks, predicted on {profile_name}"
        )
    if as_json:
        emit_json(report.model_dump(mode="json"))
    else:
        print_sweep(console(), points)
        typer.echo(f"sweep: {out}" + (f", plot: {plot}" if plot else ""))
