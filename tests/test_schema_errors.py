"""The library's own error type for schemas built in code (``ModelSpec(...)``, ``ParallelConfig(...)``):
one line naming the class and field, the message the CLI prints, and pydantic's path for files
and nested models left as it was (``schemas.base.Frozen.__init__``)."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

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
    with pytest.raises(ValidationError):
        ModelSpec.model_validate(fields)
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
