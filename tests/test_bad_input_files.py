"""Bad values in input files and arguments a review found read silently or misnamed: each is a
one-line error naming the file and the field (or, for a runs row, an unpriced reason naming it)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from planner.catalog import load_cluster, load_model, read_yaml
from planner.errors import PlannerError
from planner.hf_config import model_from_hf_config
from planner.runs import cases_from_runs, load_runs
from tests.conftest import assert_one_line_error, sample_rows

TINY_MODEL = """\
name: tiny
source: test
num_hidden_layers: 4
hidden_size: 256
num_attention_heads: 8
num_key_value_heads: 2
intermediate_size: 512
vocab_size: 1000
max_position_embeddings: 512
"""

SAMPLE_ROWS = sample_rows()
TITAN_TP = "torchtitan-2412-llama31-70b-h100x256-fsdp32-tp8"

FALCON = {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
          "vocab_size": 65024}  # fmt: skip


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- 1. a key stated twice ------------------------------------------------------------------------
def test_a_yaml_key_stated_twice_names_both_lines(cli, tmp_path: Path) -> None:
    path = _write(tmp_path, "twice.yaml", TINY_MODEL + "num_hidden_layers: 40\n")
    r = cli("show", "model", str(path))
    assert_one_line_error(r)
    assert r.err.strip() == f"error: {path}: key 'num_hidden_layers' appears twice (lines 3 and 10); give each key once"


def test_a_key_twice_on_one_line_names_the_columns(tmp_path: Path) -> None:
    path = _write(tmp_path, "flow.yaml", "gpu: {name: a, name: b}\n")
    with pytest.raises(PlannerError) as err:
        read_yaml(path)
    assert str(err.value) == f"{path}: key 'name' appears twice (line 1, columns 7 and 16); give each key once"


def test_keys_that_read_the_same_are_the_same_key(tmp_path: Path) -> None:
    # YAML 1.1 reads yes and true as one key, 1 and 0x1 as another
    for text, key in (("yes: 1\ntrue: 2\n", "true"), ("1: a\n0x1: b\n", "1")):
        with pytest.raises(PlannerError, match=f"key {key} appears twice \\(lines 1 and 2\\)"):
            read_yaml(_write(tmp_path, "same.yaml", text))


def test_numbers_in_exponent_form_read_as_yaml_1_2_floats(tmp_path: Path) -> None:
    # YAML 1.1 (PyYAML) reads 1e3 and 1.5e3 as text; YAML 1.2 and JSON read them as numbers
    text = "a: 1e3\nb: -1.5E-3\nc: .5e2\nd: 1.0e-6\ne: 1e\nf: '1e3'\ng: 1e3e3\nh: 12\n"
    assert read_yaml(_write(tmp_path, "exp.yaml", text)) == {
        "a": 1000.0, "b": -0.0015, "c": 50.0, "d": 1e-6, "e": "1e", "f": "1e3", "g": "1e3e3", "h": 12,
    }  # fmt: skip


def test_a_workload_length_in_exponent_form_is_a_number(cli, tmp_path: Path) -> None:
    path = _write(tmp_path, "w.yaml", "input_len: 1e3\noutput_len: 2.5e2\n")
    r = cli("serve", "--model", "llama3-8b", "--cluster", "dgx-h100x1", "--workload", str(path), "--top", "1")
    assert r.code == 0, r.err
    assert "ISL 1000 / OSL 250" in r.out
    r = cli(
        "serve",
        "--model",
        "llama3-8b",
        "--cluster",
        "dgx-h100x1",
        "--workload",
        str(_write(tmp_path, "x.yaml", "input_len: 1.0005e3\noutput_len: 250\n")),
    )
    assert_one_line_error(r)
    assert "input_len" in r.err


def test_a_cluster_file_with_a_key_twice(cli, tmp_path: Path) -> None:
    path = _write(tmp_path, "c.yaml", "profile: dgx-h100\nnum_nodes: 2\nnum_nodes: 4\n")
    assert_one_line_error(cli("show", "cluster", str(path)), f"{path}: key 'num_nodes' appears twice (lines 2 and 3)")


def test_a_json_key_stated_twice_is_named(cli, tmp_path: Path) -> None:
    folder = tmp_path / "dup-model"
    folder.mkdir()
    path = folder / "config.json"
    body = json.dumps({**FALCON, "max_position_embeddings": 2048})
    path.write_text(body[:-1] + ', "hidden_size": 8192}')
    r = cli("show", "model", str(path))
    assert_one_line_error(r)
    assert r.err.strip() == f"error: {path}: key 'hidden_size' appears twice; give each key once"


def test_a_runs_file_with_a_key_twice_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "runs.yaml", "runs:\n- name: a\n  group: g\n  name: b\n")
    with pytest.raises(PlannerError, match=r"key 'name' appears twice \(lines 2 and 4\)"):
        load_runs(path)


def test_merge_keys_still_merge_and_may_be_overridden(tmp_path: Path) -> None:
    text = "base: &b {a: 1, c: 3}\nx:\n  <<: *b\n  a: 2\nnested:\n  inner: &i {<<: {p: 1}, p: 2}\nz: {<<: *i, q: 1}\n"
    data = read_yaml(_write(tmp_path, "merge.yaml", text))
    assert data["x"] == {"a": 2, "c": 3} and data["nested"]["inner"] == {"p": 2}
    # a merge of a mapping that itself merged is PyYAML's to resolve: 6.0.3 gives z's p as 2, 6.0.4 as 1
    # (its first-merged-key-wins rule applied to the flattened anchor); the key check refuses neither
    assert data["z"]["q"] == 1 and data["z"]["p"] in (1, 2)


# ---- 2. cluster names and paths -------------------------------------------------------------------
def test_a_cluster_file_name_too_long_is_one_line(cli) -> None:
    name = "/tmp/" + "a" * 300 + ".yaml"
    with pytest.raises(PlannerError) as err:
        load_cluster(name)
    assert str(err.value).startswith(f"cluster file '{name[:60]}... (310 characters)' cannot be opened: ")
    assert_one_line_error(cli("show", "cluster", name), "cluster file", "(310 characters)", "cannot be opened")


def test_a_very_long_cluster_name_is_cut_in_the_message() -> None:
    with pytest.raises(PlannerError) as err:
        load_cluster("a" * 5000)
    assert str(err.value) == (
        f"unknown cluster '{'a' * 60}... (5000 characters)': names are short; use <profile> or <profile>x<nodes>, "
        "see `plan list clusters`"
    )
    with pytest.raises(PlannerError, match=r"\(5009 characters\)': names are short"):
        load_cluster("dgx-h100x" + "9" * 5000)  # int() of 5,000 digits would raise ValueError


def test_a_spec_of_the_other_kind_is_refused_by_its_type() -> None:
    with pytest.raises(PlannerError) as err:
        load_cluster(load_model("llama3-8b"))  # type: ignore[arg-type]
    assert str(err.value) == "cluster: expected a name, path or ClusterSpec, got ModelSpec"
    with pytest.raises(PlannerError) as err:
        load_model(load_cluster("dgx-h100"))  # type: ignore[arg-type]
    assert str(err.value) == "model: expected a name, path or ModelSpec, got ClusterSpec"


# ---- 3. cluster counts, name and profile ----------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "field", "shown"),
    [
        ('num_nodes: "4"', "num_nodes", "'4'"),
        ("num_nodes: 2.0", "num_nodes", "2.0"),
        ("num_nodes: true", "num_nodes", "true"),
        ('num_gpus: "16"', "num_gpus", "'16'"),
        ("num_gpus: 16.0", "num_gpus", "16.0"),
        ("num_gpus: false", "num_gpus", "false"),
        ("num_gpus: 0", "num_gpus", "0"),
    ],
)
def test_cluster_file_counts_must_be_integers(cli, tmp_path: Path, fields: str, field: str, shown: str) -> None:
    path = _write(tmp_path, "c.yaml", f"profile: dgx-h100\n{fields}\n")
    r = cli("show", "cluster", str(path))
    assert_one_line_error(r)
    assert r.err.strip() == f"error: {path}: field '{field}': must be a positive integer, got {shown}"


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ({"nodes": "2"}, "field 'num_nodes': must be a positive integer, got '2'"),
        ({"nodes": 2.0}, "field 'num_nodes': must be a positive integer, got 2.0"),
        ({"gpus": 16.0}, "field 'num_gpus': must be a positive integer, got 16.0"),
        ({"gpus": True}, "field 'num_gpus': must be a positive integer, got true"),
    ],
)
def test_cluster_count_arguments_must_be_integers(counts: dict[str, Any], message: str) -> None:
    with pytest.raises(PlannerError) as err:
        load_cluster("dgx-h100", **counts)
    assert str(err.value) == f"dgx-h100: {message}"


def test_integer_counts_still_derive_the_other() -> None:
    cluster = load_cluster("dgx-h100", gpus=16)
    assert (cluster.num_nodes, cluster.num_gpus) == (2, 16)


@pytest.mark.parametrize(("value", "shown"), [("null", "null"), ("[1]", "[1]"), ("5", "5"), ('""', "''")])
def test_a_cluster_name_must_be_a_non_empty_string(cli, tmp_path: Path, value: str, shown: str) -> None:
    path = _write(tmp_path, "c.yaml", f"profile: dgx-h100\nname: {value}\n")
    r = cli("show", "cluster", str(path))
    assert_one_line_error(r)
    assert r.err.strip() == f"error: {path}: field 'name': expected a non-empty string, got {shown}"


@pytest.mark.parametrize(("value", "shown"), [("null", "null"), ("5", "5"), ("[dgx-h100]", "['dgx-h100']")])
def test_a_cluster_profile_of_the_wrong_type_names_file_and_field(cli, tmp_path: Path, value: str, shown: str) -> None:
    path = _write(tmp_path, "c.yaml", f"profile: {value}\n")
    r = cli("show", "cluster", str(path))
    assert_one_line_error(r)
    assert r.err.strip() == (
        f"error: {path}: field 'profile': expected a hardware profile name, a path to a profile YAML or a profile "
        f"mapping, got {shown}"
    )


def test_an_unknown_cluster_profile_names_file_and_field(cli, tmp_path: Path) -> None:
    path = _write(tmp_path, "c.yaml", "profile: dgx-h10\n")
    assert_one_line_error(
        cli("show", "cluster", str(path)), f"{path}: field 'profile': unknown hardware profile 'dgx-h10'", "dgx-h100"
    )


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs a stream that never ends")
def test_a_stream_that_never_ends_is_refused_not_read_until_memory_runs_out(cli) -> None:
    r = cli("serve", "--model", "llama3-8b", "--cluster", "dgx-h100", "--workload", "/dev/zero")
    assert_one_line_error(r, "/dev/zero: larger than 64 MiB, the most a YAML or JSON input may hold")


def test_a_gpu_profile_without_a_16_bit_peak_is_refused(cli, tmp_path: Path) -> None:
    """A profile listing fp32 alone had priced bf16 at the fp32 peak (an H100 at 63% MFU)."""
    profile = read_yaml(Path(__file__).parent.parent / "hardware_profiles" / "dgx-h100.yaml")
    profile["gpu"]["peak_tflops"] = {"fp32": 67.0}
    path = _write(tmp_path, "p.yaml", json.dumps(profile))
    r = cli("--model", "llama3-8b", "--cluster", str(path))
    assert_one_line_error(r, f"{path}: field 'gpu': peak_tflops must list bf16 (or fp16)")
    profile["gpu"]["peak_tflops"] = {"fp16": 989.0, "fp32": 67.0}  # a V100-style profile: fp16 is the 16-bit rate
    path.write_text(json.dumps(profile))
    assert cli("show", "cluster", str(path)).code == 0


# ---- 4. Falcon flags and sizes --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"bias": "false"}, "key 'bias': expected true or false, got 'false'"),
        ({"multi_query": "false"}, "key 'multi_query': expected true or false, got 'false'"),
        ({"alibi": "no"}, "key 'alibi': expected true or false, got 'no'"),
        ({"new_decoder_architecture": 1}, "key 'new_decoder_architecture': expected true or false, got 1"),
        ({"ffn_hidden_size": 0}, "key 'ffn_hidden_size': expected a positive integer, got 0"),
        ({"ffn_hidden_size": False}, "key 'ffn_hidden_size': expected a positive integer, got false"),
        (
            {"new_decoder_architecture": True, "num_kv_heads": "8"},
            "key 'num_kv_heads': expected a positive integer, got '8'",
        ),
    ],
)
def test_falcon_flags_and_sizes_are_read_as_stated_or_refused(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(PlannerError) as err:
        model_from_hf_config({**FALCON, **extra}, "falcon", "f/config.json")
    assert str(err.value) == f"f/config.json: {message}"


def test_two_keys_stating_one_count_differently_are_refused(tmp_path: Path) -> None:
    # n_layer 12 beside num_hidden_layers 24 had been read as 24, silently
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}
    with pytest.raises(PlannerError, match=r"keys 'n_layer' \(12\) and 'num_hidden_layers' \(24\) both state"):
        model_from_hf_config({**gpt2, "n_layer": 12, "num_hidden_layers": 24}, "gpt2", "c.json")
    same = model_from_hf_config({**gpt2, "n_layer": 12, "num_hidden_layers": 12}, "gpt2", "c.json")
    assert same.num_hidden_layers == 12


def test_falcon_null_keeps_the_class_default() -> None:
    m = model_from_hf_config({**FALCON, "bias": None, "ffn_hidden_size": None, "multi_query": None}, "f", "f")
    assert (m.attention_bias, m.intermediate_size, m.num_kv_heads) == (False, 4 * 4544, 1)
    m = model_from_hf_config({**FALCON, "bias": True, "multi_query": False, "alibi": True}, "f", "f")
    assert m.attention_bias and m.num_kv_heads == 71 and m.position_embedding_type == "alibi"


# ---- 5. true/false where an HF config expects a count ---------------------------------------------
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"moe_layer_freq": True}, "key 'moe_layer_freq': expected an integer count, got true"),
        ({"attn_layer_period": False}, "key 'attn_layer_period': expected an integer count, got false"),
        ({"mlp_only_layers": True}, "key 'mlp_only_layers': expected a list of layer indices, got true"),
        ({"num_local_experts": False}, "field 'num_local_experts': expected a number, got false"),
    ],
)
def test_true_false_is_not_an_hf_count(extra: dict[str, Any], message: str) -> None:
    llama = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8, "num_hidden_layers": 4,
             "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512}  # fmt: skip
    with pytest.raises(PlannerError) as err:
        model_from_hf_config({**llama, **extra}, "m", "m/config.json")
    assert str(err.value) == f"m/config.json: {message}"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"quantization_config": "fp8"}, "key 'quantization_config': expected a mapping or null, got 'fp8'"),
        ({"rope_scaling": 5}, "key 'rope_scaling': expected a mapping or null, got 5"),
        ({"rope_parameters": [1]}, "key 'rope_parameters': expected a mapping or null, got [1]"),
        (
            {"quantization_config": {"quant_method": ["fp8"]}},
            "key 'quantization_config.quant_method': expected a name (e.g. 'fp8', 'mxfp4', 'modelopt'), got ['fp8']",
        ),
        (
            {"quantization_config": {"quant_method": "modelopt", "quant_algo": 8}},
            "key 'quantization_config.quant_algo': expected a name (e.g. 'fp8', 'mxfp4', 'modelopt'), got 8",
        ),
    ],
)
def test_an_hf_mapping_of_another_kind_is_refused(extra: dict[str, Any], message: str) -> None:
    """Read for their entries, these had been dropped when not a mapping: a string
    quantization_config priced 16-bit weights and a number rope_scaling exported no scaling."""
    llama = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8, "num_hidden_layers": 4,
             "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512}  # fmt: skip
    with pytest.raises(PlannerError) as err:
        model_from_hf_config({**llama, **extra}, "m", "m/config.json")
    assert str(err.value) == f"m/config.json: {message}"
    stated_null = model_from_hf_config({**llama, **dict.fromkeys(extra)}, "m", "m/config.json")
    unnamed = model_from_hf_config({**llama, "quantization_config": {"quant_method": None}}, "m", "m/config.json")
    assert unnamed.checkpoint_weights_dtype is None  # a null name is no name, as before
    assert stated_null.rope_scaling is None and stated_null.checkpoint_weights_dtype is None


# ---- 6. runs rows -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("section", "key", "value", "reason"),
    [
        ("model", "tied_embeddings", "false", "model.tied_embeddings is not true or false ('false')"),
        ("model", "tied_embeddings", "no", "model.tied_embeddings is not true or false ('no')"),
        ("model", "moe_layer_freq", True, "model.moe_layer_freq True: only 1"),
        ("parallel", "zero_stage", True, "parallel.zero_stage True: allowed a stage 0, 1, 2 or 3"),
        ("parallel", "zero_stage", "3", "parallel.zero_stage '3': allowed a stage 0, 1, 2 or 3"),
        ("parallel", "zero_stage", 7, "parallel.zero_stage 7: allowed a stage 0, 1, 2 or 3"),
        ("knobs", "compile", "false", "knobs.compile is not true or false ('false')"),
        ("hardware", "gpus_per_node", "eight", "hardware.gpus_per_node"),
        ("hardware", "gpus_per_node", 0, "hardware.gpus_per_node is not a positive integer (0)"),
        ("hardware", "gpus_per_node", 3, "hardware.gpus_per_node 3: the h100-96g-500w profile's nodes hold 8 GPUs"),
        ("knobs", "async_tp", 0, "knobs.async_tp is not true or false (0)"),
        ("knobs", "ep_comm_overlap", "no", "knobs.ep_comm_overlap is not true or false ('no')"),
    ],
)
def test_a_row_value_of_the_wrong_kind_is_unpriced_by_name(section: str, key: str, value: Any, reason: str) -> None:
    row = copy.deepcopy(SAMPLE_ROWS[TITAN_TP])
    row[section][key] = value
    cases, unpriced = cases_from_runs([row])
    assert cases == [] and len(unpriced) == 1
    assert unpriced[0]["name"] == TITAN_TP and unpriced[0]["reason"].startswith(reason), unpriced[0]["reason"]


def test_a_row_stage_stated_as_a_number_or_a_description_is_read() -> None:
    row = copy.deepcopy(SAMPLE_ROWS[TITAN_TP])
    row["parallel"]["zero_stage"] = 2
    row["model"]["tied_embeddings"] = False
    [case], unpriced = cases_from_runs([row])
    assert unpriced == [] and case.pins["zero_stage"] == 2 and not case.model.tie_word_embeddings
    row["parallel"]["zero_stage"] = "distributed optimizer (not stated)"
    assert cases_from_runs([row])[1] == []


def test_a_number_too_long_to_read_is_one_line(cli, tmp_path: Path) -> None:
    """An integer of more than 4,300 digits (Python's int-from-text limit) in a YAML or JSON file
    was a ValueError traceback from the parser."""
    digits = "9" * 5000
    yaml_path = _write(tmp_path, "big.yaml", TINY_MODEL.replace("vocab_size: 1000", f"vocab_size: {digits}"))
    json_path = _write(tmp_path, "config.json", '{"model_type": "llama", "vocab_size": ' + digits + "}")
    for path in (yaml_path, json_path):
        assert_one_line_error(cli("-m", str(path), "-c", "dgx-h100"), str(path), "a number too long to read", "4300")
        with pytest.raises(PlannerError, match="a number too long to read"):
            read_yaml(path)


@pytest.mark.parametrize(
    ("replace", "said"),
    [
        (("num_hidden_layers: 4", "num_hidden_layers: 16777216"), "num_hidden_layers 16777216 is more than 65,536"),
        (
            ("hidden_size: 256", "hidden_size: 16777216\nhead_dim: 128"),
            "make 3.38e+15 parameters, more than 1e+15, the largest model planned",
        ),
    ],
)
def test_a_model_too_large_to_plan_names_its_shape(cli, tmp_path: Path, replace: tuple[str, str], said: str) -> None:
    """Every dimension at its 16,777,216 bound made 3e22 parameters: the cost terms' int64
    arithmetic overflowed into a negative memory named by an internal schema (MemoryBreakdown), and
    16M layers made the planner refuse the pipeline layout it had written itself."""
    text = TINY_MODEL.replace(*replace).replace("intermediate_size: 512", "intermediate_size: 16777216")
    path = _write(tmp_path, "huge.yaml", text)
    assert_one_line_error(cli("-m", str(path), "-c", "dgx-h100x1024"), str(path), said)


def test_a_folder_without_config_json_says_what_it_lacks(cli, tmp_path: Path) -> None:
    """A folder is read as a Hugging Face checkpoint; one without config.json says so (it read as a
    directory that was no YAML file, though no folder is one)."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    assert_one_line_error(
        cli("show", "model", str(folder)),
        f"model file '{folder}' is a directory, not a YAML or JSON file or a Hugging Face checkpoint folder "
        "(it holds no config.json)",
    )
    assert_one_line_error(cli("show", "cluster", str(folder)), f"cluster file '{folder}' is a directory, not a YAML")


