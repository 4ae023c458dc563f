"""Megatron pipeline layout strings: Megatron's grammar, its rules, and a compact writer that
reads back to the same stages."""

from __future__ import annotations

import re

import pytest

from planner.catalog import load_model
from planner.cost.layout import check_layout, format_layout, parse_layout, rank_layer_counts
from planner.errors import PlannerError
from planner.export.megatron import pipeline_layout
from planner.schemas import ParallelConfig

DSV3_LAYOUT = "Et*3|(tt|)*29,m|L"
"""DeepSeek-V3's layout as Megatron-LM's parse_str_to_list docstring gives it ("Ettt|(tt|)*29,m|L"
written with t*3): 61 decoder layers, one MTP layer, 32 chunks."""


def test_megatron_grammar_unrolls_groups_repeats_and_cosmetic_commas() -> None:
    stages = parse_layout(DSV3_LAYOUT)
    assert len(stages) == 32
    assert stages[0] == ["E", "t", "t", "t"] and stages[1] == ["t", "t"] and stages[-2:] == [["m"], ["L"]]
    assert check_layout(stages, num_layers=61, pp=16, mtp_layers=1) == 2  # v = 32 / 16
    assert parse_layout("E(t|)*3tL") == [["E", "t"], ["t"], ["t"], ["t", "L"]]
    assert parse_layout("Et*2|t*2,|L") == [["E", "t", "t"], ["t", "t"], ["L"]]
    with pytest.raises(PlannerError, match="unknown character"):
        parse_layout("Et|x|L")


@pytest.mark.parametrize(
    "text",
    [DSV3_LAYOUT, "Et*4|(t*4|)*14t*3mL", "Et|t|tL", "E|(t*2|)*46|L", "Et*3|t*4|t*4|t*3L", "EtL"],
)
def test_format_reads_back_to_the_same_stages(text: str) -> None:
    stages = parse_layout(text)
    assert parse_layout(format_layout(stages)) == stages


def test_each_megatron_rule_is_named() -> None:
    good = parse_layout("Et*2|t*2L")
    assert check_layout(good, 4, pp=2) == 1
    cases = [
        (parse_layout("Et*2|t*2L"), 4, 3, 0, "multiple of pp 3"),
        (parse_layout("t*2|Et*2L"), 4, 2, 0, "embedding 'E' must come first"),
        (parse_layout("Et*2L|t*2"), 4, 2, 0, "loss 'L' must come last"),
        (parse_layout("Et*2|t*3L"), 4, 2, 0, "5 decoder layers 't', the model has 4"),
        (parse_layout("Et*2|t*2mL"), 4, 2, 0, "1 MTP layers 'm', the job trains 0"),
        (parse_layout("Et*2|mt*2L"), 4, 2, 1, "decoder layers must come before the MTP layers"),
    ]
    for stages, layers, pp, mtp, message in cases:
        with pytest.raises(PlannerError, match=message):
            check_layout(stages, layers, pp=pp, mtp_layers=mtp)


@pytest.mark.parametrize(
    ("model_name", "pp", "v"), [("deepseek-v3", 16, 1), ("qwen3-235b-a22b", 8, 3), ("llama3-70b", 4, 5)]
)
def test_the_exported_layout_is_the_split_the_engine_prices(model_name: str, pp: int, v: int) -> None:
    # round trip: the plan's split -> Megatron's string -> Megatron's rules -> the same per-rank counts
    from planner.cost.flops import mtp_layers
    from planner.cost.pipeline import rank_layer_split
    from planner.search import default_job

    model = load_model(model_name)
    job = default_job(model)
    text = pipeline_layout(
        model, job, ParallelConfig(pp=pp, virtual_stages=v, schedule="interleaved-1f1b" if v > 1 else "1f1b")
    )
    assert text is not None
    stages = parse_layout(text)
    assert check_layout(stages, model.num_hidden_layers, pp, mtp_layers(model, job)) == v
    counts = rank_layer_counts(stages, pp)
    assert (max(counts[:-1]), counts[-1]) == rank_layer_split(model, job, pp, v)


