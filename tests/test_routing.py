"""MoE routing: the busiest expert-parallel rank's share under token drop, forced balance and
natural dropless routing, through compute, traffic, memory, the CLI, the runs file and exports."""

from __future__ import annotations

import copy
from math import comb

import numpy as np
import pytest

from planner.catalog import load_cluster, load_model
from planner.cli import moe_routing_fields
from planner.cost.comm import Fanout
from planner.cost.compute import layer_gemms
from planner.cost.memory import activation_bytes_per_token_layer
from planner.cost.routing import moe_load_factor
from planner.cost.traffic import routed_message_bytes
from planner.errors import PlannerError
from planner.export.megatron import megatron_args, megatron_notes
from planner.mesh import MeshArrays
from planner.runs import case_from_row, load_runs
from planner.schemas import JobSpec, ModelSpec, ParallelConfig
from planner.schemas.job import NATURAL_ROUTING_IMBALANCE
from tests.conftest import SAMPLE_RUNS, assert_one_line_error
from tests.test_fidelity import BRIDGE_MOE, ROWS

MODEL = load_model("mixtral-8x7b")
TITAN_MOE = load_model("qwen3-30b-a3b")  # a MoE model torchtitan builds (its registry has no Mixtral)
MESHES = MeshArrays.from_configs([ParallelConfig(ep=1, dp=8), ParallelConfig(ep=8, dp=8)])


def _job(**routing: float) -> JobSpec:
    return JobSpec(global_batch_size=64, seq_len=4096, **routing)


def test_capacity_pads_every_rank_and_imbalance_needs_experts_spread() -> None:
    assert moe_load_factor(_job(moe_capacity_factor=1.25), MESHES, MODEL).tolist() == [1.25, 1.25]
    assert moe_load_factor(_job(moe_load_imbalance=1.4), MESHES, MODEL).tolist() == [1.0, 1.4]
    assert moe_load_factor(_job(moe_load_imbalance=1.0), MESHES, MODEL).tolist() == [1.0, 1.0]
    assert moe_load_factor(_job(), MESHES, MODEL).tolist() == [1.0, NATURAL_ROUTING_IMBALANCE]
    # each names a routing: token drop pads every expert to the capacity, so a dropless imbalance
    # beside it would go unpriced while the job echoed it (a review, 2026-12-07); refused
    with pytest.raises(PlannerError, match=r"moe_load_imbalance 2 with moe_capacity_factor 1: .*; give one"):
        _job(moe_capacity_factor=1.0, moe_load_imbalance=2.0)


def test_the_busiest_rank_computes_receives_and_keeps_its_share() -> None:
    balanced, skewed = _job(moe_load_imbalance=1.0), _job(moe_load_imbalance=1.5)

    def expert_rows(job: JobSpec) -> np.ndarray:
        return next(g for g in layer_gemms(MODEL, job, MESHES, moe=True) if g.name == "moe.expert_in").m_rows

    assert (expert_rows(skewed) / expert_rows(balanced)).tolist() == pytest.approx([1.0, 1.5])
    ratio = routed_message_bytes(MODEL, skewed, MESHES) / routed_message_bytes(MODEL, balanced, MESHES)
    assert ratio.tolist() == pytest.approx([1.0, 1.5])
    grew = activation_bytes_per_token_layer(MODEL, skewed, MESHES, moe=True) - activation_bytes_per_token_layer(
        MODEL, balanced, MESHES, moe=True
    )
    assert grew[0] == 0 and grew[1] > 0


def test_moe_routing_flag() -> None:
    assert moe_routing_fields(None) == {} and moe_routing_fields("natural") == {}
    assert moe_routing_fields("balanced") == {"moe_load_imbalance": 1.0}
    assert moe_routing_fields("drop:1.25") == {"moe_capacity_factor": 1.25}
    assert moe_routing_fields("Imbalance:1.3") == {"moe_load_imbalance": 1.3}
    for bad in ("drop:0", "drop:1e-300", "drop:0.09", "imbalance:0.9", "drop:x", "lopsided", "drop:nan", "balanced:2"):
        with pytest.raises(PlannerError, match="--moe-routing"):
            moe_routing_fields(bad)
    # drop:1e-300 had priced Mixtral at 164% MFU, dropping nearly every routed token
    assert moe_routing_fields("drop:0.1") == {"moe_capacity_factor": 0.1}
    with pytest.raises(PlannerError, match=r"moe_capacity_factor.*greater than or equal to 0\.1"):
        JobSpec(global_batch_size=8, seq_len=4096, moe_capacity_factor=1e-300)


