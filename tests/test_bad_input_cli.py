"""Bad input found by review, each one 'error:' line and exit 2 (or a PlannerError), never a
traceback, a silently ignored option, NaN in JSON or a file written half: serving runs files,
extreme profile numbers in `plan serve`, serve-calibrate with nothing to price, calibrate options
its mode ignores, sequences past a model's positions, TP overlap across NVLink domains, outputs
that cannot be written."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from planner.errors import PlannerError, UnpriceableError
from tests.conftest import SAMPLE_RUNS, assert_one_line_error

ROOT = Path(__file__).resolve().parents[1]


def _profile(tmp_path: Path, old: str, new: str) -> str:
    """dgx-h100's profile with one line changed, as a file."""
    text = (ROOT / "hardware_profiles" / "dgx-h100.yaml").read_text()
    assert old in text
    path = tmp_path / "edited.yaml"
    path.write_text(text.replace(old, new, 1))
    return str(path)


# ---- 1. serving runs files -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('runs: [1, "a"]\n', "runs[0]: expected a run mapping, got int"),
        ("runs: 3\n", "field 'runs': expected a list of run mappings"),
        ("runs:\n- name: x\n  model: llama\n", "runs[0] ('x'): field 'model': expected a mapping, got str"),
        (
            "runs:\n- name: x\n  model: {shape: [1]}\n",
            "runs[0] ('x'): field 'model.shape': expected a mapping, got list",
        ),
        ("runs:\n- name: x\n  workload: [1]\n", "runs[0] ('x'): field 'workload': expected a mapping, got list"),
    ],
)
def test_a_serving_runs_file_of_the_wrong_shape_fails_naming_row_and_field(
    cli, tmp_path: Path, text: str, said: str
) -> None:
    # each was an AttributeError or TypeError traceback (rc 1)
    runs = tmp_path / "runs.yaml"
    runs.write_text(text)
    assert_one_line_error(cli("serve-calibrate", "--runs", str(runs)), f"{runs}: {said}")


