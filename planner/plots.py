"""Pictures of a plan (the optional ``plot`` extra, matplotlib): pipeline timeline with its
bubbles, memory per GPU against usable HBM, step time by term, and the Pareto scatter of every
feasible mesh. Only draws figures the engine produced; the timeline comes from the event
simulation (``planner.cost.simulate``) at the estimate's per-micro-batch times."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.atomic import atomic_path, make_parent
from planner.cost.pipeline import layers_per_chunk, needs_pp_multiple, with_recompute_every
from planner.cost.simulate import SIMULATED_SCHEDULES, simulate
from planner.errors import PlannerError
from planner.mesh import MeshArrays
from planner.schemas.base import GIB_BYTES
from planner.schemas.estimate import Estimate
from planner.schemas.parallel import DUAL_SCHEDULES

if TYPE_CHECKING:
    from planner.schemas.model import ModelSpec
    from planner.serving.search import Curve

MAX_MICROBATCHES_DRAWN = 4
"""The timeline draws at most 4p micro-batches (whole groups of p): enough to show warm-up,
steady state and cool-down, few enough to read."""


def require_pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend, or a one-line PlannerError."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlannerError("--plot needs matplotlib: pip install '.[plot]'") from None
    return plt


PLOT_SUFFIXES = (".png", ".svg", ".pdf")
"""The picture formats --plot writes (matplotlib's Agg backend writes each)."""


def check_plot_path(path: str | Path) -> Path:
    """``path`` as a Path if its suffix is a format --plot writes, else a one-line PlannerError:
    the options' callback checks it before any work, ``_save`` again before writing."""
    target = Path(path)
    if target.suffix.lower() not in PLOT_SUFFIXES:
        raise PlannerError(f"--plot '{path}': give a .png, .svg or .pdf file name")
    return target


def _save(fig: Any, path: str | Path) -> None:
    """Write the figure atomically (``atomic_path``), in the format of the path's suffix, and say
    where (a review: a plot into a new folder was written without a word)."""
    target = check_plot_path(path)
    make_parent(target, "--plot")
    with atomic_path(target, "--plot") as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
    sys.stderr.write(f"wrote {target}\n")  # on stderr: --json's stdout stays one object


def draw_timeline(ax: Any, est: Estimate, model: ModelSpec | None = None) -> None:
    """Per pipeline rank, the forward and backward of each micro-batch (chunk-coloured when
    interleaved); white gaps are the bubble. Forward and backward split the busiest rank's slot
    as the engine does (``MeshArrays.forward_passes``); with the ``model``, at the every-n-th
    stride of a stack that recomputes so (``pipeline.with_recompute_every``, torchtitan), which
    the mesh alone does not carry (without it, at the first r layers of each chunk)."""
    cfg = est.config.parallel
    p, m = cfg.pp, est.num_microbatches
    shown = min(m, MAX_MICROBATCHES_DRAWN * p)
    if cfg.schedule == "interleaved-1f1b" and needs_pp_multiple(est.config.job):
        shown = max(p, shown - shown % p)  # p | m, as the stack's interleaving needs
    if cfg.schedule in DUAL_SCHEDULES:  # the reference programs need m >= 2p, and DualPipe an even m
        shown = min(m, max(2 * p, shown - shown % 2))
    schedule = cfg.schedule if cfg.schedule in SIMULATED_SCHEDULES else "1f1b"
    t = est.time_breakdown_s
    slot = (t.compute + t.tp_comm + t.cp_comm + t.ep_comm) / m
    # the busiest rank, as the engine prices it: ceil(L / (p v)) layers in each of its v chunks
    busiest = layers_per_chunk(sum(est.layers_per_stage), p * cfg.virtual_stages) * cfg.virtual_stages
    mesh = MeshArrays.from_configs([cfg])
    if model is not None:
        mesh = with_recompute_every(model, est.config.job, mesh)
    passes = float(mesh.forward_passes(busiest)[0])
    timeline = simulate(schedule, p, shown, slot / passes, slot - slot / passes, cfg.virtual_stages)
    colors = {
        "F": ["#4c72b0", "#64b5cd", "#8172b2", "#55a868"],
        "B": ["#dd8452", "#c44e52", "#da8bc3", "#937860"],
        "W": ["#8c8c8c", "#b0b0b0", "#6e6e6e", "#cccccc"],
    }
    for op in timeline.ops:
        ax.broken_barh(
            [(op.start_s, op.end_s - op.start_s)],
            (op.rank - 0.4, 0.8),
            facecolors=colors[op.kind][op.chunk % 4],
            edgecolor="white",
            linewidth=0.3,
        )
    ax.set_ylim(p - 0.5, -0.5)
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"stage {r}" for r in range(p)])
    ax.set_xlabel("time (s)")
    note = f"{shown} of {m} micro-batches" if shown < m else f"{m} micro-batches"
    drawn = "" if cfg.schedule in SIMULATED_SCHEDULES else f" (drawn as 1F1B; {cfg.schedule} fills part of it)"
    ax.set_title(
        f"{cfg.schedule}{drawn}, p={p}, v={cfg.virtual_stages}: {note}, "
        f"bubble {timeline.bubble_fraction:.1%} (step: {est.bubble_fraction:.1%})\n"
        "blue: forward, orange: backward, grey: deferred weight gradient (shades: model chunks or directions)",
        fontsize=9,
    )


