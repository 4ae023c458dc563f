"""Full recompute of only some layers (Megatron-LM --recompute-method block --recompute-num-layers):
memory and time between none and full, linear in the layers recomputed, the fewest that fit found
by the search, and written by the exports."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import load_cluster, load_model
from planner.cost.pipeline import layers_on_worst_stage
from planner.cost.step import evaluate
from planner.errors import PlannerError
from planner.export import deepspeed_config, megatron_args, torchtitan_config
from planner.mesh import MeshArrays
from planner.pricing import estimate_mesh
from planner.runs import case_from_row
from planner.schemas import JobSpec, ParallelConfig
from planner.search import default_job, partial_recompute, search
from planner.validate.shard import recompute_split
from tests.conftest import assert_one_line_error, sample_rows

MODEL = load_model("llama3-70b")
JOB = JobSpec(global_batch_size=64, seq_len=8192)
BASE = {"tp": 8, "pp": 4, "dp": 2, "micro_batch_size": 1, "zero_stage": 1, "sequence_parallel": True}
EVEN = "Et*20|(t*20|)*2t*20L"  # Megatron's even split, 20 layers per stage (the plan's own gives 21/21/20/19 + head)


def _columns(**recompute: object):  # type: ignore[no-untyped-def]
    mesh = MeshArrays.from_configs([ParallelConfig(**BASE, **recompute, pipeline_layout=EVEN)])
    return evaluate(MODEL, load_cluster("dgx-h100x8"), JOB, mesh)


def test_recompute_layers_needs_full_recompute() -> None:
    with pytest.raises(ValueError, match="recompute_layers needs recompute 'full'"):
        ParallelConfig(recompute="none", recompute_layers=4)
    config = ParallelConfig(**BASE, recompute="full", recompute_layers=5)
    assert config.recompute_label == "full:5" and "full:5" in config.short()
    assert MeshArrays.from_configs([config]).row(0) == config


def test_memory_and_time_lie_between_none_and_full_linearly_in_the_layers() -> None:
    # 80 layers over pp 4: 20 per stage, one chunk.
    none, every = _columns(recompute="none"), _columns(recompute="full")
    parts = {r: _columns(recompute="full", recompute_layers=r) for r in (5, 10, 15, 19, 20)}
    act = {r: float(c.memory.activations[0]) for r, c in parts.items()}
    assert act[20] == pytest.approx(float(every.memory.activations[0]))
    step = (act[5] - act[10]) / 5  # a recomputed layer's saving
    assert act[10] - act[15] == pytest.approx(5 * step) and act[15] - act[19] == pytest.approx(4 * step)
    # the last saves less by the one layer full recompute re-materialises on top of the inputs; while a
    # layer of the chunk keeps everything, it is freed before the recomputed ones run again (a review,
    # 2026-12-07: recomputing the first layer had needed more memory than none)
    buffer = step - (act[19] - act[20])
    assert 0 < buffer < step
    assert float(none.memory.activations[0]) - act[5] == pytest.approx(5 * step)
    assert float(none.memory.activations[0]) > act[5] > act[20]
    # each recomputed layer adds one more forward of that layer: 3 passes + the share
    compute = {r: float(c.time["compute"][0]) for r, c in parts.items()}
    assert compute[20] == pytest.approx(float(every.time["compute"][0]))
    assert float(none.time["compute"][0]) < compute[5] < compute[10] < compute[20]
    assert compute[10] - compute[5] == pytest.approx(compute[20] - compute[15], rel=1e-9)
    mesh = MeshArrays.from_configs([ParallelConfig(**BASE, recompute="full", recompute_layers=5, pipeline_layout=EVEN)])
    assert float(mesh.forward_passes(layers_on_worst_stage(MODEL, JOB, mesh))[0]) == pytest.approx(3.25)


def test_the_search_finds_the_fewest_layers_that_fit() -> None:
    cluster = load_cluster("dgx-h100x8")
    pins = BASE | {"micro_batch_size": 4}  # 112 GiB without recompute, 34 GiB with it everywhere
    ranking = search(MODEL, cluster, JOB, pins, top=1)
    best = ranking.candidates[0].config.parallel
    assert best.recompute == "full" and best.recompute_layers is not None
    per_chunk = -(-80 // (4 * best.virtual_stages))  # 80 layers over pp 4
    assert f"first {best.recompute_layers} of each chunk's {per_chunk} layers" in ranking.explanation[0]
    fits = estimate_mesh(MODEL, cluster, JOB, best)
    assert fits.fits
    fewer = best.model_copy(update={"recompute_layers": best.recompute_layers - 1})
    assert not estimate_mesh(MODEL, cluster, JOB, fewer).fits
    # nothing to add where every layer already fits without recompute or all must be recomputed
    mesh = MeshArrays.from_configs([ParallelConfig(**BASE, recompute="none")])
    assert len(partial_recompute(MODEL, cluster, JOB, mesh)) == 0


def test_a_pinned_full_recompute_means_every_layer() -> None:
    cluster = load_cluster("dgx-h100x8")
    pins = {**BASE, "micro_batch_size": 4, "recompute": "full"}
    best = search(MODEL, cluster, JOB, pins, top=1).candidates[0].config.parallel
    assert best.recompute == "full" and best.recompute_layers is None
    pinned = search(MODEL, cluster, JOB, {**pins, "recompute_layers": 15}, top=1).candidates[0].config.parallel
    assert pinned.recompute_layers == 15
    with pytest.raises(PlannerError, match="needs --recompute full"):
        search(MODEL, cluster, JOB, {**BASE, "recompute": "none", "recompute_layers": 15})


def test_exports_write_the_partial_recompute() -> None:
    config = ParallelConfig(**BASE, recompute="full", recompute_layers=5)
    args = megatron_args(MODEL, JOB, config)
    i = args.index("--recompute-method")
    assert args[i : i + 4] == ["--recompute-method", "block", "--recompute-num-layers", "5"]
    plain = ParallelConfig(tp=8, dp=8, micro_batch_size=1, zero_stage=3, sequence_parallel=True)
    titan = torchtitan_config(MODEL, JOB, plain.model_copy(update={"recompute": "full", "recompute_layers": 20}))
    # 80 layers on one rank, 20 recomputed: every 4th layer
    assert titan["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "4"}
    with pytest.raises(PlannerError, match="DeepSpeed's activation checkpointing recomputes every layer"):
        deepspeed_config(MODEL, JOB, ParallelConfig(dp=64, zero_stage=3, recompute="full", recompute_layers=20))


def test_the_cli_takes_recompute_layers(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("estimate", "-m", "llama3-70b", "-c", "dgx-h100x8", "--tp", "8", "--pp", "4", "--recompute-layers", "5")
    assert r.code == 0 and "full:5" in r.out
    bad = cli("estimate", "-m", "llama3-70b", "-c", "dgx-h100x8", "--recompute", "none", "--recompute-layers", "5")
    assert_one_line_error(bad, "--recompute-layers", "--recompute full")
    assert_one_line_error(cli("estimate", "-m", "llama3-70b", "-c", "dgx-h100x8", "--recompute-layers", "0"))


def test_the_validator_replays_recomputed_and_kept_layers_apart() -> None:
    plan = ParallelConfig(**BASE, recompute="full", recompute_layers=5, pipeline_layout=EVEN)
    split = recompute_split(MODEL, JOB, plan, 20)
    assert [(s, p.recompute, p.recompute_layers, share) for s, p, share in split] == [
        (".recomputed", "full", None, 0.25),
        ("", "none", None, 0.75),
    ]
    assert recompute_split(MODEL, JOB, ParallelConfig(**BASE), 20)[0][2] == 1.0


def test_torchtitan_selective_layer_ac_recomputes_every_second_layer() -> None:
    row = sample_rows()["torchtitan-2412-llama31-8b-h100x8-fsdp"]
    row["knobs"]["activation_checkpointing"] = "selective layer"
    case = case_from_row(row)
    assert case.pins["recompute"] == "full" and case.pins["recompute_layers"] == 16  # 32 layers, every 2nd
    row["knobs"]["activation_checkpointing"] = "full"
    assert "recompute_layers" not in case_from_row(row).pins
    assert np.isfinite(estimate_mesh(case.model, case.cluster, case.job, ParallelConfig(**case.pins)).step_time_s)


def test_a_recipe_recomputes_some_layers_only_with_the_block_method() -> None:
    from planner.runs import recompute_layers_from_recipe

    assert (
        recompute_layers_from_recipe("recompute_granularity=full, recompute_method=block, recompute_num_layers=5") == 5
    )
    # uniform with N: groups of N layers checkpointed together, every layer recomputed
    assert recompute_layers_from_recipe("recompute_method=uniform, recompute_num_layers=1") is None
    assert recompute_layers_from_recipe("recompute_num_layers=5") is None


@pytest.mark.parametrize(("stack", "said"), [
    ("megatron-core", "the first 26 of each chunk's 80 layers (Megatron --recompute-method block)"),
    ("torchtitan", "every 3rd layer a rank builds, 26 of the busiest rank's 80 (at least 26 of each chunk; "
                   "torchtitan 0.2's selective_ac_option 3;"),
])  # fmt: skip
def test_the_explanation_names_the_stacks_own_partial_recompute(stack: str, said: str) -> None:
    """torchtitan's winner was said to run Megatron's block method, which torchtitan has not."""
    from planner.explain import recompute_chosen

    model = load_model("llama3-70b")
    job = JobSpec(global_batch_size=512, seq_len=8192, stack=stack)
    mesh = ParallelConfig(dp=64, cp=2, zero_stage=3, recompute="full", recompute_layers=26)
    assert said in recompute_chosen(estimate_mesh(model, load_cluster("dgx-h100x16"), job, mesh), model)


def test_the_explained_every_nth_is_the_exported_one() -> None:
    """pp 3 splits 80 layers 27, 27, 26 (the last rank lighter by its LM head): n is fixed by the
    smallest chunk, so 9 recomputed layers are refused (n = 26 // 9 = 2 recomputes 13 of each), 13
    export selective_ac_option 2, where the explanation had said 3 from the even share."""
    from planner.explain import recompute_chosen
    from planner.export.torchtitan import every_nth_layer

    model = load_model("llama3-70b")
    job = JobSpec(global_batch_size=512, seq_len=8192, stack="torchtitan")
    mesh = ParallelConfig(pp=3, dp=16, zero_stage=3, recompute="full", recompute_layers=13)
    n = every_nth_layer(model, job, mesh)
    said = recompute_chosen(estimate_mesh(model, load_cluster("dgx-h100x6"), job, mesh), model)
    assert n == 2 and f"selective_ac_option {n};" in said and "every 2nd layer a rank builds, 13 of the busiest" in said
    refused = "floor\\(26/n\\) of its smallest chunk's 26; the nearest count at or above 9 is 13"
    with pytest.raises(PlannerError, match=refused):
        estimate_mesh(model, load_cluster("dgx-h100x6"), job, mesh.model_copy(update={"recompute_layers": 9}))


@pytest.mark.parametrize(("n", "text"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (13, "13th"),
                                         (21, "21st"), (22, "22nd"), (112, "112th")])  # fmt: skip
def test_ordinals(n: int, text: str) -> None:
    from planner.figures import ordinal

    assert ordinal(n) == text


def test_partial_recompute_stays_below_a_chunks_decoder_layers_beside_mtp() -> None:
    # Nemotron 3 Super (88 layers and 2 MTP layers on the last rank): at ep 64, micro-batch 8, ZeRO-3
    # on 8 DGX B200 the line of memory against r reached 89 of the rank's 90 layers, which the search
    # ranked first and check_config refused ('recompute_layers 89: ... at most 88'), so a plain `plan`
    # of the model on that cluster failed (a review, 2026-12-07); r of all 88 is plain full recompute
    model, cluster = load_model("nemotron-3-super"), load_cluster("dgx-b200x8")
    job = default_job(model)
    config = ParallelConfig(tp=1, pp=1, dp=64, ep=64, micro_batch_size=8, zero_stage=3, recompute="full")
    assert len(partial_recompute(model, cluster, job, MeshArrays.from_configs([config]))) == 0
    best = search(model, cluster, job, {}, top=1).candidates[0].config.parallel
    assert best.recompute_layers is None or best.recompute_layers < model.num_hidden_layers


def test_every_nth_prices_what_the_count_across_a_ranks_chunks_recomputes() -> None:
    """torchtitan's n is fixed by the smallest chunk (8 layers of Qwen3-235B-A22B's last rank at pp
    9, its LM head beside them): r = 4 runs n = 2, so the busiest rank recomputes 5 of its 11
    layers, not the 4 of the first r (until 2026-12-07 the search ranked r = 3 first at 12.0 s, where
    n = 2 runs 12.7 s)."""
    from planner.cost.pipeline import smallest_chunk_layers, with_recompute_every

    model, cluster = load_model("qwen3-235b"), load_cluster("gb200-nvl72x2")
    job = default_job(model).model_copy(update={"stack": "torchtitan"})
    base = {"pp": 9, "dp": 16, "ep": 8, "micro_batch_size": 2, "zero_stage": 2}
    knobs = {"none": {}, "r": {"recompute": "full", "recompute_layers": 4}, "full": {"recompute": "full"}}
    meshes = {name: MeshArrays.from_configs([ParallelConfig(**base, **k)]) for name, k in knobs.items()}
    assert int(smallest_chunk_layers(model, job, meshes["r"])[0]) == 8
    assert int(with_recompute_every(model, job, meshes["r"]).recompute_every[0]) == 2
    cols = {name: evaluate(model, cluster, job, mesh) for name, mesh in meshes.items()}
    assert int(cols["r"].ranks.body[0]) == 11 and not bool(cols["r"].last_is_slowest[0])
    compute = {name: float(c.time["compute"][0]) for name, c in cols.items()}
    assert (compute["r"] - compute["none"]) / (compute["full"] - compute["none"]) == pytest.approx(5 / 11)
    assert float(cols["r"].step_time_s[0]) == pytest.approx(12.687, abs=0.01)
    # under Megatron's block method the same r recomputes the first 4 of each chunk
    block = evaluate(model, cluster, job.model_copy(update={"stack": "megatron-core"}), meshes["r"])
    assert float(block.time["compute"][0]) < compute["r"]
    # the search keeps r below the smallest chunk (n >= 2) and never prices one stride and exports another
    for cand in search(model, cluster, job, {"pp": 9}, top=20).candidates:
        p = cand.config.parallel
        if p.recompute_layers is not None:
            assert p.recompute_layers < 8 and 8 // (8 // p.recompute_layers) == p.recompute_layers


@pytest.mark.parametrize(("model_name", "pp", "v", "schedule", "layout"), [
    ("llama3-70b", 1, 1, "1f1b", None),
    ("llama3-70b", 3, 1, "1f1b", None),
    ("llama3-70b", 4, 3, "interleaved-1f1b", None),
    ("qwen3-235b", 9, 1, "1f1b", None),
    ("qwen3-235b", 4, 2, "interleaved-1f1b", None),
    ("qwen3-235b", 4, 1, "dualpipev", None),
    ("llama3-70b", 4, 1, "1f1b", "Et*18|t*21|t*21|t*20L"),
    ("llama3-8b", 4, 1, "1f1b", "E|t*16|t*16|L"),  # chunks of the embedding and the loss alone
    ("gpt2-124m", 4, 1, "1f1b", None),
])  # fmt: skip
def test_the_priced_smallest_chunk_is_the_exported_ones(
    model_name: str, pp: int, v: int, schedule: str, layout: str | None
) -> None:
    """The n the plan prices (``pipeline.smallest_chunk_layers``) comes from the chunks torchtitan's
    job file builds (``export.torchtitan.chunk_sizes``: its module lists, or the even split)."""
    from planner.cost.pipeline import smallest_chunk_layers
    from planner.export.torchtitan import chunk_sizes

    model = load_model(model_name)
    job = JobSpec(global_batch_size=512, seq_len=4096, stack="torchtitan")
    config = ParallelConfig(
        pp=pp, dp=8, virtual_stages=v, schedule=schedule, pipeline_layout=layout, recompute="full", recompute_layers=1
    )
    sizes = [c for c in chunk_sizes(model, job, config) if c > 0]  # an embedding or loss chunk recomputes nothing
    assert int(smallest_chunk_layers(model, job, MeshArrays.from_configs([config]))[0]) == min(sizes)


def test_recompute_layers_reach_the_largest_chunk_of_the_layout_run() -> None:
    # Llama-3-70B at pp 2 splits its 80 layers 41 | 39 (the embedding's and head's share): the block method
    # may recompute the first 41 of each chunk (the 39-layer one whole); the bound had been the even
    # split's 40, below the layout the plan printed; an explicit layout's largest chunk bounds it likewise
    import planner

    ask = dict(tp=8, pp=2, dp=8, recompute="full")
    assert (
        planner.estimate("llama70b", "dgx-h100x16", recompute_layers=41, **ask).config.parallel.recompute_layers == 41
    )
    with pytest.raises(PlannerError, match="the largest of the 2 model chunks holds 41 layers"):
        planner.estimate("llama70b", "dgx-h100x16", recompute_layers=42, **ask)
    layout = "Et*50|t*30L"
    est = planner.estimate("llama70b", "dgx-h100x16", recompute_layers=45, pipeline_layout=layout, **ask)
    assert est.config.parallel.recompute_layers == 45
