#!/usr/bin/env bash
# Session 13, fourth probe (H100): CUDA attention forward with the query tiles in reverse order (the last,
# longest under a causal mask, first: hal/cuda/attention.cu kBlockOrder), against the previous build
# (base/, same call, alternated twice), and PyTorch's FlashAttention-2 and cuDNN backends in the same call.
# Then the attention tests on the GPU (CUDA and Vulkan) and the CUDA emulator-independent conformance.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
run() {  # $1: label, $2: build dir
  echo "== $1"
  LD_LIBRARY_PATH=$PWD/$2 $2/tools/kf-bench --backend cuda --no-unfused --reps 15 --dtypes f16,bf16 --ops '^attention$' --cases '^b4_h32_s(1024|4096|16384)_d128(_causal)?$' --json "$out/kf-$1.json" 2>&1 | grep -E '^attention'
}
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for i in 1 2; do run base$i base; run new$i build; done
date +%T
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_attention.py --cases-from "$out/kf-new1.json" --backends flash,cudnn --out-dir "$out" > "$out/torch-attention.log" 2>&1; echo "torch attention rc=$?"
grep -E 'b4_h32' "$out/torch-attention.log"
date +%T
export LD_LIBRARY_PATH=$PWD/build
build/tests/test_attention 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *FAILED|Failure" | head -20
build/tools/kf-conformance --backend cuda --filter '^attention' 2>&1 | tail -2
date +%T
} > "$out/probe.log" 2>&1
rm -f "$out"/*.json
tail -40 "$out/probe.log"