def test_runs_rows_state_their_routing() -> None:
    dropless = case_from_row(ROWS[BRIDGE_MOE])  # 25.11: force-balanced, token-dropless
    assert (dropless.job.moe_capacity_factor, dropless.job.moe_load_imbalance) == (None, 1.0)
    row = copy.deepcopy(ROWS[BRIDGE_MOE])
    row["knobs"]["moe_token_drop"] = True  # 25.09's tokendrop rows
    assert case_from_row(row).job.moe_capacity_factor == 1.0
    del row["knobs"]["moe_token_drop"], row["knobs"]["moe_routing"]
    assert (case_from_row(row).job.moe_capacity_factor, case_from_row(row).job.moe_load_imbalance) == (None, None)


def test_megatron_export_writes_the_routing_it_priced() -> None:
    config = ParallelConfig(ep=8, dp=8)
    dropped = megatron_args(MODEL, _job(moe_capacity_factor=1.25), config)
    assert "--moe-pad-expert-input-to-capacity" in dropped
    assert dropped[dropped.index("--moe-expert-capacity-factor") + 1] == "1.25"
    assert "--moe-router-force-load-balancing" in megatron_args(MODEL, _job(moe_load_imbalance=1.0), config)
    natural = _job()
    assert not any(a.startswith("--moe-expert-capacity") or "force" in a for a in megatron_args(MODEL, natural, config))
    assert any("dropless natural routing" in n for n in megatron_notes(MODEL, natural, config))
    assert not any("priced with" in n for n in megatron_notes(MODEL, _job(moe_capacity_factor=1.25), config))


def test_the_shipped_runs_file_prices_every_moe_row_as_it_ran() -> None:
    # every MoE row of the sample states force-balanced or token-drop routing (benchmarks do)
    moe = 0
    for row in load_runs(SAMPLE_RUNS):
        try:
            case = case_from_row(row)
        except PlannerError:
            continue
        if case.model.is_moe:
            moe += 1
            assert case.job.moe_capacity_factor == 1.0 or case.job.moe_load_imbalance == 1.0, case.name
    assert moe >= 1


def test_the_explanation_says_how_tokens_were_routed() -> None:
    from planner.explain import routing_assumed
    from planner.pricing import estimate_mesh

    cluster = load_cluster("dgx-h100", gpus=64)
    config = ParallelConfig(ep=8, dp=64)
    said = {
        name: routing_assumed(estimate_mesh(MODEL, cluster, _job(**fields), config), MODEL)
        for name, fields in (
            ("drop", {"moe_capacity_factor": 1.25}),
            ("balanced", {"moe_load_imbalance": 1.0}),
            ("given", {"moe_load_imbalance": 1.3}),
        )
    }
    assert "capacity factor 1.25" in said["drop"]
    assert "force-balanced" in said["balanced"]
    assert "1.3x the mean (the given imbalance)" in said["given"]
    assert routing_assumed(estimate_mesh(MODEL, cluster, _job(), ParallelConfig(ep=1, dp=64)), MODEL) == ""


def test_a_dropless_imbalance_is_at_most_what_the_busiest_rank_can_get() -> None:
    """A token's top-k experts are distinct, so the busiest of ep ranks holding E / ep experts gets at
    most ep x min(E / ep, k) / k times the mean: Mixtral (8 experts, top-2) at ep 8 at most 4x. A
    review (2026-12-07) found imbalance:1024 priced at 20,537 s a step there; it is priced at the cap
    and the explanation says so."""
    from planner.cost.routing import most_imbalance
    from planner.explain import routing_assumed
    from planner.pricing import estimate_mesh

    mixtral = load_model("mixtral-8x7b")
    assert list(most_imbalance(mixtral, np.array([1.0, 2.0, 4.0, 8.0]))) == [1.0, 2.0, 4.0, 4.0]
    cluster = load_cluster("dgx-h100", gpus=32)
    config = ParallelConfig(tp=4, dp=8, ep=8, recompute="full", sequence_parallel=True)
    at_cap = estimate_mesh(mixtral, cluster, _job(moe_load_imbalance=4.0), config)
    beyond = estimate_mesh(mixtral, cluster, _job(moe_load_imbalance=1024.0), config)
    assert beyond.step_time_s == at_cap.step_time_s
    assert "getting 4x the mean (the given 1024x capped at the most one of 8 ranks can get" in routing_assumed(
        beyond, mixtral
    )


