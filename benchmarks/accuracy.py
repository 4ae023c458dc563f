"""Accuracy: predicted vs published throughput of measured training runs (A100 era).

Runs and citations: benchmarks/data/published_runs.yaml (a copy of the team's ground truth).
Each run is priced on the dgx-a100-80g profile as shipped (datasheet numbers and
microbenchmark-level efficiencies shared by every run; nothing is fitted per run), with the
paper's mesh, batch and sequence length pinned, and converted to the paper's own metric:

  Narayanan et al. 2021, Table 1: TFLOP/s per GPU counted with 96*B*s*L*h^2*(1 + s/6h +
      V/16Lh), i.e. hardware FLOPs with full recompute. Our hardware FLOPs reproduce that
      formula exactly for GPT, so we compare hardware FLOPs / step time / N.
  Korthikanti et al. 2022, Tables 3 and 5: iteration time in seconds, with selective recompute
      + sequence parallelism and with full recompute (8 cases), and the 530B run at dp = 8.
  BLOOM-176B (bigscience tr11 README): ~150 TFLOP/s per GPU computed as 8 * params * tokens
      (forward 2, backward 4, recompute 2; no attention term), and ~60 GB per GPU.

Knobs: Narayanan et al.'s micro-batch sizes, virtual stages and DDP implementation come from
their launch script (Megatron-LM examples/sc21/run_table_1.sh); Korthikanti et al. state theirs
in Tables 3 and 5 (1F1B assumed for the 22B and 1T rows, as the ground-truth file notes); their
'full recompute' baseline runs without sequence parallelism (SP came with that paper).
Megatron-era kernels (the megatron-lm-2021 stack; BLOOM: deepspeed): no flash attention, dropout on;
Megatron's 2021-22 'local' DDP did not
overlap the gradient reduction (Korthikanti et al. say so for their dp = 8 run), PyTorch DDP
does. BLOOM: DeepSpeed 1F1B pipeline, ZeRO-1, bf16 with fp32 gradients, no dropout.

Run: python benchmarks/accuracy.py [--json]

Modern runs (H100, H200, B200, GB200, GB300, MI300X; llm-foundry, torchtitan, Megatron-Bridge):
python benchmarks/accuracy.py --runs ../shared/groundtruth/modern_runs.yaml [--group G] [--json]
prices every row of a file of that schema from its own fields, with cross-validated errors for
the rows the shipped calibration used (benchmarks/modern.py says how).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from planner.catalog import load_cluster  # noqa: E402
from planner.errors import PlannerError  # noqa: E402
from planner.explain import where_it_loses  # noqa: E402
from planner.pricing import estimate_mesh  # noqa: E402
from planner.schemas import ClusterSpec, Estimate, JobSpec, ModelSpec, ParallelConfig  # noqa: E402
from planner.search import search  # noqa: E402

RUNS = ROOT / "benchmarks" / "data" / "published_runs.yaml"
SC21_TABLE_1 = {
    "megatron2021-gpt-1.7B": (16, None, "torch"),
    "megatron2021-gpt-3.6B": (16, None, "torch"),
    "megatron2021-gpt-7.5B": (16, None, "torch"),
    "megatron2021-gpt-18.4B": (8, None, "torch"),
    "megatron2021-gpt-39.1B": (4, None, "local"),
    "megatron2021-gpt-76.1B": (2, 5, "local"),
    "megatron2021-gpt-145.6B": (2, 5, "local"),
    "megatron2021-gpt-310.1B": (1, 3, "local"),
    "megatron2021-gpt-529.6B": (1, 1, "local"),
    "megatron2021-gpt-1008.0B": (1, None, "local"),
}
"""(micro-batch size, --num-layers-per-virtual-pipeline-stage, DDP implementation) of each Table 1
run, from the paper's own launch script: NVIDIA/Megatron-LM examples/sc21/run_table_1.sh. PyTorch
DDP ('torch') overlaps the gradient all-reduce with backward; Megatron's 'local' DDP of 2021 did
not."""
NO_OVERLAP = {"overlap_grad_reduce": False}
"""Megatron-LM of 2021-22 reduced gradients after the backward pass (--overlap-grad-reduce came in
2023; Korthikanti et al. state 'no grad all-reduce overlap' for their dp = 8 run), and
DeepSpeed's pipeline engine reduces after the pipeline flush."""
GIB = 1024**3


@dataclass
class Case:
    """One published number to reproduce."""

    name: str
    metric: str  # "tflops_hw_per_gpu", "iter_time_s", "bloom_tflops_per_gpu"
    published: float
    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    pins: dict[str, Any]
    assumed: str
    source: str


def gpt_model(run: dict[str, Any]) -> ModelSpec:
    """The run's GPT architecture: Megatron-LM GPT (LayerNorm, GELU, biases, tied embeddings,
    learned positions; BLOOM uses ALiBi)."""
    m = run["model"]
    return ModelSpec(
        name=run["name"],
        source=run["source"],
        num_hidden_layers=m["layers"],
        hidden_size=m["hidden"],
        num_attention_heads=m["heads"],
        num_key_value_heads=m["kv_heads"],
        intermediate_size=m["ffn"],
        vocab_size=m["vocab"],
        max_position_embeddings=m["seq_len"],
        tie_word_embeddings=True,
        hidden_act="gelu",
        attention_bias=True,
        mlp_bias=True,
        norm_type="layernorm",
        position_embedding_type="alibi" if run["name"].startswith("bloom") else "learned",
    )