def test_the_serving_accuracy_benchmark_ends_a_bad_runs_file_in_one_line(tmp_path: Path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("serving_accuracy", ROOT / "benchmarks" / "serving_accuracy.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    runs = tmp_path / "runs.yaml"
    runs.write_text('runs: [1, "a"]\n')
    assert bench.main(["--runs", str(runs)]) == 2
    assert capsys.readouterr().err == f"error: {runs}: runs[0]: expected a run mapping, got int\n"


def test_the_benchmarks_end_a_file_with_nothing_to_price_in_one_line(tmp_path: Path) -> None:
    # both had printed an empty table (serving_accuracy.py: 'MAPE nan%') and exited 0
    runs = tmp_path / "runs.yaml"
    runs.write_text("runs: []\n")
    for script in ("accuracy.py", "serving_accuracy.py"):
        done = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / script), "--runs", str(runs)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (done.returncode, done.stderr) == (2, f"error: {runs}: no row can be priced\n"), script


SHAPE = {"layers": 4, "hidden": 256, "heads": 8, "vocab": 1000, "ffn": 512}


@pytest.mark.parametrize(
    ("shape", "said"),
    [
        ({**SHAPE, "layers": "many"}, "num_hidden_layers"),
        # the alternating window read range(layers) before the layer count was checked: TypeError
        ({**SHAPE, "layers": "many", "sliding_window": "128 alternating"}, "num_hidden_layers"),
        ({**SHAPE, "hidden": -1}, "hidden_size"),
    ],
)
def test_a_serving_row_value_the_model_refuses_leaves_the_row_unpriced(shape: dict, said: str) -> None:
    # as planner.runs reads a training row: a value it cannot use makes that row unpriceable
    from planner.serving.calibrate import translate
    from planner.serving.runs import model_from_row

    with pytest.raises(UnpriceableError, match=said):
        model_from_row({"name": "x", "model": {"shape": shape}})
    plans, unpriced = translate([{"name": "x", "group": "g", "model": {"shape": shape}}])
    assert not plans and unpriced[0]["name"] == "x" and said in unpriced[0]["reason"]


def test_a_serving_rate_too_slow_to_be_measured_is_refused() -> None:
    """1e-300 tokens/s had been scored, with a 300-digit error and a broken table."""
    from planner.catalog import load_cluster, load_model
    from planner.serving.runs import _check_plausible_rate

    model, h100 = load_model("llama3-8b"), load_cluster("dgx-h100")
    _check_plausible_rate({"output_tokens_per_s_per_gpu": 1.0}, model, h100)  # 1 token/s: slow, possible
    with pytest.raises(UnpriceableError, match=r"^measured\.output_tokens_per_s_per_gpu 1e-300 is below 0\.616 "):
        _check_plausible_rate({"output_tokens_per_s_per_gpu": 1e-300}, model, h100)


def test_serving_token_counts_and_figures_that_are_not_finite_are_refused() -> None:
    from planner.serving.runs import _published, _request_rate, parse_tokens

    for value in (float("nan"), float("inf"), 1e30):
        with pytest.raises(UnpriceableError, match="is not a token count up to 16,777,216"):
            parse_tokens(value, "workload.isl")
    # float('fast') was a ValueError traceback; 'inf' stays an unbounded rate (the engine at capacity)
    assert _request_rate("inf") == float("inf") and _request_rate(2) == 2.0
    for value in ("fast", float("nan"), 0, True, None):
        with pytest.raises(UnpriceableError, match=r"workload\.request_rate_qps not a positive number"):
            _request_rate(value)
    # a NaN, zero or true published figure scored as NaN or inf (or 1.0): the row is refused by it
    with pytest.raises(
        UnpriceableError, match=r"^measured\.output_tokens_per_s_per_gpu is not a positive finite .*\(true\)$"
    ):
        _published(
            {"measured": {"ttft_ms": float("nan"), "itl_ms_mean": 0, "output_tokens_per_s_per_gpu": True}},
            8,
            "concurrency",
        )
    # a bad per-GPU rate is not replaced by the total / GPUs beside it (a NaN was, silently)
    for value in (float("nan"), float("inf"), -1, 0, "fast"):
        with pytest.raises(UnpriceableError, match=r"^measured\.output_tokens_per_s_per_gpu is not a positive"):
            _published(
                {"measured": {"output_tokens_per_s_per_gpu": value, "output_tokens_per_s_total": 8000.0}},
                8,
                "concurrency",
            )
    figures = {"output_tokens_per_s_per_gpu": None, "output_tokens_per_s_total": 8000.0, "ttft_ms": 250, "note": "x"}
    assert _published({"measured": figures}, 8, "concurrency") == {
        "output_tokens_per_s_per_gpu": 1000.0,
        "ttft_s": 0.25,
    }
    with pytest.raises(UnpriceableError, match="no metric the translator scores"):
        _published({"measured": {"note": "x", "ttft_ms": None}}, 8, "concurrency")


# ---- 2. extreme but finite profile numbers in `plan serve` -------------------------------------------
@pytest.mark.parametrize("extra", [(), ("--disaggregate",), ("--json",)])
def test_serve_on_a_profile_whose_memory_overflows_is_one_line(cli, tmp_path: Path, extra: tuple[str, ...]) -> None:
    # pydantic's ValidationError traceback (input_value=inf at serving/memory.py); then the training
    # estimate's guard (pricing.out_of_range: "kv_cache came out inf"); now the profile's bound on it
    profile = _profile(tmp_path, "hbm_capacity_gib: 79.65", "hbm_capacity_gib: 1.0e300")
    r = cli("serve", "--model", "llama8b", "--cluster", profile, *extra)
    assert_one_line_error(r, "field 'gpu.hbm_capacity_gib': Input should be less than or equal to 1000000")
    assert r.out == ""


def test_a_link_latency_past_any_fabric_is_refused_when_the_profile_loads(cli, tmp_path: Path) -> None:
    # it priced every collective in centuries (rc 0)
    profile = _profile(tmp_path, "latency_us: 1.1\n", "latency_us: 1.0e300\n")
    said = "field 'intra_node.latency_us': Input should be less than or equal to 1000000"
    assert_one_line_error(cli("-m", "llama8b", "-c", profile), said)
    assert_one_line_error(cli("serve", "-m", "llama8b", "-c", profile), said)


# ---- 3. serve-calibrate with nothing to price ----------------------------------------------------------
def test_serve_calibrate_with_no_priceable_row_is_refused(cli, tmp_path: Path) -> None:
    # exit 0 with "mape_pct": NaN (not JSON) and 'MAPE nan%'
    r = cli("serve-calibrate", "--runs", str(SAMPLE_RUNS), "--json")
    assert_one_line_error(
        r,
        f"{SAMPLE_RUNS}: no row can be priced (first: 'llmfoundry-h10080gb-amp_bf16-mpt13b-s2048-g8-mb2': model "
        "shape lacks layers)",
    )
    assert r.out == ""
    empty = tmp_path / "empty.yaml"
    empty.write_text("runs: []\n")
    assert_one_line_error(cli("serve-calibrate", "--runs", str(empty), "--write"), f"{empty}: no row can be priced")


def test_serve_calibrate_json_has_no_nan() -> None:
    """An average over no rows (latency rows only, or --no-cv) is null in JSON and 'none' in text."""
    from planner.cli.serve import _pct
    from planner.serving.calibrate import Evaluation

    nan = float("nan")
    ev = Evaluation(overall={"mape_pct": nan, "rows": 1}, groups={"g": {"cv_mape_pct": nan}}, runs=[{"e": nan}])
    out = ev.as_json()
    assert out["overall"] == {"mape_pct": None, "rows": 1} and out["groups"]["g"]["cv_mape_pct"] is None
    assert out["runs"] == [{"e": None}]
    json.dumps(out, allow_nan=False)  # raises on NaN
    assert (_pct(nan), _pct(1.234), _pct(1.234, "+")) == ("none", "1.2%", "+1.2%")


def test_calibrate_from_runs_names_the_first_rows_reason_and_refuses_a_rate_past_the_peak(cli, tmp_path: Path) -> None:
    # it said only "no row can be priced", and fitted a row of 1e300 tokens/s per GPU
    row = yaml.safe_load(SAMPLE_RUNS.read_text())["runs"][0]
    row["measured"]["tokens_per_s_per_gpu"] = 1e300
    runs = tmp_path / "runs.yaml"
    runs.write_text(yaml.safe_dump({"runs": [row]}))
    assert_one_line_error(
        cli("calibrate", "--from-runs", str(runs)),
        f"{runs}: no row can be priced (first: 'llmfoundry-h10080gb-amp_bf16-mpt13b-s2048-g8-mb2': "
        "measured.tokens_per_s_per_gpu 1e+300 is more than one H100 SXM5 80GB can compute: 12,054 at its dense bf16 "
        "peak (989 TFLOP/s) and MPT-13b's FLOPs per token)",
    )


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("tokens_per_s_per_gpu", 1e-9, "measured.tokens_per_s_per_gpu 1e-09 is below 0.1% MFU on one H100 SXM5 80GB"),
        ("peak_memory_gib", 1e300, "measured.peak_memory_gib 1e+300 is more than the H100 SXM5 80GB's 79.65 GiB"),
    ],
)
def test_a_rate_too_slow_or_a_peak_past_the_gpu_is_unpriced(cli, tmp_path: Path, field, value, reason) -> None:  # type: ignore[no-untyped-def]
    """1e-9 tokens/s had made a 3.5e13% MAPE and been fitted; 1e300 GiB printed 'inf GiB measured'."""
    row = yaml.safe_load(SAMPLE_RUNS.read_text())["runs"][0]
    row["measured"][field] = value
    runs = tmp_path / "runs.yaml"
    runs.write_text(yaml.safe_dump({"runs": [row]}))
    assert_one_line_error(cli("calibrate", "--from-runs", str(runs)), "no row can be priced", reason)