def test_torchtitan_export_notes_the_routing_it_cannot_write() -> None:
    from planner.export.torchtitan import torchtitan_notes

    config = ParallelConfig(ep=8, dp=8, zero_stage=3)  # torchtitan carves EP from FSDP's dp_shard
    notes = torchtitan_notes(TITAN_MOE, _job(moe_capacity_factor=1.25), config)
    assert any("capacity factor 1.25: set it in the recipe's MoE settings" in n for n in notes)
    assert not any("priced with" in n for n in torchtitan_notes(TITAN_MOE, _job(), ParallelConfig(dp=8)))


# ---- expert-parallel communication overlap (Megatron --overlap-moe-expert-parallel-comm) ----


def test_ep_overlap_hides_the_stacks_share_within_the_compute_budget() -> None:
    from planner.cost.comm import mesh_links
    from planner.cost.traffic import ep_per_microbatch

    cluster = load_cluster("dgx-h100", gpus=64)
    mesh = MeshArrays.from_configs([ParallelConfig(ep=8, dp=64)])
    links = mesh_links(cluster, mesh)
    layers, moe = np.array([32.0]), np.array([32.0])
    off = ep_per_microbatch(MODEL, _job(), mesh, links, layers, moe, 10.0)
    on = ep_per_microbatch(MODEL, _job(ep_comm_overlap=True), mesh, links, layers, moe, 10.0)
    assert off.hidden_s == pytest.approx(0.0) and off.time_s[0] > 0
    assert on.hidden_s[0] == pytest.approx(0.8 * off.time_s[0])  # megatron-core's ep_overlap_hidden_fraction
    assert on.time_s[0] == pytest.approx(0.2 * off.time_s[0])
    tight = ep_per_microbatch(MODEL, _job(ep_comm_overlap=True), mesh, links, layers, moe, 1e-4)
    assert tight.hidden_s[0] == pytest.approx(1e-4)  # never more than the compute beside it


def test_ep_overlap_needs_a_stack_that_has_it_and_megatrons_schedule() -> None:
    from planner.constraints import rule_masks

    with pytest.raises(ValueError, match="stack torchtitan cannot overlap expert-parallel communication"):
        JobSpec(global_batch_size=64, seq_len=4096, stack="torchtitan", ep_comm_overlap=True)
    cluster = load_cluster("dgx-h100", gpus=64)
    meshes = MeshArrays.from_configs(
        [
            ParallelConfig(ep=8, dp=32, pp=2, virtual_stages=2, schedule="interleaved-1f1b"),
            ParallelConfig(ep=8, dp=32, pp=2),
            ParallelConfig(ep=8, dp=64, recompute="full"),
            ParallelConfig(ep=8, dp=64, recompute="selective"),
        ]
    )
    on = rule_masks(MODEL, cluster, _job(ep_comm_overlap=True), meshes)["ep_overlap_schedule"]
    assert on.tolist() == [True, False, False, True]
    assert rule_masks(MODEL, cluster, _job(), meshes)["ep_overlap_schedule"].all()