def a100_cluster(run: dict[str, Any]) -> ClusterSpec:
    """dgx-a100-80g nodes; BLOOM's Jean Zay nodes have 4 x 100 Gb/s Omni-Path instead of
    8 x 200 Gb/s HDR: 4 * 12.5 GB/s over 8 GPUs = 6.25 GB/s per GPU (from the README's
    hardware description, not fitted)."""
    nodes = run["hardware"]["count"] // run["hardware"]["gpus_per_node"]
    cluster = load_cluster("dgx-a100-80g", nodes=nodes)
    if "Omni-Path" in run["hardware"].get("inter_node", ""):
        inter = cluster.inter_node.model_copy(
            update={"name": "4x Omni-Path 100 Gb/s per node", "bandwidth_gb_per_s": 4 * 12.5 / 8}
        )
        profile = cluster.profile.model_copy(update={"inter_node": inter})
        cluster = cluster.model_copy(update={"profile": profile})
    return cluster


def cases() -> list[Case]:
    runs = yaml.safe_load(RUNS.read_text())["runs"]
    out: list[Case] = []
    for run in runs:
        model, cluster = gpt_model(run), a100_cluster(run)
        par = run["parallel"]
        mesh = {"tp": par["tp"], "pp": par["pp"], "dp": par["dp"], "cp": 1}
        dtype = "fp16" if "fp16" in run["precision"] or "16-bit" in run["precision"] else "bf16"
        job = JobSpec(
            global_batch_size=run["global_batch"],
            seq_len=run["model"]["seq_len"],
            dtype=dtype,
            flash_attention=False,
            dropout=True,
            stack="deepspeed" if run["name"].startswith("bloom") else "megatron-lm-2021",
        )
        name = run["name"]
        if name.startswith("megatron2021"):
            mbs, layers_per_chunk, ddp = SC21_TABLE_1[name]
            v = run["model"]["layers"] // par["pp"] // layers_per_chunk if layers_per_chunk else 1
            schedule = "interleaved-1f1b" if v > 1 else "1f1b"
            pins = {
                **mesh,
                "recompute": "full",
                "sequence_parallel": False,
                "zero_stage": 0,
                "micro_batch_size": mbs,
                "schedule": schedule,
                "virtual_stages": v,
                "overlap_grad_reduce": ddp == "torch",
            }
            out.append(
                Case(
                    name,
                    "tflops_hw_per_gpu",
                    run["measured"]["tflops_per_gpu"],
                    model,
                    cluster,
                    job,
                    pins,
                    f"b={mbs}, v={v}, {ddp} DDP (examples/sc21/run_table_1.sh)",
                    run["source"],
                )
            )
        elif name.startswith("korthikanti2022"):
            b = run["micro_batch"]
            interleaved = run["schedule"].startswith("interleaved")
            sched = {"schedule": "interleaved-1f1b", "virtual_stages": 3} if interleaved else {"schedule": "1f1b"}
            base = {**mesh, "micro_batch_size": b, "zero_stage": 0, **sched, **NO_OVERLAP}
            out.append(
                Case(
                    f"{name} selective",
                    "iter_time_s",
                    run["measured"]["iter_time_s"],
                    model,
                    cluster,
                    job,
                    {**base, "recompute": "selective", "sequence_parallel": True},
                    f"b={b}, {sched['schedule']}",
                    run["source"],
                )
            )
            if "iter_time_full_recompute_s" in run["measured"]:
                out.append(
                    Case(
                        f"{name} full",
                        "iter_time_s",
                        run["measured"]["iter_time_full_recompute_s"],
                        model,
                        cluster,
                        job,
                        {**base, "recompute": "full", "sequence_parallel": False},
                        f"b={b}, {sched['schedule']}, no SP",
                        run["source"],
                    )
                )
        elif name.startswith("bloom"):
            # DeepSpeed's BF16 optimizer keeps and reduces gradients in fp32.
            bloom_job = job.model_copy(
                update={"dtype": "bf16", "flash_attention": False, "dropout": False, "gradient_dtype": "fp32"}
            )
            pins = {
                **mesh,
                "micro_batch_size": run["micro_batch"],
                "zero_stage": 1,
                "recompute": "full",
                "schedule": "1f1b",
                "sequence_parallel": False,
                **NO_OVERLAP,
            }
            out.append(
                Case(
                    name,
                    "bloom_tflops_per_gpu",
                    run["measured"]["tflops_per_gpu_approx"],
                    model,
                    cluster,
                    bloom_job,
                    pins,
                    "1F1B, ZeRO-1, no dropout, fp32 grads",
                    run["source"],
                )
            )
    return out


