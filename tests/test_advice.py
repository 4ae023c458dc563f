"""Advice from the field that the planner attaches to candidates: unbalanced pipeline stages
(LM head on the last stage) and a global batch grown past what the job asked."""

from __future__ import annotations

import pytest

from planner.catalog import load_cluster, load_model
from planner.cost.memory import MEMORY_UNDERCOUNT, usable_memory_bytes
from planner.errors import PlannerError
from planner.export import megatron_args
from planner.pricing import biased_band_note, estimate_mesh, last_stage_imbalance, memory_remedies
from planner.schemas.job import JobSpec
from planner.schemas.parallel import ParallelConfig
from planner.search import default_job, search
from tests.conftest import assert_one_line_error, main_winner_with_band

LLAMA70 = load_model("llama3-70b")
H100X16 = load_cluster("dgx-h100x16")


def test_lm_head_work_in_layers_for_llama3_70b() -> None:
    # Head: 6*V*h = 6*128256*8192 = 6.304e9 FLOP/token. A layer at s = 8192: 6 * (attention
    # 8192*(8192 + 2*1024) + 8192^2 + MLP 3*8192*28672 = 855.6e6 weights) = 5.134e9, plus scores
    # 3 * 2*8192*64*(128 + 128) = 0.805e9: 5.939e9. Head / layer = 1.061.
    idle, head_layers, work = last_stage_imbalance(LLAMA70, default_job(LLAMA70, seq_len=8192), [10] * 8)
    assert work == [10.0] * 7 + [10.0 + head_layers]
    assert head_layers == pytest.approx(1.0614, abs=1e-3)
    # work = [10]*7 + [11.06]: idle = 1 - mean/max = 1 - 10.133/11.061
    assert idle == pytest.approx(1 - (80 + head_layers) / 8 / (10 + head_layers), rel=1e-12)
    assert idle == pytest.approx(0.0840, abs=1e-3)


def _warnings(**mesh: object) -> list[str]:
    job = default_job(LLAMA70)
    return estimate_mesh(LLAMA70, H100X16, job, ParallelConfig(**mesh)).warnings  # type: ignore[arg-type]


def test_unbalanced_stages_are_warned_at_pp8_not_at_pp4() -> None:
    # The plan balances the last rank itself (9 layers + the head's 1.06 against 11 on others):
    # still 1 - 81.06/8/11 = 7.9% idle, and no split of 80 layers over 8 ranks does better.
    pp8 = _warnings(tp=8, pp=8, dp=2, micro_batch_size=1, sequence_parallel=True)
    assert any(w.startswith("pipeline stages are unbalanced") and "idle 8%" in w for w in pp8), pp8
    assert any("no split of these layers over these stages does better" in w for w in pp8)
    # A layout the user gives is priced as given, and the advice says how to do better.
    given = _warnings(
        tp=8, pp=8, dp=2, micro_batch_size=1, sequence_parallel=True, pipeline_layout="Et*10|(t*10|)*6t*10L"
    )
    assert any("idle 8%" in w and "--decoder-last-pipeline-num-layers" in w for w in given), given
    pp4 = _warnings(tp=8, pp=4, dp=4, micro_batch_size=1, sequence_parallel=True)  # idle 4.2% < 5%
    assert not any(w.startswith("pipeline stages are unbalanced") for w in pp4), pp4
    pp1 = _warnings(tp=8, pp=1, dp=16, micro_batch_size=1, sequence_parallel=True)
    assert not any(w.startswith("pipeline stages are unbalanced") for w in pp1)