def test_ep_overlap_holds_one_more_chunk_and_megatron_gets_its_flag() -> None:
    from planner.cost.memory import ep_overlap_extra_in_flight

    meshes = MeshArrays.from_configs(
        [
            ParallelConfig(ep=8, dp=64),
            ParallelConfig(ep=8, dp=32, pp=2, virtual_stages=4, schedule="interleaved-1f1b"),
            ParallelConfig(ep=1, dp=64),
        ]
    )
    assert ep_overlap_extra_in_flight(_job(ep_comm_overlap=True), meshes).tolist() == [1.0, 0.25, 0.0]
    assert ep_overlap_extra_in_flight(_job(), meshes).tolist() == [0.0, 0.0, 0.0]
    config = ParallelConfig(ep=8, dp=8)
    assert "--overlap-moe-expert-parallel-comm" in megatron_args(MODEL, _job(ep_comm_overlap=True), config)
    assert "--overlap-moe-expert-parallel-comm" not in megatron_args(MODEL, _job(), config)


def test_ep_overlap_cli_flag(cli) -> None:  # type: ignore[no-untyped-def]
    args = ["estimate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100x8", "--ep", "8", "--dp", "64", "--json"]
    import json

    off = json.loads(cli(*args).out)
    on = json.loads(cli(*args, "--ep-comm-overlap").out)
    assert off["hidden_comm_s"]["ep"] == 0 and on["hidden_comm_s"]["ep"] > 0
    assert on["step_time_s"] < off["step_time_s"]
    refused = cli(*args, "--ep-comm-overlap", "--stack", "torchtitan")
    assert refused.code == 2 and "cannot overlap expert-parallel communication" in refused.err


# ---- token dispatchers -------------------------------------------------------------------------


def test_ranks_reached_counts_distinct_expert_parallel_ranks() -> None:
    from planner.cost.traffic import ranks_reached

    dsv3 = load_model("deepseek-v3")  # 256 experts, top-8
    reached = ranks_reached(dsv3, np.array([1, 8, 64, 256]))
    assert reached[0] == pytest.approx(1.0)
    assert reached[3] == pytest.approx(8.0)  # one expert per rank: every copy goes to its own rank
    # 8 ranks of 32 experts: 8 * (1 - prod_{i<8} (224 - i) / (256 - i))
    assert reached[1] == pytest.approx(8 * (1 - np.prod([(224 - i) / (256 - i) for i in range(8)])))
    assert 5.2 < reached[1] < 5.4 and 7.6 < reached[2] < 7.8


def test_dispatchers_move_what_megatrons_dispatchers_move() -> None:
    from planner.cost.comm import all_gather_s, all_to_all_s, mesh_links
    from planner.cost.traffic import ep_dispatch, ep_per_microbatch, ranks_reached

    model, cluster = load_model("deepseek-v3"), load_cluster("dgx-h100x16")
    mesh = MeshArrays.from_configs([ParallelConfig(dp=128, ep=64)])
    links = mesh_links(cluster, mesh)
    jobs = {d: _job(moe_dispatcher=d, moe_load_imbalance=1.0) for d in ("alltoall", "allgather", "flex")}
    routed = routed_message_bytes(model, jobs["alltoall"], mesh)
    local = routed / 8  # force-balanced: top-8 copies of the rank's tokens x h
    got = {d: ep_dispatch(model, job, mesh) for d, job in jobs.items()}
    assert got["alltoall"].op == "all_to_all" and got["alltoall"].message_bytes == pytest.approx(routed)
    assert got["allgather"].op == "all_gather" and got["allgather"].message_bytes == pytest.approx(64 * local)
    assert got["flex"].op == "all_to_all"
    assert got["flex"].message_bytes == pytest.approx(local * ranks_reached(model, np.array([64.0])))
    # the step prices each with its own collective, 4 per MoE layer (dispatch + combine, fwd + bwd)
    layers, moe = np.array([61.0]), np.array([58.0])
    for d, job in jobs.items():
        price = all_gather_s if got[d].op == "all_gather" else all_to_all_s
        expected = 4 * 58 * price(got[d].message_bytes, links["ep"], *([got[d].fanout] if d == "flex" else []))
        assert ep_per_microbatch(model, job, mesh, links, layers, moe).time_s == pytest.approx(expected)
    # flex crosses InfiniBand once per other node holding one of a token's experts, forwarded over
    # NVLink there. DeepSeek-V3 routes a token within 4 of its 8 expert groups, one group per node
    # here: each of the 4 nodes is reached unless all 8 experts fall in the other 3 groups' 96 of
    # 128, 4 (1 - prod (96-i)/(128-i)) = 3.63 nodes, 3.18 of them others, where once per rank
    # reached off-node would be 56/64 x 7.68 = 6.72 copies
    ep = links["ep"]
    assert got["flex"].fanout == Fanout(256.0, 8, 8, 4)
    others = 4 * (1 - np.prod([(96 - i) / (128 - i) for i in range(8)])) * 7 / 8
    assert others == pytest.approx(3.175, abs=1e-3)
    nic_s = others * local / ep.inter_bytes_per_s + 63 * ep.latency_s
    flex = ep_per_microbatch(model, jobs["flex"], mesh, links, layers, moe).time_s
    assert flex == pytest.approx(4 * 58 * nic_s)
    per_rank = 4 * 58 * all_to_all_s(got["flex"].message_bytes, ep)
    assert flex / per_rank == pytest.approx(0.49, abs=0.01)  # 3.18 / 6.72 of the bytes, the same latency


