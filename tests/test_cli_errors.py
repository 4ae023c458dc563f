"""Every bad input exits 2 with one line naming the file/field and what is allowed; no traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from planner.errors import PlannerError
from tests.conftest import SAMPLE_RUNS, assert_one_line_error

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
    # /dev/null exists and is no file: it was reported as missing
    said = "file '/dev/null' is not a regular file (a device or pipe), not a YAML"
    assert_one_line_error(cli("--model", "/dev/null", "--cluster", "dgx-h100"), f"model {said} or JSON file")
    assert_one_line_error(cli("--model", "llama8b", "--cluster", "/dev/null"), f"cluster {said} file")


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
    # without --dp, the degrees given must leave a whole dp (tp 3 on 16 GPUs had read "3*1*5*1 = 15")
    r = cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100x2", "--tp", "3")
    assert_one_line_error(r, "tp*pp*cp = 3*1*1 = 3 does not divide the 16 GPUs")


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


def test_true_false_is_never_read_as_a_number(cli, tmp_path: Path) -> None:
    """Pydantic's lax mode read ``true`` as 1 and 1 as true: a one-layer model, a tied head."""
    bad = tmp_path / "flags.yaml"
    bad.write_text(LLAMA_YAML.replace("num_hidden_layers: 4", "num_hidden_layers: true"))
    assert "num_hidden_layers: true" in bad.read_text()
    r = cli("show", "model", str(bad))
    assert_one_line_error(r, str(bad), "num_hidden_layers", "expected a number, got true")
    bad.write_text(LLAMA_YAML + "tie_word_embeddings: 1\n")
    assert_one_line_error(cli("show", "model", str(bad)), "tie_word_embeddings", "expected true or false, got 1")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("profile: dgx-h100\nnum_nodes: yes\n")
    assert_one_line_error(cli("show", "cluster", str(cluster)), "num_nodes", "must be a positive integer, got true")


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
    sample = str(SAMPLE_RUNS)
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


def test_hostile_names_and_files_are_one_line_errors(cli, tmp_path: Path) -> None:
    # a 5,000-character name and a 300-character file name raised OSError (name too long) from
    # Path.is_file; a binary or UTF-16 YAML raised UnicodeDecodeError
    assert_one_line_error(cli("-m", "a" * 5000, "-c", "dgx-h100x16"), "unknown model", "(5000 characters)")
    assert_one_line_error(cli("-m", "b" * 300 + ".yaml", "-c", "dgx-h100x16"), "model file", "cannot be opened")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x01binary")
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_text("name: x\nhidden_size: 10\n", encoding="utf-16")
    for path in (binary, utf16):
        assert_one_line_error(cli("-m", str(path), "-c", "dgx-h100x16"), str(path), "not UTF-8 text", "0xff")