# ---- 4. calibrate options the chosen mode ignores, and --name ---------------------------------------------
def test_calibrate_refuses_options_its_mode_ignores(cli, tmp_path: Path) -> None:
    out = tmp_path / "x.yaml"
    from_runs = ("calibrate", "--from-runs", str(SAMPLE_RUNS))
    tail = "with --from; --from-runs fits the shipped profiles and stacks (--write records the fit in them)"
    assert_one_line_error(cli(*from_runs, "--cluster", "dgx-h100"), f"error: --cluster goes {tail}")
    r = cli(*from_runs, "--out", str(out), "--cluster", "dgx-h100", "--name", "mine")
    assert_one_line_error(r, f"error: --cluster, --out, --name go {tail}")
    assert not out.exists()
    from_ = ("calibrate", "--from", str(tmp_path / "report.json"))
    said = "with --from-runs; with --from the fitted profile is written to --out"
    assert_one_line_error(cli(*from_, "--write", "--group", "g"), f"error: --write, --group go {said}")
    assert_one_line_error(cli(*from_, "--group", "g"), f"error: --group goes {said}")


def test_calibrate_write_refuses_to_drop_what_its_rows_do_not_determine(cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A fit over a subset of the runs (one --group, or a runs file of one's own) had written, with
    --write, the files it touched without the values its rows do not fix: the shipped dgx-h100
    sustained fraction, Hopper's row-wise fp8 fraction and torchtitan's TP overhead went (a review,
    2026-12-07). The dry run names them; --write refuses and writes nothing."""
    import planner.calibration_io as io

    def no_write(*args: object) -> None:
        raise AssertionError("the refused fit was written")

    monkeypatch.setattr(io, "write_texts_atomic", no_write)
    shipped = {p: p.read_bytes() for kind in ("hardware_profiles", "stacks") for p in (ROOT / kind).glob("*.yaml")}
    dry = cli("calibrate", "--from-runs", str(SAMPLE_RUNS), "--json")
    assert dry.code == 0
    dropped = dry.json()["dropped"]
    from planner.catalog import load_stack

    overhead = load_stack("torchtitan").tp_layer_overhead_us
    assert f"torchtitan.tp_layer_overhead_us {overhead:.4g}" in dropped
    assert "dgx-h100.fp8_rowwise_gemm_fraction 0.5549" in dropped
    # and the files it would re-fit were fitted on rows it has not (a review, 2026-12-08)
    assert any(entry.startswith("dgx-h100 (") for entry in dry.json()["rows_left_out"])
    r = cli("calibrate", "--from-runs", str(SAMPLE_RUNS), "--write")
    assert_one_line_error(r, "--write: the rows of runs_sample.yaml do not determine 7", "dgx-h100.fp8_rowwise")
    assert {p: p.read_bytes() for p in shipped} == shipped


@pytest.mark.parametrize("name", ["", "a/b", "../up", ".hidden", "two words", "x" * 81])
def test_calibrate_refuses_a_profile_name_that_is_not_a_plain_word(cli, tmp_path: Path, name: str) -> None:
    out = tmp_path / "fitted.yaml"
    r = cli("calibrate", "--from", str(tmp_path / "r.json"), "--cluster", "dgx-h100", "--out", str(out), "--name", name)
    assert_one_line_error(
        r,
        f"--name {name!r}: expected a profile name of letters, digits, '.', '_' and '-' (starting with a letter or "
        "digit, at most 80 characters), e.g. dgx-h100-fitted",
    )
    assert not out.exists()


@pytest.mark.parametrize("file", [".yaml", "a b#c.yaml"])
def test_calibrate_refuses_an_out_file_that_names_no_profile(cli, tmp_path: Path, file: str) -> None:
    """Without --name the profile is named after --out's file: '.yaml' wrote a profile named '.yaml'."""
    out = tmp_path / file
    r = cli("calibrate", "--from", str(tmp_path / "r.json"), "--cluster", "dgx-h100", "--out", str(out))
    assert_one_line_error(r, f"the profile would be named '{out.stem}' after the file", "give --name")
    assert not out.exists()


def test_a_plain_profile_name_passes() -> None:
    from planner.cli.calibrate import check_profile_name

    for name in ("dgx-h100", "h100-96g-500w", "my_profile.v2", "A100"):
        check_profile_name(name)


# ---- 5. sequences and positions -------------------------------------------------------------------
def test_a_rope_export_raises_max_position_embeddings_to_the_sequence(cli) -> None:
    # Megatron-LM validate_args asserts max_position_embeddings >= seq_length (arguments.py)
    r = cli("export", "-f", "megatron", "--model", "llama8b", "--cluster", "dgx-h100x1", "-s", "16384")
    assert r.code == 0, r.err
    assert "--seq-length 16384 \\\n" in r.out and "--max-position-embeddings 16384 \\\n" in r.out
    assert "# note: --max-position-embeddings 16384 is the sequence length, above the model's 8192" in r.out
    short = cli("export", "-f", "megatron", "--model", "llama8b", "--cluster", "dgx-h100x1", "-s", "4096")
    assert "--max-position-embeddings 8192 \\\n" in short.out and "is the sequence length" not in short.out


@pytest.mark.parametrize(
    "head",
    [
        (),
        ("estimate", "--tp", "1", "--pp", "1", "--dp", "8"),
        ("export", "-f", "megatron"),
        ("export", "-f", "megatron", "--tp", "1", "--pp", "1", "--dp", "8"),
    ],
)
def test_a_sequence_past_learned_positions_is_refused(cli, head: tuple[str, ...]) -> None:
    # gpt2-124m has a table of 1024 positions; -s 8192 ranked meshes (rc 0)
    cmd, pins = head[:1], head[1:]
    r = cli(*cmd, "--model", "gpt2-124m", "--cluster", "dgx-h100x1", "-s", "8192", *pins)
    assert_one_line_error(
        r,
        "error: --seq-len 8192: gpt2-124m's learned absolute positions stop at max_position_embeddings 1024: give "
        "--seq-len 1024 or less",
    )


def test_the_library_refuses_a_sequence_past_learned_positions_too() -> None:
    import planner
    from planner.catalog import load_model
    from planner.export.megatron import megatron_args
    from planner.schemas.parallel import ParallelConfig
    from planner.search import default_job

    with pytest.raises(PlannerError, match="--seq-len 2048: gpt2-124m's learned absolute positions stop at"):
        planner.estimate("gpt2-124m", "dgx-h100x1", seq_len=2048, tp=1, pp=1, dp=8)
    model = load_model("gpt2-124m")
    with pytest.raises(PlannerError, match="max_position_embeddings 1024"):
        megatron_args(model, default_job(model, seq_len=2048), ParallelConfig(dp=8))
    assert planner.estimate("gpt2-124m", "dgx-h100x1", seq_len=1024, tp=1, pp=1, dp=8).step_time_s > 0


# ---- 6. TP overlap only inside one NVLink domain ----------------------------------------------------------
def test_tp_comm_overlap_is_written_only_for_a_tp_group_inside_one_nvlink_domain(cli) -> None:
    across = cli(
        "export", "--format", "megatron", "-m", "gpt3-175b", "-c", "dgx-h100x16",
        "--tp", "16", "--pp", "8", "--dp", "1", "--ignore-memory",
    )  # fmt: skip
    assert across.code == 0, across.err
    assert "--tp-comm-overlap \\\n" not in across.out
    assert "# note: the TP group of 16 spans NVLink domains" in across.out
    # what the plan did hide there is the weight-gradient input gathers, which the note and the
    # estimate's stack line both say (the line had read 'TP overlap on, 80% hidden')
    assert "but for the weight-gradient input all-gathers" in across.out
    shown = cli("estimate", "-m", "gpt3-175b", "-c", "dgx-h100x16", "--tp", "16", "--pp", "1", "--dp", "8")
    assert "TP overlap on, but not for this mesh's TP group, which spans NVLink domains" in " ".join(shown.out.split())
    inside = cli("export", "--format", "megatron", "-m", "llama70b", "-c", "dgx-h100x16", "--tp", "8", "--pp", "2",
                 "--dp", "8", "--sequence-parallel")  # fmt: skip
    assert inside.code == 0, inside.err
    assert "--tp-comm-overlap \\\n" in inside.out and "spans NVLink domains" not in inside.out


def test_the_export_reads_the_tp_placement_from_the_cost_model() -> None:
    from planner.catalog import load_cluster
    from planner.export.megatron import tp_inside_nvlink
    from planner.schemas.parallel import ParallelConfig

    cluster = load_cluster("dgx-h100x16")
    assert tp_inside_nvlink(ParallelConfig(tp=8, dp=16, sequence_parallel=True), cluster)
    assert not tp_inside_nvlink(ParallelConfig(tp=16, pp=8, sequence_parallel=True), cluster)
    assert tp_inside_nvlink(ParallelConfig(tp=16, pp=8, sequence_parallel=True), None)  # no cluster: as before


# ---- 7. outputs that cannot be written ---------------------------------------------------------------
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc, a folder that takes no new file")
def test_an_export_to_a_folder_that_takes_no_file_fails_before_the_search(cli) -> None:
    r = cli("export", "-f", "megatron", "-m", "llama3-8b", "-c", "dgx-h100", "-o", "/proc/x.sh")
    assert_one_line_error(r, "error: --out /proc/x.sh: cannot write")  # one line: no 'plan export:' status


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc, a folder that takes no new file")
def test_a_validate_report_to_a_folder_that_takes_no_file_fails_before_the_replay(cli) -> None:
    r = cli("validate", "--local-ranks", "2", "-m", "gpt2", "-c", "localhost-cpu", "--out", "/proc/x.json")
    assert_one_line_error(r, "error: --out /proc/x.json: cannot write")  # no blank line, no 10 s replay first


def test_the_validate_progress_bar_writes_nothing_off_a_terminal(capsys) -> None:
    # rich ended its live display with a newline: a blank stderr line before validate's error
    from planner.cli.validate import _progress

    replay = SimpleNamespace(job=SimpleNamespace(blocks=[]), machine=SimpleNamespace(lead=True), total=1)
    with _progress(replay):  # type: ignore[arg-type]
        pass
    assert capsys.readouterr().err == ""


def test_an_export_priced_under_another_stack_says_so(cli) -> None:
    # a DeepSpeed config whose mesh was ranked as llm-foundry runs it (FSDP, fp32 gradient reduce,
    # FlashAttention-2) had been written without a word
    mixed = cli("export", "--format", "deepspeed", "-m", "llama3-8b", "-c", "dgx-h100x2", "--stack", "llm-foundry")
    assert mixed.code == 0, mixed.err
    assert "note: the mesh was priced as stack llm-foundry runs it" in mixed.err
    assert "without --stack, an export is priced as deepspeed" in mixed.err
    plain = cli("export", "--format", "deepspeed", "-m", "llama3-8b", "-c", "dgx-h100x2")
    assert plain.code == 0 and "priced as stack" not in plain.err


def test_runs_rows_name_themselves_once(tmp_path) -> None:
    # a row without a name had been reported as 'None', and two rows of one name both fitted
    import yaml

    from planner.runs import load_runs
    from planner.serving.runs import load_rows

    row = {"name": "a", "group": "g", "model": {}, "hardware": {}, "parallel": {}, "knobs": {}, "measured": {}}
    for rows, words in (
        ([{**row, "name": None}], "runs[0]: field 'name': expected non-empty text, got null"),
        ([{**row, "name": ["a"]}], "runs[0]: field 'name': expected non-empty text"),
        ([{**row, "group": 5}], "runs[0]: field 'group': expected non-empty text, got 5"),
        ([row, dict(row)], "runs[1]: field 'name': 'a' is also runs[0]'s; names are unique"),
    ):
        path = tmp_path / "runs.yaml"
        path.write_text(yaml.safe_dump({"runs": rows}))
        for load in (load_runs, load_rows):
            with pytest.raises(PlannerError, match=re.escape(words)):
                load(path)


def test_the_benchmark_drivers_end_a_bad_argument_in_one_line() -> None:
    # argparse printed its usage line before the error
    for script, args, said in (
        ("accuracy.py", ["--group", "x"], "error: --group and --exact-cv need --runs\n"),
        ("serving_accuracy.py", [], "error: the following arguments are required: --runs\n"),
    ):
        done = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True, timeout=120
        )
        assert (done.returncode, done.stderr) == (2, said)


def test_an_efficiency_under_a_hundredth_is_refused_when_the_profile_loads(cli, tmp_path: Path) -> None:
    # gemm_efficiency 1e-300 had printed a step of 300 digits and numpy's overflow warning (rc 0)
    profile = _profile(tmp_path, "gemm_efficiency: 0.80\n", "gemm_efficiency: 1.0e-300\n")
    said = "field 'gpu.gemm_efficiency': Input should be greater than or equal to 0.01"
    assert_one_line_error(cli("-m", "llama8b", "-c", profile), said)


def test_torchtitan_refuses_what_its_config_cannot_say(cli) -> None:
    # the exports had been priced unfused and without grad-reduce overlap but launched with neither
    base = ("export", "--format", "torchtitan", "-m", "llama3-8b", "-c", "dgx-h100")
    assert_one_line_error(cli(*base, "--no-flash-attention"), "torchtitan cannot express --no-flash-attention")
    assert_one_line_error(cli(*base, "--no-overlap-grad-reduce"), "cannot express --no-overlap-grad-reduce")
    deepspeed = cli("export", "--format", "deepspeed", "-m", "llama3-8b", "-c", "dgx-h100", "--no-flash-attention")
    assert deepspeed.code == 0 and "note: the plan priced unfused attention" in deepspeed.err


def _online_row() -> dict[str, Any]:
    """One row of TensorRT-LLM's Triton online-serving table (Llama 3.1 70B on four H100 at 2 req/s), as
    inference_runs.yaml writes it."""
    return {
        "name": "online/llama3.1-70b/h100x4/tp4/qps2",
        "group": "h100-online",
        "engine": {"name": "TensorRT-LLM", "version": "0.14.0", "backend": "Triton tensorrtllm_backend"},
        "hardware": {"count": 4, "gpu": "H100 SXM 80GB (HBM3)", "gpus_per_node": 8},
        "measured": {"ttft_ms_mean": 62, "output_tokens_per_s_per_gpu": 124.5},
        "model": {"arch": "dense", "hf_id": "meta-llama/Llama-3.1-70B-Instruct", "shape": {
            "ffn": 28672, "head_dim": 128, "heads": 64, "hidden": 8192, "kv_heads": 8, "layers": 80, "vocab": 128256}},
        "parallel": {"tp": 4, "pp": 1, "ep": None, "attention_dp": False, "dp_replicas": 1, "disaggregated": False},
        "precision": {"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"},
        "workload": {"isl": 467, "osl": 256, "request_rate_qps": 2, "num_requests": 500},
    }  # fmt: skip


def test_a_serving_row_past_the_replayed_requests_is_unpriced(cli, tmp_path: Path) -> None:
    # num_requests 1e30 had ended in numpy's 'Maximum allowed dimension exceeded'
    from planner.serving.runs import MAX_REPLAYED_REQUESTS

    row = _online_row()
    row["workload"]["num_requests"] = 10**30
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [row]}))
    r = cli("serve-calibrate", "--runs", str(path), "--no-cv")
    assert_one_line_error(r, f"is more than the {MAX_REPLAYED_REQUESTS:,} requests a row is replayed with")
    row["workload"]["num_requests"] = 500
    path.write_text(yaml.safe_dump({"runs": [row]}))
    assert "requests a row is replayed with" not in cli("serve-calibrate", "--runs", str(path), "--no-cv").err
    # the written error bars are cross-validated errors: --write without cross-validation is refused, and
    # nothing is written
    engines = {p: p.read_bytes() for p in (ROOT / "engines").glob("*.yaml")}
    r = cli("serve-calibrate", "--runs", str(path), "--no-cv", "--write")
    assert_one_line_error(r, "--write: the engine profiles' error bars are the rows' cross-validated errors")
    assert {p: p.read_bytes() for p in engines} == engines


