"""--plot on `plan` and `plan estimate` (matplotlib, the optional plot extra)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png(path: Path) -> bytes:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    return data


def test_plan_and_estimate_draw_pngs(cli, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    ranking_png, estimate_png = tmp_path / "rank.png", tmp_path / "sub" / "est.png"
    r = cli("-m", "llama3-8b", "-c", "dgx-h100x2", "-k", "4", "--plot", str(ranking_png))
    assert r.code == 0, r.err
    assert len(_png(ranking_png)) > 50_000  # four panels, one a scatter of every feasible mesh
    args = ("estimate", "-m", "llama3-8b", "-c", "dgx-h100x2", "--tp", "2", "--pp", "4", "-v", "2", "-b", "1")
    e = cli(*args, "--plot", str(estimate_png))
    assert e.code == 0, e.err
    assert r.err.endswith(f"wrote {ranking_png}\n") and e.err.endswith(f"wrote {estimate_png}\n")  # said where
    assert len(_png(estimate_png)) > 20_000
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files == ["rank.png", "sub/est.png"]  # the atomic writes left no temporary file


def test_plot_errors_are_one_line(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    args = ("estimate", "-m", "llama3-8b", "-c", "dgx-h100", "--tp", "8")
    assert_one_line_error(cli(*args, "--plot", str(tmp_path / "x.txt")), "--plot", ".png")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the extra were not installed
    assert_one_line_error(cli(*args, "--plot", str(tmp_path / "x.png")), "--plot needs matplotlib", ".[plot]")


def test_dual_schedules_are_drawn_from_their_own_programs() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from planner.catalog import load_cluster, load_model
    from planner.plots import draw_timeline
    from planner.pricing import estimate_mesh
    from planner.schemas import JobSpec, ParallelConfig

    job = JobSpec(global_batch_size=64, seq_len=4096, stack="torchtitan")
    config = ParallelConfig(pp=4, dp=4, schedule="dualpipev", zero_stage=2)
    est = estimate_mesh(load_model("llama3-8b"), load_cluster("dgx-h100x2"), job, config)
    fig, ax = plt.subplots()
    try:
        draw_timeline(ax, est)
        title = ax.get_title()
        # 16 micro-batches, 4 x 4 ranks drawn; the V's own program, not a 1F1B stand-in
        assert title.startswith("dualpipev, p=4") and "drawn as 1F1B" not in title and "16 micro-batches" in title
        grey = [c for c in ax.collections if tuple(c.get_facecolor()[0][:3]) == matplotlib.colors.to_rgb("#8c8c8c")]
        assert grey  # the deferred weight-gradient chunks of the zero-bubble steps
    finally:
        plt.close(fig)


def test_plan_serve_draws_the_throughput_interactivity_curves(cli, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "serve.png"
    r = cli("serve", "-m", "llama70b", "-c", "dgx-h100x1", "--tpot-ms", "30", "--plot", str(png))
    assert r.code == 0, r.err
    assert len(_png(png)) > 30_000  # one curve per layout over the batch grid
    assert_one_line_error(cli("serve", "-m", "llama70b", "-c", "dgx-h100x1", "--plot", str(tmp_path / "x.txt")), ".png")


def test_the_serving_plot_draws_the_tables_layouts_first() -> None:
    """The ranking is the replay's: 70B on one DGX H100 ranks TP2 x PP4 first (583 tokens/s per GPU
    replayed), while the steady curve of 2 x TP4 peaks highest (525; the pipelines' steady curves
    lie below their replays at capacity, where the closed loop's prompts fill their micro-batches
    side by side: TP2 x PP4 370). Until the steady round took its prompts in whole pieces
    (2026-12-07) the curves of TP1 x PP8 and 2 x TP1 x PP4 peaked highest, 644 and 642, replayed 535
    and 451. The plot draws the table's layouts, in its order, before the highest curves."""
    import planner
    from planner.catalog import load_cluster, load_model
    from planner.plots import MAX_SERVING_CURVES, serving_curves_shown
    from planner.serving.render import layout_label
    from planner.serving.schemas import ServeRequest
    from planner.serving.search import layout_curves

    ranking = planner.serve("llama3-70b", "dgx-h100x1", top=3)
    table = [layout_label(c) for c in ranking.candidates]
    replayed = [(label, 1.0, 1.0) for label in table]
    curves = layout_curves(load_model("llama3-70b"), load_cluster("dgx-h100x1"), ServeRequest())
    peak = max(curves, key=lambda c: float(c.tokens_per_s_per_gpu.max())).label
    assert table[0] == "1x tp2 pp4" and peak == "2x tp4 pp1" and peak not in table
    shown = [c.label for c in serving_curves_shown(curves, table[0], replayed)]
    assert shown[:3] == table and shown[3] == peak and len(shown) == min(MAX_SERVING_CURVES, len(curves))


