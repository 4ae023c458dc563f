"""NVFP4 (fp4) training and layers kept in bf16: the format's rates, quantisation traffic, LM head,
memory, the bf16 tail's placement, the rules that refuse it, and the runs translation."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import planner
from planner.catalog import load_cluster, load_model, load_stack
from planner.cost.compute import cast_bytes_per_element, lm_head_forward_s, quantise_forward_s
from planner.cost.memory import linear_input_bytes_per_element
from planner.errors import PlannerError, UnpriceableError
from planner.mesh import MeshArrays
from planner.runs import (
    bf16_last_layers_from,
    case_from_row,
    dtype_from,
    load_runs,
    published_peak_memory_bytes,
    resolve_config,
)
from planner.schemas import JobSpec, ParallelConfig
from planner.schemas.base import GIB_BYTES
from tests.conftest import SAMPLE_RUNS, assert_one_line_error

NVFP4_ROW = SAMPLE_RUNS.parent / "runs_nvfp4.yaml"  # two rows of modern_runs.yaml, copied verbatim
LLAMA8B = load_model("llama3-8b")  # 32 layers
B200 = load_cluster("dgx-b200")
STACKS = ("megatron-core", "torchtitan")


def _job(dtype: str, **fields: object) -> JobSpec:
    return JobSpec(global_batch_size=64, seq_len=4096, dtype=dtype, **fields)  # type: ignore[arg-type]


def test_blackwell_profiles_list_the_dense_fp4_peak_and_its_measured_gemm_share() -> None:
    gpu = B200.gpu
    assert gpu.peak_flops_per_s("fp4") == 9.0e15 == 2 * gpu.peak_flops_per_s("fp8")
    assert gpu.gemm_efficiency_for("fp4") == 0.60  # torchao's B200 NVFP4 GEMM, 5.37 of 9 PFLOP/s
    assert load_cluster("gb300-nvl72").gpu.peak_tflops["fp4"] == 15000.0  # Blackwell Ultra: 3x its fp8
    assert "fp4" not in load_cluster("dgx-h100").gpu.peak_tflops


def test_nvfp4_quantisation_moves_the_stacks_counted_bytes() -> None:
    mesh = MeshArrays.from_configs([ParallelConfig(dp=8)])
    assert cast_bytes_per_element(_job("fp4")) == 7.125  # Transformer Engine: amax + row cast + RHT column cast
    assert cast_bytes_per_element(_job("fp4", stack="torchtitan")) == 5.125  # torchao: amax + one fused cast
    assert cast_bytes_per_element(_job("bf16")) == 0.0
    te, ao = (
        quantise_forward_s(LLAMA8B, B200, _job("fp4", stack=s), mesh, False)[0] for s in ("megatron-core", "torchtitan")
    )
    assert te / ao == pytest.approx(7.125 / 5.125)
    mx = quantise_forward_s(LLAMA8B, B200, _job("fp8", fp8_scaling="block"), mesh, False)[0]
    assert te / mx == pytest.approx(7.125 / (4.0 + 2.0 / 32.0))


def test_the_lm_head_stays_bf16_and_linears_keep_their_nvfp4_input() -> None:
    mesh = MeshArrays.from_configs([ParallelConfig(dp=8)])
    head = {d: lm_head_forward_s(LLAMA8B, B200, _job(d), mesh)[0] for d in ("bf16", "fp8", "fp4")}
    assert head["fp4"] == head["fp8"] == head["bf16"]
    assert linear_input_bytes_per_element(_job("fp4")) == 0.5625  # E2M1 plus an E4M3 scale per 16
    assert linear_input_bytes_per_element(_job("fp4", stack="torchtitan")) == 0.5625


def test_the_bf16_tail_moves_the_step_from_the_fp4_one_to_the_bf16_one() -> None:
    """bf16_last_layers = L would leave fp4 only in the format's name, its MFU read against the fp4
    peak: refused (--dtype bf16 is that job); L - 1 of them price all but one layer's way to bf16."""
    kw = {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 2, "recompute": "full"}
    bf16 = planner.estimate(LLAMA8B, B200, _job("bf16"), **kw)
    with pytest.raises(PlannerError, match="bf16_last_layers 32: llama3-8b has 32 transformer layers, so at most 31"):
        planner.estimate(LLAMA8B, B200, _job("fp4", bf16_last_layers=32), **kw)
    all_but_one = planner.estimate(LLAMA8B, B200, _job("fp4", bf16_last_layers=31), **kw)
    fp4 = planner.estimate(LLAMA8B, B200, _job("fp4"), **kw)
    tail = planner.estimate(LLAMA8B, B200, _job("fp4", bf16_last_layers=5), **kw)
    assert fp4.step_time_s < tail.step_time_s < all_but_one.step_time_s < bf16.step_time_s
    assert (all_but_one.step_time_s - fp4.step_time_s) / (bf16.step_time_s - fp4.step_time_s) == pytest.approx(
        31 / 32, rel=0.02
    )
    # pp 1: the 5 layers are 5/32 of the way from the fp4 step to the bf16 one
    assert (tail.step_time_s - fp4.step_time_s) / (bf16.step_time_s - fp4.step_time_s) == pytest.approx(
        5 / 32, rel=0.02
    )
    assert fp4.tokens_per_s_per_gpu / bf16.tokens_per_s_per_gpu == pytest.approx(1.79, abs=0.03)