def _stacked(ax: Any, labels: list[str], parts: dict[str, list[float]], unit: str) -> None:
    bottom = np.zeros(len(labels))
    for name, values in parts.items():
        if any(v > 0 for v in values):
            ax.bar(labels, values, bottom=bottom, label=name)
            bottom += np.asarray(values)
    ax.set_ylabel(unit)
    ax.tick_params(axis="x", labelsize=7, rotation=30)
    ax.legend(fontsize=7, ncol=2)


def _label(est: Estimate, rank: int | None) -> str:
    c = est.config.parallel
    head = f"#{rank} " if rank is not None else ""
    recompute = c.recompute[:3] if c.recompute_layers is None else c.recompute_label
    return f"{head}t{c.tp} p{c.pp} d{c.dp} c{c.cp}\nb{c.micro_batch_size} z{c.zero_stage} {recompute}"


def draw_memory(ax: Any, ests: list[Estimate], ranks: list[int | None]) -> None:
    """Memory of the most loaded GPU by kind, against the usable HBM."""
    labels = [_label(e, r) for e, r in zip(ests, ranks, strict=True)]
    kinds = ests[0].memory_breakdown_bytes.model_dump()
    parts = {k: [e.memory_breakdown_bytes.model_dump()[k] / GIB_BYTES for e in ests] for k in kinds}
    _stacked(ax, labels, parts, "GiB per GPU")
    ax.axhline(ests[0].memory_usable_bytes / GIB_BYTES, color="black", linestyle="--", linewidth=1)
    ax.set_title(f"memory per GPU; dashed: usable {ests[0].memory_usable_bytes / GIB_BYTES:.0f} GiB", fontsize=9)


def draw_step_time(ax: Any, ests: list[Estimate], ranks: list[int | None]) -> None:
    """Step time by term (exposed communication only; hidden overlap is not drawn)."""
    labels = [_label(e, r) for e, r in zip(ests, ranks, strict=True)]
    terms = ests[0].time_breakdown_s.model_dump()
    parts = {k: [e.time_breakdown_s.model_dump()[k] for e in ests] for k in terms}
    _stacked(ax, labels, parts, "seconds per step")
    ax.set_title("step time by term (exposed)", fontsize=9)


def draw_pareto(ax: Any, times_s: np.ndarray, memory_bytes: np.ndarray, front: list[tuple[float, float]]) -> None:
    """Every feasible mesh (memory vs step time) and the Pareto front."""
    ax.scatter(times_s, memory_bytes / GIB_BYTES, s=4, alpha=0.3, color="#4c72b0", label="feasible meshes")
    ft, fm = zip(*front, strict=True)
    ax.plot(ft, np.asarray(fm) / GIB_BYTES, color="#c44e52", marker="o", markersize=3, label="Pareto front")
    ax.set_xscale("log")
    ax.set_xlabel("step time (s, log)")
    ax.set_ylabel("GiB per GPU")
    ax.set_title(f"{len(times_s):,} feasible meshes: memory vs step time", fontsize=9)
    ax.legend(fontsize=7)


def plot_estimate(est: Estimate, path: str | Path, model: ModelSpec | None = None) -> None:
    """``plan estimate --plot``: the timeline, memory and step-time of one mesh (``draw_timeline``
    reads the ``model``)."""
    plt = require_pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5), gridspec_kw={"width_ratios": [3, 1, 1]})
    draw_timeline(axes[0], est, model)
    draw_memory(axes[1], [est], [None])
    draw_step_time(axes[2], [est], [None])
    fig.suptitle(f"{est.config.model} on {est.config.cluster}: {est.config.parallel.short()}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    _save(fig, path)
    plt.close(fig)


def plot_ranking(
    ests: list[Estimate],
    times_s: np.ndarray,
    memory_bytes: np.ndarray,
    front: list[tuple[float, float]],
    title: str,
    path: str | Path,
    model: ModelSpec | None = None,
) -> None:
    """``plan --plot``: the winner's timeline, the top candidates' memory and step time, and the
    Pareto scatter of all feasible meshes (``draw_timeline`` reads the ``model``)."""
    plt = require_pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(15, 10))
    ranks: list[int | None] = list(range(1, len(ests) + 1))
    piped = next((i for i, e in enumerate(ests) if e.config.parallel.pp > 1), 0)
    draw_timeline(axes[0, 0], ests[piped], model)
    if piped:
        axes[0, 0].set_title(f"#{piped + 1} (the best with a pipeline): " + axes[0, 0].get_title(), fontsize=9)
    draw_pareto(axes[0, 1], times_s, memory_bytes, front)
    draw_memory(axes[1, 0], ests, ranks)
    draw_step_time(axes[1, 1], ests, ranks)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    _save(fig, path)
    plt.close(fig)