def test_group_limited_routing_bounds_the_domains_a_token_reaches() -> None:
    from planner.cost.comm import domains_reached, holders_reached

    limited, free = Fanout(256.0, 8, 8, 4), Fanout(256.0, 8)
    domains = np.array([1.0, 2.0, 8.0, 16.0])
    got, plain = domains_reached(limited, domains), domains_reached(free, domains)
    assert plain == pytest.approx(holders_reached(256.0, 8, domains))
    assert got[0] == plain[0] == 1.0
    # 8 domains of one group each: the token's 4 groups, each missed with prob prod (96-i)/(128-i)
    assert got[2] == pytest.approx(4 * (1 - np.prod([(96 - i) / (128 - i) for i in range(8)])))
    assert got[2] < 4 < plain[2]
    # 2 domains of 4 groups: j of the token's 4 groups in a domain (hypergeometric), missed when
    # all 8 experts fall in the other 4 - j groups' experts
    p = {j: comb(4, j) * comb(4, 4 - j) / comb(8, 4) for j in range(5)}
    reached = sum(p[j] * (1 - np.prod([(128 - 32 * j - i) / (128 - i) for i in range(8)])) for j in range(1, 5))
    assert got[1] == pytest.approx(2 * reached)
    # 16 domains, each group over 2: the token's 4 groups span 8 domains sharing its 128 experts
    assert got[3] == pytest.approx(holders_reached(128.0, 8, np.array(8.0)))
    # a model states it as Hugging Face does; one group limits nothing
    assert load_model("deepseek-v3").routing_groups == (8, 4)
    spec = load_model("deepseek-v3").model_dump(exclude={"name"})
    assert ModelSpec(name="x", **{**spec, "n_group": 1, "topk_group": 4}).routing_groups == (1, 1)
    with pytest.raises(ValueError, match="n_group 7 must divide the 256 routed experts"):
        ModelSpec(name="x", **{**spec, "n_group": 7})
    with pytest.raises(ValueError, match="topk_group 1 must be at most n_group 64 and its groups must hold"):
        ModelSpec(name="x", **{**spec, "n_group": 64, "topk_group": 1})


def test_a_dispatcher_the_stack_cannot_run_is_refused_in_one_line(cli) -> None:
    with pytest.raises(ValueError, match="moe_dispatcher 'flex': stack torchtitan runs alltoall"):
        JobSpec(global_batch_size=8, seq_len=4096, stack="torchtitan", moe_dispatcher="flex")
    r = cli(
        "estimate",
        "--model",
        "qwen3-30b-a3b",
        "--cluster",
        "dgx-h100",
        "--dp",
        "8",
        "--ep",
        "8",
        "--moe-dispatcher",
        "deepep",
    )
    assert_one_line_error(r, "--moe-dispatcher", "'deepep'", "'alltoall', 'allgather', 'flex'")
    r = cli("estimate", "-m", "qwen3-30b-a3b", "-c", "dgx-h100", "--stack", "torchtitan", "--moe-dispatcher", "flex")
    assert_one_line_error(r, "moe_dispatcher 'flex': stack torchtitan runs alltoall")


