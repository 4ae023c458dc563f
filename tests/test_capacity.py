"""Time-to-train, cost and the capacity search (issue 6)."""

from __future__ import annotations

import math

import pytest

from planner.capacity import SECONDS_PER_DAY, CapacityRow, _row, _rows_at, capacity, node_counts
from planner.catalog import load_cluster, load_model
from planner.cli import parse_count
from planner.errors import PlannerError
from planner.pricing import estimate_mesh
from planner.schemas.parallel import ParallelConfig
from planner.search import default_job, search
from tests.conftest import assert_one_line_error

LLAMA70 = load_model("llama3-70b")


def test_counts_parse_with_decimal_suffixes() -> None:
    assert parse_count("15T", "--training-tokens") == 15e12
    assert parse_count("300b", "--training-tokens") == 300e9
    assert parse_count("2.5e12", "--training-tokens") == 2.5e12
    with pytest.raises(PlannerError, match="--training-tokens '15X' is not a count"):
        parse_count("15X", "--training-tokens")
    with pytest.raises(PlannerError, match="must be a finite number > 0"):
        parse_count("0", "--training-tokens")


def test_time_and_cost_to_train_follow_from_throughput_and_price() -> None:
    cluster = load_cluster("dgx-h100x16")
    job = default_job(LLAMA70, training_tokens=1e12)
    cfg = ParallelConfig(tp=8, pp=2, dp=8, micro_batch_size=1, sequence_parallel=True, recompute="selective")
    est = estimate_mesh(LLAMA70, cluster, job, cfg)
    assert est.price_per_gpu_hour_usd == 10.0  # OCI list price of BM.GPU.H100.8 in the profile
    steps = math.ceil(1e12 / job.tokens_per_step)  # whole optimizer steps of 4 Mi tokens
    assert steps == 238_419 and est.time_to_train_s == pytest.approx(steps * est.step_time_s, rel=1e-12)
    assert est.cost_to_train_usd == pytest.approx(est.time_to_train_s * 128 * 10.0 / 3600, rel=1e-12)
    assert est.cost_per_step_usd == pytest.approx(est.step_time_s * 128 * 10.0 / 3600, rel=1e-12)
    cheaper = estimate_mesh(LLAMA70, cluster.with_price(2.5), job, cfg)
    assert cheaper.cost_to_train_usd == pytest.approx(est.cost_to_train_usd / 4, rel=1e-12)
    no_budget = estimate_mesh(LLAMA70, cluster, default_job(LLAMA70), cfg)
    assert no_budget.time_to_train_s is None and no_budget.cost_to_train_usd is None


def test_cost_objective_orders_as_time_on_one_cluster_and_needs_a_price(cli) -> None:
    cluster = load_cluster("dgx-h100x16")
    job = default_job(LLAMA70)
    by_time = search(LLAMA70, cluster, job, top=5)
    by_cost = search(LLAMA70, cluster, job, top=5, objective="cost")
    assert [c.config.parallel for c in by_cost.candidates] == [c.config.parallel for c in by_time.candidates]
    costs = [c.cost_per_step_usd for c in by_cost.candidates]
    assert costs == sorted(costs)
    result = cli("-m", "llama3-8b", "-c", "localhost-cpux2", "--objective", "cost")
    assert_one_line_error(result, "--objective cost needs a price", "--price")
    # the table ranked by cost shows what it ranks by: $ per million tokens at the price
    shown = cli("-m", "llama3-70b", "-c", "dgx-h100x16", "--objective", "cost", "--price", "2.5", "--top", "1")
    assert shown.code == 0, shown.err
    header, row = (line.split() for line in shown.out.splitlines()[4:6])
    per_mtok = by_cost.candidates[0].cost_per_step_usd / 4 / by_cost.candidates[0].config.job.tokens_per_step * 1e6
    assert header[-1] == "$/Mtok" and float(row[-1]) == pytest.approx(per_mtok, abs=6e-4)
    assert 0.5 < per_mtok < 0.7  # $2.50 per GPU-hour at ~1,200 tokens/s per GPU


