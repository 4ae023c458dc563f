"""Where the time of one `plan validate --layer-shard` replay goes, op by op (torch.profiler).

The H200 check of 2026-12-04 (benchmarks/data/gpu_moe_check_h200.log) measured the replay's MoE
layers at 1.6-2.35x their price where dense layers came within 1.09-1.18x. This prints the
replay's CUDA (or CPU) time per op for one layer shard forward + backward, the shard that
``planner.validate.layer.Shard`` builds for the pinned mesh, beside the layer's predicted time,
so the ops the price does not count can be named.

Usage: python3 benchmarks/gpu_layer_profile.py [--model M --cluster C --profile P --pins k=v,...]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch.profiler import ProfilerActivity, profile

from planner.catalog import load_cluster, load_model
from planner.search import default_job, pinned_mesh
from planner.validate.layer import Shard
from planner.validate.ops import GEMM_DTYPES
from planner.validate.shard import layer_terms

CASES = [
    ("qwen3-30b-a3b", "dgx-h200x1", 512, 4096, dict(dp=8, ep=8, micro_batch_size=4, zero_stage=1)),
    ("gpt-oss-120b", "dgx-h200x8", 512, 4096, dict(dp=64, ep=8, micro_batch_size=4, zero_stage=1)),
    ("llama3-8b", "dgx-h200x1", 128, 8192, dict(dp=8, micro_batch_size=1, zero_stage=1)),
]
"""The pinned meshes of benchmarks/gpu_moe_check.sh (force-balanced routing), a dense control last."""


def profile_case(model_name: str, cluster_name: str, batch: int, seq: int, pins: dict, rows: int) -> dict:
    model, cluster = load_model(model_name), load_cluster(cluster_name)
    job = default_job(model, global_batch_size=batch, seq_len=seq, moe_load_imbalance=1.0)
    config = pinned_mesh(pins, cluster.num_gpus, job)
    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda" if on_gpu else "cpu")
    profile_name = cluster.profile.name if on_gpu else "localhost-cpu"
    terms = layer_terms(model, job, config, load_cluster(profile_name), on_gpu)
    out: dict = {"model": model_name, "mesh": config.short(), "layers": []}
    for term in terms:
        assert term.layer is not None
        shard = Shard(term.layer, device, GEMM_DTYPES[term.dtype])
        sync = torch.cuda.synchronize if on_gpu else (lambda: None)
        for _ in range(3):
            shard.step()
        sync()
        start = time.perf_counter()
        for _ in range(5):
            shard.step()
        sync()
        measured = (time.perf_counter() - start) / 5
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
        with profile(activities=activities) as prof:
            shard.step()
            sync()
        key = "self_device_time_total" if on_gpu else "self_cpu_time_total"
        events = sorted(prof.key_averages(), key=lambda e: -getattr(e, key, 0.0))
        total = sum(getattr(e, key, 0.0) for e in events) or 1.0
        top = [
            {"op": e.key[:80], "calls": e.count, "us": round(getattr(e, key, 0.0), 1)}
            for e in events[:rows]
            if getattr(e, key, 0.0) > 0
        ]
        out["layers"].append(
            {
                "term": term.name,
                "predicted_s": term.predicted_s,
                "measured_s": measured,
                "self_us_total": total,
                "top": top,
            }
        )
        print(f"{model_name} {config.short()} {term.name}: predicted {term.predicted_s * 1e3:.2f} ms, "
              f"measured {measured * 1e3:.2f} ms; profiled self time {total / 1e3:.2f} ms")  # fmt: skip
        for row in top:
            print(f"   {row['us'] / 1e3:8.3f} ms  {row['calls']:5d}x  {row['op']}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="layer_profile.json")
    ap.add_argument("--rows", type=int, default=25, help="ops listed per layer")
    ap.add_argument("--small", action="store_true", help="CPU dry run: a small model and mesh")
    args = ap.parse_args()
    cases = [("gpt2-124m", "localhost-cpu", 8, 256, dict(dp=1, micro_batch_size=1))] if args.small else CASES
    results = [profile_case(*case, rows=args.rows) for case in cases]
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