def test_batch_is_exact_unless_growth_is_allowed() -> None:
    exact = search(LLAMA70, H100X16, default_job(LLAMA70, global_batch_size=500), top=20)
    assert {c.config.job.batch_size for c in exact.candidates} == {500}
    assert all(c.config.parallel.dp * c.config.parallel.micro_batch_size in (1, 2, 4) for c in exact.candidates)
    assert not any("grown" in w for c in exact.candidates for w in c.warnings)

    grown = search(LLAMA70, H100X16, default_job(LLAMA70, global_batch_size=500, max_batch_growth=0.05), top=20)
    best = grown.candidates[0]
    assert best.config.job.batch_size == 512  # dp 32 * mbs 1: the next multiple of 32 above 500
    assert best.tokens_per_s == pytest.approx(512 * 8192 / best.step_time_s)
    assert best.warnings[0].startswith("global batch grown from 500 to 512 sequences (+2.4%)")
    # Ranked by time per asked batch: the grown mesh beats the best exact one per token.
    assert best.step_time_s * 500 / 512 < exact.candidates[0].step_time_s
    assert all(c.config.job.batch_size <= 525 for c in grown.candidates)


def test_growth_is_bounded_and_the_message_says_how_far(cli) -> None:
    result = cli("estimate", "-m", "llama3-70b", "-c", "dgx-h100x16", "--tp", "8", "--dp", "16", "-B", "500")
    assert_one_line_error(result, "global batch 500", "dp*micro_batch_size = 16*1", "nearest batch it runs is 512")
    ok = cli(
        "estimate", "-m", "llama3-70b", "-c", "dgx-h100x16", "--tp", "8", "--dp", "16", "-B", "500",
        "--max-batch-growth", "0.03", "--sequence-parallel", "--recompute", "full", "--json",
    )  # fmt: skip
    assert ok.code == 0, ok.err
    est = ok.json()
    assert est["config"]["job"]["global_batch_size"] == 512
    assert est["num_microbatches"] == 32
    assert any(w.startswith("global batch grown from 500 to 512") for w in est["warnings"])


def test_a_last_rank_at_its_fewest_layers_is_pointed_at_empty_chunks() -> None:
    """GPT-OSS-120B at pp 8, v 4: the last rank holds 3 layers (one per chunk but the loss's) and the
    head's 4 layers of work, the others 4-5: 'no split does better' was true only without empty
    chunks, which Megatron-Core's layouts take ('E|(t|)*3,m|m||L' in its own help)."""
    oss = load_model("gpt-oss-120b")
    config = ParallelConfig(pp=8, dp=8, ep=8, micro_batch_size=2, virtual_stages=4, schedule="interleaved-1f1b")
    est = estimate_mesh(oss, load_cluster("dgx-h100x8"), default_job(oss), config)
    assert est.layers_per_stage[-1] == 3
    (note,) = [w for w in est.warnings if w.startswith("pipeline stages are unbalanced")]
    said = "the last rank already holds the fewest layers a split without empty chunks leaves it, 3: one in each "
    assert said + "of its model chunks but the one that runs the LM head and loss" in note
    assert "no split of these layers over these stages does better" not in note


def test_interleaved_growth_rounds_to_a_multiple_of_dp_mbs_pp() -> None:
    """Where the stack's interleaving needs p | m (torchtitan) the batch grows to a multiple of
    dp*b*pp; Megatron-Core's micro-batch group size runs the asked batch (125 micro-batches over
    pp 4: groups of 5)."""
    cfg = ParallelConfig(
        tp=8, pp=4, dp=4, micro_batch_size=1, schedule="interleaved-1f1b", virtual_stages=5, sequence_parallel=True
    )
    titan = default_job(LLAMA70, global_batch_size=500, max_batch_growth=0.2, stack="torchtitan")
    grown = estimate_mesh(LLAMA70, H100X16, titan, cfg.model_copy(update={"zero_stage": 3}))  # FSDP: bf16 with TP
    assert grown.config.job.batch_size == 512  # multiple of dp*b*pp = 16
    assert grown.num_microbatches == 128
    job = default_job(LLAMA70, global_batch_size=500, max_batch_growth=0.2)
    est = estimate_mesh(LLAMA70, H100X16, job, cfg)
    assert (est.config.job.batch_size, est.num_microbatches) == (500, 125)
    # 128 micro-batches over pp 4 run Megatron's default groups of pp: no flag
    assert "--microbatch-group-size-per-virtual-pipeline-stage" not in megatron_args(LLAMA70, grown.config.job, cfg)
    args = megatron_args(LLAMA70, est.config.job, cfg)
    assert args[args.index("--microbatch-group-size-per-virtual-pipeline-stage") + 1] == "5"