def test_node_counts() -> None:
    assert node_counts(64) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    assert node_counts(1) == [1]
    assert node_counts(5) == [1, 2, 3, 4, 5] and node_counts(1000)[-2:] == [768, 1000]  # the cap itself


def test_capacity_finds_the_fewest_nodes_meeting_the_deadline() -> None:
    node = load_cluster("dgx-h100")
    job = default_job(LLAMA70, training_tokens=1e12)
    report = capacity(LLAMA70, node, job, deadline_s=30 * SECONDS_PER_DAY, max_nodes=128)
    nodes = [r.nodes for r in report.rows]
    assert set(node_counts(128)) <= set(nodes) and nodes == sorted(set(nodes))
    assert report.rows[0].mesh is None and "no mesh fits in memory" in (report.rows[0].why_not or "")
    answer = report.answer
    assert answer is not None and answer.meets_deadline
    assert all(not r.meets_deadline for r in report.rows if r.nodes < answer.nodes)
    # the counts the grid skips below the answer were bisected: one node fewer was priced and misses
    assert answer.nodes - 1 in nodes
    # The answer's row is what a plain search on that cluster says.
    best = search(LLAMA70, load_cluster(f"dgx-h100x{answer.nodes}"), job, top=1).candidates[0]
    assert answer.mesh == best.config.parallel.short()
    steps = math.ceil(1e12 / job.tokens_per_step)  # whole optimizer steps
    assert answer.time_to_train_s == pytest.approx(steps * job.tokens_per_step / best.tokens_per_s, rel=1e-12)
    assert report.cheapest is not None and report.cheapest.cost_to_train_usd <= answer.cost_to_train_usd  # type: ignore[operator]
    # The band: time to train at the ends of the best mesh's tokens/s interval, and the fewest nodes
    # that meet the deadline at its slow end (bisected like the answer)
    band = best.tokens_per_s_per_gpu_interval
    assert band is not None and answer.time_to_train_s_interval is not None
    fast, slow = answer.time_to_train_s_interval
    assert fast == pytest.approx(answer.time_to_train_s * best.tokens_per_s_per_gpu / band[1], rel=1e-12)
    assert slow == pytest.approx(answer.time_to_train_s * best.tokens_per_s_per_gpu / band[0], rel=1e-12)
    assert fast < answer.time_to_train_s < slow
    sure = report.answer_slow_end
    assert sure is not None and sure.nodes > answer.nodes and sure.meets_deadline_slow_end
    assert sure.time_to_train_s_interval is not None and sure.time_to_train_s_interval[1] <= 30 * SECONDS_PER_DAY
    assert sure.nodes - 1 in nodes and all(not r.meets_deadline_slow_end for r in report.rows if r.nodes < sure.nodes)
    assert (report.stack, report.dtype) == ("megatron-core", "bf16")


def test_capacity_cli(cli) -> None:
    args = ("capacity", "-m", "llama3-8b", "-c", "dgx-h100", "--training-tokens", "100B", "--max-nodes", "8")
    r = cli(*args, "--days", "7", "--json")
    assert r.code == 0, r.err
    report = r.json()
    assert report["training_tokens"] == 1e11 and report["deadline_s"] == 7 * 86400
    assert [row["nodes"] for row in report["rows"]] == [1, 2, 3, 4, 6, 8]
    human = cli(*args, "--days", "7")
    assert human.code == 0 and "answer:" in human.out
    text = " ".join(human.out.split())
    assert "stack megatron-core, bf16;" in text and "80% band" in text
    # a count that fits nothing says why (the largest such count: how far off the rest are)
    big = " ".join(
        cli(
            "capacity",
            "-m",
            "llama3-405b",
            "-c",
            "dgx-h100",
            "--training-tokens",
            "1T",
            "--days",
            "60",
            "--max-nodes",
            "2",
        ).out.split()
    )
    assert "nothing fits on 2 nodes: no mesh fits in memory" in big
    # a 16-sequence batch splits evenly over 4 nodes but not over 6 under torchtitan, whose interleaving
    # needs p | m: the 6-node row is no faster, marked so (Megatron-Core interleaves pp 3 over 4
    # micro-batches in groups of 4, and its 6-node row is the fastest)
    small = " ".join(
        cli(*args[:-2], "--max-nodes", "6", "--days", "7", "-B", "16", "--stack", "torchtitan").out.split()
    )
    # (8.0 days on 6 nodes: 7.9 before torch's pipelining was priced holding the FSDP stage, 2026-12-06)
    assert "8.0* " in small and "*: no faster than a smaller node count tried" in small and "6.0* " not in small
    assert_one_line_error(cli(*args), "--days is required")
    assert_one_line_error(cli(*args[:-4], "--days", "7"), "--training-tokens is required: the token budget")
    # days whose seconds overflow are named as the days given (was "got inf"); an hour to a century
    # (1e300 days printed a 300-digit figure, 1e-300 searched every node count for nothing)
    for days in ("1e308", "1e-300", "40000"):
        assert_one_line_error(cli(*args, "--days", days), "--days must be a number of days from 0.04167 (an hour)")