# ---- a mesh with an explicit layout ----------------------------------------------------------------
LLAMA70_UNEVEN = "Et*9|(t*10|)*6t*11L"  # 80 layers, 8 chunks: the last rank holds 10 + 11 = 21


def test_a_layout_sets_the_virtual_stages_and_is_checked_where_it_can_be() -> None:
    config = ParallelConfig(pp=4, pipeline_layout=LLAMA70_UNEVEN)
    assert (config.virtual_stages, config.schedule) == (2, "interleaved-1f1b")
    with pytest.raises(ValueError, match="has 8 stages, pp x virtual_stages = 12"):
        ParallelConfig(pp=4, virtual_stages=3, schedule="interleaved-1f1b", pipeline_layout=LLAMA70_UNEVEN)
    assert ParallelConfig(pp=16, pipeline_layout=DSV3_LAYOUT).virtual_stages == 2  # MTP 'm' checked per job
    with pytest.raises(ValueError, match="loss 'L' must come last"):
        ParallelConfig(pp=2, pipeline_layout="Et*2L|t*2")


def test_the_engine_prices_the_layouts_busiest_rank_and_export_writes_it_back() -> None:
    from planner.catalog import load_cluster
    from planner.export.megatron import megatron_args
    from planner.pricing import estimate_mesh
    from planner.schemas import JobSpec
    from planner.search import search

    model, cluster = load_model("llama3-70b"), load_cluster("dgx-h100", gpus=64)
    job = JobSpec(global_batch_size=128, seq_len=4096)
    even = ParallelConfig(tp=4, pp=4, dp=4, virtual_stages=2, schedule="interleaved-1f1b", sequence_parallel=True)
    uneven = even.model_copy(update={"pipeline_layout": LLAMA70_UNEVEN})
    fast, slow = estimate_mesh(model, cluster, job, even), estimate_mesh(model, cluster, job, uneven)
    # the plan's own split gives the last rank 19 layers + the head (1.14 layers by FLOPs) against
    # 21 on the others; the layout given puts 21 + the head on the last rank
    assert slow.layers_per_stage == [19, 20, 20, 21] and fast.layers_per_stage == [20, 20, 21, 19]
    assert fast.config.parallel.pipeline_layout == "Et*10|(t*10|)*5t*11|t*9L"
    assert slow.step_time_s > fast.step_time_s * 1.04
    args = megatron_args(model, job, uneven)
    written = args[args.index("--pipeline-model-parallel-layout") + 1]
    assert parse_layout(written) == parse_layout(LLAMA70_UNEVEN)
    wrong = even.model_copy(update={"pipeline_layout": "Et*9|(t*10|)*6t*10L"})
    with pytest.raises(PlannerError, match=r"impossible mesh: .* 79 decoder layers 't', the model has 80"):
        estimate_mesh(model, cluster, job, wrong)
    with pytest.raises(PlannerError, match="--pipeline-layout prices one mesh"):
        search(model, cluster, job, {"pipeline_layout": LLAMA70_UNEVEN})


def test_pipeline_layout_flag(cli) -> None:  # type: ignore[no-untyped-def]
    import json

    args = ["--model", "llama3-70b", "--cluster", "dgx-h100x8", "--tp", "4", "--pp", "4", "--dp", "4"]
    r = cli("estimate", *args, "--pipeline-layout", LLAMA70_UNEVEN, "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert data["config"]["parallel"]["pipeline_layout"] == LLAMA70_UNEVEN and data["layers_per_stage"] == [
        19,
        20,
        20,
        21,
    ]
    # torchtitan takes the same split as module lists, chunk by chunk (9, 10, 10, 10, 10, 10, 10, 11 layers)
    titan = cli(
        "export",
        "--format",
        "torchtitan",
        *args,
        "--zero-stage",
        "3",
        "--pipeline-layout",
        LLAMA70_UNEVEN,
        "--ignore-memory",
    )  # 84 GiB without recompute: the split is what is checked here
    assert titan.code == 0, titan.err
    parts = next(line for line in titan.out.splitlines() if line.startswith("--parallelism.module_fqns_per_model_part"))
    chunks = parts.removesuffix(" \\").split()[1:]  # torchtitan 0.3: one comma-joined value per chunk
    assert [c.count("layers.") for c in chunks] == [9, 10, 10, 10, 10, 10, 10, 11]
    assert chunks[0].startswith("tok_embeddings,layers.0,") and chunks[-1].endswith(",layers.79,norm,lm_head")
    refused = cli(
        "export", "--format", "deepspeed", *args, "--tp", "1", "--dp", "16", "--pipeline-layout", LLAMA70_UNEVEN
    )  # 8 chunks on 4 ranks: DeepSpeed's pipeline engine runs no interleaving (Stack.interleaved_min_pp)
    assert refused.code == 2 and "stack deepspeed runs no interleaved pipeline" in refused.err
    one_per_rank = "Et*19|t*20|t*20|t*21L"  # 1F1B: what is left to refuse is the layout string itself
    refused = cli(
        "export", "--format", "deepspeed", *args, "--tp", "1", "--dp", "16", "--pipeline-layout", one_per_rank
    )
    assert refused.code == 2 and "--pipeline-layout" in refused.err, refused.err


