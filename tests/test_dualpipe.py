"""DualPipe and DualPipeV (DeepSeek-V3; deepseek-ai/DualPipe): bubble, activations in flight,
parameter copies, the layer split, feasibility and the exports."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import load_cluster, load_model, load_stack
from planner.cost.memory import rank_params
from planner.cost.pipeline import bubble_slots, dual_rank_layers, dual_rank_split, microbatches_in_flight
from planner.errors import PlannerError
from planner.export.megatron import megatron_args
from planner.export.torchtitan import torchtitan_config
from planner.export.torchtitan03 import torchtitan_args
from planner.mesh import MeshArrays
from planner.pricing import estimate_mesh
from planner.schemas import JobSpec, ParallelConfig
from tests.conftest import assert_one_line_error


def _meshes(pp: int, *schedules: str) -> MeshArrays:
    return MeshArrays.from_configs([ParallelConfig(pp=pp, dp=2, schedule=s) for s in schedules])


def test_bubble_is_what_the_reference_schedules_leave_idle() -> None:
    # p = 8: 1F1B idles p-1 = 7 slots; ZB-H1 and DualPipeV p-1 stage-forwards = 7/3 slots (a
    # slot is F + B + W = 3 stage-forwards); DualPipe p-2 = 6 stage-forwards = 2 slots
    slots = bubble_slots(_meshes(8, "1f1b", "zb-h1", "dualpipe", "dualpipev"))
    assert slots.tolist() == pytest.approx([7.0, 7.0 / 3.0, 2.0, 7.0 / 3.0])
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100x2")
    # DualPipe's two copies run in no shipped stack (torch runs DualPipeV): a stack file stating no
    # schedule list prices any
    anything = load_stack("torchtitan").model_copy(update={"pipeline_schedules": None})
    job = JobSpec(global_batch_size=64, seq_len=4096, stack=anything)
    est = estimate_mesh(model, cluster, job, ParallelConfig(pp=8, dp=2, schedule="dualpipe", zero_stage=2))
    m = est.num_microbatches  # 64 / (2 x 1) = 32
    assert m == 32 and est.bubble_fraction == pytest.approx(2.0 / (32 + 2.0))


def test_activations_in_flight_and_parameter_copies() -> None:
    mesh = _meshes(8, "1f1b", "dualpipe", "dualpipev")
    m = np.array([32, 32, 32])
    assert microbatches_in_flight(m, mesh, first=True).tolist() == [8.0, 9.0, 8.5]
    assert microbatches_in_flight(m, mesh, first=False).tolist() == [1.0, 9.0, 8.5]
    model = load_model("llama3-8b")
    layers = np.array([4, 4, 4])
    params = rank_params(model, mesh, layers, np.zeros(3), 0, np.ones(3, bool), np.zeros(3, bool))
    assert params.dense[1] == pytest.approx(2.0 * params.dense[0])  # DualPipe: stages r and p-1-r
    assert params.dense[2] == pytest.approx(params.dense[0])  # DualPipeV: one copy
    assert params.largest_layer[1] == params.largest_layer[0]


def test_layers_per_rank_follow_the_v_and_the_two_directions() -> None:
    # DeepSeek-V3's 61 layers on 16 ranks: 32 half-stages (29 of 2 layers, 3 of 1) in a V, rank 0
    # holding the first and the last (embedding and LM head)
    v = dual_rank_layers(61, 16, "dualpipev")
    assert sum(v) == 61 and v[0] == 2 and max(v) == 4
    assert dual_rank_split(61, 16, "dualpipev") == (4, 2)
    # DualPipe: 16 stages (13 of 4, 3 of 3); rank r runs stages r and 15-r on half the micro-batches each
    d = dual_rank_layers(61, 16, "dualpipe")
    assert d[0] == d[-1] == 3 and max(d) == 4
    assert dual_rank_layers(61, 16, "1f1b") is None


def test_dualpipe_rules_come_from_the_reference_implementation(cli) -> None:
    base = ("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100x2", "--stack", "torchtitan")
    r = cli(*base, "--pp", "4", "--dp", "4", "--schedule", "dualpipe", "--global-batch-size", "8")
    assert_one_line_error(r, "dualpipe needs at least 2*pp = 8 micro-batches, an even number,", "runs 2")
    r = cli(
        "estimate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--pp", "1", "--dp", "8", "--schedule", "dualpipev"
    )
    assert_one_line_error(r, "dualpipev needs pp >= 2")
    r = cli(
        "estimate",
        "--model",
        "llama3-8b",
        "--cluster",
        "dgx-h100x4",
        "--stack",
        "torchtitan",
        "--pp",
        "32",
        "--dp",
        "1",
        "--schedule",
        "dualpipev",
        "--global-batch-size",
        "64",
    )
    assert_one_line_error(r, "dualpipev runs 64 stages of at least one layer each (32 layers)")
    ok = cli(*base, "--pp", "4", "--dp", "4", "--schedule", "dualpipev", "--json")
    assert ok.code == 0, ok.err
    assert ok.json()["config"]["parallel"]["pipeline_layout"] is None  # no Megatron layout for DualPipe(V)


def test_exports_run_dualpipev_on_torchtitan_only() -> None:
    model = load_model("llama3-8b")
    job = JobSpec(global_batch_size=512, seq_len=8192, stack="torchtitan")
    config = ParallelConfig(pp=4, dp=4, schedule="dualpipev", zero_stage=3)
    sections = torchtitan_config(model, job, config)
    assert sections["parallelism"]["pipeline_parallel_schedule"] == "DualPipeV"
    assert sections["parallelism"]["pipeline_parallel_layers_per_stage"] == 4  # 32 layers over 2p = 8 stages
    with pytest.raises(PlannerError, match=r"torchtitan-0\.2 cannot express --schedule dualpipe: torch\.distributed"):
        torchtitan_config(model, job, config.model_copy(update={"schedule": "dualpipe"}))
    argv = torchtitan_args(model, job, config)  # torchtitan 0.3: the same schedule and split as overrides
    at = argv.index("--parallelism.pipeline_parallel_schedule")
    assert (
        argv[at + 1] == "DualPipeV" and argv[argv.index("--parallelism.pipeline_parallel_layers_per_stage") + 1] == "4"
    )
    with pytest.raises(PlannerError, match=r"torchtitan cannot express --schedule dualpipe: torch\.distributed"):
        torchtitan_args(model, job, config.model_copy(update={"schedule": "dualpipe"}))
    with pytest.raises(PlannerError, match="megatron cannot express --schedule dualpipev"):
        megatron_args(model, job.model_copy(update={"stack": "megatron-core"}), config)


def test_dualpipev_sends_twice_per_micro_batch() -> None:
    from planner.cost.traffic import pp_sends_per_step

    mesh = _meshes(4, "1f1b", "dualpipev")
    m = np.array([16, 16])
    assert pp_sends_per_step(mesh, m).tolist() == [2.0 * (16 + 3), 2.0 * (2 * 16 + 3)]  # two half-stages a rank


@pytest.mark.parametrize(
    ("schedule", "p", "m", "idle", "makespan"),
    [
        # critical paths of the reference step() orders (deepseek-ai/DualPipe dualpipe.py and
        # dualpipev.py at 030ce43) with F = B = W = one unit per stage, as a public replay of that
        # code counts them (it matches the repository's dualpipe.png: 8 rows of 66 units, 6 idle):
        # DualPipe 8 ranks x 20 micro-batches, 6 idle of 66; DualPipeV (units of half a rank's
        # layers) 4 x 10, 6 of 66, and 8 x 20, 14 of 134
        ("dualpipe", 8, 20, 6, 66),
        ("dualpipev", 4, 10, 6, 66),
        ("dualpipev", 8, 20, 14, 134),
    ],
)
def test_bubble_matches_the_reference_schedules_counts(schedule: str, p: int, m: int, idle: int, makespan: int) -> None:
    from planner.cost.pipeline import bubble_fraction

    assert float(bubble_fraction(np.array([m]), _meshes(p, schedule))[0]) == pytest.approx(idle / makespan)


def test_stacks_run_only_their_own_schedules(cli) -> None:
    # Stack.pipeline_schedules: Megatron-Core runs 1F1B and interleaved only, torchtitan torch's
    # schedules (GPipe, DualPipeV among them), no shipped stack ZB-H1 or two-copy DualPipe
    base = ("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100x2", "--pp", "2", "--dp", "8")
    r = cli(*base, "--schedule", "gpipe")
    assert_one_line_error(r, "stack megatron-core runs no gpipe pipeline schedule", "--stack torchtitan")
    r = cli(*base, "--schedule", "zb-h1", "--stack", "torchtitan")
    assert_one_line_error(r, "stack torchtitan runs no zb-h1", "no shipped stack runs it")
    assert cli(*base, "--schedule", "gpipe", "--stack", "torchtitan").code == 0
    # with one stage there is no pipeline to schedule
    one = ("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100x2", "--pp", "1", "--dp", "16")
    assert_one_line_error(cli(*one, "--schedule", "gpipe", "--stack", "torchtitan"), "gpipe needs pp >= 2")
    r = cli("--model", "llama3-8b", "--cluster", "dgx-h100x2", "--schedule", "zb-h1")
    assert_one_line_error(r, "every candidate mesh breaks a rule", "stack_schedule")
