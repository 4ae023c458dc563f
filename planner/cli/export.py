"""``plan export --format megatron|torchtitan|torchtitan-0.2|deepspeed``: the best mesh, or a given one, as the
target framework's own settings on stdout (or ``--out FILE``), ready to pipe."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.atomic import write_text_atomic
from planner.cli.app import app, write_stdout
from planner.cli.inputs import model_cluster_job, one_mesh_pins
from planner.cli.options import (
    FormatOpt,
    IgnoreMemoryOpt,
    Job,
    LauncherOpt,
    Mesh,
    ObjectiveOpt,
    OutOpt,
    Split,
    Target,
    command,
)
from planner.errors import PlannerError

if TYPE_CHECKING:
    from planner.export import Exported
    from planner.schemas.estimate import Estimate
    from planner.schemas.hardware import ClusterSpec
    from planner.schemas.job import JobSpec
    from planner.schemas.model import ModelSpec

CANDIDATES_TRIED = 25
"""How many of the search's best meshes to try, in rank order, before searching again within the
target's own limits (``_target_pins``): the fastest mesh may use what the target lacks (ZeRO-3
with pp > 1 in Megatron-LM, ZeRO-1 in torchtitan); the next one it can express is exported, and
stderr says which was skipped."""


def _target_pins(fmt: str) -> dict[str, int]:
    """Degrees a target's config cannot set at all (``export.deepspeed.DEGREES_OF_ONE``: a DeepSpeed
    config trains data and pipeline parallel only). A pin of another value is refused before the
    search (every mesh would share it); where the user left them open and none of the open search's
    best meshes exports, the search runs again with these pinned to 1."""
    if fmt != "deepspeed":
        return {}
    from planner.export.deepspeed import DEGREES_OF_ONE

    return dict.fromkeys(DEGREES_OF_ONE, 1)


@app.command("export")
@command(without=["training_tokens"])
def export_cmd(
    *,
    fmt: FormatOpt,
    target: Target,
    job: Job,
    objective: ObjectiveOpt = "time",
    mesh: Mesh,
    split: Split,
    out: OutOpt = None,
    ignore_memory: IgnoreMemoryOpt = False,
    launcher: LauncherOpt = None,
) -> None:
    """Print the launch settings of the best mesh for MODEL on CLUSTER in a framework's terms.

    With --tp, --pp and --dp all given the mesh is exported as `plan estimate` prices it (other
    knobs at their defaults, the ZeRO stage at the target stack's); otherwise the search runs with
    the given knobs pinned and the best mesh the target can express is exported. Targets refuse
    what they cannot run as planned, and a mesh predicted not to fit in memory is refused unless
    --ignore-memory. With --launcher, the command that starts the job follows the settings on stdout.
    """
    from planner.atomic import make_parent
    from planner.export.launch import check_launch, node_split

    check_launch(fmt, launcher, out)
    if out is not None:
        make_parent(out)  # an output that cannot be written fails now, not after the search
    if job.stack is None:
        job = dataclasses.replace(job, stack=_target_stack(fmt))
    spec, clus, work = model_cluster_job(target, job)
    if launcher is not None:  # torchrun starts as many processes on every host: refuse before the search
        node_split(clus.num_gpus, clus.gpus_per_host)
    pins = one_mesh_pins(mesh, split, spec, work)
    if all(axis in pins for axis in ("tp", "pp", "dp")):
        est, exported = _given_mesh(fmt, spec, clus, work, pins)
    else:
        est, exported = _best_mesh(fmt, spec, clus, work, pins, objective)
    config = est.config.parallel
    if not est.fits and not ignore_memory:
        raise PlannerError(
            f"{config.short()} needs {est.memory_per_gpu_bytes / 2**30:.1f} GiB per GPU, "
            f"{est.memory_usable_bytes / 2**30:.1f} GiB usable on {clus.name}: it would run out of memory "
            "(pin a leaner mesh, or --ignore-memory to export it anyway)"
        )
    sys.stderr.write(f"plan export: {config.short()} for {spec.name} on {clus.name} ({clus.num_gpus} GPUs)\n")
    mismatch = _stack_mismatch(fmt, work)
    if mismatch:
        sys.stderr.write(f"note: {mismatch}\n")
    for warning in est.warnings:
        sys.stderr.write(f"warning: {warning}\n")
    if fmt == "deepspeed":  # JSON carries no comments: its caveats go to stderr
        for note in exported.notes:
            sys.stderr.write(f"note: {note}\n")
    launch = None if launcher is None else _launch(fmt, launcher, spec, clus, est, out)
    if out is None:
        write_stdout(exported.text if launch is None else f"{exported.text}\n{launch}")
    else:
        write_text_atomic(out, exported.text)
        sys.stderr.write(f"wrote {out}\n")
        if launch is not None:
            write_stdout(launch)


def _launch(fmt: str, launcher: str, model: ModelSpec, cluster: ClusterSpec, est: Estimate, out: Path | None) -> str:
    """The launch command for the exported mesh on the cluster's nodes (planner/export/launch.py)."""
    from planner.export.launch import launch_text

    return launch_text(fmt, launcher, model, est.config.job, est.config.parallel, cluster, out)


def _target_stack(fmt: str) -> str:
    """The shipped stack a target launches (its ``export_format``): without --stack, an export is
    priced with the software it will run under."""
    from planner.catalog import DEFAULT_STACK, list_stacks
    from planner.export.common import FRAMEWORKS

    return next((s.name for s in list_stacks() if s.export_format == FRAMEWORKS[fmt]), DEFAULT_STACK)


def _stack_mismatch(fmt: str, job: JobSpec) -> str:
    """'' where the job's stack launches with the target, else a note that the mesh was priced
    under another stack than the one the exported settings run (``Stack.export_format``): its
    kernels, overlap and gradient format are what the prices assume."""
    from planner.export.common import FRAMEWORKS

    stack = job.software
    if stack.export_format == FRAMEWORKS[fmt]:
        return ""
    return (
        f"the mesh was priced as stack {stack.name} runs it ({stack.attention_kernel} attention, gradients reduced "
        f"in {job.gradient_format}), not as {FRAMEWORKS[fmt]} will: without --stack, an export is priced as "
        f"{_target_stack(fmt)}"
    )


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

    config = pinned_mesh(pins, cluster.num_gpus, job)  # tp, pp and dp are all given; ZeRO the stack's
    est = estimate_mesh(model, cluster, job, config)
    return est, render(fmt, model, est.config.job, config, _header(fmt, model, cluster, est), cluster)


def _best_mesh(
    fmt: str, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, pins: dict[str, Any], objective: str
) -> tuple[Estimate, Exported]:
    """The best-ranked mesh the target can express among the search's first candidates; if it
    can express none, the refusal of the best one."""
    from planner.export import render
    from planner.export.common import ExportRefusalError
    from planner.search import search

    first_refusal: PlannerError | None = None
    limits = _target_pins(fmt)
    if limits:  # a pinned degree the target lacks is the pin's refusal: every mesh would share it
        from planner.export.deepspeed import check_degree

        for knob in (k for k in limits if k in pins):
            check_degree(knob, pins[knob])
    limits = {k: v for k, v in limits.items() if k not in pins}
    last_refusal: PlannerError | None = None  # the last search's best: within the target's degrees, if limited
    for attempt in (pins, {**pins, **limits}) if limits else (pins,):
        try:
            ranking = search(model, cluster, job, attempt, top=CANDIDATES_TRIED, objective=objective)
        except PlannerError as err:
            if attempt is pins or first_refusal is None:
                raise
            # the open search had meshes, the target can write none of them, and none within its degrees
            # passes: say both (a review, 2026-12-07: a DeepSpeed export of an 8B at 64K tokens said only
            # 'no mesh fits in memory ... try more GPUs', where tp 4, which DeepSpeed cannot write, fits)
            within = ", ".join(f"--{k} {v}" for k, v in limits.items())
            raise PlannerError(
                f"{fmt} cannot write the open search's meshes ({first_refusal}), and with {within} {err}"
            ) from err
        last_refusal = None
        for est in ranking.candidates:
            try:
                header = _header(fmt, model, cluster, est)
                exported = render(fmt, model, est.config.job, est.config.parallel, header, cluster)
            except ExportRefusalError as err:
                if not err.mesh_bound:  # the model or the job is what the target lacks: no mesh would do
                    raise
                first_refusal = first_refusal or err
                last_refusal = last_refusal or err
                continue
            if first_refusal is not None:
                sys.stderr.write(f"note: the open search's best mesh was skipped: {first_refusal}; exporting "
                                 f"{est.config.parallel.short()}\n")  # fmt: skip
            return est, exported
    refusal = last_refusal or first_refusal
    assert refusal is not None  # the search returns at least one candidate or raises
    within = f" with {', '.join(f'--{k} {v}' for k, v in limits.items())}" if limits else ""
    raise PlannerError(f"{refusal} (so do the other best meshes{within}; pin knobs {fmt} supports)")
