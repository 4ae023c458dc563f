"""The validator's pure parts: replayed terms agree with the cost engine, replicas fit the world,
GEMM caps keep the work, calibration recovers known parameters, one-line errors."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from planner.catalog import load_cluster, load_model, load_profile
from planner.cost.step import evaluate
from planner.errors import PlannerError
from planner.mesh import MeshArrays
from planner.schemas.parallel import ParallelConfig
from planner.search import default_job
from planner.validate.calibrate import Params, calibrated_profile, fit, predict, write_profile_yaml
from planner.validate.gemms import capped_shape, gemm_terms
from planner.validate.replica import fit_replica, replica_config
from planner.validate.schemas import TermResult
from planner.validate.sweep import parse_ops, parse_size, sweep_terms
from planner.validate.terms import comm_terms

HEAVY_LAST = "Et*9|t*8|t*7|t*8L"
CONFIGS = [
    ("llama3-8b", "dgx-h100x2", ParallelConfig(tp=4, pp=2, dp=2, zero_stage=1, sequence_parallel=True)),
    ("llama3-8b", "dgx-h100x2", ParallelConfig(tp=2, cp=2, dp=4, recompute="full")),
    ("llama3-8b", "dgx-h100x2", ParallelConfig(tp=2, dp=8, zero_stage=3)),
    ("mixtral-8x7b", "dgx-h100x4", ParallelConfig(tp=2, pp=4, dp=4, ep=4, sequence_parallel=True, zero_stage=1)),
    ("mixtral-8x7b", "dgx-h100x4", ParallelConfig(tp=4, pp=2, dp=4, ep=2, expert_tp=2, sequence_parallel=True)),
    ("llama3-8b", "dgx-h100x2", ParallelConfig(pp=4, dp=4, schedule="interleaved-1f1b", virtual_stages=2)),
    # the busiest rank by layers (9) is not the one the step waits for (the last: 8 + the LM head)
    (
        "llama3-8b",
        "dgx-h100x2",
        ParallelConfig(tp=2, pp=4, dp=2, sequence_parallel=True, pipeline_layout="Et*9|t*8|t*7|t*8L"),
    ),
]


@pytest.mark.parametrize(("model_name", "cluster_name", "config"), CONFIGS)
def test_terms_add_up_to_the_cost_engine(model_name: str, cluster_name: str, config: ParallelConfig) -> None:
    # Replayed on the plan's own mesh and cluster without caps, the terms times their calls per
    # step must give exactly the serial communication time step.evaluate prices.
    model, cluster = load_model(model_name), load_cluster(cluster_name)
    job = default_job(model)
    cols = evaluate(model, cluster, job, MeshArrays.from_configs([config]))
    terms = comm_terms(model, job, config, config, cluster)

    def total(*prefixes: str) -> float:
        return sum(t.predicted_s * t.calls_per_step for t in terms if t.name.split(".")[0] in prefixes)

    expected = {
        ("tp", "etp"): cols.time["tp_comm"][0] + cols.hidden["tp"][0],
        ("ep",): cols.time["ep_comm"][0],
        ("pp",): cols.time["pp_comm"][0] + cols.hidden["pp"][0],
        ("cp",): cols.time["cp_comm"][0] + cols.hidden["cp"][0],
        ("dp", "edp"): cols.time["dp_comm"][0] + cols.hidden["dp"][0],
    }
    for prefixes, seconds in expected.items():
        assert total(*prefixes) == pytest.approx(seconds, rel=1e-9, abs=1e-12), prefixes
    assert any(t.name.startswith("dp.") for t in terms)


def test_capped_messages_keep_the_bytes_per_step() -> None:
    model, cluster = load_model("gpt2"), load_cluster("localhost-cpu", gpus=4)
    job = default_job(model)
    config = ParallelConfig(dp=4)
    full = {t.name: t for t in comm_terms(model, job, config, config, cluster)}
    capped = comm_terms(model, job, config, config, cluster, max_message_bytes=2**20)
    for term in capped:
        assert term.message_bytes <= 2**20 < term.plan_message_bytes
        assert term.calls_per_step * term.message_bytes == pytest.approx(full[term.name].plan_message_bytes)


def test_gemm_caps_keep_the_flops_per_step_and_the_reduction_dim() -> None:
    model, cluster = load_model("llama3-8b"), load_cluster("localhost-cpu")
    job = default_job(model)
    config = ParallelConfig(tp=2)
    plain = {t.name: t for t in gemm_terms(model, job, config, cluster, on_gpu=False)}
    for term in gemm_terms(model, job, config, cluster, on_gpu=False, max_gemm_flops=1e9):
        m, n, k = term.gemm_mnk  # type: ignore[misc]
        pm, pn, pk = plain[term.name].gemm_mnk  # type: ignore[misc]
        assert 2 * m * n * k <= 1e9 and k == pk and term.dtype == "fp32"
        assert term.calls_per_step * m * n == pytest.approx(plain[term.name].calls_per_step * pm * pn)
    assert {"gemm.attn.qkv", "gemm.attn.out", "gemm.mlp.in", "gemm.mlp.out", "gemm.lm_head"} <= set(plain)
    assert capped_shape((1024, 50257, 768), 2e9) == (1024, 1271, 768)
    # both M and N past the square's side: cut to it, not the larger alone to a thin 8,192 x 14
    assert capped_shape((8192, 28672, 8192), 2e9) == (349, 349, 8192)


@pytest.mark.parametrize(
    ("config", "world", "expected", "replicas"),
    [
        # every planned axis at 2 while the world has room, innermost first, before any grows back: the
        # pipeline had always been dropped on one node (a review, 2026-12-07: tp4 pp4 dp8 on 8 -> tp4 dp2)
        (ParallelConfig(tp=8, pp=2, dp=8), 4, (2, 1, 2), 1),
        (ParallelConfig(tp=4, pp=4, dp=8), 8, (2, 2, 2), 1),
        (ParallelConfig(tp=8, pp=2, dp=4), 64, (8, 2, 4), 1),  # room for the whole plan: as planned
        (ParallelConfig(tp=2, pp=2, dp=2), 4, (2, 1, 2), 1),  # tp, then dp (order tp-cp-dp-pp)
        (ParallelConfig(tp=2, pp=2, dp=2, order="tp-pp-dp-cp"), 4, (2, 2, 1), 1),
        (ParallelConfig(cp=2), 4, (1, 1, 1), 2),  # a 2-rank plan on 4 ranks: two replicas
        (ParallelConfig(tp=3), 4, (3, 1, 1), 1),  # ranks 3 idle
    ],
)
def test_replica_keeps_inner_groups_and_fills_the_world(
    config: ParallelConfig, world: int, expected: tuple[int, int, int], replicas: int
) -> None:
    mesh, notes = fit_replica(config, world)
    assert (mesh.tp, mesh.pp, mesh.dp) == expected and mesh.replicas == replicas
    assert mesh.ranks_per_replica * mesh.replicas <= world
    assert notes or (mesh.ranks_per_replica == world and config.num_gpus == world)
    replica_config(config, mesh)  # valid again


def test_replica_refolds_experts() -> None:
    mesh, notes = fit_replica(ParallelConfig(tp=2, dp=8, ep=8, expert_tp=2), 4)
    assert (mesh.tp, mesh.dp, mesh.expert_tp, mesh.ep) == (2, 2, 2, 2)
    assert any(n.startswith("ep 8 -> 2") for n in notes)
    config = replica_config(
        ParallelConfig(tp=2, pp=2, dp=1, sequence_parallel=True, ep=1),
        fit_replica(ParallelConfig(tp=2, pp=2, dp=1, sequence_parallel=True), 1)[0],
    )
    assert config.tp == 1 and not config.sequence_parallel


def _synthetic(profile_name: str) -> tuple[list[TermResult], Params]:
    """Sweep-like terms on 2 ranks (one node: intra_node) and 4 ranks (two nodes: inter_node
    for the full world), 'measured' on a known profile with a little deterministic noise."""
    profile = load_profile(profile_name)
    terms = []
    for world in (2, 4):
        cluster = load_cluster(profile_name, gpus=world)
        ops = ["all_reduce", "all_gather", "send_recv"]
        terms += sweep_terms(ops, [2**12, 2**16, 2**20, 2**23], 2**18, world, cluster)[0]
    terms += gemm_terms(load_model("gpt2"), default_job(load_model("gpt2")), ParallelConfig(), cluster, False, 2e9)
    truth = Params(links={"intra_node": (50e-6, 3e9), "inter_node": (200e-6, 0.4e9)}, gemm_scale={"fp32": 0.7})
    measured = predict(
        profile, truth, [TermResult(spec=t, measured_s=1, p10_s=1, p90_s=1, repeats=1, ratio=1) for t in terms]
    )
    noise = 1.0 + 0.03 * np.sin(np.arange(len(terms)))  # deterministic +-3%, as a quiet machine's
    results = [
        TermResult(spec=t, measured_s=m * e, p10_s=m, p90_s=m, repeats=1, ratio=None)
        for t, m, e in zip(terms, measured, noise, strict=True)
    ]
    return results, truth


def test_calibration_recovers_known_alpha_beta_and_gemm_rate(tmp_path) -> None:
    results, truth = _synthetic("localhost-cpu")
    params, before, after = fit(load_profile("localhost-cpu"), results)
    for tier in ("intra_node", "inter_node"):
        for got, want in zip(params.links[tier], truth.links[tier], strict=True):
            assert got == pytest.approx(want, rel=0.05), tier
    assert params.gemm_scale["fp32"] == pytest.approx(0.7, rel=0.02)
    assert after.median < 0.03 < before.median
    profile = calibrated_profile(load_profile("localhost-cpu"), params, results, "my-box", "measured on test at now")
    path = tmp_path / "my-box.yaml"
    write_profile_yaml(path, profile)
    loaded = load_profile(str(path))
    assert loaded.intra_node.latency_us == pytest.approx(50, rel=0.05)
    assert loaded.intra_node.bus_bandwidth_bytes_per_s == pytest.approx(3e9, rel=0.05)
    assert loaded.gpu.gemm_efficiency == pytest.approx(0.7, rel=0.02)
    assert loaded.intra_node.sources["latency_us"].startswith("measured on test at now")
    assert load_cluster(str(path), gpus=4).num_nodes == 2


def test_alpha_and_bandwidth_scale_together_where_one_message_size_cannot_tell_them_apart(tmp_path) -> None:
    """At one message size t = steps x alpha + factor x M / bandwidth holds for any pair on a line:
    a review (2026-12-07) fitted one 1 MiB term to alpha 905 -> 230 us and bandwidth 1 -> 2.9 GB/s
    at '0% error'. A tier with fewer than 3 collectives or one size fits one factor on both, keeping
    the profile's alpha x bandwidth, and says so in the source; the synthetic sweep's four sizes fit
    them apart."""
    from planner.validate.calibrate import alpha_fitted_tiers

    results, _ = _synthetic("localhost-cpu")
    base = load_profile("localhost-cpu")
    one_size = [r for r in results if r.spec.op in ("gemm", "layer") or r.spec.message_bytes == 2**20]
    assert alpha_fitted_tiers(results) == ["inter_node", "intra_node"] and alpha_fitted_tiers(one_size) == []
    params, _, _ = fit(base, one_size)
    for tier in ("intra_node", "inter_node"):
        link = getattr(base, tier)
        alpha, bandwidth = params.links[tier]
        assert alpha * bandwidth == pytest.approx(link.latency_s * link.bus_bandwidth_bytes_per_s)
        assert alpha != pytest.approx(link.latency_s)
    written = calibrated_profile(base, params, one_size, "one-size", "measured on test at now")
    assert "the old alpha scaled as the fitted bandwidth" in written.intra_node.sources["latency_us"]


def test_sweep_argument_errors_name_the_flag() -> None:
    assert parse_size("64KiB", "--size") == 65536 and parse_size("4MB", "--size") == 4_000_000
    with pytest.raises(PlannerError, match="--sizes: '12 parsecs' is not a size"):
        parse_size("12 parsecs", "--sizes")
    assert parse_ops("all-reduce,send-recv") == ["all_reduce", "send_recv"]
    with pytest.raises(PlannerError, match="--ops: unknown collective 'broadcast'; allowed: all, all-reduce"):
        parse_ops("broadcast")
    # 'all' among others had been called unknown while the message allowed it; a repeat was swept twice
    with pytest.raises(PlannerError, match="--ops: 'all' stands alone"):
        parse_ops("all,all-reduce")
    with pytest.raises(PlannerError, match="--ops: 'all-reduce' given 2 times; give each collective once"):
        parse_ops("all-reduce,all-reduce")
    with pytest.raises(PlannerError, match="--sizes: '2TiB' is not a size; allowed: a positive number up to 1 TiB"):
        parse_size("2TiB", "--sizes")
    with pytest.raises(PlannerError, match="up to 1 TiB"):
        parse_size("1000000000000000", "--sizes")


def test_validate_without_torch_says_how_to_install_it() -> None:
    code = (
        "import sys; sys.modules['torch'] = None; from planner.cli import main; "
        "sys.exit(main(['validate', '--local-ranks', '2', '--model', 'gpt2', '--cluster', 'localhost-cpu']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: plan validate needs torch")
    assert "pip install '.[validate]'" in lines[0]


def test_calibrate_rejects_a_file_that_is_not_a_report(cli, tmp_path) -> None:
    from tests.conftest import assert_one_line_error

    bogus = tmp_path / "x.json"
    bogus.write_text('{"kind": "estimate"}')
    r = cli("calibrate", "--from", str(bogus), "--cluster", "localhost-cpu", "--out", str(tmp_path / "p.yaml"))
    assert_one_line_error(r, "field 'kind'", "'validation' or 'sweep'")
    r = cli("validate", "sweep", "--ops", "broadcast", "--local-ranks", "2")
    assert_one_line_error(r, "--ops", "broadcast")


def test_calibrate_names_what_it_leaves_out_and_refuses_absurd_times(cli, tmp_path) -> None:
    from planner.validate.schemas import ReplayContext, SweepPoint, SweepReport
    from tests.conftest import assert_one_line_error

    results, _ = _synthetic("localhost-cpu")
    intra = [r for r in results if r.spec.tier != "inter_node"]
    context = ReplayContext(
        host="test", created_at="now", backend="gloo", device="cpu", world_size=2, replay_profile="localhost-cpu",
        warmup=1, repeats=1, timeout_s=60, max_message_bytes=None, max_gemm_flops=None, notes=[],
    )  # fmt: skip

    def report(terms: list[TermResult]) -> str:
        path = tmp_path / f"sweep{len(list(tmp_path.iterdir()))}.json"
        points = [SweepPoint(series="size", result=t) for t in terms]
        path.write_text(SweepReport(status="complete", context=context, points=points).model_dump_json())
        return str(path)

    zero = intra[0].model_copy(update={"measured_s": 0.0})
    args = ("--cluster", "localhost-cpu", "--out", str(tmp_path / "fit.yaml"))
    for tiny in (zero, intra[0].model_copy(update={"measured_s": 1e-300})):  # 1e-300 s fitted 8e297 GB/s
        r = cli("calibrate", "--from", report([tiny, *intra[1:]]), *args)
        assert r.code == 0, r.err
        assert f"1 terms of {tmp_path}" in r.err and "timed below 1 ns" in r.err and intra[0].spec.name in r.err
    assert "inter_node: unchanged (no term was measured on it)" in r.out and "intra_node: alpha" in r.out
    r = cli("calibrate", "--from", report([zero, *intra[1:]]), *args, "--json")
    assert set(r.json()["links"]) == {"intra_node"} and r.json()["unmeasurable_terms"] == [intra[0].spec.name]
    huge = intra[1].model_copy(update={"measured_s": 1e308})
    r = cli("calibrate", "--from", report([huge, *intra[2:]]), *args)
    assert_one_line_error(r, f"term '{intra[1].spec.name}': field 'measured_s': 1e+308 s", "at most 86400 s")
    # a message of 1e200 bytes overflowed the fit (OverflowError traceback): refused when read
    vast = intra[1].model_copy(update={"spec": intra[1].spec.model_copy(update={"message_bytes": 1e200})})
    r = cli("calibrate", "--from", report([vast, *intra[2:]]), *args)
    assert_one_line_error(r, "points.0.result.spec.message_bytes", "less than or equal to 1099511627776")
    # collectives that all moved 0 bytes time the latency alone: no bandwidth was fitted from them
    empty = [t.model_copy(update={"spec": t.spec.model_copy(update={"message_bytes": 0.0})}) for t in intra]
    # (each distinct term once: sizes zeroed, some collectives become one term)
    collectives = len({t.spec.model_dump_json() for t in empty if t.spec.op not in ("gemm", "layer")})
    fresh = tmp_path / "none.yaml"
    r = cli("calibrate", "--from", report(empty), "--cluster", "localhost-cpu", "--out", str(fresh))
    assert_one_line_error(
        r,
        f"the intra_node collectives all moved 0 bytes ({collectives} terms): they time the latency alone and fix "
        "no bandwidth; measure messages of some size (plan validate --sweep)",
    )
    assert not fresh.exists()


def test_kendall_tau_counts_each_distinct_replay_once() -> None:
    from planner.validate.report import distinct_replays, kendall_tau
    from planner.validate.schemas import CandidateReport, ReplicaMesh

    results, _ = _synthetic("localhost-cpu")
    a, b, c = results[0], results[1], results[2]

    def cand(rank: int, terms: list[TermResult], predicted: float, measured: float) -> CandidateReport:
        return CandidateReport(
            rank=rank, mesh=f"m{rank}", plan_step_time_s=predicted, replica=ReplicaMesh(), replica_notes=[],
            terms=terms, predicted_replay_s_per_step=predicted, measured_replay_s_per_step=measured,
            ratio=measured / predicted, complete=True,
        )  # fmt: skip

    # #1 and #2 replay the same terms (a knob the replay does not run): one replay at their mean;
    # their measured order (noise) must not count against the planner
    same = [cand(1, [a, b], 1.0, 1.30), cand(2, [a, b], 1.0, 1.10), cand(3, [a, c], 2.0, 2.5)]
    assert distinct_replays(same) == [(1.0, pytest.approx(1.2)), (2.0, 2.5)]
    assert kendall_tau(same) == 1.0
    assert kendall_tau(same[:2]) is None  # one distinct replay: no order to test
    swapped = [cand(1, [a], 1.0, 3.0), cand(2, [b], 2.0, 2.0), cand(3, [c], 3.0, 4.0)]
    assert kendall_tau(swapped) == pytest.approx(1 / 3)
    # predictions within 1% tie: the planner claims no order between them (a review read 'tau 0.71,
    # order held' off replays predicted 0.09% apart)
    close = [cand(1, [a], 171.582, 300.0), cand(2, [b], 171.733, 250.0), cand(3, [c], 171.6, 350.0)]
    assert kendall_tau(close) is None
    assert kendall_tau([*close, cand(4, [a, b], 200.0, 400.0)]) == pytest.approx(1 / 2**0.5)


@pytest.mark.parametrize("dispatcher", ["allgather", "flex"])
def test_ep_terms_replay_the_jobs_dispatcher(dispatcher: str) -> None:
    # allgather replays its all-gather and the combine's reduce-scatter; flex an all-to-all of the
    # deduplicated tokens; either way the terms add up to the step's EP time.
    model, cluster = load_model("mixtral-8x7b"), load_cluster("dgx-h100x2")
    job = default_job(model).model_copy(update={"moe_dispatcher": dispatcher})
    config = ParallelConfig(dp=16, ep=8, zero_stage=1)
    cols = evaluate(model, cluster, job, MeshArrays.from_configs([config]))
    terms = [t for t in comm_terms(model, job, config, config, cluster) if t.name.startswith("ep.")]
    names = {"allgather": ["ep.all_gather", "ep.reduce_scatter"], "flex": ["ep.all_to_all"]}[dispatcher]
    assert [t.name for t in terms] == names
    total = sum(t.predicted_s * t.calls_per_step for t in terms)
    assert total == pytest.approx(cols.time["ep_comm"][0], rel=1e-9)


def test_a_link_measured_under_a_hundredth_of_its_datasheet_becomes_the_datasheet() -> None:
    # a PCIe node without peer-to-peer calibrated against an NVLink profile: 3 GB/s measured on
    # 450 GB/s is a bus efficiency of 0.007, which the profile's floor (MIN_EFFICIENCY) refuses; the
    # measured bandwidth becomes the link's, at efficiency 1, as a faster-than-datasheet one does
    from planner.catalog import load_profile
    from planner.errors import validate_as
    from planner.schemas.hardware import HardwareProfile
    from planner.validate.calibrate import _tier_update

    profile = load_profile("dgx-h100")
    data = profile.model_dump(mode="json", exclude_none=True)
    data["intra_node"] = _tier_update(profile.intra_node, 20e-6, 3e9, "measured", alpha_fitted=True)
    link = validate_as(HardwareProfile, data, "calibrated").intra_node
    assert (link.bandwidth_gb_per_s, link.bus_efficiency) == (3.0, 1.0)
    assert "under a hundredth" in link.sources["bandwidth_gb_per_s"]


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"op": "gemm"}, "op gemm needs gemm_mnk, its M, N and K"),
        ({"op": "layer"}, "op layer needs layer, the shard it times"),
        ({"op": "gemm", "gemm_mnk": (8, 8, 8), "dtype": "int4"}, "dtype 'int4'; allowed: bf16, fp16, fp8"),
        ({"op": "all_reduce", "group_size": 1}, "a all_reduce needs a group of at least 2, got group_size 1"),
    ],
)
def test_a_report_term_carries_the_fields_of_its_op(fields: dict, said: str) -> None:
    # a hand-edited validate report had reached plan calibrate's fit as an AssertionError, a
    # KeyError or scipy's 'Residuals are not finite'
    from planner.validate.schemas import TermSpec

    base = {"name": "t", "op": "all_reduce", "group": "tp", "group_size": 2, "plan_group_size": 2, "predicted_s": 1e-3}
    with pytest.raises(PlannerError, match=re.escape(said)):
        TermSpec.model_validate({**base, **fields})
    assert TermSpec.model_validate(base).group_size == 2