def test_a_group_size_that_breaks_memory_names_the_batches_that_fit() -> None:
    """Llama-3.1-70B at tp 8, pp 4, v 2 on 4 DGX-H100, 9,216 tokens and -B 13: 13 micro-batches run in
    groups of 7 (the smallest N > 4 with 13 mod N = 0 or >= 4), so the first rank holds
    ((2-1)*7 + 2*4 - 1)/2 = 7 micro-batches where a multiple of pp holds ((2-1)*4 + 7)/2 = 5.5:
    83.5 GiB, over the 79.7 usable, where -B 12 and -B 16 need 74.2."""
    cfg = ParallelConfig(
        tp=8, pp=4, dp=1, micro_batch_size=1, schedule="interleaved-1f1b", virtual_stages=2, sequence_parallel=True
    )
    h100x4, model = load_cluster("dgx-h100x4"), load_model("llama3.1-70b")
    est = estimate_mesh(model, h100x4, default_job(model, global_batch_size=13, seq_len=9216), cfg)
    assert not est.fits
    hint = [w for w in est.warnings if "run in groups of 7" in w]
    assert len(hint) == 1 and "first rank holds 7 micro-batches' activations" in hint[0]
    twelve = estimate_mesh(model, h100x4, default_job(model, global_batch_size=12, seq_len=9216), cfg)
    assert twelve.fits
    assert f"-B 12 (12 micro-batches, 5.5 held) fits ({twelve.memory_per_gpu_bytes / 2**30:.1f} GiB)" in hint[0]
    assert "-B 16 (16 micro-batches, 5.5 held) fits" in hint[0]
    # a batch pp divides, or a stack whose interleaving needs one, gets no such line
    assert not any("run in groups of" in w for w in twelve.warnings)


def test_a_sequence_past_the_models_context_is_warned() -> None:
    """Llama 3 8B's card holds 8,192 positions; Llama 3.1 8B's RoPE scaling reaches 131,072."""
    cfg = ParallelConfig(tp=8, pp=1, dp=1, cp=8, micro_batch_size=1, sequence_parallel=True, recompute="full")
    notes = {}
    for name in ("llama3-8b", "llama3.1-8b"):
        model = load_model(name)
        est = estimate_mesh(
            model, load_cluster("dgx-h100x8"), default_job(model, seq_len=131072, global_batch_size=1), cfg
        )
        notes[name] = [w for w in est.warnings if "max_position_embeddings" in w]
    assert notes["llama3.1-8b"] == [] and len(notes["llama3-8b"]) == 1
    assert notes["llama3-8b"][0].startswith("sequence length 131,072 is 16x llama3-8b's context of 8,192")


def test_memory_headroom_keeps_its_share_free_and_the_tight_winner_is_warned() -> None:
    cap = H100X16.gpu.hbm_capacity_bytes
    job = default_job(LLAMA70)
    tight = search(LLAMA70, H100X16, job, top=1).candidates[0]
    # The fastest mesh at no headroom fills 76.6 of 79.7 GiB: the worst measured under-count
    # (12.5%) would need 76.6 / 0.875 = 87.5 GiB, so it is warned.
    assert tight.memory_per_gpu_bytes > (1 - MEMORY_UNDERCOUNT) * cap
    assert tight.memory_usable_bytes == cap
    warning = next(w for w in tight.warnings if w.startswith("tight memory"))
    need = tight.memory_per_gpu_bytes / (1 - MEMORY_UNDERCOUNT) / 2**30
    assert f"would need {need:.1f} GiB" in warning and "--memory-headroom 0.125" in warning
    safe_job = JobSpec.model_validate({**job.model_dump(), "memory_headroom": MEMORY_UNDERCOUNT})
    safe = search(LLAMA70, H100X16, safe_job, top=5)
    for c in safe.candidates:
        assert c.memory_usable_bytes == pytest.approx((1 - MEMORY_UNDERCOUNT) * cap, rel=1e-12)
        assert c.memory_per_gpu_bytes <= c.memory_usable_bytes
        assert not any(w.startswith("tight memory") for w in c.warnings)
    best = safe.candidates[0]
    assert best.config.parallel != tight.config.parallel
    # the margin costs little here: 1,180 against 1,213 tokens/s per GPU
    assert 0.95 < best.tokens_per_s_per_gpu / tight.tokens_per_s_per_gpu < 1.0
    assert usable_memory_bytes(H100X16, safe_job) == best.memory_usable_bytes


