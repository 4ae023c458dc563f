"""Megatron's selective recompute by module (--recompute-modules): what each frees and runs again
(cost.recompute.MODULES), its refusals, its export and its reading from published rows."""

from __future__ import annotations

import copy
from typing import get_args

import numpy as np
import pytest

from planner.catalog import load_cluster, load_model
from planner.cost import traffic
from planner.cost.compute import layer_forward_parts, module_recompute_forward_s
from planner.cost.flops import recompute_flops_per_token
from planner.cost.memory import activation_bytes_per_token_layer, activation_parts
from planner.cost.recompute import MODULES
from planner.errors import PlannerError
from planner.export import megatron_args
from planner.mesh import MeshArrays
from planner.pricing import estimate_mesh
from planner.runs import UnpriceableError, case_from_row
from planner.schemas import ParallelConfig
from planner.schemas.job import RecomputeModule
from planner.search import default_job
from tests.conftest import sample_rows

ROWS = sample_rows()
DEEPSEEK = load_model("deepseek-v3")
B200 = load_cluster("dgx-b200x32")
# Megatron-Bridge's DeepSeek-V3 benchmark on 256 B200 (pp16, ep8, micro-batch 1), whose recipe
# recomputes mla_up_proj (scripts/performance/configs/deepseek: recompute_modules = ["mla_up_proj"]),
# with the distributed optimizer (ZeRO-1) its performance recipes run, and so fp8 parameters
PUBLISHED_B200 = ParallelConfig(tp=1, pp=16, dp=16, ep=8, micro_batch_size=1, recompute="selective", zero_stage=1)


def _job(modules: tuple[str, ...] | None, model=DEEPSEEK):  # type: ignore[no-untyped-def]
    return default_job(model, None, 2048, None, dtype="fp8", recompute_modules=modules, moe_load_imbalance=1.0)


def test_the_table_declares_every_module_of_the_schema() -> None:
    assert set(MODULES) == set(get_args(RecomputeModule))


def test_the_default_is_megatrons_core_attn() -> None:
    a = estimate_mesh(DEEPSEEK, B200, _job(None), PUBLISHED_B200)
    b = estimate_mesh(DEEPSEEK, B200, _job(("core_attn",)), PUBLISHED_B200)
    assert a.step_time_s == b.step_time_s and a.memory_per_gpu_bytes == b.memory_per_gpu_bytes


def test_mla_up_proj_frees_q_k_and_v_and_runs_the_up_projections_again() -> None:
    mesh = MeshArrays.from_configs([PUBLISHED_B200])
    job = _job(("mla_up_proj",))
    parts = activation_parts(DEEPSEEK, job, mesh, moe=True)
    # DeepSeek-V3: 128 heads, q/k head dim 192, v 128, tp 1: 2*128*192 * 2 + 2*128*128 bytes per token
    assert parts.qkv[0] == pytest.approx(2 * 128 * 192 * 2 + 2 * 128 * 128)
    kept = activation_bytes_per_token_layer(DEEPSEEK, job, mesh, moe=True)[0]
    # and the latents' norm outputs, the up-projections' GEMM inputs (fp8 here: 1 byte); their inputs stay
    assert parts.mla_normed[0] == pytest.approx(1536 + 512) and parts.mla_latents[0] == pytest.approx(2 * 2048 + 2 * 64)
    assert kept == pytest.approx(parts.total()[0] - parts.qkv[0] - parts.mla_normed[0])
    forward = layer_forward_parts(DEEPSEEK, B200, job, mesh, moe=True)
    again = module_recompute_forward_s(DEEPSEEK, B200, job, mesh, forward)[0]
    up = forward.gemms["attn.q_b"][0] + forward.gemms["attn.kv_b"][0]
    assert up < again < up * (1 + forward.casts_s[0] / forward.gemm_s[0]) + forward.elementwise["rope"][0] + 1e-12
    # FLOPs: q_b 1536 x 128*192 and kv_b 512 x 128*(128+128), forward, per token and layer
    per_layer = 2 * (1536 * 128 * 192 + 512 * 128 * 256)
    assert recompute_flops_per_token(DEEPSEEK, 4096, "selective", "attention", ("mla_up_proj",)) == 61 * per_layer