def test_megatron_export_names_the_priced_dispatcher_and_torchtitan_refuses_others() -> None:
    from planner.export.torchtitan import torchtitan_toml
    from planner.export.torchtitan03 import torchtitan_args

    config = ParallelConfig(dp=8, ep=8)
    args = megatron_args(MODEL, _job(moe_dispatcher="flex"), config)
    at = args.index("--moe-token-dispatcher-type")
    assert args[at + 1 : at + 4] == ["flex", "--moe-flex-dispatcher-backend", "deepep"]
    # an NVLink domain wider than DeepEP's 8 peers (an NVL72 rack) runs HybridEP, as Megatron-Bridge's
    # GB200/GB300 recipes do and as the flex price (every rank of the domain over NVLink) assumes
    from planner.catalog import load_cluster

    # on AMD GPUs neither CUDA backend runs: ROCm's Megatron-LM fork runs MORI (its PR #135), which the
    # notes say (the MI300X export had written deepep: a review, 2026-12-07)
    from planner.export import megatron_notes

    for cluster, backend in (("gb200-nvl72x1", "hybridep"), ("dgx-b200x8", "deepep"), ("mi300xx8", "mori")):
        on = megatron_args(MODEL, _job(moe_dispatcher="flex"), config, load_cluster(cluster))
        assert on[on.index("--moe-flex-dispatcher-backend") + 1] == backend
        said = megatron_notes(MODEL, _job(moe_dispatcher="flex"), config, load_cluster(cluster))
        assert any("ROCm/Megatron-LM" in n for n in said) == (backend == "mori")
    default = megatron_args(MODEL, _job(), config)
    assert default[default.index("--moe-token-dispatcher-type") + 1] == "alltoall"  # Megatron's default is allgather
    titan_job = _job(moe_dispatcher="allgather").model_copy(update={"stack": "torchtitan"})
    with pytest.raises(
        PlannerError, match=r"torchtitan-0\.2 cannot express --moe-dispatcher allgather: torchtitan runs alltoall"
    ):
        torchtitan_toml(TITAN_MOE, titan_job, config)
    with pytest.raises(
        PlannerError, match="torchtitan cannot express --moe-dispatcher allgather: torchtitan runs alltoall"
    ):
        torchtitan_args(TITAN_MOE, titan_job, config)


def test_the_communication_table_names_the_expert_tp_group_its_bytes_hold(cli) -> None:
    """At tp 1 with --expert-tp 2 the tp row held 1.9 TB of the expert layers' TP traffic beside a
    group of size 1 over no link; it now names both groups and the expert-TP group's link."""
    args = ("estimate", "-m", "qwen3-30b-a3b", "-c", "dgx-h100", "--tp", "1", "--ep", "4", "--expert-tp", "2")
    r = cli(*args, "--dp", "8")
    row = next(line for line in r.out.splitlines() if "tp + expert tp" in line)
    assert row.split("│")[2].strip() == "1 / 2" and row.split("│")[4].strip() == "intra_node"
    est = cli(*args, "--dp", "8", "--json").json()
    assert est["links"]["etp"] == "intra_node" and est["links"]["tp"] == "none"
    plain = cli("estimate", "-m", "qwen3-30b-a3b", "-c", "dgx-h100", "--tp", "2", "--ep", "4", "--dp", "4")
    assert "tp + expert tp" not in plain.out  # expert TP follows tp (Megatron's default): one group


def test_a_megatron_moe_mesh_with_tp_needs_sequence_parallelism() -> None:
    # Megatron-Core's MoELayer.forward raises in training for MoE with tensor parallelism and no sequence
    # parallelism; such a mesh had been priced, its EP dispatch counted as each TP rank's 1/t of the tokens
    import planner
    from planner.errors import PlannerError

    ask = dict(tp=2, ep=8)
    with pytest.raises(PlannerError, match="without sequence parallelism"):
        planner.estimate("qwen3-30b-a3b", "dgx-h100x4", sequence_parallel=False, **ask)
    assert planner.estimate("qwen3-30b-a3b", "dgx-h100x4", **ask).config.parallel.sequence_parallel
    assert planner.estimate("llama3-8b", "dgx-h100x4", tp=2, sequence_parallel=False).step_time_s > 0  # dense: any