def test_the_ranking_names_the_fastest_mesh_that_keeps_the_memory_margin(cli) -> None:
    job = default_job(LLAMA70)
    tight = search(LLAMA70, H100X16, job, top=1, with_margin=True)
    assert search(LLAMA70, H100X16, job, top=1).margin_pick is None  # searches inside other work skip it
    safe_job = JobSpec.model_validate({**job.model_dump(), "memory_headroom": MEMORY_UNDERCOUNT})
    safe = search(LLAMA70, H100X16, safe_job, top=1, with_margin=True)
    pick, best = tight.margin_pick, safe.candidates[0]
    assert pick is not None and safe.margin_pick is None  # the margin asked for: nothing to point at
    # the pick is what --memory-headroom 0.125 ranks first: tp4 pp2 dp8 cp2 z1, 68.9 GiB, 4.4% slower
    assert pick.mesh == best.config.parallel.short()
    assert pick.step_time_s == pytest.approx(best.step_time_s, rel=1e-12)
    assert pick.memory_per_gpu_bytes == pytest.approx(best.memory_per_gpu_bytes, rel=1e-12)
    assert pick.slower == pytest.approx(best.step_time_s / tight.candidates[0].step_time_s - 1, rel=1e-9)
    assert pick.slower == pytest.approx(0.044, abs=0.002)
    assert pick.winner_memory_bytes == tight.candidates[0].memory_per_gpu_bytes
    text = " ".join(cli("-m", "llama3-70b", "-c", "dgx-h100x16").out.split())
    assert f"the fastest mesh that keeps that margin is {best.config.parallel.short()}" in text
    assert f"{100 * pick.slower:.1f}% slower per batch: --memory-headroom 0.125 ranks only such meshes" in text
    # the pick is searched again under the margin, not taken from the first search's meshes: 405B on
    # 20 DGX H100 (winner tp8 pp10 dp1 cp2 full:2) keeps the margin at the same mesh recomputing 7
    # layers of each stage, 12.3% slower
    big = load_model("llama3-405b")
    on20 = load_cluster("dgx-h100x20")
    pick20 = search(big, on20, default_job(big), top=1, with_margin=True).margin_pick
    safe20 = search(big, on20, default_job(big).model_copy(update={"memory_headroom": MEMORY_UNDERCOUNT}), top=1)
    assert pick20 is not None and pick20.mesh == safe20.candidates[0].config.parallel.short()
    assert pick20.mesh == "tp8 pp10 dp1 cp2 ep1 mbs1 v1 z1 full:7 sp 1f1b"
    assert pick20.slower == pytest.approx(0.123, abs=0.002)
    # 70B on 16 H100: the leanest mesh of every recompute and ZeRO choice needs 73.7 GiB > 0.875 x 79.7
    two = search(LLAMA70, load_cluster("dgx-h100x2"), job, top=1, with_margin=True)
    assert two.margin_pick is not None and two.margin_pick.mesh is None
    assert two.margin_pick.leanest_bytes == pytest.approx(two.pareto[-1].memory_per_gpu_bytes)
    assert two.margin_pick.leanest_bytes > (1 - MEMORY_UNDERCOUNT) * H100X16.gpu.hbm_capacity_bytes
    assert "no feasible mesh keeps that margin (the leanest needs 74.5 GiB" in two.margin_pick.describe()