def test_the_published_b200_layout_and_its_recipes_modules() -> None:
    """With the distributed optimizer the recipe runs (and so fp8 parameters, 1 byte a weight on
    Blackwell), the published mesh fits with either recompute set, the recipe's keeping well under
    0.7 of the activations; as plain DDP, the bf16 weights beside Transformer Engine's cached fp8
    copies and the unsharded optimizer leave no room for the default set (191.2 of 179.1 GiB), and
    the recipe's within 11% of the GPU (160.9 of 179.1 GiB, the runtime reserve's fixed 4 GiB of
    fragmentation counted; 189.8 and 159.9 until the MLA latents' norm inputs and the router's fp32
    scores were counted, 2026-12-07; 195.0 and 163.2 until each pipeline rank was priced with the micro-batches
    its own position holds, 2026-12-07; 177.0 until the first stage was priced with its three dense
    layers, as four MoE layers)."""
    default = estimate_mesh(DEEPSEEK, B200, _job(None), PUBLISHED_B200)
    recipe = estimate_mesh(DEEPSEEK, B200, _job(("mla_up_proj",)), PUBLISHED_B200)
    assert default.fits and recipe.fits
    assert recipe.memory_breakdown_bytes.activations < 0.7 * default.memory_breakdown_bytes.activations
    # the up-projections cost less to run again than the attention core they replace
    assert recipe.step_time_s < default.step_time_s
    ddp = estimate_mesh(DEEPSEEK, B200, _job(("mla_up_proj",)), PUBLISHED_B200.model_copy(update={"zero_stage": 0}))
    assert ddp.fits and ddp.memory_per_gpu_bytes / 2**30 == pytest.approx(160.9, abs=0.1)
    assert not estimate_mesh(DEEPSEEK, B200, _job(None), PUBLISHED_B200.model_copy(update={"zero_stage": 0})).fits
    # 3 bytes a linear weight (bf16 and its fp8 copy) against 1; the embedding and norms 2 either way
    assert 2.5 * recipe.memory_breakdown_bytes.weights < ddp.memory_breakdown_bytes.weights


def test_recomputing_the_moe_layer_runs_its_dispatch_again() -> None:
    mesh = MeshArrays.from_configs([PUBLISHED_B200])
    layers, moe_layers = np.array([4]), np.array([4])
    plain = traffic.ep_all_to_alls_per_microbatch(_job(None), mesh, layers, moe_layers)[0]
    again = traffic.ep_all_to_alls_per_microbatch(_job(("moe",)), mesh, layers, moe_layers)[0]
    assert (plain, again) == (16.0, 24.0)  # dispatch + combine, forward and backward, + the forward again
    a = estimate_mesh(DEEPSEEK, B200, _job(("core_attn",)), PUBLISHED_B200)
    b = estimate_mesh(DEEPSEEK, B200, _job(("core_attn", "moe")), PUBLISHED_B200)
    assert b.time_breakdown_s.ep_comm == pytest.approx(a.time_breakdown_s.ep_comm * 1.5)
    assert b.memory_breakdown_bytes.activations < a.memory_breakdown_bytes.activations
    assert b.hardware_flops_per_step > a.hardware_flops_per_step


