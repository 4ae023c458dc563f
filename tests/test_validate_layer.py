"""The layer-shard microbenchmark: the torch shard runs exactly the GEMMs the step prices, its
prediction is the step's own per-layer compute, and calibration recovers the rates behind it."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import load_cluster, load_model, load_stack
from planner.cost.compute import layer_gemms, lm_head_forward_s, loss_s, mtp_projection_forward_s
from planner.cost.pipeline import num_microbatches
from planner.cost.step import evaluate, slowest_rank
from planner.mesh import MeshArrays
from planner.schemas import JobSpec, ParallelConfig
from planner.schemas.model import ModelSpec
from planner.validate.shard import layer_terms, predict_layer_s, pricing_cluster

CPU = load_cluster("localhost-cpu")


def _small(name: str, **dims: object) -> ModelSpec:
    """A bundled architecture at toy width (same structure: GQA, MLA, MoE, shared experts)."""
    return load_model(name).model_copy(update=dims)


SMALL_MOE = _small("mixtral-8x7b", hidden_size=256, intermediate_size=512, num_attention_heads=8, num_key_value_heads=2)
SMALL_MLA = _small(
    "deepseek-v3",
    hidden_size=256,
    intermediate_size=512,
    moe_intermediate_size=64,
    num_attention_heads=4,
    num_key_value_heads=4,
    n_routed_experts=16,
    q_lora_rank=64,
    kv_lora_rank=32,
)

SMALL_OSS = _small(
    "gpt-oss-120b",
    hidden_size=128,
    intermediate_size=128,
    moe_intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    num_local_experts=16,
    sliding_window=None,
    layer_types=None,
    attention_sinks=False,
)


def _matmul_flops_run_and_priced(
    shard: object, model: ModelSpec, job: JobSpec, plan: ParallelConfig
) -> tuple[float, float]:
    """Matmul FLOPs one training pass of ``shard`` executes (torch's FLOP counter) and those the
    step prices for one forward of its layer (``layer_gemms``)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        shard.step()  # type: ignore[attr-defined]
    counted = counter.get_flop_counts()["Global"]
    matmul = sum(v for op, v in counted.items() if str(op) in ("aten.mm", "aten.addmm"))
    mesh = MeshArrays.from_configs([plan])
    priced = sum(
        float(np.asarray(g.count * 2.0 * np.round(g.m_rows) * g.n * g.k).reshape(-1)[0])
        for g in layer_gemms(model, job, mesh, shard.spec.moe)  # type: ignore[attr-defined]
    )
    return float(matmul), priced


CASES = [
    (load_model("gpt2-124m"), ParallelConfig(tp=2, sequence_parallel=True, recompute="full"), 128),
    (load_model("llama3-8b"), ParallelConfig(tp=4, cp=2, recompute="selective"), 128),
    (SMALL_MOE, ParallelConfig(tp=2, ep=4, dp=4), 64),
    (SMALL_MLA, ParallelConfig(tp=2, ep=4, dp=4, sequence_parallel=True), 64),
]


@pytest.mark.parametrize(("model", "plan", "seq_len"), CASES, ids=["gpt2-sp-full", "llama-cp-sel", "moe", "mla-moe"])
def test_shard_runs_the_priced_gemms_forward_and_backward(model: ModelSpec, plan: ParallelConfig, seq_len: int) -> None:
    # torch's FLOP counter over one training pass of the shard: every matmul FLOP it executes is
    # one the step prices (layer_gemms x forward passes: 3, or 4 under full recompute), no more.
    torch = pytest.importorskip("torch")
    from planner.validate.layer import Shard

    torch.set_num_threads(1)
    job = JobSpec(global_batch_size=64, seq_len=seq_len)
    terms = layer_terms(model, job, plan, CPU, on_gpu=False)
    assert {t.name for t in terms} == (
        {"layer.moe"} | ({"layer.dense"} if model.num_dense_layers else set()) if model.is_moe else {"layer.dense"}
    )
    passes = 4.0 if plan.recompute == "full" else 3.0
    for term in terms:
        assert term.layer is not None
        shard = Shard(term.layer, torch.device("cpu"), torch.float32)
        matmul, priced = _matmul_flops_run_and_priced(shard, model, job, plan)
        assert matmul == pytest.approx(passes * priced, rel=1e-9)
        assert shard.x.shape[0] == (seq_len // plan.cp // plan.tp if plan.sequence_parallel else seq_len // plan.cp)


def test_shard_replays_the_sort_the_clamp_and_the_expert_bias_it_prices() -> None:
    # A gpt-oss-shaped layer at toy width on Megatron-Core with 4 local experts per rank: the
    # replay sorts the routed rows into expert order and back, clamps gate and up outside the
    # activation and adds each expert's output bias after its second GEMM, as the price counts
    # (compute.token_reorders, expert_epilogue_bytes); none of it is a matmul, so the shard's
    # matmul FLOPs stay the priced ones, and every weight, the per-expert biases too, gets a gradient.
    torch = pytest.importorskip("torch")
    from planner.validate.layer import Shard

    torch.set_num_threads(1)
    model = SMALL_OSS
    plan = ParallelConfig(ep=4, dp=4)
    job = JobSpec(global_batch_size=64, seq_len=64)
    (term,) = layer_terms(model, job, plan, CPU, on_gpu=False)
    assert term.layer is not None
    shard = Shard(term.layer, torch.device("cpu"), torch.float32)
    assert shard.expert_order is not None and shard.clamp == 7.0
    assert sorted(n for n in shard.weights if n.endswith("bias_after")) == [
        f"moe.expert_out.{e}.bias_after" for e in range(4)
    ]
    matmul, priced = _matmul_flops_run_and_priced(shard, model, job, plan)
    assert matmul == pytest.approx(3.0 * priced, rel=1e-9)
    # at one expert per rank there is nothing to sort
    (single,) = layer_terms(model, job, ParallelConfig(ep=16, dp=16), CPU, on_gpu=False)
    assert single.layer is not None
    assert Shard(single.layer, torch.device("cpu"), torch.float32).expert_order is None


@pytest.mark.parametrize(
    ("model_name", "plan"),
    [
        ("llama3-70b", ParallelConfig(tp=8, pp=4, dp=4, recompute="selective", sequence_parallel=True)),
        ("mixtral-8x7b", ParallelConfig(tp=2, pp=2, ep=8, dp=32, recompute="full")),
        ("deepseek-v3", ParallelConfig(tp=1, pp=16, ep=64, dp=64, micro_batch_size=1)),
    ],
)
def test_layer_terms_price_the_steps_own_compute(model_name: str, plan: ParallelConfig) -> None:
    # On the plan's own GPU (the replay an H200 run makes), the layer terms times their calls,
    # plus the LM heads' three passes and losses and the MTP projections where the step waits for
    # the last rank (``slowest_rank``), are exactly the step's compute term: one
    # model, no copy. A replay runs at burst clocks, so the step is priced without the
    # sustained fraction a long run loses, and it runs the local experts one after another, so
    # the step is priced on a stack whose grouped linear does the same.
    model = load_model(model_name)
    cluster = pricing_cluster(load_cluster("dgx-h200", gpus=plan.tp * plan.pp * plan.dp * plan.cp), "bf16")
    assert cluster.gpu.sustained_tensor_fraction is None
    serial = load_stack("megatron-core").model_copy(update={"grouped_gemm_streams": 1})
    job = JobSpec(global_batch_size=1024, seq_len=4096, stack=serial)
    mesh = MeshArrays.from_configs([plan])
    m = float(num_microbatches(job.batch_size, mesh)[0])
    terms = layer_terms(model, job, plan, cluster, on_gpu=True)
    assert all(t.dtype == "bf16" for t in terms)
    layers_total = sum(t.calls_per_step * t.predicted_s for t in terms)
    rank = slowest_rank(model, cluster, job, plan)
    mtp, heads = rank.mtp, rank.heads
    head = (
        m * heads * float(3.0 * lm_head_forward_s(model, cluster, job, mesh)[0] + loss_s(model, cluster, job, mesh)[0])
    )
    head += m * mtp * 3.0 * float(mtp_projection_forward_s(model, cluster, job, mesh)[0])
    compute = float(evaluate(model, cluster, job, mesh).time["compute"][0])
    assert layers_total + head == pytest.approx(compute, rel=1e-9)


@pytest.mark.parametrize(
    ("cluster_name", "model_name", "gemm", "attention"),
    [("localhost-cpu", "gpt2-124m", 0.7, 0.5), ("dgx-h200", "llama3-8b", 1.3, 0.9)],
)
def test_calibration_recovers_the_gemm_rate_and_attention_efficiency_of_layer_shards(
    cluster_name: str, model_name: str, gemm: float, attention: float
) -> None:
    # Synthetic measurements made with known factors on the layer shards and GEMMs of three plans
    # (fp32 on CPU; bf16 on an H200, where x1.3 pushes the GEMM efficiency past 1 so the peak is
    # raised instead); the fit must find both factors, and the profile it writes must price every
    # sample as the fit did.
    from planner.validate.calibrate import Params, calibrated_profile, fit, initial_params, predict
    from planner.validate.gemms import gemm_terms
    from planner.validate.schemas import TermResult

    cluster = load_cluster(cluster_name)
    model, profile, on_gpu = load_model(model_name), cluster.profile, cluster_name != "localhost-cpu"
    terms = []
    for plan in (ParallelConfig(tp=1), ParallelConfig(tp=2, cp=2), ParallelConfig(tp=4)):
        for seq_len in (256, 1024):
            job = JobSpec(global_batch_size=8, seq_len=seq_len)
            terms += layer_terms(model, job, plan, cluster, on_gpu) + gemm_terms(model, job, plan, cluster, on_gpu)
    dtype = terms[0].dtype
    start = initial_params(profile)
    truth = Params(links=start.links, gemm_scale={dtype: gemm}, attention_scale=attention)
    results = [TermResult(spec=t, measured_s=1.0, p10_s=1.0, p90_s=1.0, repeats=1, ratio=None) for t in terms]
    measured = predict(profile, truth, results)
    results = [r.model_copy(update={"measured_s": float(s)}) for r, s in zip(results, measured, strict=True)]
    params, before, after = fit(profile, results)
    assert params.gemm_scale[dtype] == pytest.approx(gemm, rel=0.02)
    assert params.attention_scale == pytest.approx(attention, rel=0.05)
    assert after.median < 0.01 < before.median
    written = calibrated_profile(profile, params, results, "fitted", "test")
    assert (written.gpu.peak_tflops[dtype] > profile.gpu.peak_tflops[dtype]) == on_gpu  # type: ignore[index]
    np.testing.assert_allclose(
        predict(written, initial_params(written), results), predict(profile, params, results), rtol=1e-5
    )


def test_layer_prediction_on_cpu_prices_fp32() -> None:
    # On CPU the shard runs fp32: priced at the fp32 rate, not the emulated bf16 rate (250x slower).
    job = JobSpec(global_batch_size=8, seq_len=256)
    (term,) = layer_terms(load_model("gpt2-124m"), job, ParallelConfig(), CPU, on_gpu=False)
    assert term.dtype == "fp32" and term.layer is not None
    flops = 3.0 * 2.0 * 256 * (4 * 768 * 768 + 2 * 768 * 3072)  # 3 passes of the layer's GEMMs
    assert flops / CPU.gpu.peak_flops_per_s("fp32") < term.predicted_s < 2.0 * flops / CPU.gpu.peak_flops_per_s("fp32")
    assert predict_layer_s(term.layer, CPU, "fp32") == term.predicted_s


def test_a_layer_shard_too_slow_for_the_timeout_is_refused_in_one_line(cli) -> None:
    # One llama3-70b layer (tp=8, 8k tokens) in fp32 on one CPU core is minutes: refused before
    # any rank starts, naming the flag and the way out.
    pytest.importorskip("torch")
    from tests.conftest import assert_one_line_error

    args = ("validate", "--local-ranks", "2", "--model", "llama3-70b", "--cluster", "dgx-h100x16", "--top", "1")
    r = cli(*args, "--layer-shard", "--timeout", "60")
    assert_one_line_error(r, "--layer-shard", "layer.dense", "localhost-cpu", "--timeout", "--no-layer-shard")


def test_torchtitan_op_sac_replay_recomputes_every_second_matmul() -> None:
    # torchtitan's per-op SAC (stacks/torchtitan.yaml): of the shard's four matmuls (QKV and
    # gate/up fused) the 2nd and 4th are not saved; backward needs the 2nd's output (the second
    # norm reads the residual sum) and not the 4th's (only the residual add reads it), so it runs
    # the attention output projection again, and not the attention core.
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from planner.validate.layer import Shard

    torch.set_num_threads(1)
    model = load_model("llama3-8b").model_copy(
        update={"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2}
    )
    plan = ParallelConfig(recompute="selective")
    mesh = MeshArrays.from_configs([plan])
    counts = {}
    for stack in ("megatron-core", "torchtitan"):
        job = JobSpec(global_batch_size=8, seq_len=64, stack=stack)
        [term] = layer_terms(model, job, plan, CPU, on_gpu=False)
        assert term.layer is not None
        shard = Shard(term.layer, torch.device("cpu"), torch.float32)
        with FlopCounterMode(display=False) as counter:
            shard.step()
        counts[stack] = sum(v for op, v in counter.get_flop_counts()["Global"].items() if str(op) == "aten.mm")
    gemms = {
        g.name: 2.0 * float(np.asarray(g.m_rows * g.n * g.k).reshape(-1)[0])
        for g in layer_gemms(model, job, mesh, False)
    }
    assert counts["megatron-core"] == pytest.approx(3.0 * sum(gemms.values()))
    assert counts["torchtitan"] == pytest.approx(3.0 * sum(gemms.values()) + gemms["attn.out"])