# ---- 4. a fuzzing review (2026-12-07) ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("section", "changes", "reason"),
    [
        # -1 x -1 GPUs made a one-GPU layout: priced at 3.7x, or scipy's 'Residuals are not finite'
        ("parallel", {"tp": -1, "pp": -1, "dp_replicas": 4}, "parallel.tp -1 is not a positive count"),
        ("parallel", {"ep": 0}, "parallel.ep 0 is not a positive count"),  # numpy's divide warning on stderr
        ("parallel", {"ep": 4}, "parallel.ep 4 on a dense model"),
        ("workload", {"osl": 1.5}, "workload.osl 1.5 is not a whole count of tokens >= 1"),  # had read as 1
        ("measured", {"itl_ms_mean": 21.0}, None),  # a TPOT beside osl 256 is read
    ],
)
def test_a_serving_row_with_degrees_or_lengths_that_are_no_counts_is_unpriced(
    section: str, changes: dict[str, Any], reason: str | None
) -> None:
    from planner.serving.calibrate import translate

    row = _online_row()
    row[section] |= changes
    plans, unpriced = translate([row])
    if reason is None:
        assert len(plans) == 1 and "tpot_s" in plans[0].published
        # at one output token there is no second token to time: the TPOT is refused, as `plan serve` does
        row["workload"]["osl"] = 1
        plans, unpriced = translate([row])
        reason = "a TPOT at workload.osl 1"
    assert not plans and unpriced[0]["reason"].startswith(reason), unpriced


