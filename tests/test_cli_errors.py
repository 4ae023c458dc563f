"""Every bad input exits 2 with one line naming the file/field and what is allowed; no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error

LLAMA_YAML = """\
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


def test_unknown_model_suggests(cli) -> None:
    assert_one_line_error(
        cli("--model", "llama3-7b", "--cluster", "dgx-h100"), "unknown model 'llama3-7b'", "did you mean"
    )


def test_unknown_cluster_suggests(cli) -> None:
    r = cli("--model", "llama70b", "--cluster", "dgx-h1000x16")
    assert_one_line_error(r, "unknown cluster 'dgx-h1000x16'", "did you mean")


def test_missing_path(cli, tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    assert_one_line_error(cli("show", "model", missing), "does not exist", "nope.yaml")
    assert_one_line_error(cli("show", "cluster", missing), "does not exist")


def test_malformed_yaml(cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nhidden_size: [1, 2\n")
    assert_one_line_error(cli("show", "model", str(bad)), str(bad), "malformed YAML", "line")


def test_top_level_not_a_mapping(cli, tmp_path: Path) -> None:
    bad = tmp_path / "list.yaml"
    bad.write_text("- a\n- b\n")
    assert_one_line_error(cli("show", "model", str(bad)), "expected a mapping")


def test_unknown_key(cli, tmp_path: Path) -> None:
    bad = tmp_path / "typo.yaml"
    bad.write_text(LLAMA_YAML + "num_hiden_layers: 4\n")
    assert_one_line_error(cli("show", "model", str(bad)), str(bad), "num_hiden_layers", "unknown key")


def test_negative_and_zero_sizes_in_yaml(cli, tmp_path: Path) -> None:
    bad = tmp_path / "neg.yaml"
    bad.write_text(LLAMA_YAML.replace("hidden_size: 256", "hidden_size: -256"))
    assert_one_line_error(cli("show", "model", str(bad)), "hidden_size", "greater than 0")


@pytest.mark.parametrize("flag", ["--tp", "--nodes", "--micro-batch-size", "--seq-len"])
def test_zero_sizes_on_the_command_line(cli, flag: str) -> None:
    r = cli("estimate", "--model", "llama70b", "--cluster", "dgx-h100x2", flag, "0")
    assert_one_line_error(r, flag)


def test_heads_not_divisible_by_kv_heads(cli, tmp_path: Path) -> None:
    bad = tmp_path / "gqa.yaml"
    bad.write_text(LLAMA_YAML.replace("num_key_value_heads: 2", "num_key_value_heads: 3"))
    assert_one_line_error(cli("show", "model", str(bad)), "num_attention_heads 8", "num_key_value_heads 3")


def test_mesh_product_not_gpu_count(cli) -> None:
    r = cli("estimate", "--model", "llama70b", "--cluster", "dgx-h100x2", "--tp", "8", "--pp", "4", "--dp", "2")
    assert_one_line_error(r, "tp*pp*dp*cp", "64", "16 GPUs")


def test_heads_not_divisible_by_tp(cli) -> None:
    r = cli("estimate", "--model", "gpt-1.7b", "--cluster", "dgx-h100x2", "--tp", "16", "--dp", "1")
    assert_one_line_error(r, "num_attention_heads 24", "tp 16")


def test_batch_not_divisible(cli) -> None:
    r = cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100", "-B", "12", "--micro-batch-size", "1")
    assert_one_line_error(r, "global batch 12", "dp*micro_batch_size")


def test_bad_choice_and_unknown_option(cli) -> None:
    assert_one_line_error(
        cli("estimate", "--model", "llama70b", "--cluster", "dgx-h100", "--recompute", "most"), "--recompute"
    )
    assert_one_line_error(cli("--model", "llama70b", "--cluster", "dgx-h100", "--tpp", "8"), "--tpp")


def test_interleaved_without_virtual_stages(cli) -> None:
    r = cli(
        "estimate",
        "--model",
        "llama70b",
        "--cluster",
        "dgx-h100x2",
        "--tp",
        "8",
        "--pp",
        "2",
        "--schedule",
        "interleaved-1f1b",
    )
    assert_one_line_error(r, "mesh", "virtual_stages")


def test_bad_cluster_yaml_field(cli, tmp_path: Path) -> None:
    bad = tmp_path / "cluster.yaml"
    bad.write_text("profile: dgx-h100\nnum_nodes: 0\n")
    assert_one_line_error(cli("show", "cluster", str(bad)), "num_nodes", str(bad))
    bad.write_text("profile: dgx-h100\nnodes: 2\n")
    assert_one_line_error(cli("show", "cluster", str(bad)), "nodes", "unknown key")


def test_dense_model_with_ep(cli) -> None:
    r = cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--ep", "2")
    assert_one_line_error(r, "ep 2", "dense")


def test_missing_required_option(cli) -> None:
    assert_one_line_error(cli("estimate", "--cluster", "dgx-h100"), "--model is required")


def test_pin_that_does_not_divide_the_gpus(cli) -> None:
    assert_one_line_error(cli("--model", "llama70b", "--cluster", "dgx-h100x16", "--tp", "3"), "--tp 3", "128 GPUs")


def test_pins_whose_product_exceeds_the_gpus(cli) -> None:
    r = cli("--model", "llama70b", "--cluster", "dgx-h100x16", "--tp", "8", "--pp", "8", "--cp", "4")
    assert_one_line_error(r, "tp*pp*cp = 256", "128 GPUs")


def test_nothing_fits_names_the_shortfall(cli) -> None:
    r = cli("--model", "llama3-405b", "--cluster", "dgx-a100-80g")
    assert_one_line_error(r, "no mesh fits in memory", "GiB per GPU", "80.0 GiB available")


def test_bad_order(cli) -> None:
    r = cli("--model", "llama70b", "--cluster", "dgx-h100x16", "--order", "tp-dp")
    assert_one_line_error(r, "--order", "tp-cp-dp-pp")


def test_unknown_stack_suggests(cli) -> None:
    r = cli("--model", "llama70b", "--cluster", "dgx-h100x16", "--stack", "torchtitn")
    assert_one_line_error(r, "unknown stack 'torchtitn'", "did you mean torchtitan")


def test_calibrate_from_runs_refusals(cli, tmp_path: Path) -> None:
    assert_one_line_error(cli("calibrate"), "--from", "--from-runs")
    bad = tmp_path / "runs.yaml"
    bad.write_text("runs: 3\n")
    assert_one_line_error(cli("calibrate", "--from-runs", str(bad)), "field 'runs'", "list")
    sample = str(Path(__file__).parent / "data" / "runs_sample.yaml")
    assert_one_line_error(cli("calibrate", "--from-runs", sample, "--group", "nope"), "--group 'nope'")
    assert_one_line_error(cli("calibrate", "--from-runs", sample, "--from", sample), "not both")


@pytest.mark.parametrize(
    "args",
    [
        ("--model", "llama70b", "--cluster", "dgx-h100x1000000000"),
        ("--model", "llama70b", "--cluster", "dgx-h100", "--nodes", "1000000000"),
        (
            "capacity",
            "--model",
            "llama3-8b",
            "--cluster",
            "dgx-h100",
            "--training-tokens",
            "1e9",
            "--days",
            "1",
            "--max-nodes",
            "100000000",
        ),
    ],
)
def test_a_cluster_beyond_any_built_is_refused_at_once(cli, args: tuple[str, ...]) -> None:
    # before, the search walked every integer up to the GPU count for its divisors (a hang)
    assert_one_line_error(cli(*args), "is more than the 1,048,576 GPUs planned at most")


def test_divisors_by_trial_division_up_to_the_square_root() -> None:
    from planner.search import divisors

    for n in (1, 2, 12, 36, 97, 1024, 6720, 2**20):
        assert divisors(n) == [k for k in range(1, n + 1) if n % k == 0]
    assert divisors(2**40) == [2**k for k in range(41)]  # fast: 2^20 trial divisions