def predict(case: Case) -> tuple[float, Estimate]:
    """The case's metric as the planner predicts it, with the estimate behind it."""
    unstated = {"micro_batch_size", "virtual_stages"} - set(case.pins)
    if unstated:
        best = search(case.model, case.cluster, case.job, case.pins, top=1).candidates[0]
        config = best.config.parallel
    else:
        config = ParallelConfig(**case.pins)
    est = estimate_mesh(case.model, case.cluster, case.job, config)
    n = case.cluster.num_gpus
    if case.metric == "iter_time_s":
        return est.step_time_s, est
    if case.metric == "tflops_hw_per_gpu":
        return est.hardware_flops_per_step / est.step_time_s / n / 1e12, est
    tokens = case.job.tokens_per_step
    return 8.0 * case.model.parameter_counts.total * tokens / est.step_time_s / n / 1e12, est


def planner_vs_published(case: Case) -> tuple[Estimate, Estimate]:
    """(published mesh, planner's best) for the same GPUs, batch, sequence and software: only
    ``overlap_grad_reduce`` stays pinned, since it is the framework's, not the mesh's."""
    _, published = predict(case)
    pins = {"overlap_grad_reduce": case.pins.get("overlap_grad_reduce", True)}
    best = search(case.model, case.cluster, case.job, pins, top=1).candidates[0]
    return published, best


def print_planner_vs_published() -> None:
    print("\nPlanner's best mesh vs the published one (same GPUs, batch, sequence length and software):")
    seen: set[str] = set()
    for case in cases():
        run = case.name.split(" ")[0]
        if run in seen:
            continue
        seen.add(run)
        published, best = planner_vs_published(case)
        gain = published.step_time_s / best.step_time_s
        verdict = "ok" if best.step_time_s <= published.step_time_s * (1 + 1e-9) else "SEARCH MISSES IT"
        why = where_it_loses(best, published) if gain > 1 + 1e-9 else "the planner picks the published mesh"
        print(
            f"{run:26} {gain:5.2f}x {verdict:3}  published {published.config.parallel.short()} | planner "
            f"{best.config.parallel.short()} | published mesh: {why}"
        )


def _run_modern(compute: Callable[[], Any], show: Callable[[Any], None], as_json: bool) -> None:
    """A --runs mode: its result as JSON or as text; a bad input is one 'error:' line, exit 2."""
    try:
        result = compute()
    except PlannerError as err:
        sys.stderr.write(f"error: {err}\n")
        raise SystemExit(2) from None
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        show(result)


def main() -> None:
    from benchmarks.arguments import OneLineParser

    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--runs", metavar="FILE", help="a runs file of modern_runs.yaml's schema")
    parser.add_argument("--group", metavar="G", help="only the rows of this group (with --runs)")
    parser.add_argument("--exact-cv", action="store_true", help="refit every fold exactly (slow; with --runs)")
    parser.add_argument(
        "--explain",
        metavar="PATTERN",
        help="with --runs: why the rows whose name contains PATTERN are off (priced mesh, step by term, "
        "the step the published figure implies); a pattern that starts with '-' goes as --explain=PATTERN",
    )
    args = parser.parse_args()
    if args.explain is not None and not args.runs:
        parser.error("--explain needs --runs")
    if args.runs:
        import modern

        if args.explain is not None:
            _run_modern(lambda: modern.explain(args.runs, args.explain), modern.print_explain, args.json)
        else:
            _run_modern(lambda: modern.report(args.runs, args.group, args.exact_cv), modern.print_report, args.json)
        return
    if args.group or args.exact_cv:
        parser.error("--group and --exact-cv need --runs")
    rows = []
    for case in cases():
        predicted, est = predict(case)
        error = (predicted - case.published) / case.published
        rows.append(
            {
                "run": case.name,
                "metric": case.metric,
                "published": case.published,
                "predicted": predicted,
                "error": error,
                "mesh": est.config.parallel.short(),
                "assumed": case.assumed,
                "memory_per_gpu_gib": est.memory_per_gpu_bytes / GIB,
                "source": case.source,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'run':34} {'metric':20} {'published':>10} {'predicted':>10} {'error':>8}  mesh")
    for r in rows:
        print(
            f"{r['run']:34} {r['metric']:20} {r['published']:10.2f} {r['predicted']:10.2f} {r['error']:+8.1%}  "
            f"{r['mesh']}"
        )
    mape = sum(abs(r["error"]) for r in rows) / len(rows)
    kor = [r for r in rows if r["run"].startswith("korthikanti2022") and "dp8" not in r["run"]]
    print(f"\nMAPE over {len(rows)} published figures: {mape:.1%}")
    print(
        f"MAPE over the {len(kor)} Korthikanti et al. 2022 iteration times: "
        f"{sum(abs(r['error']) for r in kor) / len(kor):.1%}"
    )
    print_planner_vs_published()
    bloom = next(r for r in rows if r["run"].startswith("bloom"))
    print(
        f"BLOOM-176B memory per GPU: predicted {bloom['memory_per_gpu_gib'] * GIB / 1e9:.1f} GB "
        "(published: about 60 GB)"
    )


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # the reader (`| head`) closed the pipe: stop quietly, as a filter does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