def test_a_serving_row_stating_a_top_k_without_experts_is_unpriced() -> None:
    # experts 0 beside top_k 8 had priced DeepSeek-R1 as a dense model, 1.8x too fast
    from planner.serving.runs import model_from_row

    shape = {**SHAPE, "experts": 0, "top_k": 8}
    with pytest.raises(UnpriceableError, match=r"^model shape: top_k 8 with experts 0; give both or neither$"):
        model_from_row({"name": "x", "model": {"shape": shape}})


def test_serve_calibrate_write_that_fits_nothing_is_refused(cli, tmp_path: Path) -> None:
    # exit 0 with no 'wrote' line: a TTFT-only row prices but fits no engine parameter
    row = _online_row()
    row["measured"] = {"ttft_ms_mean": 62}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [row]}))
    engines = {p: p.read_bytes() for p in (ROOT / "engines").glob("*.yaml")}
    r = cli("serve-calibrate", "--runs", str(path), "--write")
    assert_one_line_error(r, "--write: the rows of runs.yaml fit no engine's parameters", "nothing written")
    assert {p: p.read_bytes() for p in engines} == engines


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("compute_units: 132", "compute_units: 1000000000000000", "gpu.compute_units"),  # a 1.6e12 s step
        ("tensor_flops_per_exp: 256", "tensor_flops_per_exp: 1.0e+300", "gpu.tensor_flops_per_exp"),
        ("domain_size_gpus: 8", "domain_size_gpus: 1000000000000", "intra_node.domain_size_gpus"),
        ("gpus_per_node: 8", "gpus_per_node: 1000000000000", "gpus_per_node"),
        # a switchless domain of 8 GPUs links each to 7 peers at most (MI300X's xGMI)
        ("domain_size_gpus: 8", "domain_size_gpus: 8\n  point_to_point_links: 9", "point_to_point_links 9"),
    ],
)
def test_profile_counts_past_any_machine_are_refused_when_it_loads(cli, tmp_path: Path, old, new, field) -> None:  # type: ignore[no-untyped-def]
    text = (ROOT / "hardware_profiles" / "dgx-h100.yaml").read_text()
    if "point_to_point_links" in new:
        text = text.replace("    domain_size_gpus:", "    point_to_point_links: estimate\n    domain_size_gpus:", 1)
    assert old in text
    path = tmp_path / "edited.yaml"
    path.write_text(text.replace(old, new, 1))
    r = cli("estimate", "-m", "llama3-8b", "-c", str(path), "--tp", "8")
    assert_one_line_error(r, field)


