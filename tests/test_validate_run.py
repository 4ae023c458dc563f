"""The validator's replays as library calls (planner/validate/run.py), without the command line:
built from model, cluster, job and pins objects, run on local gloo ranks, returning the report."""

from __future__ import annotations

import re

import pytest

from planner.catalog import load_cluster, load_model
from planner.errors import PlannerError
from planner.search import default_job
from planner.validate.run import build_validation, run_sweep, run_validation
from planner.validate.settings import GLOO_DEFAULTS, ReplaySettings, ValidationSettings

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)


def test_settings_take_the_backends_defaults_and_refuse_what_cannot_run() -> None:
    gloo = ValidationSettings(local_ranks=2)
    assert [gloo.setting(n) for n in GLOO_DEFAULTS] == list(GLOO_DEFAULTS.values())
    assert ValidationSettings(backend="nccl", repeats=3).setting("repeats") == 3
    assert ValidationSettings(backend="nccl").setting("max_message_bytes") is None
    with pytest.raises(PlannerError, match="timeout"):
        ReplaySettings(timeout=0.5)
    with pytest.raises(PlannerError, match="warmup"):
        ReplaySettings(warmup=-1)


def test_a_pinned_mesh_is_built_into_one_block_priced_on_the_replay_profile(monkeypatch) -> None:
    model, cluster = load_model("gpt2"), load_cluster("localhost-cpux2")
    job = default_job(model, seq_len=256, global_batch_size=8)
    replay = build_validation(model, cluster, job, {"tp": 2, "dp": 2}, ValidationSettings(local_ranks=4), top=3)
    assert (replay.machine.world, replay.machine.lead, replay.machine.profile_name) == (4, True, "localhost-cpu")
    (block,) = replay.job.blocks
    assert block.label.startswith("#1 tp2 pp1 dp2") and replay.total == len(block.terms) > 0
    assert replay.caps == (GLOO_DEFAULTS["max_message_bytes"], GLOO_DEFAULTS["max_gemm_flops"])
    assert replay.job.repeats == GLOO_DEFAULTS["repeats"] and replay.candidates[0].rank == 1
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(PlannerError, match="give --local-ranks N"):  # nor under torchrun
        build_validation(model, cluster, job, {"tp": 2}, ValidationSettings())


def test_run_validation_and_run_sweep_return_their_reports() -> None:
    model, cluster = load_model("gpt2"), load_cluster("localhost-cpux1")
    job = default_job(model, seq_len=128, global_batch_size=4)
    settings = ValidationSettings(local_ranks=2, repeats=1, warmup=0, max_gemm_flops=1e7)
    outcome = run_validation(model, cluster, job, {"tp": 2, "dp": 1}, settings)
    report = outcome.report
    assert report is not None and report.status == "complete" and not outcome.interrupted
    assert outcome.measured == outcome.total == len(report.candidates[0].terms)
    assert report.model == model.name and report.context.world_size == 2
    sweep = run_sweep(["all_reduce"], [16384], 16384, ReplaySettings(local_ranks=2, repeats=2, warmup=0))
    assert sweep.report is not None and sweep.report.status == "complete"
    assert {(p.series, p.result.spec.group_size) for p in sweep.report.points} == {("world", 2), ("size", 2)}


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"RANK": "0", "WORLD_SIZE": "abc"}, "WORLD_SIZE 'abc': expected a whole number >= 1 (torchrun sets it)"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "x"}, "LOCAL_RANK 'x': expected a whole number >= 0"),
        ({"RANK": "5", "WORLD_SIZE": "2"}, "RANK 5: expected a rank below WORLD_SIZE 2"),
    ],
)
def test_torchrun_variables_that_are_no_ranks_are_named(monkeypatch, env: dict, said: str) -> None:
    """int() of WORLD_SIZE=abc was a ValueError traceback; RANK 5 of 2 was taken."""
    from planner.validate.runtime import torchrun_world

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(PlannerError, match=re.escape(said)):
        torchrun_world()


def test_calibration_counts_each_distinct_term_once_and_refuses_terms_the_world_cannot_hold() -> None:
    # two candidates replaying the same GEMMs had counted each shape twice, each twin in another
    # cross-validation fold; a hand-edited group of 1,000 ranks in a world of 2 had been fitted (a review)
    import copy

    from planner.validate.calibrate import samples_from_json

    model, cluster = load_model("gpt2"), load_cluster("localhost-cpux1")
    job = default_job(model, seq_len=128, global_batch_size=4)
    settings = ValidationSettings(local_ranks=2, repeats=1, warmup=0, max_gemm_flops=1e7)
    report = run_validation(model, cluster, job, {"tp": 2, "dp": 1}, settings).report
    assert report is not None
    data = report.model_dump(mode="json")
    one = len(samples_from_json(data, "r").results)
    twice = copy.deepcopy(data)
    twice["candidates"].append({**copy.deepcopy(data["candidates"][0]), "rank": 2})
    assert len(samples_from_json(twice, "r").results) == one
    wide = copy.deepcopy(data)
    wide["candidates"][0]["terms"][0]["spec"]["group_size"] = 1000
    with pytest.raises(PlannerError, match="field 'group_size': 1000 ranks, more than the 2 the report ran"):
        samples_from_json(wide, "r")


def test_a_failed_replay_does_not_replace_a_complete_report(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # a failed re-run to the same --out had replaced a complete sweep with an empty failed one (a review)
    import json

    from planner.cli.validate import _write
    from planner.validate.run import Outcome

    sweep = run_sweep(["all_reduce"], [4096], 4096, ReplaySettings(local_ranks=2, repeats=1, warmup=0)).report
    assert sweep is not None and sweep.status == "complete"
    out = tmp_path / "sweep.json"
    _write(Outcome(sweep, 2, 2, False), out)
    failed = sweep.model_copy(update={"status": "failed", "error": "rank 0 failed", "points": []})
    with pytest.raises(PlannerError, match="keeps the complete report it held"):
        _write(Outcome(failed, 0, 2, False), out)
    assert json.loads(out.read_text())["status"] == "complete"
    assert json.loads((tmp_path / "sweep.partial.json").read_text())["status"] == "failed"
