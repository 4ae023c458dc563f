"""Fewer GPUs that train faster (planner.fewer_gpus): a 72-GPU NVL72 rack splits a 512-sequence
batch only by pipelining over 9 stages, and 64 of its GPUs in plain data parallelism beat that."""

from __future__ import annotations

import json

import pytest

import planner
from planner.catalog import load_cluster, load_model
from planner.fewer_gpus import MIN_SAVING, fewer_count, largest_power_of_two_below
from planner.search import default_job, search

LLAMA8 = load_model("llama3-8b")


@pytest.mark.parametrize(
    ("cluster", "fewer"),
    [
        ("gb200-nvl72", 64),  # a rack: its 64-GPU segment
        ("gb300-nvl72x2", 128),
        ("gb200-nvl72x3", 192),  # 3 segments, not the power of two below 216
        ("dgx-h100x3", 16),  # 24 GPUs on 8-GPU nodes: the power of two below
        ("dgx-h100x16", None),  # 128 GPUs: a power of two already
        ("dgx-h100", None),
    ],
)
def test_fewer_count_takes_the_racks_segments_else_a_power_of_two(cluster: str, fewer: int | None) -> None:
    assert fewer_count(load_cluster(cluster)) == fewer
    assert largest_power_of_two_below(72) == 64 and largest_power_of_two_below(3) == 2
    assert largest_power_of_two_below(64) is None and largest_power_of_two_below(1) is None


def test_a_full_nvl72_rack_is_slower_than_64_of_its_gpus_for_llama3_8b() -> None:
    rack = load_cluster("gb200-nvl72")
    ranking = planner.plan("llama3-8b", rack, top=1)
    best, fewer = ranking.candidates[0], ranking.fewer_gpus
    assert fewer is not None and fewer.gpus == 64
    # the 72-GPU winner pipelines over 9 stages (dp 8 of the 512 sequences; 32 micro-batches of 2
    # interleaved over 3 chunks in Megatron-Core's groups of 11), the 64-GPU one does not
    assert (best.config.parallel.pp, best.config.parallel.dp) == (9, 8)
    assert fewer.mesh.startswith("tp1 pp1 dp64 ")
    # the same figures as searching 64 GPUs directly
    direct = search(LLAMA8, load_cluster(rack, gpus=64), default_job(LLAMA8), top=1).candidates[0]
    assert fewer.tokens_per_s == pytest.approx(direct.tokens_per_s, rel=1e-12)
    assert fewer.step_time_s == pytest.approx(direct.step_time_s, rel=1e-12)
    assert fewer.saving == pytest.approx(1.0 - best.tokens_per_s / direct.tokens_per_s, rel=1e-12)
    # 3.069 s against 2.953 s per step (3.358 s on the rack before interleaving took m mod pp != 0)
    assert fewer.saving == pytest.approx(0.038, abs=0.01)
    assert fewer.describe(72, 512).endswith(
        "(512 sequences per step split evenly over 64 GPUs, not over 72): --gpus 64"
    )


def test_no_fewer_gpus_where_the_count_is_a_power_of_two_or_pins_forbid() -> None:
    assert planner.plan("llama3-70b", "dgx-h100x16", top=1).fewer_gpus is None  # 128 GPUs
    # pinned to a 72-GPU mesh, 64 GPUs hold no mesh with those pins: nothing to report
    assert planner.plan("llama3-8b", "gb200-nvl72", top=1, pp=9, dp=8).fewer_gpus is None
    # the fit and the validator search without it
    rack = load_cluster("gb200-nvl72")
    assert search(LLAMA8, rack, default_job(LLAMA8), top=1).fewer_gpus is None
    assert 0.0 < MIN_SAVING < 0.05


def test_cli_says_so_in_text_and_json(cli) -> None:
    text = cli("--model", "llama3-8b", "--cluster", "gb200-nvl72", "--top", "1")
    assert text.code == 0, text.err
    assert "fewer GPUs: on 64 of these 72 GPUs the best mesh, tp1 pp1 dp64" in text.out.replace("\n", " ")
    out = cli("--model", "llama3-8b", "--cluster", "gb200-nvl72", "--top", "1", "--json")
    data = json.loads(out.out)
    assert data["fewer_gpus"]["gpus"] == 64 and data["fewer_gpus"]["saving"] > MIN_SAVING
    main = json.loads(cli("--model", "llama70b", "--cluster", "dgx-h100x16", "--top", "1", "--json").out)
    assert main["fewer_gpus"] is None


def test_where_no_mesh_runs_on_the_rack_the_error_names_the_count_that_does() -> None:
    """A stack that splits layers evenly only (Megatron-LM 2021, constraint 'stack_even_layer_split'):
    Llama-3 70B's 80 layers and a 512-sequence batch leave a 72-GPU rack no mesh (a dp dividing 512
    leaves 9, 18, 36 or 72 GPUs to tp x pp, and no pp of them divides 80), while 64 of its GPUs run
    one; the one-line error says so."""
    from planner.errors import PlannerError

    with pytest.raises(
        PlannerError, match=r"; on 64 of the 72 GPUs \(--gpus 64\): tp\d+ pp\d+ dp\d+ .* tokens/s per GPU$"
    ):
        planner.plan("llama3-70b", "gb300-nvl72", top=1, stack="megatron-lm-2021")
    llama = load_model("llama3-70b")
    with pytest.raises(PlannerError) as err:  # without the fewer-GPU search (a library search), no clause
        search(llama, load_cluster("gb300-nvl72"), default_job(llama, stack="megatron-lm-2021"))
    assert "--gpus" not in str(err.value)