def test_a_host_link_or_attention_scale_near_zero_is_refused(cli, tmp_path: Path) -> None:
    # host_link_gb_per_s 1e-300 priced a 5.8e302 s step with numpy's overflow warning on stderr
    gb200 = (ROOT / "hardware_profiles" / "gb200-nvl72.yaml").read_text()
    path = tmp_path / "gb200.yaml"
    path.write_text(gb200.replace("host_link_gb_per_s: 200", "host_link_gb_per_s: 1.0e-300", 1))
    assert_one_line_error(cli("estimate", "-m", "llama3-8b", "-c", str(path)), "gpu.host_link_gb_per_s")
    stack = yaml.safe_load((ROOT / "stacks" / "megatron-core.yaml").read_text())
    for key, value, said in [
        ("attention_efficiency_scale", 1e-300, "greater than or equal to 0.01"),  # an 8e300 s step
        ("adam_moments", [], "at least 1 item"),  # every job then failed mid-sentence
    ]:
        edited = tmp_path / f"{key}.yaml"
        edited.write_text(yaml.safe_dump({**stack, key: value}))
        r = cli("estimate", "-m", "llama3-8b", "-c", "dgx-h100", "--stack", str(edited))
        assert_one_line_error(r, f"field '{key}'", said)


def test_a_link_that_loops_is_named_as_input_and_refused_as_output(cli, tmp_path: Path) -> None:
    # Path.resolve's RuntimeError('Symlink loop') had been a traceback: --plot, export -o, calibrate --out
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    a.symlink_to(b)
    b.symlink_to(a)
    said = "cannot write: the link loops"
    assert_one_line_error(cli("-m", "llama3-8b", "-c", "dgx-h100", "--plot", str(a)), "--plot", said)
    assert_one_line_error(cli("export", "-f", "megatron", "-m", "llama3-8b", "-c", "dgx-h100", "-o", str(loop)), said)
    assert_one_line_error(cli("-m", str(loop), "-c", "dgx-h100"), "is a link that loops")  # had read 'does not exist'
    gone = tmp_path / "gone.yaml"
    gone.symlink_to(tmp_path / "missing.yaml")
    assert_one_line_error(cli("-m", str(gone), "-c", "dgx-h100"), "is a link to", "which does not exist")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        # past 64 bits these named the schema's field and 2**63 - 1, not the option and its range
        (("-m", "llama3-8b", "-c", "dgx-h100", "--nodes", "9" * 23), "num_nodes 99999999999999999999999 x 8 GPUs is "
         "more than the 1,048,576 GPUs planned at most"),
        (("-m", "llama3-8b", "-c", "dgx-h100", "--top", "9" * 23), "'--top'"),
        (("serve", "-m", "llama3-8b", "-c", "dgx-h100", "--input-len", "9" * 20), "'--input-len'"),
        (("serve", "-m", "llama3-8b", "-c", "dgx-h100", "--concurrency", str(2**63 - 1)), "'--concurrency'"),
        (("estimate", "-m", "llama3-8b", "-c", "dgx-h100", "--recompute", "selective", "--recompute-modules", ""),
         "--recompute-modules '': an empty name is no module; allowed, comma-separated: core_attn"),
        (("estimate", "-m", "llama3-8b", "-c", "dgx-h100", "--recompute", "selective", "--recompute-modules",
          "mlp,foo"), "'foo' is no module"),
        # a pinned tp may span domains (tp 16 on two DGX is priced): the bound is the cluster's GPUs
        (("serve", "-m", "llama3-8b", "-c", "dgx-h100x2", "--tp", "32"), "tp: pinned 32 exceeds the cluster's 16 GPUs"),
        (("serve", "-m", "deepseek-v3", "-c", "dgx-h200", "--ep", "16"), "ep: pinned 16 exceeds the cluster's 8 GPUs"),
    ],
)  # fmt: skip
def test_options_past_their_range_name_the_option(cli, args: tuple[str, ...], said: str) -> None:
    assert_one_line_error(cli(*args), said)