def test_megatron_split_options_build_the_layout_megatron_builds() -> None:
    from planner.cost.layout import split_layout

    # Qwen3-235B's 94 layers on 16 ranks x 3 chunks: the embedding and the loss count as one layer
    # each, so 96 split two per chunk and the first and last chunks hold one decoder layer
    assert split_layout(94, 16, 3, embedding=True, loss=True) == "Et|(t*2|)*46tL"
    # DeepSeek-V3's 61 layers + 1 MTP on 16 ranks, 4 on the first and 1 on the last: 56 over 14
    text = split_layout(61, 16, 1, mtp_layers=1, first=4, last=1)
    assert text == "Et*4|(t*4|)*14tmL" and rank_layer_counts(parse_layout(text), 16) == [4] * 15 + [1]
    # with virtual stages a rank's count is spread evenly over its chunks (chunk c on rank c mod pp)
    assert [s.count("t") for s in parse_layout(split_layout(36, 4, 2, first=8, last=8))] == [4, 5, 5, 4] * 2
    # only the first given: the other ranks split the rest
    assert rank_layer_counts(parse_layout(split_layout(61, 8, 1, first=5)), 8) == [5] + [8] * 7
    for kwargs, said in [
        (dict(first=5), "the 56 decoder layers left must split evenly over 15 middle rank"),
        (
            dict(first=3, pp=16, vp=2),
            "--decoder-first-pipeline-num-layers 3: must be divisible by the virtual stages 2",
        ),
        (dict(first=3, embedding=True), "cannot be given with --account-for-embedding/loss-in-pipeline-split"),
        (dict(embedding=True, pp=4, vp=2), "62 must be divisible by pp x virtual stages = 8"),
        (dict(first=60, last=1, pp=2), None),
        (dict(first=60, pp=1), "needs --pp >= 2"),
        (dict(first=30, last=30, pp=2), "1 of the model's 61 decoder layers are left over and pp 2 has no middle rank"),
        (dict(first=500, last=500, pp=2), "1000 layers pinned, more than the model's 61 decoder layers"),
        (dict(first=30, last=31, pp=3), "no decoder layer is left for the 1 middle pipeline rank (each needs some)"),
        (dict(first=61, pp=2), "no decoder layer is left for the 1 other pipeline rank (each needs some)"),
    ]:
        args = dict(num_layers=61, pp=kwargs.pop("pp", 16), vp=kwargs.pop("vp", 1))
        if said is None:
            assert split_layout(**args, **kwargs) == "Et*60|tL"
            continue
        with pytest.raises(PlannerError, match=re.escape(said)):
            split_layout(**args, **kwargs)


