"""Search speed: meshes enumerated and priced per second, and wall time, for three cases.

  (a) llama3-70b on dgx-h100x16 (128 GPUs)
  (b) llama3-405b on dgx-h100x2048 (16,384 GPUs)
  (c) deepseek-v3 on dgx-h100x256 (MoE, EP searched)

Run: python benchmarks/search_speed.py [--repeat 3]. Times the search after import and catalog
load, and the whole `plan --model M --cluster C` process of every case (``python -m planner``,
without a launcher shim such as pyenv's, which adds its own ~0.15 s), the best of --repeat runs.
The process times assume compiled bytecode, as an installed package has: a checkout run under
PYTHONDONTWRITEBYTECODE=1 compiles the package again in every process (~0.1-0.2 s more), unless
``python -m compileall planner`` wrote it once.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from planner.catalog import load_cluster, load_model
from planner.search import default_job, search

CASES = (
    ("a", "llama3-70b", "dgx-h100x16"),
    ("b", "llama3-405b", "dgx-h100x2048"),
    ("c", "deepseek-v3", "dgx-h100x256"),
)


def main() -> None:
    from benchmarks.arguments import OneLineParser

    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{'case':4} {'model':14} {'cluster':16} {'GPUs':>6} {'meshes':>9} {'feasible':>9} {'best s':>8} "
        f"{'meshes/s':>11}"
    )
    for label, model_name, cluster_name in CASES:
        model, cluster = load_model(model_name), load_cluster(cluster_name)
        job = default_job(model)
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            ranking = search(model, cluster, job, top=10)
            best = min(best, time.perf_counter() - start)
        print(
            f"{label:4} {model_name:14} {cluster_name:16} {cluster.num_gpus:6d} {ranking.evaluated:9d} "
            f"{ranking.feasible:9d} {best:8.3f} {ranking.evaluated / best:11,.0f}"
        )
    for label, model_name, cluster_name in CASES:
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "planner", "--model", model_name, "--cluster", cluster_name],
                check=True,
                capture_output=True,
                cwd=Path(__file__).resolve().parents[1],
            )
            best = min(best, time.perf_counter() - start)
        print(f"({label}) whole process `plan --model {model_name} --cluster {cluster_name}`: {best:.2f} s")


if __name__ == "__main__":
    main()