def test_hf_keys_of_the_wrong_kind_are_refused_not_dropped() -> None:
    from planner.hf_config import model_from_hf_config

    base = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8, "num_hidden_layers": 4,
            "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 2048}  # fmt: skip
    for extra, said in [
        ({"text_config": [1]}, "key 'text_config': expected a mapping or null, got [1]"),
        ({"attn_type_list": "linear"}, "key 'attn_type_list': expected a list of 0 and 1, got 'linear'"),
    ]:
        with pytest.raises(PlannerError, match=re.escape(said)):
            model_from_hf_config({**base, **extra}, "m", "test")


def test_a_training_row_of_too_many_alternating_layers_is_unpriced_not_out_of_memory() -> None:
    # model_from_row listed range(10**30) layer kinds before the count was checked: MemoryError
    from planner.runs import model_from_row

    row = next(r for r in yaml.safe_load(SAMPLE_RUNS.read_text())["runs"] if "gpt-oss" in r["name"])
    row["model"]["layers"] = 10**30
    with pytest.raises(PlannerError, match="num_hidden_layers"):
        model_from_row(row)


def test_serve_calibrate_marks_only_fitted_values_on_their_bounds(cli, tmp_path: Path) -> None:
    # a key without a MoE row takes expert_gemm_fraction 1 and routed_copy_ns 0, both FIT bounds, without
    # a fit: serve-calibrate's '*' ('the rows push it past') had marked them as if the rows had
    from planner.serving.calibrate import FIT, UNMOVED_MOE, at_bound, fit, held_fields, translate

    rows = []
    for i, (hf_id, shape) in enumerate(
        [("meta-llama/Llama-3.1-70B-Instruct", _online_row()["model"]["shape"]),
         ("meta-llama/Llama-3.1-8B-Instruct", {"ffn": 14336, "head_dim": 128, "heads": 32, "hidden": 4096,
                                               "kv_heads": 8, "layers": 32, "vocab": 128256})] * 5
    ):  # fmt: skip
        row = _online_row()
        row["name"] = f"online/{i}"
        row["model"] = {"key": hf_id.split("/")[1], "arch": "dense", "hf_id": hf_id, "shape": shape}
        row["measured"] = {"output_tokens_per_s_per_gpu": 300.0 + 50 * i}
        row["workload"] = {"isl": 128, "osl": 128, "concurrency": 8 * (1 + i)}
        rows.append(row)
    plans, unpriced = translate(rows)
    assert len(plans) == 10 and not unpriced
    held = held_fields(plans)
    assert set(UNMOVED_MOE) <= held
    (params,) = fit(plans).values()
    for name, value in UNMOVED_MOE.items():
        assert getattr(params, name) == value and at_bound(name, value) and name in FIT
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": rows}))
    r = cli("serve-calibrate", "--runs", str(path), "--no-cv")
    assert r.code == 0 and "expert_gemm_fraction 1  " in r.out and "routed_copy_ns 0  " in r.out, r.out


