"""Property tests of the cost engine (hypothesis): monotonicity, finiteness, schema round-trip."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planner.catalog import load_cluster, load_model
from planner.cost.pipeline import bubble_fraction
from planner.mesh import MeshArrays
from planner.pricing import estimate_mesh
from planner.schemas import Estimate, JobSpec, ParallelConfig

MODELS = ["llama3-8b", "llama3-70b", "mixtral-8x7b", "gpt-22b", "qwen3-30b-a3b"]
settings.register_profile("planner", max_examples=40, deadline=None, derandomize=True)
settings.load_profile("planner")


def _stack(zero_stage: int) -> str:
    """A stack that runs ``zero_stage`` with pipeline parallelism (Stack.zero_stages, zero_with_pipeline):
    torchtitan's FSDP2 runs ZeRO-2/3 under a pipeline but no ZeRO-1, and trains bf16 with TP or PP
    only under FSDP (Stack.amp_through_sharding, so not at ZeRO-0); Megatron-Core's distributed
    optimizer is the ZeRO-1 that runs with one, its plain DDP the ZeRO-0."""
    return "megatron-core" if zero_stage <= 1 else "torchtitan"


def _memory(model_name: str, **mesh: object) -> float:
    model = load_model(model_name)
    # Megatron-Core trains a MoE layer under TP only with sequence parallelism (Stack.moe_tp_needs_sequence_parallel)
    sp = model.is_moe and int(mesh["tp"]) > 1 and int(mesh["zero_stage"]) <= 1  # type: ignore[call-overload]
    config = ParallelConfig(**mesh, sequence_parallel=sp)  # type: ignore[arg-type]
    cluster = (
        load_cluster("dgx-h100", gpus=config.num_gpus)
        if config.num_gpus <= 8
        else load_cluster("dgx-h100x1", gpus=config.num_gpus)
    )
    job = JobSpec(
        global_batch_size=64 * config.dp * config.micro_batch_size, seq_len=4096, stack=_stack(config.zero_stage)
    )
    return estimate_mesh(model, cluster, job, config).memory_per_gpu_bytes


@given(
    model_name=st.sampled_from(MODELS),
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([1, 2]),
    zero=st.integers(0, 3),
    recompute=st.sampled_from(["none", "selective", "full"]),
    mbs=st.sampled_from([1, 2]),
)
def test_memory_does_not_rise_when_tp_or_pp_doubles(
    model_name: str, tp: int, pp: int, dp: int, zero: int, recompute: str, mbs: int
) -> None:
    """Doubling t or p with the rest fixed never raises memory per GPU (1F1B, layers divisible
    by 2p: interleaved 1F1B keeps p(1 + (p-1)/(pv)) micro-batches, which grows with p, and an
    uneven split can give the worst stage more than its share)."""
    model = load_model(model_name)
    assume(dp > 1 or zero <= 1)  # FSDP over one rank is none: torchtitan would train it in fp32 (amp_through_sharding)
    assume(model.num_hidden_layers % (2 * pp) == 0)
    assume(model.num_attention_heads % (2 * tp) == 0 and model.num_kv_heads % (2 * tp) == 0)  # tp divides the KV heads
    assume(model.intermediate_size % (2 * tp) == 0)
    base = {"tp": tp, "pp": pp, "dp": dp, "zero_stage": zero, "recompute": recompute, "micro_batch_size": mbs}
    before = _memory(model_name, **base)
    assert _memory(model_name, **{**base, "tp": 2 * tp}) <= before * (1 + 1e-12)
    if pp > 1 or zero <= 1:
        # torchtitan's pipeline keeps FSDP's gathered weights and unsharded gradients through a step
        # (Stack.pipeline_holds_fsdp_state): its first pipeline stage can add memory (Mixtral-8x7B at tp 2, dp 2,
        # ZeRO-3: 203.8 -> 217.7 GiB)
        assert _memory(model_name, **{**base, "pp": 2 * pp}) <= before * (1 + 1e-12)


@given(
    p=st.integers(1, 64),
    m=st.integers(1, 512),
    extra=st.integers(1, 64),
    schedule=st.sampled_from(["gpipe", "1f1b", "interleaved-1f1b", "zb-h1"]),
    v=st.integers(2, 8),
)
def test_more_microbatches_never_raise_the_bubble(p: int, m: int, extra: int, schedule: str, v: int) -> None:
    assume(schedule != "interleaved-1f1b" or p >= 2)
    config = ParallelConfig(pp=p, schedule=schedule, virtual_stages=v if schedule == "interleaved-1f1b" else 1)  # type: ignore[arg-type]
    mesh = MeshArrays.from_configs([config])
    assert bubble_fraction(np.array([m + extra]), mesh)[0] <= bubble_fraction(np.array([m]), mesh)[0]


@given(
    model_name=st.sampled_from([*MODELS, "deepseek-v3"]),
    profile=st.sampled_from(["dgx-a100-80g", "dgx-h100", "gb200-nvl72", "mi300x"]),
    tp=st.sampled_from([1, 2, 8]),
    pp=st.sampled_from([1, 2, 4]),
    cp=st.sampled_from([1, 2]),
    zero=st.integers(0, 3),
    recompute=st.sampled_from(["none", "selective", "full"]),
    sp=st.booleans(),
)
def test_every_figure_is_finite_nonnegative_and_round_trips(
    model_name: str, profile: str, tp: int, pp: int, cp: int, zero: int, recompute: str, sp: bool
) -> None:
    model = load_model(model_name)
    assume(model.num_attention_heads % tp == 0 and model.num_kv_heads % tp == 0 and model.intermediate_size % tp == 0)
    assume(tp > 1 or not sp)
    assume(sp or tp == 1 or not model.is_moe or zero >= 2)  # Megatron-Core's MoE under TP needs SP
    gpus = tp * pp * cp * 2
    cluster = load_cluster(profile, gpus=gpus)
    assume(cluster.num_gpus == gpus)
    config = ParallelConfig(tp=tp, pp=pp, cp=cp, dp=2, zero_stage=zero, recompute=recompute, sequence_parallel=sp)  # type: ignore[arg-type]
    job = JobSpec(global_batch_size=32, seq_len=4096, stack=_stack(zero))
    est = estimate_mesh(model, cluster, job, config)
    numbers = [
        est.step_time_s,
        est.memory_per_gpu_bytes,
        est.mfu,
        est.hfu,
        est.tokens_per_s,
        *est.time_breakdown_s.model_dump().values(),
        *est.memory_breakdown_bytes.model_dump().values(),
        *est.comm_bytes_per_gpu.model_dump().values(),
    ]
    assert all(np.isfinite(x) and x >= 0 for x in numbers)
    assert Estimate.model_validate_json(est.model_dump_json()) == est


def test_layer_costs_priced_once_per_distinct_row_equal_the_direct_pricing() -> None:
    # layer_costs prices each distinct LAYER_COST_COLUMNS row once and spreads it; if a layer's
    # cost ever reads another mesh column, the shared price would go wrong: every search mesh of a
    # MoE model, with its schedules, ZeRO stages and recomputes, must price as directly.
    from planner.cost.step import _layer_costs, layer_costs
    from planner.search import enumerate_meshes

    model, cluster = load_model("mixtral-8x7b"), load_cluster("dgx-h100x2")
    job = JobSpec(global_batch_size=256, seq_len=4096)
    mesh = enumerate_meshes(model, cluster, {})
    shared, direct = layer_costs(model, cluster, job, mesh), _layer_costs(model, cluster, job, mesh)
    for field in type(shared).__dataclass_fields__:
        np.testing.assert_allclose(
            getattr(shared, field), np.broadcast_to(getattr(direct, field), len(mesh)), rtol=1e-12
        )