def test_capacity_on_nvl72_racks_keeps_their_64_gpu_segments_where_faster(cli) -> None:
    """72 GPUs per rack leave a 512-sequence batch no even data parallelism: on one and on two
    GB200 NVL72 racks the 64-GPU segments (Slurm block scheduling) train Llama-3-8B faster, and
    each row equals a plain search on that many GPUs; a DGX profile has no segments."""
    llama8 = load_model("llama3-8b")
    job = default_job(llama8, training_tokens=1e12)
    report = capacity(llama8, load_cluster("gb200-nvl72"), job, deadline_s=10 * SECONDS_PER_DAY, max_nodes=2)
    for row in report.rows:
        racks = load_cluster("gb200-nvl72", nodes=row.nodes)
        assert (row.gpus, row.node_gpus) == (64 * row.nodes, 72 * row.nodes)
        seg = search(llama8, load_cluster(racks, gpus=row.gpus), job, top=1).candidates[0]
        whole = search(llama8, racks, job, top=1).candidates[0]
        assert row.mesh == seg.config.parallel.short() and row.step_time_s == seg.step_time_s
        assert row.all_gpus_step_time_s == whole.step_time_s
        assert row.cost_to_train_usd == pytest.approx(row.time_to_train_s * row.gpus * 16.0 / 3600, rel=1e-12)  # type: ignore[operator]
    one, two = report.rows
    assert one.step_time_s == pytest.approx(2.979, abs=0.005)
    assert one.all_gpus_step_time_s == pytest.approx(3.101, abs=0.005)
    assert two.step_time_s < 0.9 * two.all_gpus_step_time_s  # type: ignore[operator]
    args = ("-m", "llama3-8b", "-c", "gb200-nvl72", "--training-tokens", "1T", "--days", "10", "--max-nodes", "2")
    human = cli("capacity", *args)
    assert human.code == 0, human.err
    assert "64 of 72" in human.out and "128 of 144" in human.out
    assert "the 64-GPU segment of each 72-GPU rack" in " ".join(human.out.split())
    # the profile's node is a whole NVL72 rack, and the output says so (a GB200 tray, 4 GPUs, is the
    # 'node' of most price lists), as it says what whole racks would cost
    assert "answer: 1 rack (64 of their 72 GPUs)" in human.out and "gb200-nvl72 racks:" in human.out
    assert report.unit == "rack" and "(whole racks bought cost 1.12x the $ shown)" in " ".join(human.out.split())
    dgx = capacity(llama8, load_cluster("dgx-h100"), job, deadline_s=10 * SECONDS_PER_DAY, max_nodes=3)
    assert dgx.unit == "node"
    assert all(r.gpus == r.node_gpus == 8 * r.nodes and r.all_gpus_step_time_s is None for r in dgx.rows)


