# Sourced by the prepared GPU checks (gpu_moe_check.sh, gpu_mamba_check.sh) after they set and make
# $OUT: unbuffered Python, everything also logged to $OUT/log.txt, the carried wheels (.whl/*.whl:
# the device reaches nothing outside) installed to /tmp/site and put on the path with the checkout,
# and the GPU's name, clocks and power limit recorded.
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/log.txt") 2>&1

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:.
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,memory.total --format=csv || true
