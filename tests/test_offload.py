"""Activation offloading (Megatron-Core --cpu-offloading-num-layers): its rules,
the memory it frees, the transfers it leaves exposed, the search's choice and the export."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import load_cluster, load_model
from planner.cost.compute import layer_forward_s
from planner.cost.memory import OFFLOAD_RESIDENT_LAYERS, layer_activations, offload_kept_share, stage_memory
from planner.cost.step import evaluate
from planner.errors import PlannerError
from planner.export import megatron_args
from planner.mesh import MeshArrays
from planner.pricing import estimate_mesh
from planner.runs import case_from_row, resolve_config
from planner.schemas import JobSpec, ParallelConfig
from planner.search import search
from tests.conftest import assert_one_line_error, sample_rows

LLAMA70B = load_model("llama3-70b")
GB200 = load_cluster("gb200-nvl72", gpus=64)
JOB = JobSpec(global_batch_size=256, seq_len=8192, dtype="fp8")
MESH = {"dp": 64, "zero_stage": 3, "micro_batch_size": 2}


def _mesh(**kw: object) -> MeshArrays:
    return MeshArrays.from_configs([ParallelConfig(**{**MESH, **kw})])  # type: ignore[arg-type]


def test_offloading_takes_megatrons_rules() -> None:
    with pytest.raises(ValueError, match="offload_layers needs pp 1 and recompute 'none'"):
        ParallelConfig(pp=2, dp=32, offload_layers=4)
    with pytest.raises(ValueError, match="offload_layers needs pp 1 and recompute 'none'"):
        ParallelConfig(dp=64, recompute="full", offload_layers=4)
    assert ParallelConfig(dp=64, offload_layers=40).short() == "tp1 pp1 dp64 cp1 ep1 mbs1 v1 z0 offload:40 1f1b"


@pytest.mark.parametrize(
    ("cluster", "stack", "layers", "message"),
    [
        ("gb200-nvl72", "torchtitan", 40, "stack torchtitan offloads no activations"),
        ("dgx-h100", "megatron-core", 40, "profile dgx-h100 states no host_link_gb_per_s"),
        ("gb200-nvl72", "megatron-core", 80, "Megatron-Core offloads fewer than the model's 80 layers"),
    ],
)
def test_a_mesh_that_cannot_offload_says_why(cluster: str, stack: str, layers: int, message: str) -> None:
    job = JOB.model_copy(update={"stack": stack})
    config = ParallelConfig(**MESH, offload_layers=layers)  # type: ignore[arg-type]
    with pytest.raises(PlannerError, match=message):
        estimate_mesh(LLAMA70B, load_cluster(cluster, gpus=64), job, config)


def test_offloaded_layers_leave_the_gpu_but_the_reload_buffers() -> None:
    layers = np.array([80])
    assert offload_kept_share(_mesh(offload_layers=40), layers)[0] == (80 - 40 + OFFLOAD_RESIDENT_LAYERS) / 80
    assert offload_kept_share(_mesh(), layers)[0] == 1.0
    m = np.array([2])
    kept = stage_memory(LLAMA70B, GB200, JOB, _mesh(offload_layers=40), m, "last").activations[0]
    every = stage_memory(LLAMA70B, GB200, JOB, _mesh(), m, "last").activations[0]
    assert kept == pytest.approx(every * 42 / 80)


def test_the_transfer_shows_where_it_outlasts_a_layers_compute() -> None:
    # per offloaded layer: (copy - forward)+ going out, (copy - backward)+ coming back
    mesh = _mesh(offload_layers=40)
    cols = evaluate(LLAMA70B, GB200, JOB, mesh)
    plain = evaluate(LLAMA70B, GB200, JOB, _mesh())
    tokens = 2 * 8192
    copy_s = tokens * layer_activations(LLAMA70B, JOB, mesh).all_dense[0] / 200e9
    forward_s = layer_forward_s(LLAMA70B, GB200, JOB, mesh, moe=False)[0]  # no recompute: a third of the layer
    assert forward_s < copy_s < 2 * forward_s  # fp8 70B on GB200: the copy outlasts a forward, not a backward
    per_microbatch = cols.time["offload"][0] / cols.num_microbatches[0]
    assert per_microbatch == pytest.approx(40 * (copy_s - forward_s), rel=1e-9)
    assert plain.time["offload"][0] == 0.0
    # the rest of the step is the plain mesh's: the same compute, no recompute
    assert cols.time["compute"][0] == pytest.approx(plain.time["compute"][0])


def test_the_search_offloads_where_megatron_does_instead_of_recomputing() -> None:
    # Megatron-Bridge's GB200 FP8-CS preset for this job offloads 40 layers (llama3_workload_base_configs.py)
    ranking = search(LLAMA70B, GB200, JOB, MESH, top=3)
    best = ranking.candidates[0].config.parallel
    assert best.offload_layers is not None and 36 <= best.offload_layers <= 40 and best.recompute == "none"
    assert any(c.config.parallel.recompute_layers for c in ranking.candidates[1:])  # partial recompute is slower
    # no host link priced (DGX H100), or a stack that offloads nothing: no offloading tried
    h100 = search(LLAMA70B, load_cluster("dgx-h100", gpus=64), JOB, MESH, top=20)
    assert all(c.config.parallel.offload_layers is None for c in h100.candidates)


def test_the_export_writes_megatrons_offload_flags_and_torchtitan_refuses(cli) -> None:  # type: ignore[no-untyped-def]
    config = ParallelConfig(**MESH, offload_layers=38)  # type: ignore[arg-type]
    args = megatron_args(LLAMA70B, JOB, config)
    i = args.index("--cpu-offloading-num-layers")  # Megatron-LM has no --cpu-offloading flag: N > 0 turns it on
    assert args[i + 1] == "38" and "--cpu-offloading" not in args
    assert "--recompute-granularity" not in args
    pins = ["-m", "llama3-70b", "-c", "gb200-nvl72", "--gpus", "64", "--dp", "64", "-z", "3", "-b", "2"]
    refused = cli("export", "-f", "torchtitan", *pins, "--offload-layers", "38", "--ignore-memory")
    assert_one_line_error(refused, "offload")


def test_offloaded_activations_must_fit_host_memory() -> None:
    from planner.cost.memory import HOST_MEMORY_RESERVE, host_offload_capacity_bytes, offloaded_host_bytes

    # a Grace CPU's 480 GB serve two GPUs: 223.5 GiB each, a quarter kept for the rest
    cap = host_offload_capacity_bytes(GB200)
    assert cap == pytest.approx(223.5 * 2**30 * (1 - HOST_MEMORY_RESERVE))
    assert host_offload_capacity_bytes(load_cluster("dgx-h100")) == 0.0  # no host figure: nothing offloads
    # one micro-batch of the offloaded layers' saved activations, as the transfer term copies them
    mesh = _mesh(offload_layers=40)
    per_layer = layer_activations(LLAMA70B, JOB, mesh)
    one = float(offloaded_host_bytes(LLAMA70B, JOB, _mesh(offload_layers=1), per_layer)[0])
    assert one == pytest.approx(2 * 8192 * float(per_layer.all_dense[0]))  # mbs 2 x seq x bytes per token
    assert float(offloaded_host_bytes(LLAMA70B, JOB, mesh, per_layer)[0]) == pytest.approx(40 * one)
    # Llama-3-70B at micro-batch 4 offloading 79 layers fills about 660 GiB per GPU: refused with the reason
    job = JobSpec(global_batch_size=512, seq_len=8192)
    est = estimate_mesh(LLAMA70B, load_cluster("gb200-nvl72x2", gpus=128), job,
                        ParallelConfig(dp=128, micro_batch_size=4, zero_stage=2, offload_layers=79))  # fmt: skip
    assert est.memory_per_gpu_bytes <= est.memory_usable_bytes and not est.fits
    assert est.host_offload_bytes_per_gpu > 600 * 2**30
    assert any(w.startswith("does not fit in host memory: 79 offloaded layers") for w in est.warnings)
    # the search offloads only what host memory holds (llama3-405b on 128 GB200 chose 122 layers, ~1.9 TiB)
    big = load_model("llama3-405b")
    ranking = search(big, load_cluster("gb200-nvl72x2", gpus=128), job, top=20)
    offloading = [c for c in ranking.candidates if c.config.parallel.offload_layers]
    assert all(c.host_offload_bytes_per_gpu <= cap for c in ranking.candidates)
    assert all(c.host_offload_bytes_per_gpu > 0 for c in offloading)


def test_a_rows_recipe_hint_gives_its_offloaded_layers() -> None:
    """Megatron-Bridge's FSDP recipes state cpu_offloading_num_layers in the rows' recipe hints:
    the row is priced with those layers offloaded (and so without recompute), not with the
    search's smallest offload; a hint that also recomputes keeps its recompute."""
    row = sample_rows()["mbridge-25.11-dgx-b200-gpt-oss-120b-bf16-main"]
    row["hardware"]["gpu"] = "GB200"  # a system whose profile states its host link
    row["knobs"]["recipe_hint"] = "recipe: cpu_offloading_num_layers=6 (activation offload to host)"
    case = case_from_row(row)
    assert case.pins["offload_layers"] == 6 and case.pins["recompute"] == "none"
    assert resolve_config(case).short() == "tp1 pp1 dp64 cp1 ep8 mbs4 v1 z1 offload:6 1f1b"
    assert not any(a.startswith("recompute") for a in case.assumed)
    row["knobs"]["recipe_hint"] += ", recompute_granularity=full"
    case = case_from_row(row)
    assert "offload_layers" not in case.pins and case.pins["recompute"] == "full"
