#!/usr/bin/env bash
# The prepared GPU check of issues 11/12's MoE miss (GPT-OSS), on one GPU, in one device call:
#   1. benchmarks/gpu_moe_parts.py: one expert-parallel rank's expert MLP at the published meshes'
#      shapes, part by part (per-expert cuBLAS GEMMs, Megatron-Core's own activation and bias code);
#   2. `plan validate --layer-shard` of pinned published meshes (GPT-OSS EP 8 and EP 64, Qwen3-30B-A3B
#      EP 8, Llama-3 8B as the dense control), priced on dgx-h200: the planner's layer price against
#      the same layer run in PyTorch on the GPU;
#   3. benchmarks/gpu_validate.sh (the validator's own prepared check, llama3-70b).
# Each step has its own time limit so the whole ends inside one call. Results: $OUT/log.txt,
# $OUT/moe_parts.json and $OUT/results.tgz (every report).
#
# Wheels first (here, once): pydantic as gpu_validate.sh says, and megatron-core==0.16.1 for cp312:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 -d .whl megatron-core==0.16.1
# Run (carry .whl): bash benchmarks/gpu_moe_check.sh
set -uo pipefail
OUT=${OUT:-gpu-moe-out}
W=/tmp/moe-work
mkdir -p "$OUT" "$W"
source benchmarks/gpu_setup.sh

echo "== 1. expert MLP parts"
timeout 150 python3 benchmarks/gpu_moe_parts.py --out "$OUT/moe_parts.json" 2>&1 | grep -v -i warn

validate() {  # name, limit, then the model and mesh options
    local name=$1 limit=$2
    shift 2
    echo "== 2. validate $name"
    timeout "$limit" python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m planner validate \
        --backend nccl --profile dgx-h200 --top 1 --layer-shard --repeats 10 --warmup 3 -z 1 \
        --out "$W/validate-$name.json" "$@" 2>&1 | grep -v -i warn
}
validate gpt-oss-ep8 75 --model gpt-oss-120b --cluster dgx-h200x8 -B 512 -s 4096 --tp 1 --pp 1 --ep 8 --dp 64 \
    -b 4 --moe-routing balanced
validate qwen3-30b-ep8 60 --model qwen3-30b-a3b --cluster dgx-h200x1 -B 512 -s 4096 --tp 1 --pp 1 --ep 8 --dp 8 \
    -b 4 --moe-routing balanced
validate gpt-oss-ep64 60 --model gpt-oss-120b --cluster dgx-h200x8 -B 512 -s 4096 --tp 1 --pp 1 --ep 64 \
    --dp 64 -b 4 --moe-routing balanced
validate llama3-8b 50 --model llama3-8b --cluster dgx-h200x1 -B 128 -s 8192 --tp 1 --pp 1 --dp 8 -b 1

echo "== 3. gpu_validate.sh"
OUT=$W/gpu-validate timeout 120 bash benchmarks/gpu_validate.sh

tar -czf "$OUT/results.tgz" -C "$W" .
echo "== done"