MODERN_RUNS = ROOT.parent / "shared" / "groundtruth" / "modern_runs.yaml"


@pytest.mark.skipif(not MODERN_RUNS.is_file(), reason="shared/groundtruth/modern_runs.yaml not present")
def test_calibrate_write_refuses_a_fit_without_the_rows_the_shipped_values_were_fitted_on(cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """One --group (Megatron-Bridge's B200 rows) had replaced megatron-core's overheads fitted on 39 rows
    with values fitted on 8, and GB200/GB300, fitted jointly with them, priced 6-10% -> 12-14% off (a
    review, 2026-12-08): --write refuses, naming the files and the rows left out."""
    import planner.calibration_io as io

    def no_write(*args: object) -> None:
        raise AssertionError("the refused fit was written")

    monkeypatch.setattr(io, "write_texts_atomic", no_write)
    r = cli("calibrate", "--from-runs", str(MODERN_RUNS), "--group", "b200-megatron-bridge", "--write")
    assert_one_line_error(r, "leave out rows the shipped values they would replace were fitted on", "megatron-core (")


def test_calibrate_refuses_an_out_file_it_could_not_load_or_that_is_its_input(cli, tmp_path: Path) -> None:
    """--out prof.json wrote the YAML then read it back as JSON and failed, leaving the file; --out prof
    wrote a profile `--cluster prof` could not find; --out equal to --from overwrote the measurements
    with the profile before failing on them (a review, 2026-12-08). Each is refused before anything runs."""
    measured = tmp_path / "m.yaml"
    measured.write_text("kind: sweep\n")
    for out, said in (
        (tmp_path / "prof.json", "give a .yaml or .yml file"),
        (tmp_path / "prof", "give a .yaml or .yml file"),
        (measured, "is the --from file"),
    ):
        r = cli("calibrate", "--from", str(measured), "--cluster", "localhost-cpu", "--out", str(out))
        assert_one_line_error(r, f"--out {out}", said)
        assert not (tmp_path / "prof.json").exists() and not (tmp_path / "prof").exists()
    assert measured.read_text() == "kind: sweep\n"