def test_memory_headroom_out_of_range_is_a_one_line_error(cli) -> None:
    for bad in ("0.7", "-0.1", "nan"):
        result = cli("-m", "llama3-70b", "-c", "dgx-h100x16", "--memory-headroom", bad)
        assert_one_line_error(result, "--memory-headroom")
    with pytest.raises(ValueError, match="memory_headroom"):
        JobSpec(global_batch_size=8, seq_len=4096, memory_headroom=0.6)


def test_nothing_fits_says_what_the_headroom_kept() -> None:
    job = JobSpec.model_validate({**default_job(LLAMA70).model_dump(), "memory_headroom": 0.5})
    with pytest.raises(PlannerError, match=r"GiB available \(50% kept free by --memory-headroom\)"):
        search(LLAMA70, load_cluster("dgx-h100"), job)


def test_a_band_wholly_below_the_prediction_is_warned_with_the_band_to_plan_with() -> None:
    (note,) = biased_band_note(main_winner_with_band((620.0, 880.0)))
    assert note == (
        "biased prediction: the published runs it is read from (6 runs) measured 12-38% below what the planner "
        "predicted for them; plan with 620 .. 880 tokens/s per GPU, not 1,000"
    )
    (above,) = biased_band_note(main_winner_with_band((1050.0, 1300.0)))
    assert "measured 5-30% above" in above
    assert biased_band_note(main_winner_with_band((830.0, 1120.0))) == []  # straddles the prediction
    assert biased_band_note(main_winner_with_band(None)) == []


def test_mi300x_plans_carry_the_bias_of_its_published_runs() -> None:
    # The four torchao MI300X rows of modern_runs.yaml all ran 14-44% below the planner
    # (cross-validated), so a dense MI300X plan's band lies wholly below its figure.
    model, cluster = load_model("llama3-8b"), load_cluster("mi300xx4")
    best = search(model, cluster, default_job(model), top=1).candidates[0]
    assert best.tokens_per_s_per_gpu_interval is not None
    assert best.tokens_per_s_per_gpu_interval[1] < best.tokens_per_s_per_gpu
    assert any(w.startswith("biased prediction:") and "below" in w for w in best.warnings)
    # the main plan's band straddles its figure: no such warning
    main = search(LLAMA70, H100X16, default_job(LLAMA70), top=1).candidates[0]
    assert not any(w.startswith("biased prediction:") for w in main.warnings)


@pytest.mark.parametrize(
    ("stack", "mesh", "remedies"),
    [
        # everything left to try
        ("megatron-core", {"pp": 1, "zero_stage": 1, "micro_batch_size": 4}, "a higher --zero-stage, --recompute full"),
        # DeepSpeed's pipeline engine runs at most ZeRO-1 with pp > 1, and full recompute is on
        ("deepspeed", {"pp": 4, "zero_stage": 1, "recompute": "full"}, "more tp/pp, more GPUs, or a shorter --seq-len"),
        # torchtitan has no ZeRO-1 and stops at 3; partial recompute may go on to full
        (
            "torchtitan",
            {"pp": 1, "zero_stage": 3, "recompute": "full", "recompute_layers": 4},
            "--recompute full, more",
        ),
    ],
)
def test_a_mesh_that_does_not_fit_is_offered_only_what_its_stack_can_still_change(
    stack: str, mesh: dict[str, object], remedies: str
) -> None:
    """The advice offered --recompute full to a mesh running it, and a higher ZeRO stage where the
    stack has none (DeepSpeed's pipeline engine: at most ZeRO-1 with pp > 1)."""
    job = default_job(LLAMA70, stack=stack)
    text = memory_remedies(job, ParallelConfig(**{"dp": 1, **mesh}))  # type: ignore[arg-type]
    assert text.startswith(remedies)
    assert ("--zero-stage" in text) == (stack == "megatron-core")
    assert ("smaller --micro-batch-size" in text) == (stack == "megatron-core")


