#!/usr/bin/env bash
# The prepared GPU check of the validator (issue 5): on one GPU, replay llama3-70b's top plans
# for 16 DGX H200 nodes (128 GPUs; GEMMs and one transformer layer shard forward+backward per
# layer kind, at the plans' per-rank shapes) through torchrun with NCCL at world size 1 (the same code path as the
# multi-GPU run: process group, barriers and timing all go through NCCL), then fit dgx-h200's GEMM
# and attention efficiency to what was measured, and show the plan before and after. Attention
# runs through PyTorch SDPA (FlashAttention-2 or cuDNN), not Transformer Engine or FlashAttention-3:
# the fitted attention efficiency describes that kernel.
#
# On the device machine (python3 there has torch with CUDA but not pydantic), from the repo root:
#   here, once: echo /.whl/ >> .git/info/exclude
#               python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#                 --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#                 -d .whl pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2
#   run (carry .whl, timeout 600):
#     python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl \
#       && PYTHONPATH=/tmp/site:. bash benchmarks/gpu_validate.sh
# Everything lands in $OUT (8 files with nccl, 7 in the CPU dry run). The same steps run on CPU with gloo in the test suite
# (tests/test_gpu_script.py): BACKEND=gloo MODEL=gpt2-124m PLAN_CLUSTER=localhost-cpu ...
set -euo pipefail

OUT=${OUT:-gpu-validate-out}
BACKEND=${BACKEND:-nccl}
MODEL=${MODEL:-llama3-70b}
PLAN_CLUSTER=${PLAN_CLUSTER:-dgx-h200x16}
PROFILE=${PROFILE:-dgx-h200}
PLAN_NODES=${PLAN_NODES:-16}
TOP=${TOP:-3}
NPROC=${NPROC:-1}
EXTRA=${EXTRA:-}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

"$PY" - >"$OUT/env.txt" <<'EOF'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu", p.name, f"{p.total_memory / 2**30:.1f} GiB", p.multi_processor_count, "SMs")
    print("nccl", torch.cuda.nccl.version())
else:
    print("no CUDA device: CPU dry run")
EOF
cat "$OUT/env.txt"

if [ "$BACKEND" = nccl ]; then
    echo "== the validator's NCCL tests (they skip without CUDA elsewhere)"
    "$PY" -m pytest -q -p no:cacheprovider tests/test_validate_nccl.py 2>&1 | tee "$OUT/nccl-tests.txt" \
        || echo "NCCL tests failed: see $OUT/nccl-tests.txt; going on with the replay"
fi

echo "== the plans being replayed (ranked on $PLAN_CLUSTER)"
"$PY" -m planner --model "$MODEL" --cluster "$PLAN_CLUSTER" --top "$TOP" | tee "$OUT/plan-before.txt"

echo "== replay: torchrun, $NPROC rank(s), $BACKEND, priced on $PROFILE"
# shellcheck disable=SC2086  # EXTRA holds several options
"$PY" -m torch.distributed.run --standalone --nproc-per-node "$NPROC" -m planner validate \
    --backend "$BACKEND" --model "$MODEL" --cluster "$PLAN_CLUSTER" --top "$TOP" --profile "$PROFILE" \
    --layer-shard --out "$OUT/validate.json" $EXTRA | tee "$OUT/validate.txt"

echo "== calibrate $PROFILE from the replay"
"$PY" -m planner calibrate --from "$OUT/validate.json" --cluster "$PROFILE" \
    --out "$OUT/$PROFILE-measured.yaml" | tee "$OUT/calibrate.txt"

echo "== the plans on the calibrated profile"
"$PY" -m planner --model "$MODEL" --cluster "$OUT/$PROFILE-measured.yaml" --nodes "$PLAN_NODES" --top "$TOP" \
    | tee "$OUT/plan-after.txt"
