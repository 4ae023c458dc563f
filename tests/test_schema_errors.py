"""The library's own error type for schemas built in code (``ModelSpec(...)``, ``ParallelConfig(...)``):
one line naming the class and field, the message the CLI prints, and pydantic's path for files
and nested models left as it was (``schemas.base.Frozen.__init__``)."""

from __future__ import annotations

import json
import math

import pytest

import planner
from planner.catalog import load_cluster, load_model
from planner.errors import PlannerError, SchemaError, validate_as
from planner.schemas.hardware import ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig


def test_a_mesh_built_in_code_with_a_bad_degree_raises_the_planners_error() -> None:
    with pytest.raises(PlannerError) as caught:
        ParallelConfig(tp=0)
    assert str(caught.value) == "ParallelConfig: field 'tp': Input should be greater than 0"
    assert isinstance(caught.value, SchemaError)
    assert caught.value.validation.errors()[0]["loc"] == ("tp",)
    assert "\n" not in str(caught.value)


def test_unknown_keys_non_finite_numbers_and_flags_read_as_numbers_are_refused_by_name() -> None:
    with pytest.raises(PlannerError, match=r"^ParallelConfig: field 'tensor_parallel': unknown key"):
        ParallelConfig(tensor_parallel=2)
    with pytest.raises(PlannerError, match=r"^JobSpec: field 'global_batch_size': Input should be a finite number"):
        JobSpec(global_batch_size=math.inf, seq_len=4096)
    with pytest.raises(PlannerError, match=r"^ParallelConfig: field 'dp': expected a number, got true$"):
        ParallelConfig(dp=True)
    # a misspelt required key is named, not the key it leaves missing (a review, 2026-12-07)
    with pytest.raises(PlannerError, match=r"^JobSpec: field 'seqlen': unknown key \(did you mean 'seq_len'\?\)"):
        JobSpec(seqlen=4096, global_batch_size=512)


def test_a_model_built_from_a_catalog_models_fields_reports_the_first_problem_and_counts_the_rest() -> None:
    fields = load_model("llama8b").model_dump()
    fields.update(num_hidden_layers=-1, hidden_size=0)
    with pytest.raises(PlannerError) as caught:
        ModelSpec(**fields)
    first = "ModelSpec: field 'num_hidden_layers': Input should be greater than 0"
    assert str(caught.value) == f"{first} (and 1 more problem)"
    assert ModelSpec(**load_model("llama8b").model_dump()) == load_model("llama8b")


def test_files_and_nested_models_keep_pydantics_path_and_locations() -> None:
    # model_validate (what the catalog's loaders call through validate_as) does not go through
    # Frozen.__init__, so a nested field's location survives in the message
    fields = load_model("llama8b").model_dump()
    fields["num_hidden_layers"] = 0
    # a library caller's model_validate raises the project's one line, as the constructor does
    with pytest.raises(PlannerError, match=r"^ModelSpec: field 'num_hidden_layers': Input should be greater than 0$"):
        ModelSpec.model_validate(fields)
    with pytest.raises(PlannerError, match=r"^ModelSpec: field 'num_hidden_layers'"):
        ModelSpec.model_validate_json(json.dumps(fields))
    with pytest.raises(PlannerError, match=r"^models/x.yaml: field 'num_hidden_layers': Input should be greater than"):
        validate_as(ModelSpec, fields, "models/x.yaml")
    assert ModelSpec.__pydantic_custom_init__ is False
    cluster = load_cluster("dgx-h100x1").model_dump()
    cluster["profile"]["gpus_per_node"] = 0
    with pytest.raises(PlannerError, match=r"^x.yaml: field 'profile.gpus_per_node': Input should be greater than 0$"):
        validate_as(ClusterSpec, cluster, "x.yaml")
    with pytest.raises(PlannerError, match=r"^ClusterSpec: field 'profile.gpus_per_node': Input should be greater"):
        ClusterSpec(**cluster)


def test_a_runs_row_names_its_section_once() -> None:
    # a row's reason says which section failed; the class is not repeated ('parallel: ParallelConfig: ...')
    from planner.errors import UnpriceableError
    from planner.runs import pinned_config

    with pytest.raises(UnpriceableError, match=r"^parallel: field 'tp': Input should be greater than 0$"):
        pinned_config({"tp": 0})
    with pytest.raises(UnpriceableError, match=r"^parallel: ep x expert_tp = 64 x 1 must divide tp\*cp\*dp = 32"):
        pinned_config({"tp": 1, "dp": 32, "ep": 64})


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: planner.plan("llama3-8b", "dgx-h100", price=10**400), "price"),
        (lambda: planner.plan("llama3-8b", "dgx-h100", tp=10**5000), "tp"),
        (lambda: planner.estimate("llama3-8b", "dgx-h100", micro_batch_size=10**5000), "micro_batch_size"),
        (lambda: planner.plan_capacity("llama3-8b", "dgx-h100", 1e12, 10**400), "days"),
        (lambda: planner.plan_capacity("llama3-8b", "dgx-h100", 1e12, 30, max_nodes=10**5000), "max_nodes"),
        (lambda: planner.serve("llama3-8b", "dgx-h100", concurrency=10**5000), "concurrency"),
        (lambda: planner.plan("llama3-8b", "dgx-h100", bf16_last_layers=10**5000), "bf16_last_layers"),
        (lambda: planner.load_cluster("dgx-h100").with_price(10**400), "--price"),
        (lambda: planner.load_cluster("dgx-h100").with_price("x"), "--price"),
    ],
)
def test_integers_no_float_or_text_can_hold_are_planner_errors(call, named: str) -> None:
    """float() overflows past about 1e308 and Python prints no integer of more than 4,300 digits, so
    such an argument raised OverflowError, ValueError or TypeError from deep inside; it is now a
    PlannerError naming the argument."""
    with pytest.raises(PlannerError, match=named) as caught:
        call()
    assert "\n" not in str(caught.value) and "Exceeds the limit" not in str(caught.value)