def test_a_disaggregated_plan_is_drawn_as_its_splits_over_the_colocated_curves(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A split has no curve (its pools' sizes change with the load): --plot of a disaggregated plan
    draws the table's splits as numbered diamonds at their figures over the co-located layouts'
    curves, which they are weighed against (it had drawn the curves alone, none of them the plan's)."""
    pytest.importorskip("matplotlib")
    from typer.testing import CliRunner

    from planner import plots
    from planner.cli.app import app

    drawn: dict = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path: drawn.update(ax=fig.axes[0]))
    args = ["serve", "-m", "llama70b", "-c", "dgx-h100x2", "--disaggregate", "--tpot-ms", "30", "--ttft-ms", "500"]
    r = CliRunner().invoke(app, [*args, "--plot", "x.png", "--top", "3"])
    assert r.exit_code == 0, r.output
    ax = drawn["ax"]
    assert ax.get_title().endswith(": disaggregated splits against co-located layouts")
    assert [t.get_text() for t in ax.texts] == ["#1", "#2", "#3"]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "disaggregated splits (#: the table's rank)" in labels and not any(" | " in t for t in labels)
    assert not any(label.endswith("(#1)") for label in labels)  # no co-located layout is the plan's winner


def test_the_timeline_splits_forward_and_backward_at_torchtitans_every_nth_stride() -> None:
    # torchtitan recomputes every n-th layer a rank builds (n from its smallest chunk), which the mesh
    # alone does not carry: drawn without the model, the slot had split at the first r of each chunk
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from planner.catalog import load_cluster, load_model
    from planner.mesh import MeshArrays
    from planner.plots import draw_timeline
    from planner.pricing import estimate_mesh
    from planner.schemas import JobSpec, ParallelConfig

    model = load_model("llama3-8b")
    job = JobSpec(global_batch_size=64, seq_len=4096, stack="torchtitan")
    config = ParallelConfig(
        pp=2, dp=8, zero_stage=3, virtual_stages=3, schedule="interleaved-1f1b", recompute="full", recompute_layers=2
    )
    est = estimate_mesh(model, load_cluster("dgx-h100x2"), job, config)
    # the busiest rank is drawn with 3 chunks of 6 layers: every n-th layer, n = 2 from the smallest chunk
    # (r = 2 of at most 5), recomputes 9 of its 18, a share of 1/2; the block method's 2 of each 6, 1/3
    assert float(MeshArrays.from_configs([config]).recomputed_share(18)[0]) == pytest.approx(1 / 3)

    def widths(model_given: bool) -> dict[str, float]:
        fig, ax = plt.subplots()
        try:
            draw_timeline(ax, est, model if model_given else None)
            colours = {"F": "#4c72b0", "B": "#dd8452"}  # chunk 0's forward and backward
            out = {}
            for kind, colour in colours.items():
                bar = next(c for c in ax.collections if tuple(c.get_facecolor()[0][:3]) == to_rgb(colour))
                xs = bar.get_paths()[0].vertices[:, 0]
                out[kind] = float(xs.max() - xs.min())
            return out
        finally:
            plt.close(fig)

    to_rgb = matplotlib.colors.to_rgb
    drawn = widths(True)
    assert drawn["B"] / drawn["F"] == pytest.approx(2.5)  # 3 + 1/2 passes: forward 1, backward 2.5
    assert widths(False)["B"] / widths(False)["F"] == pytest.approx(2 + 1 / 3)