@pytest.mark.parametrize("factor", [float("inf"), float("nan"), -2.0, 0, "8", [8], True])
def test_a_rope_scaling_number_that_is_no_positive_finite_number_is_refused(factor: Any) -> None:
    """It reached the Megatron export as '--rope-scaling-factor inf'."""
    llama = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8, "num_hidden_layers": 4,
             "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512}  # fmt: skip
    scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 256}  # fmt: skip
    with pytest.raises(PlannerError, match=r"rope_scaling.factor must be a finite number > 0"):
        model_from_hf_config({**llama, "rope_scaling": scaling}, "m", "m/config.json")
    assert model_from_hf_config({**llama, "rope_scaling": {**scaling, "factor": 8.0}}, "m", "m").rope_scaling


@pytest.mark.parametrize("kind", [None, [1], 5, ""])
def test_a_rope_scaling_without_its_kind_as_text_is_refused(kind: Any) -> None:
    # {rope_type: [1]} had been echoed into the export's notes, {factor: 8} dropped without a word
    llama = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8, "num_hidden_layers": 4,
             "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512}  # fmt: skip
    scaling = {"factor": 8.0} if kind is None else {"rope_type": kind, "factor": 8.0}
    with pytest.raises(PlannerError, match=r"rope_scaling needs its kind as text under 'rope_type'"):
        model_from_hf_config({**llama, "rope_scaling": scaling}, "m", "m/config.json")
    assert model_from_hf_config({**llama, "rope_scaling": {"type": "linear", "factor": 2.0}}, "m", "m").rope_scaling


def test_an_mtp_depth_past_any_published_is_refused_in_a_model_file() -> None:
    """--mtp-layers stopped at 64, a config.json's num_nextn_predict_layers did not (5000 was priced)."""
    llama = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8, "num_hidden_layers": 4,
             "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512}  # fmt: skip
    with pytest.raises(
        PlannerError, match="field 'num_nextn_predict_layers': Input should be less than or equal to 64"
    ):
        model_from_hf_config({**llama, "num_nextn_predict_layers": 5000}, "m", "m/config.json")
    assert model_from_hf_config({**llama, "num_nextn_predict_layers": 64}, "m", "m").num_nextn_predict_layers == 64