def test_library_plan_capacity_is_the_capacity_search_with_pins() -> None:
    import planner

    llama8 = load_model("llama3-8b")
    job = default_job(llama8, training_tokens=1e12)
    direct = capacity(llama8, load_cluster("gb200-nvl72"), job, deadline_s=10 * SECONDS_PER_DAY, max_nodes=2)
    assert planner.plan_capacity("llama3-8b", "gb200-nvl72", 1e12, 10, max_nodes=2) == direct
    # a node count is the CLI's refusal too (the library had planned from one rack of the four silently)
    with pytest.raises(planner.PlannerError, match="cluster 'gb200-nvl72x4': plan capacity chooses the node count"):
        planner.plan_capacity("llama3-8b", "gb200-nvl72x4", 1e12, 10, max_nodes=2)
    pinned = planner.plan_capacity("llama3-8b", "dgx-h100", 1e12, 10, max_nodes=2, tp=2)
    assert [r.mesh.split()[0] for r in pinned.rows if r.mesh] == ["tp2", "tp2"]


def test_the_grid_rows_are_the_same_searched_one_at_a_time_or_in_threads() -> None:
    """``capacity._rows_at`` searches the grid's counts in threads where the machine has cores; each
    search is a pure function of its count, so three threads give the rows one thread gives, in
    the same order (NVL72 counts: each row is two searches, all GPUs and the 64-GPU segments)."""
    node = load_cluster("gb200-nvl72")
    job = default_job(LLAMA70, training_tokens=1e12)

    def row_at(nodes: int) -> CapacityRow:
        cluster = node.model_copy(update={"name": f"x{nodes}", "num_nodes": nodes, "num_gpus": nodes * 72})
        return _row(LLAMA70, cluster, job, None, 30 * SECONDS_PER_DAY)

    counts = [1, 2, 3]
    one = _rows_at(counts, row_at, threads=1)
    several = _rows_at(counts, row_at, threads=3)
    assert [r.model_dump() for r in several] == [r.model_dump() for r in one]
    assert [r.nodes for r in one] == counts and all(r.mesh is not None for r in one)


def test_capacity_refuses_a_format_the_gpu_lacks_before_searching(cli) -> None:
    """It searched every node count, found nothing fits and advised more nodes or days, exit 0."""
    args = ("capacity", "-m", "llama3-70b", "--training-tokens", "1T", "--days", "30")
    assert_one_line_error(cli(*args, "-c", "dgx-h100", "--dtype", "fp4"), "dtype fp4 (NVFP4) needs FP4 tensor cores")
    assert_one_line_error(cli(*args, "-c", "dgx-a100-80g", "--dtype", "fp8"), "dtype fp8 needs FP8 tensor cores")


def test_where_no_count_meets_the_deadline_the_advice_names_a_thinly_split_batch(cli) -> None:
    """A global batch of 16 sequences over 16 DGX H100 holds an eighth of a sequence per GPU: MFU falls
    from 55.9% on one node to 35.9%, so the advice names -B beside more nodes (it had said only "raise
    --max-nodes or --days"); and a cap that is not a power of two (or 1.5 x one) is searched too."""
    args = ("capacity", "-m", "llama3-8b", "-c", "dgx-h100", "--training-tokens", "1T")
    r = cli(*args, "--days", "1", "--max-nodes", "16", "-B", "16")
    assert r.code == 0
    assert (
        "no node count up to 16 meets the deadline; raise --max-nodes, -B (a global batch of 16 sequences splits "
        "ever thinner: 35.9% MFU at 16 nodes against 55.9% at 1) or --days" in " ".join(r.out.split())
    )
    five = cli(*args, "--days", "30", "--max-nodes", "5")
    assert "answer: 5 nodes (40 GPUs)" in five.out and "maybe" in five.out
    assert "the largest dense run the bands rest on" not in five.out  # 40 GPUs: inside what the bands saw


def test_an_answer_larger_than_any_calibrated_run_says_its_days_are_not_covered(cli) -> None:
    """Llama-3 8B on 15T tokens in 7 days takes 512 DGX H100 nodes, 4,096 GPUs: 8x the largest run the
    bands rest on, which the answer says (Meta's 16,384-GPU Llama 3 405B ran below its price)."""
    r = cli("capacity", "-m", "llama3-8b", "-c", "dgx-h100", "--training-tokens", "15T", "--days", "7")
    text = " ".join(r.out.split())
    assert r.code == 0 and "answer: 512 nodes (4096 GPUs)" in text
    assert "4,096 GPUs, 8x the 512 of the largest dense run the bands rest on: they do not cover" in text


