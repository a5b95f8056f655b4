#!/bin/sh
# The watcher's NVML path on a real GPU (docs/policies/progress.md, docs/benchmarks.md): what
# cinch-watch reads of an idle GPU and of one a PyTorch matmul loop keeps busy, beside what
# nvidia-smi says. CI has no GPU; its tests use a stand-in NVML (plugin/watch/tests/fake_nvml.c).
#
#   plugin/watch/check-gpu.sh [CINCH_WATCH] [GPU_MINOR]
#
# CINCH_WATCH: the watcher (default target/release/cinch-watch); GPU_MINOR: the GPU's minor number
# (/dev/nvidiaN, as Slurm's SLURM_JOB_GPUS numbers it; default 0). The load runs on CUDA device 0
# (CUDA_VISIBLE_DEVICES picks it on a machine with several GPUs). Needs nvidia-smi and PyTorch.
set -eu
watch=${1:-target/release/cinch-watch}
gpu=${2:-0}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "step 3/10" > "$out"

echo "GPU $gpu: $(nvidia-smi -i "$gpu" --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
echo "idle, cinch-watch over 10 s:"
"$watch" --job-id 0 --once --sample-gpus-s 10 --gpus "$gpu" --output "$out"
echo "idle, nvidia-smi: $(nvidia-smi -i "$gpu" --query-gpu=utilization.gpu,memory.used --format=csv,noheader)"

python3 - <<'PY' &
import time
import torch
x = torch.randn(8192, 8192, device="cuda")
end = time.time() + 30
while time.time() < end:
    y = x @ x
torch.cuda.synchronize()
PY
load=$!
sleep 10
echo "a matmul loop, cinch-watch over 10 s:"
"$watch" --job-id 0 --once --sample-gpus-s 10 --gpus "$gpu" --output "$out"
echo "a matmul loop, nvidia-smi: $(nvidia-smi -i "$gpu" --query-gpu=utilization.gpu,memory.used --format=csv,noheader)"
wait "$load"
