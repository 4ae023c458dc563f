"""The CLI's happy paths: JSON shapes and the figures they carry."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from planner import __version__
from planner.schemas import Estimate
from planner.schemas.ranking import Ranking
from tests.conftest import SAMPLE_RUNS

ESTIMATE_KEYS = {
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "model_flops_per_step",
    "model_tflops_per_gpu",
    "mfu",
    "hfu",
    "bubble_fraction",
    "num_microbatches",
    "memory_per_gpu_bytes",
    "memory_breakdown_bytes",
    "time_breakdown_s",
    "comm_bytes_per_gpu",
    "fits",
    "warnings",
    "config",
}


def test_version_and_help(cli) -> None:
    r = cli("--version")
    assert r.code == 0 and r.out.strip() == f"plan {__version__}"
    r = cli("--help")
    assert r.code == 0 and "plan --model llama70b --cluster dgx-h100x16" in r.out
    r = cli("estimate", "--help")
    assert r.code == 0 and "--micro-batch-size" in r.out


def test_show_model_json_prints_parameter_counts(cli) -> None:
    r = cli("show", "model", "llama3-70b", "--json")
    assert r.code == 0
    data = r.json()
    assert data["parameters"]["total"] == pytest.approx(70.6e9, rel=0.01)
    assert data["parameters"]["embedding"] == data["parameters"]["lm_head"] == 8192 * 128256
    assert data["gated_mlp"] is True and data["is_moe"] is False
    assert data["training_flops_per_token"] == pytest.approx(4.86e11, rel=0.01)


def test_show_model_by_alias_human(cli) -> None:
    r = cli("show", "model", "dsv3")
    assert r.code == 0 and "deepseek-v3" in r.out and "671" in r.out
    # the attention kinds, where a model has more than full attention
    maverick = " ".join(cli("show", "model", "maverick").out.split())
    assert "full on 12 layers, chunked (8192-token chunks) on 36" in maverick
    oss = " ".join(cli("show", "model", "gpt-oss-120b").out.split())
    assert "full on 18 layers, sliding window 128 on 18, with sinks" in oss and "full on" not in r.out
    # a model of MoE layers alone sizes no dense layer and names its experts' activation, clamp included
    assert "per layer │ MoE 3213.1 M (126.5 M active)" in oss and "dense" not in oss.split("per layer")[1][:30]
    assert "expert MLP │ gated silu, clamped at 7 (swiglu_limit)" in oss
    assert "MLP │ gated silu, width 18432" in " ".join(r.out.split())  # DeepSeek-V3's 3 dense layers


def test_list_json(cli) -> None:
    models = cli("list", "models", "--json").json()
    assert {m["name"] for m in models} >= {"llama3-70b", "deepseek-v3", "gpt3-175b"}
    clusters = cli("list", "clusters", "--json").json()
    assert {c["name"] for c in clusters} >= {"dgx-h100", "gb200-nvl72", "localhost-cpu"}
    assert all("sources" in c["gpu"] for c in clusters)


def test_show_cluster(cli) -> None:
    data = cli("show", "cluster", "dgx-h100x16", "--json").json()
    assert data["num_gpus"] == 128 and data["num_nodes"] == 16
    assert data["description"].startswith("dgx-h100x16: 16 nodes x 8 ")
    # the cluster's peak and the GPU's, each named for what it sums (989.4 dense BF16 TFLOP/s an H100 SXM)
    assert data["peak_bf16_flops_per_s_per_gpu"] == pytest.approx(989.4e12, rel=1e-3)
    assert data["cluster_peak_bf16_flops_per_s"] == pytest.approx(128 * data["peak_bf16_flops_per_s_per_gpu"])
    human = cli("show", "cluster", "dgx-h100x16")
    assert human.code == 0 and "128 GPUs" in human.out and "NVLink groups" not in human.out
    # NVL72 racks: all 144 GPUs of two hold each rack whole; 128 of them a 64-GPU segment of each.
    assert cli("show", "cluster", "gb200-nvl72x2", "--json").json()["fast_domain_gpus"] == 72
    whole = " ".join(cli("show", "cluster", "gb200-nvl72x2").out.split())
    assert "this job's NVLink groups │ whole 72-GPU domains (ranks 0-71 share the first)" in whole
    segments = " ".join(cli("show", "cluster", "gb200-nvl72x2", "--gpus", "128").out.split())
    assert "64-GPU segment of each 72-GPU domain" in segments
    # a rack is 18 hosts (compute trays) of 4 GPUs: what plan export --launcher starts torchrun on
    assert "hosts │ 18 per node of 4 GPUs each" in segments and "hosts" not in human.out
    assert cli("show", "cluster", "gb200-nvl72x2", "--json").json()["gpus_per_host"] == 4
    assert data["gpus_per_host"] == 8


def test_estimate_json_has_the_contract_keys_and_round_trips(cli) -> None:
    r = cli(
        "estimate",
        "--model",
        "llama70b",
        "--cluster",
        "dgx-h100x16",
        "--tp",
        "8",
        "--pp",
        "2",
        "--dp",
        "8",
        "--sequence-parallel",
        "--zero-stage",
        "1",
        "--recompute",
        "selective",
        "--json",
    )
    assert r.code == 0, r.err
    data = r.json()
    assert ESTIMATE_KEYS <= set(data)
    assert set(data["memory_breakdown_bytes"]) == {
        "weights",
        "gradients",
        "optimizer",
        "activations",
        "logits",
        "overhead",
    }
    assert set(data["time_breakdown_s"]) == {
        "compute",
        "tp_comm",
        "pp_comm",
        "dp_comm",
        "cp_comm",
        "ep_comm",
        "bubble",
        "optimizer",
        "layer_overhead",
        "overlap_slowdown",
        "offload",
    }
    assert set(data["hidden_comm_s"]) == {"tp", "dp", "cp", "ep", "pp"}
    assert set(data["comm_bytes_per_gpu"]) == {"tp", "pp", "dp", "cp", "ep"}
    # the error bar: megatron-core has no H100 runs, so the H100 runs of other stacks and the
    # megatron-core runs of other GPUs make it; the prediction lies inside it
    low, high = data["tokens_per_s_per_gpu_interval"]
    assert low < data["tokens_per_s_per_gpu"] < high
    assert "dgx-h100" in data["interval_basis"] and "megatron-core" in data["interval_basis"]
    assert data["config"]["job"]["stack"] == "megatron-core"
    est = Estimate.model_validate_json(r.out)
    assert est.config.parallel.tp == 8 and est.config.num_gpus == 128
    assert sum(est.time_breakdown_s.model_dump().values()) == pytest.approx(est.step_time_s, rel=1e-9)
    assert sum(est.memory_breakdown_bytes.model_dump().values()) == pytest.approx(est.memory_per_gpu_bytes, rel=1e-9)
    assert est.tokens_per_s == pytest.approx(est.config.job.tokens_per_step / est.step_time_s)
    assert 0 < est.mfu <= est.hfu < 1


def test_estimate_human_output(cli) -> None:
    r = cli("estimate", "--model", "llama70b", "--cluster", "dgx-h100x16", "--tp", "8", "--pp", "2")
    assert r.code == 0, r.err
    for text in ("step time", "MFU", "memory per GPU", "tp_comm", "intra_node"):
        assert text in r.out


def test_estimate_compares_a_given_layout_with_the_searchs_best(cli) -> None:  # type: ignore[no-untyped-def]
    # Issue 12: the published DeepSeek-V3 layout on 256 B200 (Megatron-Bridge: tp1 pp16 ep8, mbs 1,
    # selective recompute of mla_up_proj, fp8, 2048 sequences) against the planner's best for the
    # same job: the best is faster by the planner's own model, and the comparison says why.
    from planner.catalog import load_cluster, load_model
    from planner.explain import where_it_loses
    from planner.pricing import estimate_mesh
    from planner.schemas import JobSpec, ParallelConfig
    from planner.search import search

    args = ["--model", "deepseek-v3", "--cluster", "dgx-b200x32", "--tp", "1", "--pp", "16", "--ep", "8", "-b", "1"]
    args += ["-B", "2048", "--dtype", "fp8", "--recompute", "selective", "--recompute-modules", "mla_up_proj"]
    r = cli("estimate", *args, "--compare-best", "--json")
    assert r.code == 0, r.err
    data = r.json()
    versus = data["compared_with_best"]
    assert versus["best"]["step_time_s"] < data["step_time_s"]
    # fp8 parameters (1 byte a weight on Blackwell) leave room for two sequences a micro-batch (the
    # best had been pp 16 x dp 16 at mbs 2); with each pipeline rank priced at the micro-batches its
    # own position holds (2026-12-07) pp 8 x dp 32 fits them too, and is the best
    assert "the search's best for this job is tp1 pp8 dp32 cp1 ep8 mbs2" in versus["explanation"]
    assert " slower" in versus["explanation"]
    # the text is explain.where_it_loses of the two estimates, and the table prints it
    model, cluster = load_model("deepseek-v3"), load_cluster("dgx-b200x32")
    job = JobSpec(global_batch_size=2048, seq_len=4096, dtype="fp8", recompute_modules=("mla_up_proj",))
    est = estimate_mesh(
        # the CLI's unset --zero-stage is the stack's: megatron-core's distributed optimizer
        model,
        cluster,
        job,
        ParallelConfig(tp=1, pp=16, dp=16, ep=8, micro_batch_size=1, recompute="selective", zero_stage=1),
    )
    best = search(model, cluster, job, {}, top=1).candidates[0]
    assert where_it_loses(best, est) in versus["explanation"]
    table = cli("estimate", *args, "--compare-best")
    assert versus["explanation"].split(";")[0] in " ".join(table.out.split())


def test_compare_best_says_when_the_best_is_tight_on_memory(cli) -> None:
    # the main plan's best (tp4 pp4 dp8 v8) holds 76.6 of the H100's 79.7 GiB: within the memory
    # count's worst measured under-count (12.5%) of full, which the comparison must say
    r = cli("estimate", "-m", "llama70b", "-c", "dgx-h100x16", "--tp", "8", "--pp", "2", "--dp", "8", "--compare-best")
    text = " ".join(r.out.split())
    assert r.code == 0 and "tight on memory: 76.6 of 79.7 GiB, so --memory-headroom 0.125 may pick another" in text
    small = ("estimate", "-m", "llama3-8b", "-c", "dgx-h100", "--tp", "2", "--compare-best")
    r = cli(*small, "--memory-headroom", "0.125")
    assert r.code == 0 and "tight on memory" not in r.out
    # the ranking's free column counts below the usable memory, and says so where headroom is kept
    r = cli("-m", "llama3-8b", "-c", "dgx-h100", "--memory-headroom", "0.125")
    assert "free GiB left of 69.7 usable (12.5% kept free by --memory-headroom)," in " ".join(r.out.split())
    plain = " ".join(cli("-m", "llama3-8b", "-c", "dgx-h100").out.split())
    assert "free GiB left of 79.7 usable, bubble (p-1)/(v m+p-1)" in plain and "kept free" not in plain


def test_the_ranking_names_its_terse_columns(cli) -> None:
    """Under the table, one legend line names v, Z, recomp, SP, GiB, free and bubble; the recompute
    codes f:N and o:N only where a candidate shows them."""
    text = " ".join(cli("-m", "llama70b", "-c", "dgx-h100x16").out.split())
    assert "columns: v virtual stages per pipeline rank, Z ZeRO stage (1 optimizer, 2 +gradients, 3 +weights " in text
    assert "recomp sele selective, SP sequence parallel, GiB peak per GPU" in text and "f:N" not in text
    pinned = cli("-m", "llama70b", "-c", "dgx-h100x16", "--recompute", "full", "--recompute-layers", "2")
    assert "f:2" in pinned.out and "f:N full on N layers of each chunk" in " ".join(pinned.out.split())


def test_hfu_above_the_sustained_gemm_rate_is_explained(cli, tmp_path) -> None:
    # 128K tokens under full recompute, on megatron-core as a stack that logs the full s x s square
    # would count it: MFU 57% stays under the H100's sustained GEMM rate (0.80 x the fitted
    # sustained fraction, 71%), HFU 76% does not, since the recomputed forward counts causal
    # attention's full square again; the note says which figure and why
    full = tmp_path / "full-square.yaml"
    text = (SAMPLE_RUNS.parents[2] / "stacks" / "megatron-core.yaml").read_text()
    full.write_text(text.replace("causal_model_flops: true", "causal_model_flops: false"))
    args = ("estimate", "-m", "llama3-8b", "-c", "dgx-h100x4", "--tp", "8", "--cp", "4", "-B", "64", "--json")
    data = cli(*args, "--seq-len", "131072", "--recompute", "full", "--stack", str(full)).json()
    assert data["mfu"] < 0.71 < data["hfu"] and data["flops_count"] == "full_square"
    note = next(w for w in data["warnings"] if "sustained GEMM rate" in w)
    assert note.startswith(f"HFU {data['hfu']:.0%} (MFU {data['mfu']:.0%}) exceeds") and "counts it again" in note
    assert "the PaLM convention" in note
    # Megatron-LM's own count (causal attention at half) keeps both under it: 34% and 45%
    data = cli(*args, "--seq-len", "131072", "--recompute", "full").json()
    assert data["mfu"] == pytest.approx(0.338, abs=0.002) and data["hfu"] == pytest.approx(0.448, abs=0.002)
    assert data["flops_count"] == "causal"
    assert not any("sustained GEMM rate" in w for w in data["warnings"])
    data = cli(*args, "--seq-len", "8192", "--stack", str(full)).json()
    assert not any("sustained GEMM rate" in w for w in data["warnings"])


def test_cross_node_tp_is_warned(cli) -> None:
    r = cli(
        "estimate", "--model", "gpt3-175b", "--cluster", "dgx-h100x16", "--tp", "16", "--sequence-parallel", "--json"
    )
    data = r.json()
    assert any("fast domain" in w for w in data["warnings"])
    assert data["links"]["tp"] == "inter_node"


def test_plan_ranks_candidates(cli) -> None:
    r = cli("--model", "llama70b", "--cluster", "dgx-h100x16", "--top", "3", "--json")
    assert r.code == 0, r.err
    ranking = Ranking.model_validate_json(r.out)
    assert [c.rank for c in ranking.candidates] == [1, 2, 3]
    times = [c.step_time_s for c in ranking.candidates]
    assert times == sorted(times)
    assert all(c.fits for c in ranking.candidates)
    assert ranking.evaluated >= ranking.feasible > 0 and ranking.pareto


def test_plan_pins_are_respected(cli) -> None:
    r = cli("--model", "llama70b", "--cluster", "dgx-h100x16", "--tp", "8", "--zero-stage", "1", "--top", "5", "--json")
    for c in r.json()["candidates"]:
        assert c["config"]["parallel"]["tp"] == 8 and c["config"]["parallel"]["zero_stage"] == 1


def test_console_script_runs_without_torch() -> None:
    code = (
        "import sys; from planner.cli import main; "
        "rc = main(['--model','llama70b','--cluster','dgx-h100x16','--top','1']);"
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "dgx-h100x16: 16 nodes x 8" in out.stdout


def test_tp16_across_two_nodes_is_slower_than_tp8_pp2(cli) -> None:
    # The classic disaster configuration (shared/reference strategy notes): TP over two 8-GPU
    # nodes. Every layer's all-reduces cross InfiniBand, and each GPU runs all 96 layers' TP
    # traffic where TP=8, PP=2 splits them over two stages (GPT-3 175B: 96 KV heads, which TP 16
    # divides; Llama-3 70B's 8 do not split over 16 in training).
    args = ("estimate", "--model", "gpt3-175b", "--cluster", "dgx-h100x2", "-B", "64", "--sequence-parallel", "--json")
    tp16 = cli(*args, "--tp", "16", "--dp", "1").json()
    tp8 = cli(*args, "--tp", "8", "--pp", "2", "--dp", "1").json()
    assert tp16["step_time_s"] > 1.25 * tp8["step_time_s"]
    assert tp16["links"]["tp"] == "inter_node" and tp8["links"]["tp"] == "intra_node"
    assert any("fast domains" in w for w in tp16["warnings"]) and not any("fast domains" in w for w in tp8["warnings"])


def test_overlap_the_plan_relies_on_is_reported(cli) -> None:
    args = (
        "estimate",
        "--model",
        "llama70b",
        "--cluster",
        "dgx-h100x16",
        "--dp",
        "32",
        "--cp",
        "4",
        "--zero-stage",
        "3",
        "--json",
    )
    on = cli(*args).json()
    assert on["hidden_comm_s"]["dp"] > 0.5 * on["time_breakdown_s"]["compute"]
    assert any("counts on hiding" in w for w in on["warnings"])
    off = cli(*args, "--no-overlap-grad-reduce").json()
    assert off["hidden_comm_s"]["dp"] == 0
    # what overlap saved, net of the slowdown of the compute it ran beside
    saved = on["hidden_comm_s"]["dp"] - on["time_breakdown_s"]["overlap_slowdown"]
    assert off["step_time_s"] > on["step_time_s"] + 0.9 * saved


def test_zero3_advice_when_its_gathers_show(cli) -> None:
    args = (
        "estimate",
        "--model",
        "llama3-8b",
        "--cluster",
        "dgx-a100-80gx16",
        "--dp",
        "128",
        "-B",
        "2048",
        "-b",
        "1",
        "--seq-len",
        "512",
        "--json",
    )
    z3 = cli(*args, "--zero-stage", "3").json()
    z1 = cli(*args, "--zero-stage", "1").json()
    assert any(w.startswith("ZeRO-3 gathers weights for every micro-batch") for w in z3["warnings"])
    assert z1["step_time_s"] < z3["step_time_s"] and z1["memory_per_gpu_bytes"] > z3["memory_per_gpu_bytes"]


def test_stacks_listed_shown_and_chosen(cli) -> None:
    listed = cli("list", "stacks")
    assert listed.code == 0 and "megatron-core" in listed.out and "torchtitan" in listed.out
    shown = cli("show", "stack", "torchtitan")
    assert shown.code == 0 and "attention_kernel = sdpa" in shown.out and "calibrated by" in shown.out
    plan = cli("--model", "llama3-8b", "--cluster", "dgx-h100", "--stack", "torchtitan", "--top", "2")
    assert plan.code == 0, plan.err
    assert "stack: torchtitan" in plan.out and "band: where published runs" in plan.out and "assumes" in plan.out
    pinned = cli(
        "estimate",
        "--model",
        "llama3-8b",
        "--cluster",
        "dgx-h100",
        "--dp",
        "8",
        "--stack",
        "torchtitan",
        "--no-compile",
        "--json",
    ).json()
    assert pinned["config"]["job"]["stack"] == "torchtitan" and pinned["config"]["job"]["compile"] is False


def test_calibrate_from_runs_dry_run(cli) -> None:
    sample = str(SAMPLE_RUNS)
    r = cli("calibrate", "--from-runs", sample, "--group", "h100-fsdp-llmfoundry", "--json")
    assert r.code == 0, r.err
    data = r.json()
    assert data["priced"] == 4 and data["written"] == []
    assert "dgx-h100.sustained_tensor_fraction" in data["parameters"]
    assert 0 < data["cv_mape_pct"] < 50


def test_estimate_turns_sequence_parallelism_on_with_tp_as_the_search_does(cli) -> None:  # type: ignore[no-untyped-def]
    on = cli("estimate", "-m", "llama3-70b", "-c", "dgx-h100x8", "--tp", "4", "--pp", "8", "--json")
    assert on.code == 0 and json.loads(on.out)["config"]["parallel"]["sequence_parallel"] is True
    off = cli("estimate", "-m", "llama3-70b", "-c", "dgx-h100x8", "--tp", "4", "--pp", "8", "--no-sequence-parallel")
    assert off.code == 0 and " sp " not in off.out.split("mesh:")[1].splitlines()[0]
    one = cli("estimate", "-m", "llama3-8b", "-c", "dgx-h100x1", "--json")
    assert json.loads(one.out)["config"]["parallel"]["sequence_parallel"] is False


@pytest.mark.parametrize("extra", [(), ("--json",)])
def test_a_closed_pipe_ends_the_run_quietly(extra: tuple[str, ...]) -> None:
    # `plan ... | head` without head: the reader is gone before the first write (closed at once,
    # while the child still imports), so every write meets a closed pipe; rich's own handler
    # would exit 1, the interpreter's last flush would print 'Exception ignored'
    args = [sys.executable, "-m", "planner", "--model", "llama3-8b", "--cluster", "dgx-h100", *extra]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, err
    assert err == b""


def test_subcommands_are_made_on_first_use_as_typer_makes_them() -> None:
    """``click_app`` (what ``main`` runs) lists typer's subcommands in typer's order and makes each
    one, on first lookup, as typer would have up front; a run of ``plan`` makes none."""
    import typer

    from planner.cli.app import app, click_app

    lazy, eager = click_app(), typer.main.get_command(app)
    assert list(lazy.commands) == list(eager.commands)
    assert [p.name for p in lazy.params] == [p.name for p in eager.params]
    assert lazy.commands.get("no-such-command") is None
    assert not lazy.commands._made
    for name, made in eager.commands.items():
        again = lazy.commands[name]
        assert type(again) is type(made) and again.name == made.name and again.help == made.help
        assert [(p.name, p.opts, p.default) for p in again.params] == [(p.name, p.opts, p.default) for p in made.params]
        assert list(getattr(again, "commands", {})) == list(getattr(made, "commands", {}))


def test_show_model_counts_the_mtp_modules_training_runs(cli) -> None:
    """`plan show model deepseek-v3` gave 281 GFLOP per token without its MTP module, while the
    estimate's MFU counts 292 (model_flops_per_step / tokens with mtp 1): the two now agree."""
    data = cli("show", "model", "deepseek-v3", "--json").json()
    assert data["mtp_layers"] == 1
    assert data["training_flops_per_token"] == pytest.approx(291.85e9, rel=0.002)
    est = cli(
        "estimate", "-m", "deepseek-v3", "-c", "gb200-nvl72x2", "--tp", "1", "--pp", "6", "--dp", "24", "--ep", "8",
        "-b", "4", "-z", "1", "--recompute", "full", "--json",
    ).json()  # fmt: skip
    tokens = est["config"]["job"]["global_batch_tokens"]
    # megatron-core's MFU counts causal attention at half, as Megatron-LM's log does
    assert est["model_flops_per_step"] / tokens == pytest.approx(data["training_flops_per_token_causal"], rel=1e-9)
    assert data["training_flops_per_token_causal"] < data["training_flops_per_token"]
    shown = " ".join(cli("show", "model", "llama70b").out.split())
    assert "481 GFLOP; 449 GFLOP with causal attention at half, as Megatron-LM counts" in shown