def test_advice_names_what_the_stack_runs(cli) -> None:
    """torchtitan has no ZeRO-1: its ZeRO-3 advice names ZeRO-2. DeepSpeed takes no layout: its
    unbalanced-stage advice named Megatron-LM's flags."""
    small = load_model("llama3-8b")
    r = cli("estimate", "-m", "llama3-8b", "-c", "dgx-h100x16", "--stack", "torchtitan", "--tp", "1", "--pp", "1",
            "--dp", "128", "-b", "1", "-B", "1024", "-s", "1024", "-z", "3", "--recompute", "selective")  # fmt: skip
    said = " ".join(r.out.split())
    assert r.code == 0 and "ZeRO-3 gathers weights for every micro-batch" in said
    assert "try --zero-stage 2 if memory allows" in said
    # Megatron-Core has ZeRO-1, which gathers once per step and reduces once (its ZeRO-2 every micro-batch)
    r = cli("estimate", "-m", "llama3-8b", "-c", "dgx-h100x16", "--tp", "1", "--pp", "1",
            "--dp", "128", "-b", "1", "-B", "1024", "-s", "1024", "-z", "3", "--recompute", "selective")  # fmt: skip
    assert "try --zero-stage 1 if memory allows" in " ".join(r.out.split())
    ds = default_job(small, stack="deepspeed")
    est = estimate_mesh(small, load_cluster("dgx-h100x2"), ds, ParallelConfig(pp=2, dp=8, zero_stage=1))
    (unbalanced,) = [w for w in est.warnings if w.startswith("pipeline stages are unbalanced")]
    assert "Megatron-LM" not in unbalanced and "deepspeed takes no split of the planner's choosing" in unbalanced
    # in fp8 too: the low-precision advice (compare splits with --pipeline-layout) is for stacks with layouts
    est = estimate_mesh(
        small,
        load_cluster("dgx-h100x2"),
        # a DeepSpeed whose model code ran fp8 (the shipped stack trains none: Stack.fp8_scalings)
        ds.model_copy(update={"dtype": "fp8", "stack": ds.software.model_copy(update={"fp8_scalings": ("tensor",)})}),
        ParallelConfig(pp=2, dp=8, zero_stage=1),
    )
    (unbalanced,) = [w for w in est.warnings if w.startswith("pipeline stages are unbalanced")]
    assert "--pipeline-layout needs a stack" in unbalanced


def test_advice_after_a_later_fuzz_names_only_what_the_job_can_take(cli) -> None:
    """--ep-comm-overlap refuses full recompute and llm-foundry pipelines: neither is offered; the
    batch-growth hint counts Megatron-Core's interleaving minimum of pp micro-batches (it said 6 for
    a mesh that then asked for 8); the growth warning names the rule the stack has."""
    r = cli("estimate", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100x2", "--pp", "2", "--ep", "8", "-v", "2",
            "--ep-comm-overlap", "-B", "40")  # fmt: skip
    said = " ".join(r.out.split())
    assert "does not fit" in said and "--recompute full" not in said
    r = cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100", "-b", "8", "--stack", "llm-foundry")
    said = " ".join(r.out.split())
    assert "try --recompute full, more tp, a smaller --micro-batch-size" in said and "tp/pp" not in said
    mesh = ("--model", "llama3-70b", "--cluster", "dgx-h100x4", "--tp", "8", "--pp", "4", "--dp", "1", "-v", "2")
    assert_one_line_error(
        cli("estimate", *mesh, "-B", "5", "-b", "2"),
        "the nearest batch it runs is 8 (interleaved-1f1b runs at least pp micro-batches: 8) (+60.0%)",
    )
    r = cli("estimate", *mesh, "-B", "9", "-b", "2", "--max-batch-growth", "0.2")
    said = " ".join(r.out.split())
    assert "so that dp*micro_batch_size divides it and interleaving has at least pp micro-batches" in said


