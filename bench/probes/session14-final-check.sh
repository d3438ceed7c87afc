#!/usr/bin/env bash
# Session 14, final checks (H100) of the merged code. Part "conf": kf-conformance on vulkan and cuda with
# the validation layer, and a spot check of CUDA memory-bound timings (every CUDA kernel is now compiled
# for sm_90a instead of sm_90). Part "tests": the GPU test suites.
set -u
part=${1:-conf}
out=${OUT:-/tmp/final}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
b=build/tools
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
if [ "$part" = conf ]; then
  "$b/kf-bench" --backend cuda --no-unfused --reps 15 --dtypes f32,f16 --ops '^(add_relu|softmax|layer_norm|rms_norm|cross_entropy|adamw_step)$' > "$out/cuda-mb-spot.txt" 2>&1
  grep -E '^(add_relu|softmax|layer_norm|rms_norm|cross|adamw)|copy bandwidth' "$out/cuda-mb-spot.txt"
  date +%T
  "$b/kf-conformance" --backend vulkan,cuda --validation --json "$out/conf.json" > "$out/conf.txt" 2>&1; echo "conformance rc=$?"
  tail -1 "$out/conf.txt"; grep -E ' fail ' "$out/conf.txt" | head
  gzip -f "$out/conf.json"
else
  for t in test_attention test_linalg test_matmul_paths test_norm test_training test_errors test_grad; do
    timeout 150 build/tests/$t --gtest_brief=1 > "$out/t.txt" 2>&1; rc=$?
    echo "$t rc=$rc $(grep -E 'PASSED|FAILED' "$out/t.txt" | head -3 | tr '\n' ' ')"; cat "$out/t.txt" >> "$out/gpu-tests.txt"
  done
  rm -f "$out/t.txt"
fi
date +%T
