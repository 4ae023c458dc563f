"""``plan validate``, ``plan validate sweep`` and ``plan calibrate`` (ARCHITECTURE section 7).

Importing this module registers the commands on ``planner.cli.app`` (planner/cli.py imports it
last, after the options it reuses are defined). torch is imported only inside the commands,
through ``planner.validate.runtime``, so ``plan`` itself stays torch-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from planner.atomic import make_parent
from planner.cli import (
    AdamMomentsOpt,
    BatchOpt,
    BatchTokensOpt,
    ClusterOpt,
    CpOpt,
    DpOpt,
    DropoutOpt,
    DtypeOpt,
    EpOpt,
    EpOverlapOpt,
    EtpOpt,
    FlashOpt,
    GpusOpt,
    JsonOpt,
    LayoutOpt,
    MbsOpt,
    ModelOpt,
    MoeDispatcherOpt,
    MoeRoutingOpt,
    MtpOpt,
    NodesOpt,
    OrderOpt,
    OverlapOpt,
    PpOpt,
    RecomputeLayersOpt,
    RecomputeOpt,
    ScheduleOpt,
    SeqOpt,
    SpOpt,
    TopOpt,
    TpOpt,
    VOpt,
    ZeroOpt,
    _console,
    _emit_json,
    _mesh_knobs,
    _model_cluster_job,
    app,
    finite,
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

# ---- options of the validator, declared once ---------------------------------------------------
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


def _candidates(ctx: typer.Context, top: int) -> tuple[Any, Any, Any, list[tuple[int, Any, float]]]:
    """Model, cluster, job and (rank, ParallelConfig, plan step time) of the meshes to replay:
    the one mesh that the degree pins name (as ``plan estimate`` reads them), else the top K."""
    from planner.pricing import estimate_mesh
    from planner.search import pinned_mesh, search

    spec, clus, job = _model_cluster_job(ctx)
    pins = _mesh_knobs(ctx)
    if any(axis in pins for axis in ("tp", "pp", "dp", "cp", "ep")):
        config = pinned_mesh(pins, clus.num_gpus)
        return spec, clus, job, [(1, config, estimate_mesh(spec, clus, job, config).step_time_s)]
    ranking = search(spec, clus, job, pins, top=top)
    return spec, clus, job, [(c.rank, c.config.parallel, c.step_time_s) for c in ranking.candidates]


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
def validate_main(
    ctx: typer.Context,
    model: ModelOpt = None,
    cluster: ClusterOpt = None,
    nodes: NodesOpt = None,
    gpus: GpusOpt = None,
    global_batch_size: BatchOpt = None,
    global_batch_tokens: BatchTokensOpt = None,
    seq_len: SeqOpt = None,
    dtype: DtypeOpt = "bf16",
    flash_attention: FlashOpt = True,
    dropout: DropoutOpt = False,
    ep_comm_overlap: EpOverlapOpt = None,
    moe_dispatcher: MoeDispatcherOpt = None,
    moe_routing: MoeRoutingOpt = None,
    adam_moments: AdamMomentsOpt = None,
    mtp_layers: MtpOpt = None,
    top: TopOpt = 3,
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
    pipeline_layout: LayoutOpt = None,
    backend: BackendOpt = "gloo",
    local_ranks: LocalRanksOpt = None,
    profile: ProfileOpt = None,
    out: Annotated[Path, typer.Option("--out", metavar="PATH", help="Report JSON (written atomically).")] = Path(
        "validate-report.json"
    ),
    repeats: RepeatsOpt = None,
    warmup: WarmupOpt = None,
    timeout: TimeoutOpt = 60.0,
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

    check_backend(backend)
    make_parent(out)  # an output that cannot be written fails now, not after the replay
    world, lead = _world(local_ranks, backend)
    spec, clus, job_spec, candidates = _candidates(ctx, top)
    replay_cluster, profile_name, profile_path = _replay_cluster(profile, backend, clus, world)
    cap_text = _setting(backend, "max_message_bytes", max_message_bytes)
    cap_bytes = parse_size(cap_text, "--max-message-bytes") if isinstance(cap_text, str) else cap_text
    cap_flops = _setting(backend, "max_gemm_flops", max_gemm_flops)
    on_gpu = backend == "nccl"
    with_layers = on_gpu if layer_shard is None else layer_shard
    blocks, infos = [], []
    for rank, config, step_s in candidates:
        mesh, notes = fit_replica(config, world)
        replica = replica_config(config, mesh)
        terms = comm_terms(spec, job_spec, config, replica, replay_cluster, cap_bytes)
        terms += gemm_terms(spec, job_spec, config, replay_cluster, on_gpu, cap_flops)
        if with_layers:
            terms = counted_once(terms + _layer_terms(spec, job_spec, config, replay_cluster, on_gpu, timeout))
        blocks.append(ReplayBlock(label=f"#{rank} {config.short()}", mesh=mesh, terms=terms))
        infos.append(CandidateInfo(rank=rank, mesh=config.short(), plan_step_time_s=step_s, replica=mesh, notes=notes))
    import os

    cores = os.cpu_count() or 1
    job = ReplayJob(
        backend=backend,
        blocks=blocks,
        warmup=_setting(backend, "warmup", warmup),
        repeats=_setting(backend, "repeats", repeats),
        timeout_s=timeout,
        gemm_on_all_ranks=on_gpu or world <= cores,
    )
    notes = [f"every predicted_s is priced on {profile_name}, the replay's hardware; plan_step_time_s on {clus.name}"]
    if not job.gemm_on_all_ranks:
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
    measurements, error, interrupted = _run_with_progress(job, local_ranks, lead)
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
        context=_context(backend, world, profile_name, profile_path, job, (cap_bytes, cap_flops), notes),
        candidates=reports,
        kendall_tau=kendall_tau(reports),
    )
    write_json_atomic(out, report)
    _stop_if_interrupted(interrupted, len(measurements), sum(len(b.terms) for b in job.blocks), out)
    if error:
        raise PlannerError(f"{error} (results so far in {out})")
    if as_json:
        _emit_json(report.model_dump(mode="json"))
    else:
        from planner.validate.report import print_validation

        print_validation(_console(), report)
        typer.echo(f"report: {out}")


@validate_app.command("sweep")
def sweep_cmd(
    ops: Annotated[
        str,
        typer.Option(
            "--ops",
            metavar="LIST",
            help="Collectives, comma-separated: all, all-reduce, reduce-scatter, all-gather, all-to-all, send-recv.",
        ),
    ] = "all",
    sizes: Annotated[
        str, typer.Option("--sizes", metavar="LIST", help="Message sizes at the full world, e.g. 64KiB,1MiB,8MiB.")
    ] = "64KiB,256KiB,1MiB,4MiB",
    size: Annotated[
        str, typer.Option("--size", metavar="SIZE", help="Message size of the world-size series (groups of 2..N).")
    ] = "1MiB",
    backend: BackendOpt = "gloo",
    local_ranks: LocalRanksOpt = None,
    profile: ProfileOpt = None,
    out: Annotated[Path, typer.Option("--out", metavar="PATH", help="Sweep JSON (written atomically).")] = Path(
        "sweep.json"
    ),
    plot: Annotated[
        Path | None, typer.Option("--plot", metavar="PNG", help="Also draw the sweep (needs matplotlib).")
    ] = None,
    repeats: RepeatsOpt = None,
    warmup: WarmupOpt = None,
    timeout: TimeoutOpt = 60.0,
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
    check_backend(backend)
    world, lead = _world(local_ranks, backend)
    if backend == "nccl" and profile is None:
        raise PlannerError("--profile is required with --backend nccl (the profile of the GPUs the sweep runs on)")
    replay_cluster, profile_name, profile_path = _replay_cluster(profile, backend, None, world)
    terms, series = sweep_terms(op_names, size_list, fixed, world, replay_cluster)
    job = ReplayJob(
        backend=backend,
        blocks=[ReplayBlock(label="sweep", terms=terms)],
        warmup=_setting(backend, "warmup", warmup),
        repeats=_setting(backend, "repeats", repeats),
        timeout_s=timeout,
        gemm_on_all_ranks=True,
    )
    measurements, error, interrupted = _run_with_progress(job, local_ranks, lead)
    if not lead:
        return
    points = [SweepPoint(series=series[m.term], result=term_result(terms[m.term], m)) for m in measurements]  # type: ignore[arg-type]
    notes = [f"groups are ranks 0..n-1 of the world; predictions priced on {profile_name}"]
    report = SweepReport(
        status="failed" if error else "complete",
        error=error,
        context=_context(backend, world, profile_name, profile_path, job, (None, None), notes),
        points=points,
    )
    write_json_atomic(out, report)
    _stop_if_interrupted(interrupted, len(measurements), len(terms), out)
    if error:
        raise PlannerError(f"{error} (results so far in {out})")
    if plot is not None:
        from planner.validate.plot import plot_sweep

        plot_sweep(
            points, plot, f"{backend} sweep on {report.context.host}, {world} ranks, predicted on {profile_name}"
        )
    if as_json:
        _emit_json(report.model_dump(mode="json"))
    else:
        print_sweep(_console(), points)
        typer.echo(f"sweep: {out}" + (f", plot: {plot}" if plot else ""))


def calibrate_cmd(
    from_: Annotated[
        Path | None, typer.Option("--from", metavar="JSON", help="A plan validate or plan validate sweep JSON.")
    ] = None,
    from_runs: Annotated[
        Path | None,
        typer.Option(
            "--from-runs",
            metavar="YAML",
            help="A published-runs file (modern_runs.yaml's schema): fit sustained tensor throughput per GPU "
            "profile and kernel overhead per stack, cross-validated.",
        ),
    ] = None,
    group: Annotated[
        list[str] | None, typer.Option("--group", metavar="G", help="With --from-runs: only these groups.")
    ] = None,
    write: Annotated[
        bool, typer.Option("--write", help="With --from-runs: write the fit into the shipped profiles and stacks.")
    ] = False,
    cluster: ClusterOpt = None,
    out: Annotated[Path | None, typer.Option("--out", metavar="YAML", help="The calibrated hardware profile.")] = None,
    name: Annotated[str | None, typer.Option("--name", help="Profile name (default: the --out file's stem).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit a profile to measurements: alpha and bandwidth per link tier, GEMM and attention
    efficiency from `plan validate` (--from); or, from published runs (--from-runs), the
    sustained tensor throughput of each GPU profile and the kernel overhead of each stack."""
    import numpy as np

    if from_runs is not None:
        if from_ is not None:
            raise PlannerError("give --from or --from-runs, not both")
        _calibrate_from_runs(from_runs, group or [], write, as_json)
        return
    if from_ is None:
        raise PlannerError("--from (a validate JSON) or --from-runs (a published-runs YAML) is required")

    from planner.catalog import load_cluster, load_profile, read_yaml
    from planner.validate.calibrate import (
        ErrorStats,
        base_attention_efficiency,
        calibrated_profile,
        check_measured_on,
        fit,
        fits_attention,
        initial_params,
        predict,
        samples_from_json,
        write_profile_yaml,
    )
    from planner.validate.report import measured_where

    if cluster is None:
        raise PlannerError("--cluster is required: the profile the measurements ran on (e.g. localhost-cpu)")
    if out is None:
        raise PlannerError("--out is required: where to write the calibrated profile YAML")
    base = load_cluster(cluster).profile
    samples = samples_from_json(read_yaml(from_), str(from_))
    check_measured_on(samples.context, base, str(from_))
    results, context = samples.results, samples.context
    if samples.error is not None:
        typer.echo(
            f"warning: {from_} is a partial report (the run stopped: {samples.error}); fitting the "
            f"{len(results)} terms measured before it stopped",
            err=True,
        )
    params, before, _ = fit(base, results)
    where = measured_where(context.host, context.created_at, context.device_name, context.torch_version)
    source = f"{where}: plan calibrate fit to {len(results)} terms of {from_.name}"
    profile = calibrated_profile(base, params, results, name or out.stem, source)
    write_profile_yaml(out, profile)
    written = load_profile(str(out.resolve()))  # what was written must load, and is what "after" prices
    after = ErrorStats.of(predict(written, initial_params(written), results), np.array([r.measured_s for r in results]))
    summary = {
        "profile": str(out),
        "samples": len(results),
        "partial": samples.error is not None,
        "error_before": vars(before),
        "error_after": vars(after),
        "links": {t: {"latency_s": lat, "bus_bandwidth_bytes_per_s": bw} for t, (lat, bw) in params.links.items()},
        "gemm_rate_scale": params.gemm_scale,
        "attention_efficiency_scale": params.attention_scale,
    }
    if as_json:
        _emit_json(summary)
        return
    typer.echo(f"fit to {len(results)} measured terms of {from_}")
    typer.echo(f"before ({base.name}): {before}")
    typer.echo(f"after  ({profile.name}): {after}")
    for tier, (lat, bw) in params.links.items():
        typer.echo(f"  {tier}: alpha {lat * 1e6:.1f} us, bus bandwidth {bw / 1e9:.3g} GB/s")
    for dtype, scale in params.gemm_scale.items():
        typer.echo(f"  {dtype} GEMM rate x{scale:.3g} of the old profile's")
    if fits_attention(results):
        typer.echo(
            f"  attention efficiency {base_attention_efficiency(base):.3g} -> {profile.gpu.attention_efficiency:.3g} "
            "(fitted from the layer shards)"
        )
    typer.echo(f"wrote {out}: use it with --cluster {out} or --profile {out}")