def test_a_stack_refusal_comes_before_a_batch_hint_and_a_void_overlap_is_named(cli) -> None:
    """A mesh DeepSpeed cannot interleave was told to grow its batch to 8, which then met the stack's
    refusal: the stack rules come first. --ep-comm-overlap on a dense model or at ep 1 was accepted
    silently; it is now said to overlap nothing."""
    r = cli("estimate", "--model", "llama3-70b", "--cluster", "dgx-h100x4", "--tp", "8", "--pp", "4", "--dp", "1",
            "-v", "2", "-B", "5", "--stack", "deepspeed")  # fmt: skip
    assert_one_line_error(r, "stack deepspeed runs no interleaved pipeline")
    dense = " ".join(cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--ep-comm-overlap").out.split())
    assert "--ep-comm-overlap has nothing to overlap: llama3-8b has no experts" in dense
    assert "route" not in dense  # no routing flag given
    routed = cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--moe-routing", "drop:1.25",
                 "--moe-dispatcher", "allgather")  # fmt: skip
    assert "--moe-dispatcher and --moe-routing route nothing: llama3-8b has no experts" in " ".join(routed.out.split())
    r = cli("estimate", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--ep", "1", "--ep-comm-overlap")
    assert "runs no expert parallelism (ep 1)" in " ".join(r.out.split())
    r = cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--tp", "1", "--tp-comm-overlap")
    assert "--tp-comm-overlap has nothing to overlap: this mesh runs no tensor parallelism (tp 1)" in " ".join(
        r.out.split()
    )


def test_a_stack_without_sequence_parallelism_runs_tp_unsharded(cli) -> None:  # type: ignore[no-untyped-def]
    """DeepSpeed's sequence parallelism is Ulysses', not Megatron's (stacks/deepspeed.yaml): its
    ranking had been all tp 8 with SP, meshes its own stack file says it cannot run."""
    a100 = load_cluster("dgx-a100-80gx8")
    ranked = search(LLAMA70, a100, default_job(LLAMA70, stack="deepspeed"), top=8).candidates
    assert ranked and not any(c.config.parallel.sequence_parallel for c in ranked)
    assert any(
        c.config.parallel.sequence_parallel for c in search(LLAMA70, a100, default_job(LLAMA70), top=8).candidates
    )
    mesh = ("--model", "llama3-70b", "--cluster", "dgx-a100-80gx8", "--tp", "8", "--dp", "8", "--stack", "deepspeed")
    assert "mesh: tp8 pp1 dp8 cp1 ep1 mbs1 v1 z3 none 1f1b" in cli("estimate", *mesh).out  # unpinned: off
    assert_one_line_error(
        cli("estimate", *mesh, "--sequence-parallel"),
        "stack deepspeed has no Megatron sequence parallelism; use --no-sequence-parallel",
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--dtype", "fp8", "--fp8-scaling", "row"), "stack megatron-core scales fp8 per tensor or block"),
        (("--stack", "torchtitan", "--adam-moments", "bf16"), "stack torchtitan keeps them in fp32"),
        (("--stack", "torchtitan", "--dropout"), "stack torchtitan's models have no dropout layers"),
        (("--stack", "deepspeed", "--dtype", "fp8"), "dtype 'fp8': stack deepspeed trains no fp8"),
        (("--stack", "deepspeed", "--tp-comm-overlap"), "stack deepspeed cannot overlap tensor-parallel collectives"),
    ],
)
def test_a_format_the_stack_cannot_train_is_refused_before_it_is_priced(cli, flags, message) -> None:  # type: ignore[no-untyped-def]
    """Priced, then refused only by the export (or, dropout, exported without it)."""
    assert_one_line_error(cli("--model", "llama3-8b", "--cluster", "dgx-h100", *flags), message)


def test_the_exports_formats_are_their_stacks() -> None:
    from planner.catalog import load_stack
    from planner.export.megatron import FP8_RECIPES

    assert set(FP8_RECIPES) == set(load_stack("megatron-core").fp8_scalings)
    assert load_stack("megatron-core").adam_moments == ("fp32", "bf16")  # the export's --exp-avg-dtype bf16
    assert load_stack("torchtitan").adam_moments == ("fp32",) and load_stack("deepspeed").fp8_scalings == ()


