"""render.print_table writes the text rich would, with or without rich's layout."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence

import pytest
from rich.console import Console
from rich.table import Table

from planner.catalog import load_cluster, load_model
from planner.error_bar import relative_band
from planner.figures import rate, seconds
from planner.render import band_cell, plain_table_lines, print_ranking, print_table
from planner.search import default_job, search
from tests.conftest import main_winner_with_band


def _table(rows: Sequence[Sequence[str]], headers: Sequence[str], justify: Sequence[str]) -> Table:
    table = Table(box=None, padding=(0, 1), header_style="bold")
    for header, how in zip(headers, justify, strict=True):
        table.add_column(header, justify=how)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*row)
    return table


def _printed(width: int, show: Table | Callable[[Console], None]) -> str:
    """What ``show`` (a table, or a function that prints) writes to a plain 'width'-column console."""
    out = io.StringIO()
    console = Console(width=width, file=out)
    if isinstance(show, Table):
        console.print(show)
    else:
        show(console)
    return out.getvalue()


TABLES = [
    ([["1", "none", "1.690 s"], ["10", "f:3", "12.5 ms"]], ["#", "recomp", "step"], ["right", "left", "right"]),
    ([["9%", "±"], ["100%", "—"]], ["±", "x"], ["right", "left"]),
    ([["漢字", "a"]], ["wide", "b"], ["left", "right"]),
    ([], ["only", "headers"], ["right", "right"]),
]


@pytest.mark.parametrize(("rows", "headers", "justify"), TABLES)
def test_plain_table_is_what_rich_prints(rows: list[list[str]], headers: list[str], justify: list[str]) -> None:
    lines = plain_table_lines(Console(width=120, file=io.StringIO()), _table(rows, headers, justify))
    assert lines is not None
    assert "\n".join(lines) + "\n" == _printed(120, _table(rows, headers, justify))
    assert _printed(120, lambda c: print_table(c, _table(rows, headers, justify))) == _printed(
        120, _table(rows, headers, justify)
    )


@pytest.mark.parametrize(
    ("rows", "width"),
    [
        ([["[bold]x[/]", "1"]], 120),  # markup: rich styles it
        ([[":smile:", "1"]], 120),  # an emoji code
        ([["two\nlines", "1"]], 120),
    ],
)
def test_rich_lays_out_other_tables(rows: list[list[str]], width: int) -> None:
    table = _table(rows, ["a", "b"], ["left", "right"])
    assert plain_table_lines(Console(width=width, file=io.StringIO()), table) is None
    assert _printed(width, lambda c: print_table(c, _table(rows, ["a", "b"], ["left", "right"]))) == _printed(
        width, table
    )


def test_a_table_wider_than_a_pipe_is_written_whole_and_folded_on_a_terminal() -> None:
    # rich cut the cells of a table wider than the 120 columns a pipe gets ('-18..+1…' for a band
    # of -18..+11% once --training-tokens adds its days and dollars): a file has no width to fit
    table = _table([["x" * 70, "y" * 70]], ["a", "b"], ["left", "right"])
    lines = plain_table_lines(Console(width=120, file=io.StringIO()), table)
    assert lines is not None and lines[1] == f" {'x' * 70}  {'y' * 70} "
    terminal = Console(width=120, file=io.StringIO(), force_terminal=True, color_system=None)
    assert plain_table_lines(terminal, table) is None


def test_no_plain_text_on_a_colour_console() -> None:
    console = Console(width=120, file=io.StringIO(), force_terminal=True, color_system="standard")
    assert plain_table_lines(console, _table([["1"]], ["#"], ["right"])) is None


@pytest.mark.parametrize(("model", "cluster"), [("llama3-70b", "dgx-h100x16"), ("deepseek-v3", "dgx-h100x32")])
def test_ranking_table_unchanged(model: str, cluster: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_model(model)
    ranking = search(spec, load_cluster(cluster), default_job(spec), top=10)
    fast = _printed(120, lambda c: print_ranking(c, ranking))
    monkeypatch.setattr("planner.render.plain_table_lines", lambda console, table: None)
    assert fast == _printed(120, lambda c: print_ranking(c, ranking))


@pytest.mark.parametrize(
    ("band", "cell"),
    [
        ((900.0, 1100.0), "±10%"),  # mirror images: the half-width
        ((861.0, 1121.0), "±13%"),  # -13.9/+12.1: within 2 points of symmetric
        ((830.0, 1120.0), "-17..+12%"),  # -17/+12: the ends, signed
        ((620.0, 880.0), "-38..-12%"),  # wholly below the prediction: never a ±
        ((1050.0, 1300.0), "+5..+30%"),
        (None, "-"),
    ],
)
def test_band_cell_shows_an_off_centre_band_by_its_ends(band: tuple[float, float] | None, cell: str) -> None:
    assert band_cell(main_winner_with_band(band)) == cell


def test_ranking_table_heads_the_band_and_says_what_it_is() -> None:
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100")
    ranking = search(model, cluster, default_job(model), top=2)
    text = _printed(160, lambda c: print_ranking(c, ranking))
    header = next(line for line in text.splitlines() if line.lstrip().startswith("#  tp"))
    assert header.split()[12:14] == ["tok/s/GPU", "band"]
    assert "band: where published runs priced like this landed, relative to the prediction" in text
    best = ranking.candidates[0]
    assert best.tokens_per_s_per_gpu_interval is not None
    low, high = relative_band(best.tokens_per_s_per_gpu, best.tokens_per_s_per_gpu_interval)
    assert low < 0.0 < high
    assert band_cell(best) in (f"{low:+.0f}..{high:+.0f}%", f"±{(high - low) / 2:.0f}%")
    assert f" {band_cell(best)} " in text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1214.4, "1,214"),
        (100.0, "100"),
        (99.94, "99.9"),
        (99.96, "100"),
        (1.0, "1.00"),
        (0.32846, "0.328"),
        (1.23456e-5, "0.0000123"),
        (1e-300, "1e-300"),
        (0.0, "0"),
    ],
)
def test_rates_below_100_keep_three_significant_figures(value: float, text: str) -> None:
    assert rate(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (18.5, "18.50 s"),
        (1.0, "1.00 s"),
        (0.996, "1.00 s"),
        (0.00182, "1.82 ms"),
        (1.23e-5, "0.0123 ms"),
        (0.0, "0.00 s"),
    ],
)
def test_times_in_prose_below_a_second_read_in_milliseconds(value: float, text: str) -> None:
    # gpt2 on 512 H100 'assumes DP 0.00 s ... hidden behind 0.00 s of compute': 1.8 ms behind 2.2 ms
    assert seconds(value) == text


def test_a_cpu_profile_rate_does_not_read_as_zero() -> None:
    """gpt2 on two CPU cores runs a third of a token per second and core: the table said 0."""
    ranking = search(load_model("gpt2"), load_cluster("localhost-cpu"), default_job(load_model("gpt2")), top=1)
    lines = _printed(200, lambda console: print_ranking(console, ranking)).splitlines()
    row = next(line for line in lines if line.lstrip().startswith("1 "))
    per_gpu = ranking.candidates[0].tokens_per_s_per_gpu
    assert 0.1 < per_gpu < 1.0
    assert f" {per_gpu:.3g} " in row


def test_the_bubble_legend_writes_each_schedules_own_fraction() -> None:
    # DualPipeV's column read 7/(3m+7) under a legend of (p-1)/(v m+p-1) alone (a review)
    import re

    import numpy as np

    from planner.render import bubble_legend
    from planner.schedules import SCHEDULE_SHAPES

    p, v, m = 8.0, 2.0, 16.0
    for name, shape in SCHEDULE_SHAPES.items():
        slots = float(shape.bubble_slots(np.array([p]), np.array([v]), np.array([m]))[0])
        written = re.sub(r"(\d|v) ?m", r"\1*m", shape.bubble_text)
        assert eval(written, {"p": p, "v": v, "m": m}) == pytest.approx(slots / (m + slots)), name
    assert bubble_legend(["1f1b", "interleaved-1f1b"]) == "bubble (p-1)/(v m+p-1)"
    assert bubble_legend(["dualpipev"]) == "bubble dualpipev (p-1)/(3m+p-1)"
    assert bubble_legend(["interleaved-1f1b", "zb-h1"]) == "bubble (p-1)/(v m+p-1), zb-h1 (p-1)/(3m+p-1)"