def test_the_answer_says_its_days_are_a_lower_bound_and_when_its_mesh_is_tight_on_memory(cli) -> None:
    """Llama-3 70B on 1T tokens in 30 days: 42 DGX H100 nodes, whose best mesh needs 78.4 of 79.7 GiB
    a GPU, within the planner's 12.5% undercount of measured peaks: the answer warns, as plan and
    estimate do (capacity had said nothing), and the days are steady-state steps."""
    args = ("capacity", "-m", "llama70b", "-c", "dgx-h100", "--training-tokens", "1T", "--days", "30")
    text = " ".join(cli(*args).out.split())
    assert "days: whole optimizer steps at the steady state, no restarts, checkpoints or evaluation" in text
    assert "answer: 42 nodes (336 GPUs)" in text
    assert "warning (answer): tight memory: 78.4 of 79.7 GiB per GPU" in text
    answer = cli(*args, "--json").json()["answer"]
    assert answer["nodes"] == 42 and answer["warnings"][0].startswith("tight memory: 78.4 of 79.7 GiB")


def test_a_batch_grown_to_fit_each_mesh_is_shown_per_row(cli) -> None:
    """With --max-batch-growth each node count's best mesh may run more sequences than asked (504 or
    512 of an asked 500 on 8-GPU multiples); the rows were priced so while the header said 'batch
    500' and the growth warning was dropped (a review, 2026-12-07): each row now carries its batch
    (a column where any grew) and the warning. One node: 1e12 / (504 x 8192) steps of 47.286 s, on
    tp1 pp2 dp4 v6, whose 500 sequences (125 micro-batches, groups of 3) did not fit and whose 504
    (126, groups of 2) the search had never tried (cost.pipeline.batch_choices)."""
    args = ("capacity", "-m", "llama3-8b", "-c", "dgx-h100", "--training-tokens", "1T", "--days", "30", "-B", "500")
    grown = cli(*args, "--max-batch-growth", "0.1", "--max-nodes", "4")
    lines = grown.out.splitlines()
    assert "batch 500 (grown where a row's batch column says)" in " ".join(grown.out.split())
    header = next(line for line in lines if line.split()[:3] == ["nodes", "GPUs", "best"])
    assert "batch" in header.split()
    one = next(line for line in lines if line.split()[:2] == ["1", "8"]).split()
    assert one[one.index("none") + 1] == "504" and one[one.index("none") + 5] == "132.6"  # after "47.286 s"
    assert one[2:5] == ["tp1", "pp2", "dp4"]
    rows = cli(*args, "--max-batch-growth", "0.1", "--max-nodes", "4", "--json").json()["rows"]
    assert [r["global_batch_size"] for r in rows] == [504, 512, 504, 512]
    assert all(any(w.startswith("global batch grown from 500 to") for w in r["warnings"]) for r in rows)
    exact = cli(*args, "--max-nodes", "4")
    assert "batch 500 x seq 8192" in exact.out and "batch" not in exact.out.splitlines()[2].split()


def test_a_rows_mesh_comes_in_full_and_prices_the_same_again() -> None:
    """A capacity row's mesh was a short string with no parser, so a script wanting its whole
    Estimate had to search again (a library review, 2026-12-07); the row carries the ParallelConfig."""
    import planner

    report = planner.plan_capacity("llama3-8b", "dgx-h100", 1e12, 30, max_nodes=4)
    rows = [r for r in report.rows if r.parallel is not None]
    assert rows and all(r.mesh == r.parallel.short() for r in rows)
    row = rows[-1]
    again = planner.estimate("llama3-8b", planner.load_cluster("dgx-h100", gpus=row.gpus), **row.parallel.model_dump())
    assert again.step_time_s == pytest.approx(row.step_time_s, rel=1e-12)
