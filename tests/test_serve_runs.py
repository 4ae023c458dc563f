"""Serving ground truth: the runs translator, the fit and its cross-validation (planner/serving/runs.py,
calibrate.py) on rows of shared/groundtruth/inference_runs.yaml."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from planner.serving.calibrate import evaluate, nan_as_null
from planner.serving.runs import (
    UnpriceableError,
    dtypes_from_row,
    model_from_row,
    parse_tokens,
    plan_row,
    predict,
    served,
)

RUNS = Path(__file__).resolve().parents[2] / "shared" / "groundtruth" / "inference_runs.yaml"
pytestmark = pytest.mark.skipif(not RUNS.is_file(), reason="shared/groundtruth/inference_runs.yaml not present")


@cache
def _rows() -> tuple[dict[str, Any], ...]:
    from planner.serving.runs import load_rows

    return tuple(load_rows(str(RUNS)))


def _row(prefix: str) -> dict[str, Any]:
    return copy.deepcopy(next(r for r in _rows() if r["name"].startswith(prefix)))


def test_parse_tokens() -> None:
    assert parse_tokens(2048, "isl") == 2048
    assert parse_tokens("2K", "isl") == 2048
    assert parse_tokens("~20k (+-15%)", "isl") == 20480
    with pytest.raises(UnpriceableError, match="not stated"):
        parse_tokens("not stated in this blog", "isl")


def test_models_from_their_shape() -> None:
    ds = model_from_row(_row("trtllm-latest/deepseek-r1/"))
    assert ds.is_mla and ds.kv_lora_rank == 512 and ds.num_dense_layers == 3 and ds.num_experts_total == 256
    oss = model_from_row(_row("trtllm-latest/gpt-oss-20b/"))
    assert oss.sliding_window == 128 and oss.num_sliding_layers == 12  # alternating layers
    gptj = model_from_row(_row("trtllm-v0.9/gptj-6b/"))
    assert not gptj.is_gated_mlp  # GPT-J's MLP is fc_in/fc_out with GELU


def test_formats_from_precision_text() -> None:
    assert dtypes_from_row(_row("trtllm-latest/deepseek-r1/b200x4/dep4/fp4")) == ("fp4", "fp8")
    assert dtypes_from_row(_row("trtllm-v0.9/gptj-6b/a100x1/tp1/fp16")) == ("bf16", "bf16")
    # a format the planner does not price was read as bf16: int4 AWQ weights as 4x their size
    row = _row("trtllm-v0.9/gptj-6b/a100x1/tp1/fp16")
    row["precision"]["weights"] = "int4 AWQ"
    with pytest.raises(UnpriceableError, match=r"precision\.weights 'int4 AWQ': not a format the planner prices"):
        dtypes_from_row(row)
    row = _row("trtllm-v0.9/gptj-6b/a100x1/tp1/fp16")
    row["precision"]["kv_cache"] = "int8"
    with pytest.raises(UnpriceableError, match=r"precision\.kv_cache 'int8'"):
        dtypes_from_row(row)


def test_unpriceable_rows_say_why() -> None:
    row = _row("trtllm-v1.0/llama3.1-8b/")
    row["parallel"]["speculative"] = "MTP 3"
    with pytest.raises(UnpriceableError, match="speculative"):
        plan_row(row)
    row = _row("trtllm-v1.0/llama3.1-8b/")
    row["hardware"]["gpu"] = "TPU v5p"
    with pytest.raises(UnpriceableError, match="no hardware profile"):
        plan_row(row)
    row = _row("trtllm-v1.0/llama3.1-8b/")
    row["parallel"]["tp"] = 4  # 4 x 1 x 1 on a 1-GPU row
    with pytest.raises(UnpriceableError, match="does not use"):
        plan_row(row)


def test_modes_from_the_workload() -> None:
    assert plan_row(_row("trtllm-v0.9/gptj-6b/h100x1/tp1/fp8/bs1/isl128-ttft")).mode == "ttft"
    assert plan_row(_row("trtllm-v0.9/gptj-6b/h100x1/tp1/fp8/bs1024")).mode == "static"
    assert plan_row(_row("trtllm-v0.14-online/llama3.1-70b/h100x4")).mode == "rate"
    # a rate row that states its request count is replayed (serving/replay.py): 500 requests sent at
    # once to 70B on 4 H100 queue for seconds (published: TTFT 9,126 ms, inter-token 548 ms, every
    # iteration carrying prompt tokens to the 8,192-token budget), which Little's law at a
    # steady batch put at 1.2 s and 2.1 s
    p = plan_row(_row("trtllm-v0.14-online/llama3.1-70b/h100x4/tp4/bf16/isl467-osl16/qpsinf"))
    assert p.requests == 500 and any("replayed" in n for n in p.notes)
    out = predict(p)
    assert out["ttft_s"] == pytest.approx(9.126, rel=0.15) and out["tpot_s"] == pytest.approx(0.548, rel=0.3)
    p = plan_row(_row("trtllm-v1.0/llama3.1-8b/h100x1"))
    assert p.mode == "max_throughput" and 1 <= p.batch <= 4096
    assert set(predict(p)) == {"output_tokens_per_s_per_gpu"}


def test_a_trtllm_bench_row_without_a_request_count_runs_the_documented_one_in_waves() -> None:
    """TensorRT-LLM's performance overview lists its dataset's requests per input / output length;
    a table row of lengths the list leaves out takes the nearest listed (1000/1000: 1024/1024's
    3,000). At a KV room of 4,568 sequences, 3,000 requests are one partial wave: the steady round
    at the room prices DeepSeek-R1 on 4 B200 8% above its published 6,463 tokens/s per GPU, the
    wave 2% below (9% below while the fit priced the waves at the steady state's ratio to them,
    sessions 55-57; 3% below since it takes the ratio of the run's replay, 2026-12-07), and the
    replay of the run, every request sent at once, within 2% of the wave."""
    from planner.serving.runs import bench_requests

    assert (bench_requests(1000, 1000), bench_requests(1024, 2048), bench_requests(128, 128)) == (3000, 1500, 30000)
    row = _row("trtllm-latest/deepseek-r1/b200x4/dep4/fp4/isl1000-osl1000")
    assert not isinstance(row["workload"]["num_requests"], int)
    p = plan_row(row)
    assert any("requests not stated: 3000" in n for n in p.notes)
    waves = predict(p)["output_tokens_per_s_per_gpu"]
    assert waves == pytest.approx(6292, rel=0.02)
    assert p.requests == 3000 and served(p)["output_tokens_per_s_per_gpu"] == pytest.approx(waves, rel=0.02)
    unstated = row["workload"]["num_requests"]
    row["workload"]["num_requests"] = 3000
    assert predict(plan_row(row))["output_tokens_per_s_per_gpu"] == waves
    row["workload"]["num_requests"] = unstated
    row["engine"]["tool"] = "a tool that states no count"  # priced at the steady round, as before
    assert predict(plan_row(row))["output_tokens_per_s_per_gpu"] > 1.08 * waves


def test_a_row_of_a_request_count_is_scored_by_its_whole_run() -> None:
    """trtllm-bench reports a run's output tokens over its whole duration, first request sent to
    last token out, so a row of 1,500 requests in a KV room of 1,420 (Llama-3.3-70B in FP4, TP1 x
    PP8 on eight RTX PRO 6000, 1,000 / 2,000 tokens) holds one full wave and 80 requests decoding
    alone for as long again. The row is scored by that run replayed (``Replayed.output_tokens_per_s``),
    within 2% of its waves, where the steady state plan serve prints for the layout comes out 29%
    above it; a row without a count is scored by that steady state."""
    from planner.serving.schemas import ServeRequest
    from planner.serving.search import replay_at_batch

    p = plan_row(_row("trtllm-v1.0/llama3.3-70b/rtxpro6000x8/tp1-pp8/fp4/isl1000-osl2000"))
    metric = "output_tokens_per_s_per_gpu"
    assert (p.mode, p.requests, p.batch) == ("max_throughput", 1500, pytest.approx(1420, abs=20))
    run, waves = served(p)[metric], predict(p)[metric]
    assert run == pytest.approx(waves, rel=0.02)
    request = ServeRequest(input_len=p.input_len, output_len=p.output_len)
    steady = replay_at_batch(p.setting, p.layout, request, p.batch).output_tokens_per_s_per_gpu
    assert steady > 1.2 * run
    p.requests = None
    assert served(p)[metric] == pytest.approx(steady)


@pytest.mark.parametrize(
    ("prefix", "engine"),
    [
        ("trtllm-v0.9/gptj-6b/", "trtllm-tensorrt"),  # gptSessionBenchmark's static batch of a built engine
        ("trtllm-v0.14-online/", "trtllm-tensorrt"),  # Triton's tensorrtllm_backend
        ("trtllm-v0.17/llama3.1-8b/", "trtllm-tensorrt"),  # trtllm-bench of a built engine
        ("trtllm-v1.0/llama3.1-8b/", "trtllm"),  # the PyTorch backend
        ("trtllm-latest/deepseek-r1/", "trtllm"),
    ],
)
def test_a_tensorrt_llm_row_is_priced_with_the_runtime_it_ran(prefix: str, engine: str) -> None:
    from planner.serving.runs import engine_from_row

    row = _row(prefix)
    assert engine_from_row(row).name == engine
    assert plan_row(row).key.startswith(engine + "/")
    row["engine"]["backend"] = "pytorch"
    assert engine_from_row(row).name == "trtllm"


@pytest.mark.parametrize(
    ("prefix", "adp", "ep"),
    [
        ("trtllm-v1.0/qwen3-235b-a22b/b200x8/tp8/", True, 8),  # MoE at TP 8: the 1.0 MoE recipe's attention DP
        ("trtllm-v1.0/llama4-maverick/rtxpro6000x8/tp4-pp2/", True, 4),
        ("trtllm-v1.0/qwen3-30b-a3b/b200x1/tp1/", False, 1),  # one GPU: nothing to run data-parallel
        ("trtllm-v1.0/llama3.3-70b/h100x2/tp2/", False, 1),  # dense: the dense recipe sets none
        ("trtllm-v0.20/llama4-maverick/h200x8/tp8/", False, 1),  # says only 'not stated'
        ("trtllm-latest/deepseek-r1/b200x4/dep4/", True, 4),  # states it
    ],
)
def test_a_moe_row_whose_recipe_sets_attention_dp_runs_it(prefix: str, adp: bool, ep: int) -> None:
    # TensorRT-LLM 1.0's perf-overview labels its MoE columns TP n, but its MoE recipe runs
    # trtllm-bench --ep with enable_attention_dp: true, which the rows' parallel.attention_dp says
    p = plan_row(_row(prefix))
    assert (bool(p.layout.attention_dp[0]), int(p.layout.ep[0])) == (adp, ep)
    row = _row(prefix)
    if row["parallel"].get("attention_dp") is not True:
        row["parallel"]["attention_dp"] = "not stated"
        assert not bool(plan_row(row).layout.attention_dp[0])


def test_fit_and_cross_validation_on_a100_rows() -> None:
    rows = [r for r in _rows() if r["group"].startswith(("a100-trtllm", "l40s-trtllm"))]
    ev = evaluate(rows, cross_validate=True)
    # all priced but the Mixtral static row whose rate its weight reads cannot reach
    assert ev.overall["priced"] == ev.overall["rows"] - 1
    (refused,) = ev.as_json()["unpriced"]
    assert refused["name"] == "trtllm-v0.9/mixtral-8x7b/a100x2/tp2/fp16/bs32/isl2048-osl2048"
    assert "datasheet HBM bandwidth: a typo or another unit" in refused["reason"]
    assert {"trtllm-tensorrt/ampere", "trtllm-tensorrt/ada"} <= set(ev.fitted)  # their rows ran TensorRT engines
    assert ev.overall["mape_pct"] < 25 and ev.overall["cv_mape_pct"] < 40
    for r in ev.runs:
        assert set(r) >= {"name", "group", "metric", "published", "predicted", "error_pct", "cv_error_pct"}
    for g in ev.groups.values():
        assert g["rows"] >= g["priced"] >= 1 and g["coverage"] == g["priced"] / g["rows"]
        assert {"mape_pct", "cv_mape_pct", "signed_pct"} <= set(g) or {"ttft_mape_pct"} <= set(g)
    assert ev.overall["cv_mape_pct"] >= ev.overall["mape_pct"] - 1.0  # held-out groups do not fit better
    # the JSON the benchmark and serve-calibrate print: numpy's booleans and floats would not serialise
    json.dumps(nan_as_null(ev.as_json()))
    assert all(isinstance(r["inside_interval"], bool) for r in ev.runs if r["interval"] is not None)


def test_a_key_with_few_tp_rows_takes_its_engines_all_reduce_speed() -> None:
    """``tp_comm_fraction`` is fitted per key only where 10 of its rows of two models all-reduce
    over TP; without the L40S throughput table the Ada key keeps its static rows' eight TP rows,
    and takes the speed the Ampere key (the engine's only key with enough) fitted; a key none of
    whose rows all-reduces (GH200, one GPU per replica) keeps 1."""
    from planner.serving.calibrate import fit, translate

    rows = [r for r in _rows() if r["group"] in ("a100-trtllm-throughput", "l40s-trtllm-static-batch-throughput")]
    plans, _ = translate(rows)
    assert 0 < sum(p.key == "trtllm-tensorrt/ada" and p.cost.tp_comm_s[0] > 0 for p in plans) < 10
    fitted = fit(plans)
    ampere, ada = (fitted[f"trtllm-tensorrt/{a}"].tp_comm_fraction for a in ("ampere", "ada"))
    assert ampere < 0.98 and ada == ampere  # the all-reduces run slower than the collective model prices
    gh200, _ = translate([r for r in _rows() if r["group"] == "gh200-trtllm-throughput"])
    assert fit(gh200)["trtllm-tensorrt/hopper"].tp_comm_fraction == 1.0


def test_shipped_fit_names_its_rows() -> None:
    from planner.serving.engine import load_engine

    # TensorRT-LLM's two runtimes are fitted apart: the PyTorch backend's rows (0.20 and later) on Hopper
    # and Blackwell, the TensorRT-engine runtime's (0.9, 0.14, 0.17) on Ampere, Ada and Hopper
    trt, engine_runtime = load_engine("trtllm"), load_engine("trtllm-tensorrt")
    assert set(trt.fitted) == {"hopper", "blackwell", "blackwell-gb202"}
    assert set(engine_runtime.fitted) == {"ampere", "ada", "hopper"}
    names = {r["name"] for r in _rows()}
    for e in (trt, engine_runtime):
        assert e.calibration is not None and e.calibration.runs_file == "inference_runs.yaml"
        for arch, rows in e.calibration.rows.items():
            assert rows and set(rows) <= names, arch
        for p in e.fitted.values():  # fractions never above the profiles' measured ceilings
            assert 0 < p.compute_fraction <= 1 and 0 < p.decode_hbm_fraction <= 1 and 0 < p.kv_read_fraction <= 1
    runtime = {r["name"]: str(r["engine"].get("backend")) for r in _rows()}
    assert all(runtime[n] == "pytorch" for rows in trt.calibration.rows.values() for n in rows)  # type: ignore[union-attr]
    assert not any(
        runtime[n] == "pytorch"
        for rows in engine_runtime.calibration.rows.values()  # type: ignore[union-attr]
        for n in rows
    )
    # the request path: fitted to the 72 Triton online rows, the TensorRT-engine runtime's server, and
    # the same on each of its architectures; borrowed by the PyTorch backend, which names no rows
    paths = {p.request_path_ms for e in (trt, engine_runtime) for p in e.fitted.values()}
    assert len(paths) == 1 and paths.pop() > 0
    served = engine_runtime.calibration.request_path_rows  # type: ignore[union-attr]
    assert len(served) == 72 and all(n.startswith("trtllm-v0.14-online/") for n in served)
    assert trt.calibration.request_path_rows == []  # type: ignore[union-attr]
    # NVLink TP all-reduces at decode sizes run below the collective model's price (ARCHITECTURE 9.7)
    assert all(0.4 < trt.fitted[a].tp_comm_fraction < 0.95 for a in ("hopper", "blackwell"))
    assert 0.4 < engine_runtime.fitted["hopper"].tp_comm_fraction < 0.9
    # the A100 rows' fit reaches about the model's price (0.96 with the routed copies priced, 0.90 before,
    # 1.01 since the fit takes each run's replay, tail included, 2026-12-07)
    assert 0.4 < engine_runtime.fitted["ampere"].tp_comm_fraction <= 1.05
    # vLLM and SGLang borrow the PyTorch backend's fit (a Python executor with CUDA graphs, as theirs)
    assert load_engine("vllm").calibrated_like == "trtllm"
    assert load_engine("vllm").parameters("hopper") == trt.fitted["hopper"]
    # and the benchmark prices their rows with the same (it had taken the mean of every fitted key)
    from planner.serving.calibrate import params_for

    fits = {f"{e.name}/{a}": p for e in (trt, engine_runtime) for a, p in e.fitted.items()}
    assert params_for("vllm/hopper", fits) == trt.fitted["hopper"] == params_for("sglang/hopper", fits)
    assert params_for("vllm/ada", fits) == load_engine("vllm").parameters("ada")  # the backend's mean


def test_a_ttft_measured_through_a_server_holds_the_request_path() -> None:
    """A client of Triton's tensorrtllm_backend (or of ``vllm bench serve``) measures the TTFT through
    the server: the fitted request path adds to the engine's first token there, and nowhere else:
    not to an in-process benchmark's TTFT (gptSessionBenchmark), a TPOT or a throughput."""
    from planner.serving.engine import FittedParameters
    from planner.serving.runs import through_server

    online = _row("trtllm-v0.14-online/llama3.1-8b/h100x1/tp1/bf16/isl467-osl16/qps2")
    session = _row("trtllm-v0.9/llama2-7b/h100x1/tp1/fp8/bs1/isl128-ttft")
    bench = _row("trtllm-v1.0/llama3.1-8b/h100x1")
    served = next(r for r in _rows() if r["name"].startswith("vllm/llama3.1-8b/h100x1/kv-bf16"))
    assert [through_server(r) for r in (online, served, session, bench)] == [True, True, False, False]
    said = ("trtllm-serve", "python -m sglang.bench_serving", "KV cache reserved 0.9", "observed")
    assert [through_server({"engine": {"tool": t}}) for t in said] == [True, True, False, False]  # whole words
    for row, holds in ((online, True), (session, False)):
        p = plan_row(row)
        base = FittedParameters(**(p.setting.params.model_dump() | {"request_path_ms": 0.0}))
        with_path = base.model_copy(update={"request_path_ms": 7.0})
        without, withp = predict(p, base), predict(p, with_path)
        assert withp["ttft_s"] - without["ttft_s"] == pytest.approx(0.007 if holds else 0.0, abs=1e-12)
        assert {k: v for k, v in withp.items() if k != "ttft_s"} == {k: v for k, v in without.items() if k != "ttft_s"}
        assert p.engine_ttft_s(with_path) == pytest.approx(without["ttft_s"], rel=1e-12)


def test_the_request_path_is_fitted_per_engine_and_borrowed_where_no_row_measures_it() -> None:
    """The online table's 72 TTFTs (two models, H100 and H200) fit the TensorRT-engine runtime's
    path, a few ms, and every architecture of it takes it; the PyTorch backend, none of whose
    rows is measured through a server, borrows it; with the online table left out, no row fits
    one and the path is 0 (an in-process engine)."""
    import numpy as np

    from planner.serving.calibrate import _request_path_ms, fit, translate

    rows = [
        r
        for r in _rows()
        if r["group"] in ("h100-trtllm-online-latency", "h200-trtllm-online-latency", "h100-trtllm-throughput")
    ]
    plans, _ = translate(rows)
    fitted = fit(plans)
    paths = {k: v.request_path_ms for k, v in fitted.items()}
    assert set(paths) >= {"trtllm-tensorrt/hopper", "trtllm/hopper"}
    assert len(set(paths.values())) == 1 and 3.0 < paths["trtllm-tensorrt/hopper"] < 10.0
    # the optimum of the soft-L1 loss on log errors: half a millisecond either way fits worse
    online = [p for p in plans if p.through_server]
    assert len(online) == 72 and len({p.setting.model.name for p in online}) == 2
    engine_s = np.array([p.engine_ttft_s(fitted[p.key]) for p in online])
    published = np.array([p.published["ttft_s"] for p in online])

    def loss(ms: float) -> float:
        z = np.log((engine_s + ms * 1e-3) / published) ** 2 / 0.1**2
        return float(np.sum(2.0 * (np.sqrt(1.0 + z) - 1.0)))

    best = _request_path_ms(online, fitted)
    assert best == pytest.approx(paths["trtllm-tensorrt/hopper"], rel=1e-9)
    assert loss(best) < min(loss(best - 0.5), loss(best + 0.5))
    # the engine's TTFTs alone came in low in every row: the path is what they miss
    assert np.all(engine_s < published)
    in_process, _ = translate([r for r in rows if r["group"] == "h100-trtllm-throughput"])
    assert all(v.request_path_ms == 0.0 for v in fit(in_process).values())
    # the online rows alone fit no throughput key: no parameters carry a path, and no row is named for one
    online_only = [r for r in rows if r["group"] != "h100-trtllm-throughput"]
    assert fit(translate(online_only)[0]) == {}
    assert evaluate(online_only, cross_validate=False).request_path_rows_used == {}


def test_serve_calibrate_marks_parameters_on_their_bound(cli, tmp_path: Path) -> None:
    """A review (2026-12-07): kv_read_fraction sat at its upper bound 1.0 in every fitted key, with
    nothing in the table saying so. The text output marks such a value and gives each key's
    cross-validated error, and TTFT and TPOT where rows publish them."""
    import yaml

    from planner.serving.calibrate import at_bound

    assert at_bound("kv_read_fraction", 1.0) and at_bound("block_overhead_us", 0.0)
    assert not at_bound("compute_fraction", 0.6)
    rows = [r for r in _rows() if r["group"] in ("l40s-trtllm-throughput", "l40s-trtllm-batch1-ttft")]
    path = tmp_path / "l40s.yaml"
    path.write_text(yaml.safe_dump({"runs": rows}))
    r = cli("serve-calibrate", "--runs", str(path), "--no-cv")
    assert r.code == 0, r.err
    line = next(x for x in r.out.splitlines() if x.startswith("trtllm-tensorrt/ada"))
    assert " rows, CV none, signed " in line and "kv_read_fraction 1*" in line
    assert "* on its fit bound (serving/calibrate.py FIT)" in r.out
    assert "TTFT over 10 rows: MAPE" in r.out and "its waves at the replay's ratio to them" in " ".join(r.out.split())


def test_the_fit_prices_a_replayed_tpot_row_as_its_replay() -> None:
    """A replayed TPOT row joins the fit as its steady round at its load times the replay's ratio to
    it: at the parameters the ratio was taken at, the fit's log error is the replay's own, and the
    rows are listed among those the shipped fit used."""
    import numpy as np

    from planner.serving.calibrate import X0, _params, _Priced, _tpot_rows, replay_ratios, translate

    rows = [r for r in _rows() if r["group"] == "h100-trtllm-online-latency"][:6]
    plans, _ = translate(rows)
    at = _params(X0)
    fitted = {plans[0].key: at}
    replay_ratios(plans, fitted)
    tpot = _tpot_rows(plans)
    assert len(tpot) == 6 and all(p.tpot_cost is not None and np.isfinite(p.tpot_ratio) for p in tpot)
    errors = _Priced.of([], tpot).log_errors(X0)
    replayed = [predict(p, at)["tpot_s"] / p.published["tpot_s"] for p in tpot]
    assert errors == pytest.approx(np.log(replayed), rel=1e-9, abs=1e-12)
    # the replay is not the steady round: the ratio moves the fit's price
    assert any(abs(p.tpot_ratio - 1.0) > 0.01 for p in tpot)
    from planner.serving.engine import load_engine

    shipped = load_engine("trtllm-tensorrt").calibration
    assert shipped is not None and rows[0]["name"] in shipped.rows["hopper"]


def test_a_load_row_without_a_request_count_is_scored_as_plan_serve_replays_it() -> None:
    """A concurrency row that states no request count scores the TTFT and TPOT plan serve
    --concurrency prints (the replay at the load, ``replay_at_load``), not the steady round
    ``predict`` fits; a row that states its count keeps the replay of that count (``predict``)."""
    from planner.serving.schemas import ServeRequest
    from planner.serving.search import replay_at_load

    row = _row("vllm/llama3.1-8b/h100x1")  # vLLM's latency rows: 8 in flight, the request count stated
    counted = plan_row(row)
    assert counted.mode == "concurrency" and counted.requests is not None
    assert served(counted)["tpot_s"] == predict(counted)["tpot_s"]
    del row["workload"]["num_requests"]
    plan = plan_row(row)
    assert plan.requests is None
    req = ServeRequest(input_len=plan.input_len, output_len=plan.output_len, concurrency=round(plan.batch))
    loaded = replay_at_load(plan.setting, plan.layout, req)
    assert loaded is not None and loaded.tpot_s is not None
    scored = served(plan)
    assert scored["tpot_s"] == loaded.tpot_s
    # vllm bench serve measures through the server: the TTFT holds its request path as the replay's does
    assert plan.through_server and scored["ttft_s"] == pytest.approx(loaded.ttft_s)
    plan.through_server = False  # measured in process: the replay's TTFT less the request path
    in_process = served(plan)["ttft_s"]
    assert in_process == pytest.approx(loaded.ttft_s - plan.setting.params.request_path_s)
    assert scored["tpot_s"] != pytest.approx(predict(plan)["tpot_s"], rel=1e-3)  # the steady round differs


def test_serve_calibrate_write_refuses_to_drop_the_fits_its_rows_do_not_hold(cli, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """35 GH200 rows of TensorRT-LLM had replaced, written, the engine file's whole fitted block: its
    Ada and Ampere fits and its 6.9 ms request path (no TTFT row among them) went (a review,
    2026-12-07). The text names them; --write refuses and writes nothing."""
    import yaml

    import planner.serving.calibrate as calibrate

    def no_write(*args: object) -> list[str]:
        raise AssertionError("the refused fit was written")

    monkeypatch.setattr(calibrate, "write_engine_fits", no_write)
    rows = [r for r in yaml.safe_load(RUNS.read_text())["runs"] if "GH200" in str(r.get("hardware", {}).get("gpu"))]
    path = tmp_path / "gh200.yaml"
    path.write_text(yaml.safe_dump({"runs": rows}))
    said = cli("serve-calibrate", "--runs", str(path))
    text = " ".join(said.out.split())
    assert said.code == 0 and "--write would drop, and so refuses: trtllm-tensorrt ada fit" in text
    r = cli("serve-calibrate", "--runs", str(path), "--write")
    assert r.code == 2 and "trtllm-tensorrt ampere fit, trtllm-tensorrt request_path_ms 6.93" in r.err