@pytest.mark.parametrize(
    ("model", "modules", "pins", "message"),
    [
        ("llama3-70b", ("mla_up_proj",), {}, "mla_up_proj \\(needs MLA attention\\)"),
        ("llama3-70b", ("moe_act",), {}, "moe_act \\(needs MoE layers\\)"),
        ("deepseek-v3", ("mla_up_proj",), {"recompute": "none"}, "selective recompute"),
    ],
)
def test_modules_that_cannot_apply_are_refused(model: str, modules: tuple[str, ...], pins, message: str) -> None:  # type: ignore[no-untyped-def]
    spec = load_model(model)
    config = PUBLISHED_B200.model_copy(update={"ep": 8 if spec.is_moe else 1, **pins})
    with pytest.raises(PlannerError, match=message):
        estimate_mesh(spec, B200, _job(modules, spec), config)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"recompute_modules": ("core_attn", "core_attn")}, "each module once"),
        ({"recompute_modules": ("attention",)}, "recompute_modules"),
        ({"recompute_modules": ("core_attn",), "stack": "torchtitan"}, "takes no list of modules to recompute"),
    ],
)
def test_bad_module_lists_are_refused_at_the_schema(extra: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(PlannerError, match=message):
        default_job(DEEPSEEK, None, 2048, None, **extra)


def test_the_megatron_export_writes_the_modules() -> None:
    args = megatron_args(DEEPSEEK, _job(("mla_up_proj", "moe_act")), PUBLISHED_B200)
    i = args.index("--recompute-modules")
    expected = ["--recompute-granularity", "selective", "--recompute-modules", "mla_up_proj", "moe_act"]
    assert args[i - 2 : i + 3] == expected
    assert "--recompute-modules" not in megatron_args(DEEPSEEK, _job(None), PUBLISHED_B200)


def test_a_rows_recipe_hint_gives_its_modules() -> None:
    row = copy.deepcopy(ROWS["mbridge-25.11-dgx-gb200-deepseek-v3-womtp-bf16-main"])
    row["knobs"]["recipe_hint"] = 'recipe sets recompute_modules = ["mla_up_proj", "layernorm"]'
    case = case_from_row(row)
    assert case.job.recompute_modules == ("mla_up_proj", "layernorm") and case.pins["recompute"] == "selective"
    row["knobs"]["recompute_modules"] = ["core_attn", "attn_sink"]
    with pytest.raises(UnpriceableError, match="not attn_sink"):
        case_from_row(row)


def test_the_cli_takes_megatrons_module_list(cli) -> None:  # type: ignore[no-untyped-def]
    pins = ["-m", "deepseek-v3", "-c", "dgx-b200x32", "--tp", "1", "--pp", "16", "--ep", "8", "-b", "1"]
    pins += ["--recompute", "selective", "--dtype", "fp8", "--moe-routing", "balanced"]  # as Bridge benchmarks
    r = cli("export", *pins, "--dp", "16", "--format", "megatron", "--recompute-modules", "mla_up_proj,layernorm")
    assert r.code == 0 and "--recompute-modules mla_up_proj layernorm" in " ".join(r.out.split())
    r = cli("estimate", *pins, "--recompute-modules", "mla_up_proj", "--json")
    assert r.code == 0 and '"fits": true' in r.out
    bad = cli("estimate", *pins, "--recompute-modules", "attention")
    assert bad.code == 2 and "--recompute-modules 'attention': 'attention' is no module" in bad.err
    assert "mla_up_proj" in bad.err


def test_a_mesh_that_fits_only_with_cheap_modules_says_so() -> None:
    ddp = PUBLISHED_B200.model_copy(update={"zero_stage": 0})  # plain DDP: no optimizer sharding
    est = estimate_mesh(DEEPSEEK, B200, _job(None), ddp.model_copy(update={"recompute": "none"}))
    assert not est.fits
    hint = [w for w in est.warnings if w.startswith("fits with --recompute selective --recompute-modules")]
    assert hint and "core_attn,mla_up_proj,moe_act,layernorm" in hint[0]
    pinned = estimate_mesh(DEEPSEEK, B200, _job(("core_attn", "mla_up_proj", "moe_act", "layernorm")), ddp)
    assert pinned.fits and f"{pinned.memory_per_gpu_bytes / 2**30:.1f} GiB" in hint[0]


def test_the_search_tries_the_cheap_modules_and_says_so() -> None:
    # DeepSeek-V3 in fp8 on 256 B200: with Megatron's default (core_attn) only full-recompute
    # meshes fit the fastest layouts; recomputing the cheap modules (MLA up-projections, expert
    # activation, norms) lets a selective mesh fit, which the search now finds and carries
    from planner.cost.recompute import CHEAP_MODULES, cheap_set_to_try
    from planner.render import recompute_cell
    from planner.search import search

    job = default_job(DEEPSEEK, dtype="fp8")
    assert cheap_set_to_try(DEEPSEEK, job) == CHEAP_MODULES
    assert cheap_set_to_try(DEEPSEEK, job.model_copy(update={"stack": "torchtitan"})) is None
    assert cheap_set_to_try(DEEPSEEK, _job(("mla_up_proj",))) is None  # the user named modules
    best = search(DEEPSEEK, B200, job, top=1).candidates[0]
    plain = search(DEEPSEEK, B200, job, top=1, try_module_sets=False).candidates[0]
    assert best.config.job.recompute_modules == CHEAP_MODULES and best.config.parallel.recompute == "selective"
    assert plain.config.job.recompute_modules is None and plain.config.parallel.recompute == "full"
    assert best.step_time_s < 0.97 * plain.step_time_s  # about 7% faster
    again = estimate_mesh(DEEPSEEK, B200, best.config.job, best.config.parallel)
    assert again.step_time_s == pytest.approx(best.step_time_s, rel=1e-12)
    assert recompute_cell(best) == "sel+" and recompute_cell(plain).startswith("f")
    args = megatron_args(DEEPSEEK, best.config.job, best.config.parallel)
    i = args.index("--recompute-modules")
    assert args[i + 1 : i + 5] == list(CHEAP_MODULES)