def test_a_whole_float_batch_or_length_is_the_integer_it_holds() -> None:
    """JobSpec's int fields take 512.0 as 512 (pydantic's lax int), so the batch's two forms derive
    each other from a whole float too: global_batch_tokens=4194304.0 had left the batch in sequences
    unset and failed an assertion (a review, 2026-12-07), and seq_len=8192.0 had been refused where
    global_batch_size=512.0 passed."""
    whole = planner.estimate("llama3-8b", "dgx-h100x2", global_batch_tokens=4194304)
    for kw in ({"global_batch_tokens": 4194304.0}, {"global_batch_size": 512.0}, {"seq_len": 8192.0}):
        est = planner.estimate("llama3-8b", "dgx-h100x2", **kw)
        assert (est.config.job.global_batch_size, est.config.job.global_batch_tokens) == (512, 4194304)
        assert est.step_time_s == whole.step_time_s
    with pytest.raises(PlannerError, match="global_batch_tokens"):
        planner.estimate("llama3-8b", "dgx-h100x2", global_batch_tokens=4194304.5)
    with pytest.raises(PlannerError, match="seq_len"):
        planner.estimate("llama3-8b", "dgx-h100x2", seq_len=8192.5)


def test_the_library_refuses_an_fp8_scaling_without_fp8_as_the_cli_does() -> None:
    """`plan --fp8-scaling block` without --dtype fp8 is an error; planner.estimate(fp8_scaling='block')
    on a bf16 job had been accepted and ignored (a review, 2026-12-07)."""
    with pytest.raises(PlannerError, match="fp8_scaling 'block': scales fp8 matmuls only; set dtype 'fp8'"):
        planner.estimate("llama3-8b", "dgx-h100x2", fp8_scaling="block")
    fp8 = planner.estimate("llama3-8b", "dgx-h100x2", fp8_scaling="block", dtype="fp8")
    assert fp8.config.job.fp8_scaling == "block"


def test_a_schema_field_past_a_64_bit_integer_names_the_field() -> None:
    shape = {"hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 512,
             "vocab_size": 1000, "max_position_embeddings": 512}  # fmt: skip
    huge = "field 'num_hidden_layers': an integer of about 5,001 digits is out of range"
    with pytest.raises(SchemaError, match=huge):
        ModelSpec(name="x", source="t", num_hidden_layers=10**5000, **shape)


def test_yaml_exponents_that_pyyaml_reads_as_text_stay_numbers() -> None:
    # PyYAML reads 1e-6 (no dot, no exponent sign) as the text '1e-6': a model file's norm_eps and a
    # profile's figures are written so, and must stay numbers
    import yaml

    assert yaml.safe_load("x: 1e-6")["x"] == "1e-6"
    fields = load_model("llama8b").model_dump()
    fields["norm_eps"] = "1e-6"
    assert ModelSpec.model_validate(fields).norm_eps == 1e-6
    with pytest.raises(PlannerError, match=r"field 'norm_eps'"):
        ModelSpec.model_validate({**fields, "norm_eps": "tiny"})


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        # a batch in tokens that is no whole number had been replaced by global_batch_size x seq_len (a review)
        ({"global_batch_size": 64, "global_batch_tokens": float("nan")}, "field 'global_batch_tokens'"),
        ({"global_batch_size": 64, "global_batch_tokens": "lots"}, "field 'global_batch_tokens'"),
        ({"global_batch_size": 64, "global_batch_tokens": 262144.5}, "field 'global_batch_tokens'"),
        # a misspelt batch key had read 'give global_batch_size (sequences) or global_batch_tokens'
        ({"global_batch_sise": 64}, "field 'global_batch_sise': unknown key"),
    ],
)
def test_a_bad_batch_in_tokens_or_a_misspelt_batch_key_is_named(fields: dict, said: str) -> None:
    with pytest.raises(PlannerError) as err:
        JobSpec(seq_len=4096, **fields)
    assert said in str(err.value)


def test_an_inline_stack_is_named_by_its_field_not_by_pydantics_union_branches() -> None:
    # 'stack: str | Stack' had named 'stack.function-after[_unasked_stage_runs(), ...]]]]].nam' (a review)
    with pytest.raises(PlannerError) as err:
        planner.plan("llama3-8b", "dgx-h100x1", stack={"nam": "mystack"})
    assert "field 'stack.nam': unknown key (did you mean 'stack.name'?)" in str(err.value)
    assert "function-after" not in str(err.value)
    with pytest.raises(PlannerError) as err:
        planner.plan("llama3-8b", "dgx-h100x1", stack=5)
    assert "field 'stack': Input should be a valid string" in str(err.value)


def test_assigning_to_a_frozen_field_raises_the_projects_error() -> None:
    # pydantic's multi-line ValidationError ('Instance is frozen') had reached the caller (a review)
    spec = load_model("llama3-8b")
    with pytest.raises(PlannerError, match=r"^ModelSpec.num_hidden_layers cannot be assigned: the object is frozen"):
        spec.num_hidden_layers = 3  # type: ignore[misc]
    assert spec.num_hidden_layers == 32 and spec.model_copy(update={"num_hidden_layers": 3}).num_hidden_layers == 3
