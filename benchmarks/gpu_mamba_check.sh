#!/usr/bin/env bash
# The prepared GPU check of the hybrid models' Mamba-2 price (issue 11, ARCHITECTURE 8.10), on one GPU,
# in one device call: benchmarks/gpu_mamba_scan.py times mamba_ssm's SSD scan forward and backward at
# the held-out Nemotron 3 rows' per-rank shapes and tilelang's, beside the planner's price of each;
# then benchmarks/gpu_validate.sh (the validator's own prepared check). Results: $OUT/log.txt,
# $OUT/mamba_scan.json.
#
# Wheels and sdist first (here, once; the docstring of benchmarks/gpu_mamba_scan.py gives the two
# commands): .whl/einops-*.whl and .whl/mamba_ssm-*.tar.gz, beside gpu_validate.sh's pydantic wheels.
# Run (carry .whl): bash benchmarks/gpu_mamba_check.sh
set -uo pipefail
OUT=${OUT:-gpu-mamba-out}
mkdir -p "$OUT"
source benchmarks/gpu_setup.sh

echo "== 1. Mamba-2 SSD scan, measured and priced"
timeout 240 python3 benchmarks/gpu_mamba_scan.py --out "$OUT/mamba_scan.json"

echo "== 2. gpu_validate.sh"
OUT=$OUT/gpu-validate timeout 150 bash benchmarks/gpu_validate.sh
echo "== done"
