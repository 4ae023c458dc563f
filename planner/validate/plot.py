"""The sweep as a figure: per collective, measured (markers, p10-p90 bars) and the alpha-beta
prediction (lines) against group size at a fixed message, and against message size at the full
world (log-log). matplotlib is the optional ``plot`` extra, imported only here."""

from __future__ import annotations

from pathlib import Path

from planner.atomic import atomic_path
from planner.plots import check_plot_path, require_pyplot
from planner.validate.schemas import SweepPoint


def plot_sweep(points: list[SweepPoint], path: Path, title: str) -> None:
    """Write the sweep figure to ``path`` (.png, .svg or .pdf: ``plots.check_plot_path``)."""
    check_plot_path(path)
    plt = require_pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    ops = sorted({p.result.spec.op for p in points})
    for op in ops:
        for ax, series, key in ((axes[0], "world", "group_size"), (axes[1], "size", "message_bytes")):
            rows = sorted(
                (p.result for p in points if p.series == series and p.result.spec.op == op),
                key=lambda r: getattr(r.spec, key),
            )
            if not rows:
                continue
            x = [getattr(r.spec, key) for r in rows]
            meas = [r.measured_s * 1e3 for r in rows]
            err = [[(r.measured_s - r.p10_s) * 1e3 for r in rows], [(r.p90_s - r.measured_s) * 1e3 for r in rows]]
            (line,) = ax.plot(x, [r.spec.predicted_s * 1e3 for r in rows], "-", label=f"{op} predicted")
            ax.errorbar(x, meas, yerr=err, fmt="o", color=line.get_color(), label=f"{op} measured")
    fixed = next((p.result.spec.message_bytes for p in points if p.series == "world"), None)
    axes[0].set(
        xlabel="ranks in the group", ylabel="ms per call", title=f"fixed message {(fixed or 0) / 2**10:.0f} KiB"
    )
    axes[0].xaxis.get_major_locator().set_params(integer=True)
    axes[1].set(xlabel="message bytes", ylabel="ms per call", title="full world", xscale="log", yscale="log")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, loc="upper left")
    fig.suptitle(title)
    fig.tight_layout()
    try:
        with atomic_path(path, "--plot") as tmp:
            fig.savefig(tmp, dpi=110)
    finally:
        plt.close(fig)