def _calibrate_from_runs(path: Path, groups: list[str], write: bool, as_json: bool) -> None:
    """`plan calibrate --from-runs`: fit, cross-validate, report, and with --write record it."""
    import shlex

    import numpy as np

    from planner.calibration_io import write_fit
    from planner.fit_runs import fit_and_cross_validate
    from planner.runs import cases_from_runs, check_groups, load_runs

    runs = load_runs(path)
    if groups:
        check_groups(runs, groups, path)
        runs = [r for r in runs if str(r.get("group")) in groups]
    cases, skipped = cases_from_runs(runs)
    if not cases:
        raise PlannerError(f"{path}: no row can be priced")
    result = fit_and_cross_validate(cases)
    command = "plan calibrate --from-runs " + " ".join(
        shlex.quote(a) for a in [path.name, *[x for g in groups for x in ("--group", g)]]
    )
    written = [str(p) for p in write_fit(result, command, path.name)] if write else []
    moved = result.problem.uses.any(axis=0)
    pairs = list(zip(result.problem.params, result.theta, result.free, moved, strict=True))
    params = {p.label(): float(v) for p, v, free, _ in pairs if free}
    unfitted = [p.label() for p, _, free, some in pairs if some and not free]
    summary = {
        "runs": len(runs),
        "priced": len(cases),
        "skipped": [{"name": s["name"], "reason": s["reason"]} for s in skipped],
        "parameters": params,
        "not_fitted": unfitted,
        "mape_pct": float(100 * np.mean(np.abs(result.error))),
        "cv_mape_pct": float(100 * np.mean(np.abs(result.cv_error))),
        "signed_pct": float(100 * np.mean(result.error)),
        "written": written,
    }
    if as_json:
        _emit_json(summary)
        return
    typer.echo(f"fit to {len(cases)} of {len(runs)} runs of {path} ({len(skipped)} cannot be priced)")
    for label, value in params.items():
        typer.echo(f"  {label} = {value:.4g}")
    if unfitted:
        typer.echo(
            "  not fitted (moved by rows of fewer than two models, or a kernel's by rows of one GPU "
            f"architecture; left uncalibrated): {', '.join(unfitted)}"
        )
    typer.echo(
        f"MAPE {summary['mape_pct']:.1f}% in sample, {summary['cv_mape_pct']:.1f}% cross-validated "
        f"(leave one model of one source out); mean signed {summary['signed_pct']:+.1f}%"
    )
    typer.echo(f"wrote {', '.join(written)}" if written else "dry run: --write records the fit in the shipped files")


def register(root: typer.Typer) -> None:
    """Add ``validate`` (with ``sweep``) and ``calibrate`` to the ``plan`` app."""
    root.add_typer(validate_app, name="validate")
    root.command("calibrate")(calibrate_cmd)


register(app)
