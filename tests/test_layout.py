"""Megatron pipeline layout strings: Megatron's grammar, its rules, and a compact writer that
reads back to the same stages."""

from __future__ import annotations

import pytest

from planner.catalog import load_model
from planner.cost.layout import check_layout, format_layout, parse_layout, rank_layer_counts
from planner.cost.pipeline import chunk_layer_counts, stage_layer_counts
from planner.errors import PlannerError
from planner.export.megatron import pipeline_layout
from planner.schemas import ParallelConfig

DSV3_LAYOUT = "Et*3|(tt|)*29,m|L"
"""DeepSeek-V3's layout as Megatron-LM's parse_str_to_list docstring gives it ("Ettt|(tt|)*29,m|L"
written with t*3): 61 decoder layers, one MTP layer, 32 chunks."""


def test_megatron_grammar_unrolls_groups_repeats_and_cosmetic_commas() -> None:
    stages = parse_layout(DSV3_LAYOUT)
    assert len(stages) == 32
    assert stages[0] == ["E", "t", "t", "t"] and stages[1] == ["t", "t"] and stages[-2:] == [["m"], ["L"]]
    assert check_layout(stages, num_layers=61, pp=16, mtp_layers=1) == 2  # v = 32 / 16
    assert parse_layout("E(t|)*3tL") == [["E", "t"], ["t"], ["t"], ["t", "L"]]
    assert parse_layout("Et*2|t*2,|L") == [["E", "t", "t"], ["t", "t"], ["L"]]
    with pytest.raises(PlannerError, match="unknown character"):
        parse_layout("Et|x|L")


@pytest.mark.parametrize(
    "text",
    [DSV3_LAYOUT, "Et*4|(t*4|)*14t*3mL", "Et|t|tL", "E|(t*2|)*46|L", "Et*3|t*4|t*4|t*3L", "EtL"],
)
def test_format_reads_back_to_the_same_stages(text: str) -> None:
    stages = parse_layout(text)
    assert parse_layout(format_layout(stages)) == stages


def test_each_megatron_rule_is_named() -> None:
    good = parse_layout("Et*2|t*2L")
    assert check_layout(good, 4, pp=2) == 1
    cases = [
        (parse_layout("Et*2|t*2L"), 4, 3, 0, "multiple of pp 3"),
        (parse_layout("t*2|Et*2L"), 4, 2, 0, "embedding 'E' must come first"),
        (parse_layout("Et*2L|t*2"), 4, 2, 0, "loss 'L' must come last"),
        (parse_layout("Et*2|t*3L"), 4, 2, 0, "5 decoder layers 't', the model has 4"),
        (parse_layout("Et*2|t*2mL"), 4, 2, 0, "1 MTP layers 'm', the model has 0"),
        (parse_layout("Et*2|mt*2L"), 4, 2, 1, "decoder layers must come before the MTP layers"),
    ]
    for stages, layers, pp, mtp, message in cases:
        with pytest.raises(PlannerError, match=message):
            check_layout(stages, layers, pp=pp, mtp_layers=mtp)


@pytest.mark.parametrize(
    ("model_name", "pp", "v"), [("deepseek-v3", 16, 1), ("qwen3-235b-a22b", 8, 3), ("llama3-70b", 4, 5)]
)
def test_the_exported_layout_is_the_split_the_engine_prices(model_name: str, pp: int, v: int) -> None:
    # round trip: the plan's split -> Megatron's string -> Megatron's rules -> the same per-rank counts
    model = load_model(model_name)
    text = pipeline_layout(
        model, ParallelConfig(pp=pp, virtual_stages=v, schedule="interleaved-1f1b" if v > 1 else "1f1b")
    )
    stages = parse_layout(text)
    assert check_layout(stages, model.num_hidden_layers, pp) == v
    assert [s.count("t") for s in stages] == chunk_layer_counts(model.num_hidden_layers, pp, v)
    assert rank_layer_counts(stages, pp) == stage_layer_counts(model.num_hidden_layers, pp, v)
