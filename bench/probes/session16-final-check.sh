#!/usr/bin/env bash
# Session 16, final checks (H100) of the merged code (the Vulkan backward's QUAD form, bf16, dropout). Part
# "conf": kf-conformance on vulkan and cuda with the validation layer, then attention_backward on both
# backends in one call (the Vulkan / CUDA ratio, four cases). Part "tests1": the GPU suites that run the
# attention backward (test_attention, test_errors, test_grad); "tests2" the others of session 15's list.
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
    timeout 200 "$b/kf-bench" --backend $be --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention_backward$' --cases '^b4_h32_s(1024_d128_causal|4096_d128|4096_d128_causal|4096_d128_causal_dropout)$' 2>&1 | grep -E '^attention'
  done | tee "$out/attn-bwd-vulkan-cuda.txt"
else
  if [ "$part" = tests1 ]; then list="test_attention test_errors test_grad"; else list="test_grad test_training test_norm test_linalg"; fi
  for t in $list; do
    timeout 400 build/tests/$t --gtest_brief=1 > "$out/t.txt" 2>&1; rc=$?
    echo "$t rc=$rc $(grep -E 'PASSED|FAILED' "$out/t.txt" | head -3 | tr '\n' ' ')"; cat "$out/t.txt" >> "$out/gpu-tests-$part.txt"
  done
  rm -f "$out/t.txt"
fi
date +%T
