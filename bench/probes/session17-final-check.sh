#!/usr/bin/env bash
# Session 17, final checks (H100) of the merged code (dropout bits once per Philox block on Vulkan's tensor-core
# passes and CUDA's forward kernels, flash-wgmma with dropout, the shared bf16 staging of the Vulkan
# tensor-core attention). Part "conf": kf-conformance on vulkan and cuda with the validation layer, then the
# attention forward and backward on both backends in one call (S 4096 causal with and without dropout).
# Part "tests": test_attention, test_dropout, test_errors, test_grad on the GPU.
set -u
part=${1:-conf}
out=${OUT:-/tmp/final}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
b=build/tools
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
if [ "$part" = conf ]; then
  "$b/kf-conformance" --backend vulkan,cuda --validation --json "$out/conf.json" > "$out/conf.txt" 2>&1; echo "conformance rc=$?"
  tail -1 "$out/conf.txt"; grep -E ' fail ' "$out/conf.txt" | head
  gzip -f "$out/conf.json"
  date +%T
  for be in vulkan cuda; do
    timeout 100 "$b/kf-bench" --backend $be --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention$' --cases '^b4_h32_s4096_d128_causal(_dropout)?$' 2>&1 | grep -E '^attention'
    timeout 150 "$b/kf-bench" --backend $be --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention_backward$' --cases '^b4_h32_s(1024_d128_causal|4096_d128|4096_d128_causal|4096_d128_causal_dropout)$' 2>&1 | grep -E '^attention'
  done | tee "$out/attn-vulkan-cuda.txt"
else
  for t in test_attention test_dropout test_errors test_grad; do
    timeout 300 build/tests/$t --gtest_brief=1 > "$out/t.txt" 2>&1; rc=$?
    echo "$t rc=$rc $(grep -E 'PASSED|FAILED' "$out/t.txt" | head -3 | tr '\n' ' ')"; cat "$out/t.txt" >> "$out/gpu-tests.txt"
  done
  rm -f "$out/t.txt"
fi
date +%T