def test_torchtitans_pipeline_zero_2_says_it_holds_the_gradients_whole() -> None:
    # torch.distributed.pipelining keeps an FSDP stage's gradients unsharded through the step, so the
    # table's Z 2 prices ZeRO-1's gradient memory; the warning says so (a review, 2026-12-07)
    import planner

    est = planner.estimate("llama3-8b", "dgx-h100x1", stack="torchtitan", pp=2, dp=4, zero_stage=2, micro_batch_size=1)
    said = [w for w in est.warnings if w.startswith("ZeRO-2 with pp 2 on torchtitan")]
    assert len(said) == 1 and "holds each stage's gradients unsharded" in said[0]
    flat = planner.estimate("llama3-8b", "dgx-h100x1", stack="torchtitan", pp=1, dp=8, zero_stage=2)
    assert not any(w.startswith("ZeRO-2 with") for w in flat.warnings)
    megatron = planner.estimate("llama3-8b", "dgx-h100x1", pp=2, dp=4, zero_stage=1, micro_batch_size=1)
    assert not any(w.startswith("ZeRO-") for w in megatron.warnings)


def test_a_low_precision_job_priced_slower_than_bf16_says_so() -> None:
    # torchao's row-scaled fp8 GEMMs on H100 carry a fitted rate of about half the fp8 peak, so torchtitan's
    # row-scaled Llama-3 8B on 32 H100 is priced slower than bf16 on the same mesh (a review, 2026-12-07)
    import planner

    kw = {"stack": "torchtitan", "dp": 32, "zero_stage": 2, "recompute": "selective"}
    row = planner.estimate("llama3-8b", "dgx-h100x4", dtype="fp8", fp8_scaling="row", **kw)
    bf16 = planner.estimate("llama3-8b", "dgx-h100x4", **kw)
    assert row.step_time_s > bf16.step_time_s
    (said,) = [w for w in row.warnings if "priced slower than bf16" in w]
    assert said.startswith(f"fp8 (row scaling) is priced slower than bf16 on this mesh: {row.step_time_s:.3f} s")
    assert f"against {bf16.step_time_s:.3f} s" in said
    tensor = planner.estimate("llama3-8b", "dgx-h100x4", dtype="fp8", **kw)
    assert tensor.step_time_s < bf16.step_time_s and not any("priced slower" in w for w in tensor.warnings)


def test_the_offload_of_a_gh200_reads_its_grace_memory() -> None:
    # the superchip's NVLink-C2C to its own Grace's LPDDR5X: a GH200 plan had refused offloading for want
    # of a host link in its profile (a review, 2026-12-07)
    import planner

    est = planner.estimate("llama3.1-8b", "gh200x16", seq_len=131072, global_batch_size=16, cp=16, offload_layers=20)
    assert est.host_offload_bytes_per_gpu > 0 and est.fits


def test_the_imbalance_advice_follows_the_rank_the_step_waits_for() -> None:
    # by FLOPs DeepSeek-V3's last rank at pp 16 (2 MoE layers, the LM head and its MTP layer) does 4.6
    # layers' work against 4 elsewhere, but its other ranks' 4 MoE layers and their all-to-alls set the
    # step: the advice had said the stages idle 12% of each slot, a time the step does not have
    import planner

    est = planner.estimate(
        "deepseek-v3", "dgx-h100x32", tp=1, pp=16, dp=16, ep=8, micro_batch_size=2, virtual_stages=2, recompute="full"
    )
    assert est.last_rank_sets_pace is False
    assert not any(w.startswith("pipeline stages are unbalanced") for w in est.warnings)
    idle, _, work = last_stage_imbalance(planner.load_model("deepseek-v3"), est.config.job, est.layers_per_stage)
    assert idle > 0.1 and work[-1] > max(work[:-1])  # what the FLOP count alone says
    assert planner.estimate("llama70b", "dgx-h100x16", tp=8, pp=8, dp=2).last_rank_sets_pace is not None
    assert planner.estimate("llama70b", "dgx-h100x16", tp=8, pp=1, dp=16).last_rank_sets_pace is None