MAX_SERVING_CURVES = 8
"""The serving plot draws 8 layouts: the table's first, then those whose curves reach the most
tokens/s per GPU (readable; the rest are in the table and JSON)."""


def serving_curves_shown(
    curves: list[Curve], winner_label: str | None, replayed: list[tuple[str, float, float]] | None
) -> list[Curve]:
    """The ``MAX_SERVING_CURVES`` curves ``plot_serving`` draws: the winner's and the table's
    (``replayed``) first, in the table's order (the ranking is the replay's, not the curves' peaks:
    a pipeline's steady curve can peak far above its replay), then those that reach the most
    tokens/s per GPU."""
    ranked = list(dict.fromkeys([winner_label, *(label for label, _, _ in replayed or [])]))

    def order(c: Curve) -> tuple[int, float]:
        if c.label in ranked:
            return ranked.index(c.label), 0.0
        return len(ranked), -float(np.max(c.tokens_per_s_per_gpu))

    return sorted(curves, key=order)[:MAX_SERVING_CURVES]


def plot_serving(
    curves: list[Curve],
    winner_label: str | None,
    tpot_target_s: float | None,
    title: str,
    path: str | Path,
    replayed: list[tuple[str, float, float]] | None = None,
    splits: list[tuple[float, float]] | None = None,
) -> None:
    """``plan serve --plot``: each layout's trade-off over the batch grid at the steady-state
    round, output tokens/s per user (1 / TPOT) against output tokens/s per GPU, as the serving
    benchmarks draw it (InferenceMAX, TensorRT-LLM's throughput-latency curves); batches that meet
    the targets solid, the others hollow, the TPOT target as a vertical line and the winner's
    layout in bold. ``replayed``: the table's candidates whose figures come from a replay
    (label, tokens/s per user, per GPU), drawn as crosses in their layout's colour: where they sit
    below their curve is the steady state's optimism (above it, for a MoE model, its pessimism:
    rounds of decode tokens alone read fewer experts than its even spread of prompts). ``splits``: a
    disaggregated plan's candidates in the table's order (tokens/s per user, per GPU of the cluster),
    drawn as numbered diamonds over the co-located layouts' curves, which they are weighed against
    (a split has no curve: its pools' sizes change with the load)."""
    plt = require_pyplot()
    fig, ax = plt.subplots(figsize=(9, 6))
    best = serving_curves_shown(curves, winner_label, replayed)
    for curve in best:
        order = np.argsort(curve.tokens_per_s_per_user)
        x, y, ok = curve.tokens_per_s_per_user[order], curve.tokens_per_s_per_gpu[order], curve.meets[order]
        bold = curve.label == winner_label
        (line,) = ax.plot(x, y, lw=2.5 if bold else 1.0, label=curve.label + (" (#1)" if bold else ""))
        ax.scatter(x[ok], y[ok], color=line.get_color(), s=18)
        ax.scatter(x[~ok], y[~ok], facecolors="none", edgecolors=line.get_color(), s=18)
        for label, per_user, per_gpu in replayed or []:
            if label == curve.label:
                ax.scatter([per_user], [per_gpu], marker="x", color=line.get_color(), s=60)
    if replayed:
        ax.scatter([], [], marker="x", color="k", s=60, label="replayed (the table's figures)")
    for rank, (per_user, per_gpu) in enumerate(splits or [], start=1):
        ax.scatter([per_user], [per_gpu], marker="D", color="k", s=30, zorder=3)
        ax.annotate(f"#{rank}", (per_user, per_gpu), textcoords="offset points", xytext=(4, 4), fontsize=7)
    if splits:
        ax.scatter([], [], marker="D", color="k", s=30, label="disaggregated splits (#: the table's rank)")
    if tpot_target_s is not None:
        ax.axvline(1.0 / tpot_target_s, color="k", ls="--", lw=1, label=f"TPOT target {tpot_target_s * 1e3:g} ms")
    ax.set_xlabel("output tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