def test_megatron_split_flags_price_and_export_that_layout(cli) -> None:  # type: ignore[no-untyped-def]
    import json

    import planner

    args = ["-m", "qwen3-235b-a22b", "-c", "dgx-b200x32", "--tp", "1", "--pp", "16", "--dp", "16", "--ep", "8"]
    split = ["-v", "3", "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    r = cli("estimate", *args, *split, "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert data["config"]["parallel"]["pipeline_layout"] == "Et|(t*2|)*46tL"
    assert data["layers_per_stage"] == [5] + [6] * 14 + [5]
    # the same as the layout written out, and as the library prices it
    written = json.loads(cli("estimate", *args, "--pipeline-layout", "Et|(t*2|)*46tL", "--json").out)
    assert written["step_time_s"] == data["step_time_s"]
    lib = planner.estimate(
        "qwen3-235b-a22b", "dgx-b200x32", tp=1, pp=16, dp=16, ep=8, virtual_stages=3,
        account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True,
    )  # fmt: skip
    assert lib.step_time_s == data["step_time_s"]
    # Megatron's export writes the layout the flags build
    out = cli("export", "--format", "megatron", *args, *split, "--ignore-memory").out
    assert "--pipeline-model-parallel-layout 'Et|(t*2|)*46tL'" in out
    # what Megatron refuses, the planner refuses in one line
    bad = cli("estimate", *args, "--decoder-first-pipeline-num-layers", "4", "--pipeline-layout", "Et|(t*2|)*46tL")
    assert (
        bad.code == 2
        and bad.err.startswith("error: --pipeline-layout cannot be given with")
        and "\n" not in bad.err.strip()
    )
    uneven = cli("estimate", *args, "--decoder-first-pipeline-num-layers", "5")
    assert uneven.code == 2 and "must split evenly over 15 middle rank(s)" in uneven.err
    with pytest.raises(PlannerError, match=r"price one mesh: give them to planner\.estimate"):
        planner.plan("qwen3-235b-a22b", "dgx-b200x32", pp=16, account_for_loss_in_pipeline_split=True)


@pytest.mark.parametrize(
    ("layout", "said"),
    [
        ("", "pipeline_layout '': empty; give its stages"),
        ("Et*16|(t*16L", "a parenthesis that does not close a repetition"),
        ("Et*16|(t*16)L", "a parenthesis that does not close a repetition"),
    ],
)
def test_an_empty_layout_or_an_open_parenthesis_says_so(layout: str, said: str) -> None:
    """'' was read as one stage; a parenthesis of no (...)*n group was an 'unknown character' although
    groups are allowed."""
    with pytest.raises(PlannerError, match=re.escape(said)):
        parse_layout(layout)


def test_an_end_kind_off_its_chunk_is_priced_where_it_runs_and_said() -> None:
    """Megatron-LM accepts 'E|t*80|L|' (its check flattens the chunks) but builds the LM head into
    the last chunk (get_model's post_process): the estimate prices it there, says so once per
    misplaced kind, and the torchtitan export writes the head into the last part."""
    from planner.catalog import load_cluster
    from planner.cost.layout import ends_placed, placement_notes
    from planner.export.torchtitan import model_parts
    from planner.pricing import estimate_mesh
    from planner.schemas import JobSpec

    model, cluster = load_model("llama3-70b"), load_cluster("dgx-h100", gpus=64)
    job = JobSpec(global_batch_size=128, seq_len=4096)
    base = ParallelConfig(tp=4, pp=4, dp=4, sequence_parallel=True)
    off = estimate_mesh(model, cluster, job, base.model_copy(update={"pipeline_layout": "E|t*80|L|"}))
    right = estimate_mesh(model, cluster, job, base.model_copy(update={"pipeline_layout": "E|t*80||L"}))
    notes = [w for w in off.warnings if w.startswith("pipeline_layout writes")]
    assert len(notes) == 1 and "'L' in model chunk 3 of 4" in notes[0] and "runs on the last chunk" in notes[0]
    assert not [w for w in right.warnings if w.startswith("pipeline_layout writes")]
    assert off.step_time_s == pytest.approx(right.step_time_s, rel=1e-12)
    assert off.layers_per_stage == right.layers_per_stage == [0, 80, 0, 0]
    both = placement_notes(parse_layout("|Et*80|L|"))
    assert [n.split("'")[1] for n in both] == ["E", "L"]
    assert ends_placed(parse_layout("|Et*80|L|")) == [["E"], ["t"] * 80, [], ["L"]]
    parts = model_parts(model, job, base.model_copy(update={"pipeline_layout": "E|t*80|L|"}), head=["norm", "output"])
    assert parts is not None and parts[0] == ["tok_embeddings"] and parts[2] == [] and parts[3] == ["norm", "output"]
