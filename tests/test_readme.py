"""The README's library example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs(capsys) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})
    out = capsys.readouterr().out
    assert "s/step" in out and "GiB per GPU" in out


def test_readme_commands_match_ci() -> None:
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    test_command = ci.strip().splitlines()[-1]
    assert test_command in text
    assert "plan --model llama70b --cluster dgx-h100x16" in text


def test_package_api_names_are_functions_after_submodule_imports() -> None:
    # A submodule named like an API function would replace it on first import.
    import planner
    import planner.capacity
    import planner.pricing
    import planner.search

    assert callable(planner.plan) and callable(planner.estimate) and callable(planner.plan_capacity)
    assert not hasattr(planner.estimate, "__path__") and type(planner.estimate).__name__ == "function"


def test_a_cluster_spec_changed_without_its_checks_is_checked_again() -> None:
    """model_copy(update=...) skips pydantic's checks: 64 GPUs on one 8-GPU node had been planned
    as dp 64, as a ModelSpec changed so is not."""
    import pytest

    import planner
    from planner.catalog import load_cluster

    node = load_cluster("dgx-h100")
    with pytest.raises(planner.PlannerError, match="cluster 'dgx-h100': num_gpus 64 exceeds 1 nodes x 8 GPUs"):
        planner.plan("llama8b", node.model_copy(update={"num_gpus": 64}))
    assert planner.plan("llama8b", node, top=1).candidates[0].config.parallel.num_gpus == 8


def test_library_job_overrides_are_revalidated() -> None:
    import pytest

    import planner
    from planner.schemas import JobSpec

    job = JobSpec(global_batch_size=512, seq_len=8192)
    est = planner.estimate("llama70b", "dgx-h100x16", job=job, seq_len=4096, tp=8, pp=2, dp=8)
    assert est.config.job.global_batch_size == 512 and est.config.job.global_batch_tokens == 512 * 4096
    est = planner.estimate("llama70b", "dgx-h100x16", job=job, global_batch_tokens=2**20, tp=8, pp=2, dp=8)
    assert est.config.job.global_batch_size == 128
    with pytest.raises(planner.PlannerError, match="seq_len"):
        planner.estimate("llama70b", "dgx-h100x16", job=job, seq_len=-5, tp=8, pp=2, dp=8)


@pytest.mark.parametrize(
    ("call", "kwargs", "message"),
    [
        # each raised ZeroDivisionError, AttributeError, raw pydantic text, or returned everything
        ("plan", {"tp": 0}, "mesh: field 'tp': Input should be greater than 0"),
        ("plan", {"recompute": "some"}, "mesh: field 'recompute': Input should be 'none', 'selective' or 'full'"),
        ("plan", {"zero_stage": 5}, "mesh: field 'zero_stage': Input should be less than or equal to 3"),
        ("plan", {"job": "notajob"}, "job: expected a JobSpec (or None for the model's default job), got 'notajob'"),
        ("plan", {"top": -1}, "top: expected a whole number >= 1, got -1"),
        ("plan", {"top": "3"}, "top: expected a whole number >= 1, got '3'"),
        ("plan", {"top": 2.5}, "top: expected a whole number >= 1, got 2.5"),
        ("plan", {"seq_len": 0}, "job: field 'seq_len': expected a whole number >= 1, got 0"),
        ("estimate", {"tp": True}, "mesh: field 'tp': expected int, got True"),
        ("estimate", {"tp": 8, "pp": 2, "dp": 3}, "impossible mesh"),
        ("plan_capacity", {"training_tokens": 1e12, "days": float("nan")}, "days must be a number of days from"),
        ("plan_capacity", {"training_tokens": 1e12, "days": 9, "max_nodes": 0}, "max_nodes: expected a whole number"),
        ("plan_capacity", {"training_tokens": 0, "days": 9}, "job: field 'training_tokens': Input should be greater"),
        ("plan_capacity", {"training_tokens": 1e12, "days": "9"}, "days: expected a finite number > 0, got '9'"),
    ],
)
def test_library_arguments_are_validated_as_the_cli_does(call: str, kwargs: dict, message: str) -> None:
    import planner

    cluster = "dgx-h100" if call == "plan_capacity" else "dgx-h100x16"  # capacity counts the nodes itself
    with pytest.raises(planner.PlannerError) as err:
        getattr(planner, call)("llama70b", cluster, **kwargs)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_library_estimate_resolves_dp_from_the_leftover_gpus() -> None:
    import planner

    # as `plan estimate` does: 128 GPUs / (tp 8 x pp 2) = dp 8, sequence parallel on with tp > 1, ZeRO the
    # stack's (megatron-core: the distributed optimizer, ZeRO-1)
    est = planner.estimate("llama70b", "dgx-h100x16", tp=8, pp=2)
    assert est.config.parallel.short() == "tp8 pp2 dp8 cp1 ep1 mbs1 v1 z1 none sp 1f1b"
    assert planner.plan("llama70b", "dgx-h100x16", tp="8", top=1).candidates[0].config.parallel.tp == 8


def test_numpy_scalars_are_taken_as_the_numbers_they_hold() -> None:
    """A notebook's np.int64 had been refused for top, seq_len and max_nodes (and taken for tp)."""
    import numpy as np

    import planner

    ranked = planner.plan("llama8b", "dgx-h100", top=np.int64(2), seq_len=np.int64(4096))
    assert len(ranked.candidates) == 2 and ranked.job.seq_len == 4096
    est = planner.estimate("llama8b", "dgx-h100", tp=np.int64(2), dp=np.int32(4), price=np.float32(5))
    assert est.config.parallel.tp == 2


def test_serve_takes_a_price_as_plan_does() -> None:
    """`plan serve --price` existed; planner.serve(price=...) was refused as an unknown key."""
    import pytest

    import planner

    at = {p: planner.serve("llama8b", "dgx-h100x1", price=p, input_len=1024, output_len=256, top=1) for p in (5, 10)}
    cost = {p: r.candidates[0].cost_per_million_output_tokens_usd for p, r in at.items()}
    assert cost[10] == pytest.approx(2 * cost[5])
    with pytest.raises(planner.PlannerError, match="price: expected USD per GPU-hour"):
        planner.serve("llama8b", "dgx-h100x1", price="5")


def test_a_spec_changed_to_a_wrong_type_is_one_error_without_serializer_warnings() -> None:
    """The check named the field, after pydantic's multi-line serializer warning on stderr."""
    import warnings

    import pytest

    import planner
    from planner.catalog import load_cluster, load_model
    from planner.schemas import JobSpec

    model = load_model("llama8b").model_copy(update={"hidden_size": float("nan")})
    job = JobSpec(global_batch_size=64, seq_len=4096).model_copy(update={"seq_len": "x"})
    cluster = load_cluster("dgx-h100").model_copy(update={"num_gpus": "many"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a serializer warning fails the test
        for args, kwargs, said in (
            ((model, "dgx-h100"), {}, "field 'hidden_size': Input should be a finite number"),
            (("llama8b", "dgx-h100"), {"job": job}, "field 'seq_len': Input should be a valid integer"),
            (("llama8b", cluster), {}, "field 'num_gpus'"),
        ):
            with pytest.raises(planner.PlannerError, match=said):
                planner.plan(*args, **kwargs)