def test_sizes_beyond_any_model_or_job_are_refused(cli, tmp_path: Path) -> None:
    # hidden_size 4e12 overflowed numpy's int64 in the cost terms; a 1e23 micro-batch overflowed
    # the enumeration's arrays; an MTP depth of 1e11 reached the memory schema as a negative size
    model = tmp_path / "huge.yaml"
    text = (Path(__file__).parents[1] / "models" / "llama3-8b.yaml").read_text()
    model.write_text(
        "\n".join("hidden_size: 4096000000000" if ln.startswith("hidden_size:") else ln for ln in text.splitlines())
        + "\n"
    )
    assert_one_line_error(cli("-m", str(model), "-c", "dgx-h100x16"), "hidden_size 4096000000000", "16,777,216")
    assert_one_line_error(cli("-m", "llama70b", "-c", "dgx-h100x16", "-s", "100000000"), "--seq-len", "16777216")
    assert_one_line_error(
        cli("-m", "llama70b", "-c", "dgx-h100x16", "-b", "99999999999999999999999"),
        "--micro-batch-size 99999999999999999999999: expected a whole number from 1 to 1,048,576",
    )
    assert_one_line_error(
        cli("-m", "llama70b", "-c", "dgx-h100x16", "--mtp-layers", "99999999999"), "--mtp-layers", "64"
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--max-batch-growth", "inf"), "'--max-batch-growth': inf is not a finite number"),
        (("--price", "inf", "--json"), "'--price': inf is not a finite number"),
        # one range, as --help states it (0 had been refused by one check, 1e-300 by the cluster's with another)
        (("--price", "0"), "'--price': 0 is not a number >= 1e-06 and <= 1e+06"),
        (("--price", "1e-300"), "'--price': 1e-300 is not a number >= 1e-06 and <= 1e+06"),
        (("--price", "nan"), "'--price'"),
        (("capacity", "--training-tokens", "1e12", "--days", "nan"), "'--days': nan is not a finite number"),
        (("capacity", "--training-tokens", "inf", "--days", "30"), "--training-tokens must be a finite number > 0"),
        (("capacity", "--training-tokens", "1e400", "--days", "30"), "--training-tokens must be a finite number > 0"),
        # finite but past any corpus: the days and dollars ran to 20 digits and were cut in the table
        (("--training-tokens", "1e30"), "--training-tokens '1e30': at most 1e+16 (10,000T)"),
    ],
)
def test_non_finite_numbers_are_refused(cli, args: tuple[str, ...], fragment: str) -> None:
    # they were accepted, and --json then printed Infinity or NaN, which is not JSON
    head, rest = (args[:1], args[1:]) if args[0] == "capacity" else ((), args)
    assert_one_line_error(cli(*head, "-m", "llama70b", "-c", "dgx-h100", *rest), fragment)


def test_a_profile_with_an_infinite_rate_is_refused(tmp_path: Path) -> None:
    from planner.catalog import load_profile

    text = (Path(__file__).parents[1] / "hardware_profiles" / "dgx-h100.yaml").read_text()
    assert "{bf16: 989.4," in text
    bad = tmp_path / "inf.yaml"
    bad.write_text(text.replace("{bf16: 989.4,", "{bf16: .inf,", 1))
    with pytest.raises(PlannerError, match="finite"):
        load_profile(str(bad))