def test_the_bf16_tail_sits_on_the_last_pipeline_rank() -> None:
    kw = {"tp": 1, "pp": 4, "dp": 2, "micro_batch_size": 1}
    even = planner.estimate(LLAMA8B, B200, _job("fp4"), **kw)
    tail = planner.estimate(LLAMA8B, B200, _job("fp4", bf16_last_layers=8), **kw)
    # the 8 bf16 layers fill the last of 4 stages: the pipeline waits for it on every micro-batch
    assert tail.step_time_s > even.step_time_s * 1.05


@pytest.mark.parametrize("v", [2, 4])
def test_a_tail_counts_back_through_the_interleaved_chunks(v: int) -> None:
    """With v chunks per rank the tail wraps from the last rank's last chunk to the other ranks'
    and back to the last rank's earlier chunks: a tail of all but one layer is all but one layer's
    share of the way to the bf16 step (a tail of every layer is refused: that job is bf16's)."""
    kw = {"tp": 1, "pp": 2, "dp": 4, "micro_batch_size": 1, "virtual_stages": v}
    steps = [planner.estimate(LLAMA8B, B200, _job("fp4", bf16_last_layers=n), **kw).step_time_s for n in (0, 8, 16, 31)]
    bf16 = planner.estimate(LLAMA8B, B200, _job("bf16"), **kw).step_time_s
    assert steps[0] < steps[1] <= steps[2] < steps[3] < bf16
    # the one fp4 layer leaves about 1/32 of the difference (0.036 at v 2 and 4)
    assert (bf16 - steps[3]) / (bf16 - steps[0]) == pytest.approx(1 / 32, rel=0.25)
    with pytest.raises(PlannerError, match="bf16_last_layers 8 with schedule dualpipev: the planner prices a bf16"):
        planner.estimate(LLAMA8B, B200, _job("fp4", bf16_last_layers=8), tp=1, pp=2, dp=4, schedule="dualpipev")


def test_fp4_is_refused_where_it_cannot_run(cli) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PlannerError, match=r"dtype fp4 \(NVFP4\) needs FP4 tensor cores: H100 SXM5 80GB lists"):
        planner.estimate(LLAMA8B, "dgx-h100", _job("fp4"), tp=1, pp=1, dp=8)
    with pytest.raises(
        ValueError, match="stack deepspeed trains no NVFP4 \\(stacks that do: megatron-core, torchtitan\\)"
    ):
        _job("fp4", stack="deepspeed")
    with pytest.raises(
        ValueError, match=r"bf16_last_layers 4 \(--bf16-last-layers\) keeps layers out of fp8/fp4, but dtype is 'bf16'"
    ):
        _job("bf16", bf16_last_layers=4)
    with pytest.raises(PlannerError, match="bf16_last_layers 40: llama3-8b has 32 transformer layers"):
        planner.estimate(LLAMA8B, B200, _job("fp4", bf16_last_layers=40), tp=1, pp=1, dp=8)
    assert load_stack("megatron-core-25.09").fp4_cast_bytes_per_element is None
    assert_one_line_error(
        cli("--model", "llama3-8b", "--cluster", "dgx-h100", "--dtype", "fp4"), "needs FP4 tensor cores"
    )


def test_runs_name_nvfp4_and_the_layers_they_keep_in_bf16() -> None:
    assert dtype_from("nvfp4 linears in layers 0-26") == "fp4"
    assert dtype_from("mxfp8") == "fp8" and dtype_from("bf16") == "bf16"
    assert bf16_last_layers_from("nvfp4 linears in layers 0-26, layers 27-31 and lm head bf16", 32) == 5
    assert bf16_last_layers_from("nvfp4", 32) == 0
    with pytest.raises(UnpriceableError, match="bf16 layers 0-3 are not the model's last ones"):
        bf16_last_layers_from("nvfp4, layers 0-3 bf16", 32)
    assert published_peak_memory_bytes({"memory": "78.63 GiB (42.67%)"}) == pytest.approx(78.63 * GIB_BYTES)
    assert published_peak_memory_bytes({"memory": "a lot"}) is None


def test_a_stated_peak_memory_rules_out_meshes_that_keep_far_more() -> None:
    """torchtitan's Qwen3-8B NVFP4 run measured 78.63 GiB without stating its activation
    checkpointing: the fastest mesh without recompute needs about twice that, so the run
    recomputed, and the translation prices the fastest mesh the measured peak allows."""
    row, mxfp8 = load_runs(NVFP4_ROW)
    case = case_from_row(row)
    assert (case.job.dtype, case.job.bf16_last_layers, case.job.stack_name) == ("fp4", 6, "torchtitan")
    assert resolve_config(case).recompute != "none"
    unstated = copy.deepcopy(row)
    unstated["measured"].pop("memory")
    assert resolve_config(case_from_row(unstated)).recompute == "none"
    assert np.isfinite(case.published_peak_memory_bytes or np.nan)
    # and a run that measured 179.9 GiB of 184 kept more than full recompute's 97 GiB: selective
    # recompute, which the planner counts at 197 GiB, over the GPU it ran on
    llama = case_from_row(mxfp8)
    chosen = resolve_config(llama)
    assert chosen.recompute == "selective"
    assert planner.estimate(llama.model, llama.cluster, llama.job, **chosen.model_dump()).memory_per_gpu_bytes > (
        llama.cluster.gpu.hbm_capacity_bytes
    )