def test_outputs_under_a_file_fail_before_any_work(cli, tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("a file, not a folder\n")
    where = f"'{blocker}' is a file, not a folder"
    r = cli("-m", "llama3-8b", "-c", "dgx-h100x2", "--plot", str(blocker / "x.png"))
    assert_one_line_error(r, "--plot", where)


def test_expert_tensor_parallelism_needs_experts(cli) -> None:
    assert_one_line_error(cli("-m", "llama3-8b", "-c", "dgx-h100x1", "--expert-tp", "2"), "expert_tp 2 > 1", "dense")


def test_a_full_output_device_is_one_line() -> None:
    import subprocess
    import sys

    args = [sys.executable, "-m", "planner", "--model", "llama3-8b", "--cluster", "dgx-h100"]
    with open("/dev/full", "w") as full:
        proc = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == "error: cannot write the output: No space left on device\n"


def test_attention_sinks_on_a_stack_that_does_not_run_them(cli) -> None:
    # gpt-oss's sink logits: torchtitan trains it on FlexAttention, whose rate the planner has no
    # measurement of; Transformer Engine runs sinks under context parallelism only with a2a CP
    titan = cli("estimate", "-m", "gpt-oss-120b", "-c", "dgx-b200", "--stack", "torchtitan", "--ep", "8")
    assert_one_line_error(
        titan, "gpt-oss-120b has attention sinks", "prices no sink attention for stack torchtitan", "megatron-core"
    )
    search = cli("-m", "gpt-oss-20b", "-c", "dgx-b200", "--stack", "torchtitan")
    assert_one_line_error(search, "attention sinks")
    cp = cli("estimate", "-m", "gpt-oss-120b", "-c", "dgx-b200", "--cp", "2", "--ep", "4")
    assert_one_line_error(cp, "cp 2 with gpt-oss-120b's attention sinks", "cp_comm_type a2a")


def test_out_of_range_inputs_from_review_are_one_line_errors(cli, tmp_path: Path) -> None:
    import planner

    deep_json, deep_yaml = tmp_path / "deep.json", tmp_path / "deep.yaml"
    deep_json.write_text("[" * 100_000 + "]" * 100_000)
    deep_yaml.write_text("a: " + "[" * 100_000 + "]" * 100_000)  # libyaml's C parser crashed on it
    for path in (deep_json, deep_yaml):
        assert_one_line_error(cli("estimate", "-m", str(path), "-c", "dgx-h100"), str(path), "nested too deeply")
    mesh = ("estimate", "-m", "llama3-8b", "-c", "dgx-h100x2", "--tp", "1", "--pp", "2", "--dp", "8")
    for layout in ("Et*99999999999999999999|t*40L", "(t*4|)*99999999", "((t*40|)*300|)*300"):
        assert_one_line_error(cli(*mesh, "--pipeline-layout", layout), "unrolls to more than 100,000")
    pricey = cli("-m", "llama70b", "-c", "dgx-h100x16", "--price", "1e300")
    assert_one_line_error(pricey, "--price", "<= 1e+06")
    # a profile number far outside any GPU's overflows a cost: named, not a traceback
    profile = tmp_path / "pricey.yaml"
    text = (Path(planner.__file__).parents[1] / "hardware_profiles" / "dgx-h100.yaml").read_text()
    profile.write_text(text.replace("hbm_capacity_gib: 79.65", "hbm_capacity_gib: 1.0e300"))
    assert "hbm_capacity_gib: 1.0e300" in profile.read_text()
    assert_one_line_error(cli("-m", "llama3-8b", "-c", str(profile)), "field 'gpu.hbm_capacity_gib'", "1000000")
    moe = ("estimate", "-m", "mixtral-8x7b", "-c", "dgx-h100x4", "--tp", "2", "--ep", "4")
    assert_one_line_error(cli(*moe, "--moe-routing", "imbalance:1e300"), "moe_load_imbalance", "1024")
    with pytest.raises(PlannerError, match="moe_capacity_factor"):
        planner.estimate("mixtral-8x7b", "dgx-h100x4", tp=2, ep=4, moe_capacity_factor=1e300)
    assert_one_line_error(cli("-m", "llama3-8b", "-c", "dgx-h100", "--plot", str(tmp_path / "x.txt")), "--plot")
    sweep = cli("validate", "sweep", "--local-ranks", "2", "--plot", str(tmp_path / "x.txt"))
    assert_one_line_error(sweep, "--plot", ".png, .svg or .pdf")  # before the sweep runs
    assert not (tmp_path / "sweep.json").exists()
    assert_one_line_error(cli("validate", "--local-ranks", "100000", "-m", "gpt2", "-c", "localhost-cpu"), "128")
    assert_one_line_error(cli("calibrate", "--from", str(deep_json), "--write"), "--write goes with --from-runs")
    assert_one_line_error(cli("validate", "sweep", "--local-ranks", "2", "--sizes", ""), "--sizes", "at least one")
    assert_one_line_error(cli("validate", "sweep", "--local-ranks", "2", "--ops", " , "), "--ops", "at least one")
    served = cli("serve", "-m", "llama70b", "-c", "dgx-h100x1", "--export", "vllm", "--json")
    assert_one_line_error(served, "--export", "--json")


def test_inputs_the_review_found_accepted_are_refused(cli, tmp_path: Path) -> None:
    import planner

    pins = ("estimate", "-m", "llama70b", "-c", "dgx-h100x16", "--tp", "8", "--pp", "2", "--dp", "8")
    r = cli(*pins, "--recompute", "full", "--recompute-layers", "1000")
    assert_one_line_error(r, "recompute_layers 1000", "the largest of the 2 model chunks holds 41 layers")
    for key, value, said in (
        ("hidden_act", "nope", "hidden_act 'nope' is not one of"),
        ("name", '""', "name"),
        ("num_experts_per_tok", "2", "num_experts_per_tok without experts"),
    ):
        bad = tmp_path / f"{key}.yaml"
        text = LLAMA_YAML.replace("name: tiny\n", "") + ("" if key == "name" else "name: tiny\n")
        bad.write_text(text + f"{key}: {value}\n")
        assert_one_line_error(cli("show", "model", str(bad)), said)
    profile = tmp_path / "d3.yaml"
    text = (Path(planner.__file__).parents[1] / "hardware_profiles" / "dgx-h100.yaml").read_text()
    profile.write_text(text.replace("  domain_size_gpus: 8\n", "  domain_size_gpus: 3\n"))
    assert_one_line_error(cli("show", "cluster", str(profile)), "domain_size_gpus 3 is not a multiple of")
    assert_one_line_error(cli("-m", "llama3-8b", "-c", "dgx-h100", "--stack", ""), "stack: empty name")
    capacity = ("capacity", "-m", "llama70b", "--training-tokens", "15T", "--days", "30")
    assert_one_line_error(cli(*capacity, "-c", "gb200-nvl72x4"), "chooses the node count itself", "(gb200-nvl72)")
    assert_one_line_error(cli("-m", str(tmp_path), "-c", "dgx-h100"), "is a directory")
    assert_one_line_error(cli("-m", "llama3-8b", "-c", str(tmp_path)), "is a directory")
    for nan in ("--max-batch-growth", "--memory-headroom"):
        assert_one_line_error(cli("-m", "llama3-8b", "-c", "dgx-h100", nan, "nan"), nan, "nan is not a finite number")
    # the leanest mesh already shards everything and recomputes all: only more GPUs or less sequence help
    assert_one_line_error(
        cli("-m", "llama3-405b", "-c", "dgx-h100x4"), "the leanest, tp8", "z3 full", "try more GPUs or a shorter"
    )


def test_an_output_that_cannot_be_written_fails_before_the_work(cli, tmp_path: Path) -> None:
    for out, said in (("", "give a file name"), (str(tmp_path), "is a folder")):
        r = cli("export", "-f", "megatron", "-m", "llama3-8b", "-c", "dgx-h100", "--out", out)
        assert_one_line_error(r, "--out", said)  # one line: the search never ran
    r = cli("export", "-f", "megatron", "-m", "llama3-8b", "-c", "dgx-h100", "--out", str(tmp_path / "new" / "a.txt"))
    assert r.code == 0 and (tmp_path / "new" / "a.txt").exists()  # a missing folder is made, as for --plot


def test_estimate_and_export_price_the_stack_s_zero_stage_when_none_is_pinned(cli) -> None:
    import planner

    pins = ("-m", "llama70b", "-c", "dgx-h100x16", "--tp", "8", "--pp", "2", "--dp", "8")
    est = cli("estimate", *pins, "--json").json()
    assert est["config"]["parallel"]["zero_stage"] == 1  # megatron-core's distributed optimizer
    assert planner.estimate("llama70b", "dgx-h100x16", tp=8, pp=2, dp=8).config.parallel.zero_stage == 1
    titan = planner.estimate("llama70b", "dgx-h100x16", tp=8, pp=1, dp=16, stack="torchtitan")
    assert titan.config.parallel.zero_stage == 3  # FSDP
    r = cli("export", "-f", "megatron", *pins)
    assert r.code == 0 and "z1" in r.err.splitlines()[0]


def test_batch_growth_is_bounded(cli) -> None:
    """1e308 overflowed int() in JobSpec.max_batch_size (OverflowError traceback)."""
    r = cli("--model", "llama70b", "--cluster", "dgx-h100x16", "--max-batch-growth", "1e308")
    assert_one_line_error(r, "max-batch-growth", "<= 10")


def test_fp8_on_a_gpu_without_fp8_tensor_cores_is_one_line(cli) -> None:
    result = cli("--model", "llama3-8b", "--cluster", "dgx-a100-80g", "--dtype", "fp8")
    assert_one_line_error(result, "dtype fp8 needs FP8 tensor cores", "no fp8 peak")


def test_fp8_scaling_is_an_option_checked_against_the_format_and_the_gpu(cli) -> None:
    """--fp8-scaling selects the recipe the plan prices (row-scaled GEMMs are priced at the fitted
    fp8_rowwise_gemm_fraction, so row is slower than tensor on H100); it means nothing without
    --dtype fp8, and block scaling needs Hopper or Blackwell tensor cores (Ada has per-tensor fp8 only)."""
    pins = ("--model", "llama3-8b", "--cluster", "dgx-h100x1", "--tp", "1", "--pp", "1", "--dp", "8", "--json")
    rates = {}
    for scaling in ("tensor", "row"):  # torchtitan's torchao runs both (Megatron-Core has no row-wise recipe)
        r = cli(*pins, "--dtype", "fp8", "--fp8-scaling", scaling, "--stack", "torchtitan", "-z", "3")
        assert r.code == 0, r.err
        rates[scaling] = json.loads(r.out)["candidates"][0]["tokens_per_s_per_gpu"]
    assert rates["row"] < rates["tensor"]
    assert_one_line_error(cli(*pins, "--fp8-scaling", "row"), "--fp8-scaling row", "add --dtype fp8")
    r = cli("--model", "llama3-8b", "--cluster", "l40s", "--dtype", "fp8", "--fp8-scaling", "block")
    assert_one_line_error(r, "fp8 scaling 'block' needs block-scaled fp8", "use --fp8-scaling tensor")
    r = cli(
        "--model", "llama3-8b", "--cluster", "l40s", "--dtype", "fp8", "--fp8-scaling", "block", "--stack", "torchtitan"
    )
    assert_one_line_error(r, "use --fp8-scaling tensor or row")
    assert cli("--model", "llama3-8b", "--cluster", "l40s", "--dtype", "fp8", "--top", "1").code == 0


def test_objects_names_and_defaults_the_library_is_given(cli, tmp_path: Path) -> None:
    """QA findings: a spec copied with pydantic's model_copy(update=...) skips the schema's checks,
    so the library checks it again; an empty model name is not the current folder's config.json; a
    config.json without a card length trains at most its context; a token budget takes whole
    steps; a profile without a bf16 peak prices 16-bit work at its fp16 rate, not fp32."""
    import planner
    from planner.catalog import load_cluster
    from planner.search import default_job

    model = planner.load_model("llama3-8b")
    with pytest.raises(PlannerError, match="model 'llama3-8b': field 'num_hidden_layers'"):
        planner.plan(model.model_copy(update={"num_hidden_layers": 0}), "dgx-h100")
    with pytest.raises(PlannerError, match="not divisible by num_key_value_heads"):
        planner.estimate(model.model_copy(update={"num_attention_heads": 7}), "dgx-h100")
    job = default_job(model)
    with pytest.raises(PlannerError, match="job: field 'memory_headroom'"):
        planner.plan(model, "dgx-h100", job=job.model_copy(update={"memory_headroom": 2.0}))
    assert_one_line_error(cli("--model", "", "--cluster", "dgx-h100"), "model: empty name")
    # the library takes --price as price (it had been refused as an unknown mesh knob)
    at_3 = planner.estimate("llama3-8b", "dgx-h100", price=3.0, tp=1, training_tokens=1e12)
    at_list = planner.estimate("llama3-8b", "dgx-h100", tp=1, training_tokens=1e12)
    assert at_3.cost_to_train_usd == pytest.approx(at_list.cost_to_train_usd * 3.0 / 10.0, rel=1e-12)  # type: ignore[operator]
    ranked = planner.plan("llama3-8b", "dgx-h100", price=3.0, training_tokens=1e12, top=1).candidates[0]
    assert ranked.cost_to_train_usd == pytest.approx(ranked.time_to_train_s * 8 * 3.0 / 3600, rel=1e-12)  # type: ignore[operator]
    with pytest.raises(PlannerError, match="price: expected USD per GPU-hour, a number > 0, got '3'"):
        planner.plan_capacity("llama3-8b", "dgx-h100", 1e12, 30, price="3")  # type: ignore[arg-type]
    # the library names its argument, not the command line's option
    with pytest.raises(PlannerError, match=r"^price must be a finite number from 1e-06 to 1,000,000"):
        planner.plan("llama3-8b", "dgx-h100", price=float("nan"))
    with pytest.raises(PlannerError, match=r"^price must be a finite number"):
        planner.serve("llama3-8b", "dgx-h100", price=-1)
    # a denormal price had ranked every candidate at 1e-321 dollars
    with pytest.raises(PlannerError, match="got 1e-320"):
        planner.plan("llama3-8b", "dgx-h100", price=1e-320)
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024}
    (tmp_path / "config.json").write_text(json.dumps(gpt2 | {"vocab_size": 50257, "activation_function": "gelu_new"}))
    r = cli("estimate", "--model", str(tmp_path / "config.json"), "--cluster", "dgx-h100", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["config"]["job"]["seq_len"] == 1024
    steps = planner.estimate("llama3-8b", "dgx-h100", tp=1, pp=1, training_tokens=1.5 * job.tokens_per_step)
    assert steps.time_to_train_s == pytest.approx(2 * steps.step_time_s)
    gpu = load_cluster("dgx-h100").gpu
    fp16_only = gpu.model_copy(update={"peak_tflops": {"fp16": 989.4, "fp32": 66.9}})
    assert fp16_only.peak_flops_per_s("bf16") == pytest.approx(989.4e12)


def test_options_without_a_model_are_the_missing_model_error(cli) -> None:
    """Bare `plan` prints the help; `plan --tp 8` or `plan --json` is a plan without its model (it
    printed the help and exited 0, as if nothing had been asked)."""
    bare = cli()
    assert bare.code == 0 and "Usage: plan" in bare.out
    for args in (("--tp", "8"), ("--json",), ("--top", "5")):
        assert_one_line_error(cli(*args), "--model is required")


def test_a_token_batch_of_too_many_sequences_is_named_as_given(cli) -> None:
    """The --global-batch-tokens bound (2**48) allows more tokens than one batch of sequences holds
    at a given length: the error named global_batch_size, a field the user never gave."""
    r = cli("-m", "llama3-8b", "-c", "dgx-h100", "--global-batch-tokens", "281474976710656")
    assert_one_line_error(r, "global_batch_tokens 281474976710656 is 34,359,738,368 sequences of 8192 tokens")


def test_a_line_break_typed_into_a_value_is_shown_escaped(cli) -> None:
    """An error is one line even where the value it echoes holds a line break."""
    assert_one_line_error(cli("show", "model", "gpt2\n"), "unknown model 'gpt2\\n'")
    assert_one_line_error(cli("-m", "llama3-8b", "-c", "dgx-h100", "--training-tokens", "1\n2"), "'1\\n2'")


def test_a_profile_rate_too_small_for_any_machine_is_refused(cli, tmp_path: Path) -> None:
    """1e-300 TB/s priced a step of 1e301 s, with numpy's overflow warning on stderr."""
    text = (Path(__file__).parents[1] / "hardware_profiles" / "dgx-h100.yaml").read_text()
    profile = tmp_path / "slow.yaml"
    profile.write_text(text.replace("hbm_bandwidth_tb_per_s: 3.35", "hbm_bandwidth_tb_per_s: 1e-300"))
    r = cli("-m", "llama3-8b", "-c", str(profile))
    assert_one_line_error(r, "field 'gpu.hbm_bandwidth_tb_per_s': Input should be greater than or equal to 0.000001")


@pytest.mark.parametrize(
    ("folder", "file", "field", "new", "said"),
    [
        ("hardware_profiles", "dgx-h100.yaml", r"bf16: [0-9.]+", "bf16: 1.0e+300", "field 'gpu.peak_tflops.bf16'"),
        ("hardware_profiles", "dgx-h100.yaml", r"^  hbm_capacity_gib: [0-9.]+", "  hbm_capacity_gib: 1e300",
         "field 'gpu.hbm_capacity_gib': Input should be less than or equal to 1000000"),
        ("stacks", "megatron-core.yaml", r"^overlap_slowdown: .*$", "overlap_slowdown: 1.0e+300",
         "field 'overlap_slowdown': Input should be less than or equal to 1"),
        ("stacks", "megatron-core.yaml", r"^layer_overhead_us: .*$", "layer_overhead_us: 1.0e+300",
         "layer_overhead_us 1e+300: at most 1e+06"),
    ],
)  # fmt: skip
def test_a_number_too_large_for_any_machine_or_stack_is_refused(
    cli, tmp_path: Path, folder, file, field, new, said
) -> None:  # type: ignore[no-untyped-def]
    """1e300 in a profile or stack priced a 0.0% MFU or a 300-digit step with numpy's overflow warning."""
    import re

    text = (Path(__file__).parents[1] / folder / file).read_text()
    path = tmp_path / file
    path.write_text(re.sub(field, new, text, count=1, flags=re.M))
    assert new in path.read_text()
    where = ("-c", str(path)) if folder == "hardware_profiles" else ("-c", "dgx-h100", "--stack", str(path))
    assert_one_line_error(cli("-m", "llama3-8b", *where), said)


def test_an_estimate_that_comes_out_infinite_names_the_quantity() -> None:
    """The guard behind every profile bound (pricing.out_of_range): a quantity the schemas refuse as
    infinite is named with the inputs that can drive it there (a profile's 1e300 GiB of memory had
    reached it through kv_cache before the profile bound it)."""
    from pydantic import BaseModel, Field, ValidationError

    from planner.pricing import out_of_range

    class Kv(BaseModel):
        kv_cache: float = Field(allow_inf_nan=False)

    with pytest.raises(ValidationError) as err:
        Kv(kv_cache=float("inf"))
    assert out_of_range(err.value) == (
        "the estimate's kv_cache came out inf: an input is out of range (--price, or a hardware profile's memory, "
        "peak TFLOP/s or bandwidth)"
    )


def test_a_library_call_its_signature_refuses_is_a_planner_error() -> None:
    """Python's TypeError had reached the caller of load_cluster(racks=2), plan_capacity without its
    token budget and estimate with five positional arguments, where every other bad input is a
    PlannerError of one line."""
    import planner

    for call, said in (
        (
            lambda: planner.load_cluster("dgx-h100", racks=2),
            "load_cluster(): got an unexpected keyword argument 'racks'",
        ),
        (
            lambda: planner.plan_capacity("llama70b", "dgx-h100"),
            "plan_capacity(): missing a required argument: 'training_tokens'",
        ),
        (
            lambda: planner.estimate("llama70b", "dgx-h100x16", None, None, 5),
            "estimate(): too many positional arguments",
        ),
        (lambda: planner.load_model(), "load_model(): missing a required argument: 'name_or_path'"),
    ):
        with pytest.raises(PlannerError) as err:
            call()
        assert str(err.value).startswith(said) and "\n" not in str(err.value)
    assert planner.load_cluster("dgx-h100x2").num_gpus == 16  # a call it takes is unchanged


def test_a_batch_error_says_where_interleaving_sets_the_batch(cli) -> None:
    # 6 over dp 4 would run 8, but an interleaved pipeline of pp 4 runs at least 4 micro-batches: 16
    # (the bare '16' had read as an arithmetic error to a review, 2026-12-07)
    r = cli("estimate", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100x2", "--pp", "4", "-v", "2", "-B", "6")
    assert_one_line_error(
        r, "the nearest batch it runs is 16 (interleaved-1f1b runs at least pp micro-batches: 16) (+166.7%)"
    )
    r = cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100x1", "--dp", "8", "-B", "6")
    assert_one_line_error(r, "the nearest batch it runs is 8 (+33.3%)")


def test_the_header_says_which_gpus_of_the_nodes_a_job_holds() -> None:
    from planner.catalog import load_cluster

    # 256 GPUs of four NVL72 racks are the profile's job segments, 64 of each (not 'the last node partly used')
    racks = load_cluster("gb200-nvl72x4").model_copy(update={"num_gpus": 256})
    assert racks.describe().endswith("= 256 GPUs (64 of each node's 72: the profile's job segments)")
    part = load_cluster("gb200-nvl72x2", gpus=100)  # ranks 0-63 on the first rack's segment, 64-99 on the second
    assert part.describe().endswith("= 100 GPUs (64 of each node's 72: the profile's job segments; the last node's 36)")
    nodes = load_cluster("dgx-h100x2").model_copy(update={"num_gpus": 12})
    assert nodes.describe().endswith("= 12 GPUs (the last node's 4 of 8)")
    assert load_cluster("dgx-h100x2").describe().endswith("= 16 GPUs")


def test_a_job_segment_larger_than_its_domain_is_refused(cli, tmp_path: Path) -> None:
    from planner.catalog import catalog_dir

    text = (catalog_dir("hardware_profiles") / "gb200-nvl72.yaml").read_text()
    assert "job_segment_gpus: 64" in text
    bad = tmp_path / "gb200-bad.yaml"
    bad.write_text(text.replace("job_segment_gpus: 64", "job_segment_gpus: 80"))
    assert_one_line_error(
        cli("--model", "llama3-8b", "--cluster", str(bad)),
        "intra_node.job_segment_gpus 80 is more than the 72 GPUs of a fast domain",
    )


def test_the_library_names_a_near_job_field_or_mesh_knob() -> None:
    import planner

    with pytest.raises(PlannerError, match=r"unknown keyword\(s\) moe_load_imbalanc: neither a job field") as e:
        planner.plan("llama3-8b", "dgx-h100x1", moe_load_imbalanc=1.0)
    assert "did you mean moe_load_imbalance?" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(PlannerError, match="did you mean pp, tp"):
        planner.estimate("llama3-8b", "dgx-h100x1", tpp=2)


def test_a_group_without_its_command_names_its_commands(cli) -> None:
    assert_one_line_error(cli("list"), "Missing command: one of clusters, models, stacks.", "plan list --help")
    assert_one_line_error(cli("show"), "Missing command: one of cluster, model, stack.")


@pytest.mark.parametrize("size", [0, 3, 1e9])
def test_adam_state_is_one_of_its_formats_sizes(size: float) -> None:
    # 0 bytes of optimizer state had let meshes fit that cannot run, on any stack (a review, 2026-12-07)
    import planner

    said = re.escape(f"optimizer_state_bytes_per_param {size:g}: Adam with an fp32 master")
    with pytest.raises(PlannerError, match=said):
        planner.estimate("llama3-8b", "dgx-h100", optimizer_state_bytes_per_param=size)
    assert planner.estimate("llama3-8b", "dgx-h100", optimizer_state_bytes_per_param=8).fits is not None


def test_a_windowed_model_takes_no_ring_context_parallelism_on_transformer_engine(cli) -> None:
    # Transformer Engine asserts a sliding window under CP runs a2a or all_gather, not the ring the planner
    # prices: Mistral-7B at cp 4 had been priced and exported with --window-size (a review, 2026-12-07)
    args = ("--model", "mistral-7b", "--cluster", "dgx-h100x4", "-s", "65536", "-B", "64")
    assert_one_line_error(
        cli("estimate", *args, "--cp", "4"),
        "cp 4 with mistral-7b's sliding-window layers on megatron-core",
        "a2a or all_gather",
        "use cp 1",
    )
    r = cli(*args, "--json")
    assert r.code == 0 and all(c["config"]["parallel"]["cp"] == 1 for c in r.json()["candidates"])


def test_the_library_points_a_cli_only_keyword_to_its_own_spelling() -> None:
    import planner

    with pytest.raises(PlannerError, match=r"nodes is the cluster's: planner.load_cluster\(name, nodes=N\)") as e:
        planner.plan("llama3-8b", "dgx-h100x1", nodes=2)
    assert "did you mean" not in str(e.value)
    with pytest.raises(PlannerError, match="adam_moments is optimizer_state_bytes_per_param here: 12"):
        planner.estimate("llama3-8b", "dgx-h100x1", adam_moments="bf16")


def test_a_rule_no_mesh_passes_leads_with_its_own_words(cli) -> None:
    # a job no mesh can fix (fp8 on an A100) had read "every candidate mesh breaks 'format_tensor_cores': ..."
    r = cli("--model", "llama3-8b", "--cluster", "dgx-a100-80gx2", "--dtype", "fp8")
    assert_one_line_error(
        r, "error: dtype fp8 needs FP8 tensor cores", "(no candidate mesh passes 'format_tensor_cores')"
    )
