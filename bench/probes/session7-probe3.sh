#!/usr/bin/env bash
# Session 7, third probe (H100): Vulkan fused norm backward with its column sums in registers (was in
# shared memory: layer f16 0.45, bf16 0.42, f32 0.74; rms 0.83 / 0.80 / 0.91), packs 2 and 4.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
log="$out/probe.log"
{
date +%T
for p in 0 4 2; do
  echo "== normbwd_packs=$p (0: default)"
  KF_TUNE=$([ $p = 0 ] || echo normbwd_packs=$p) $B --backend vulkan --no-unfused --reps 20 --dtypes f32,f16,bf16 --ops '^(layer|rms)_norm_backward$' 2>&1 | grep -E '^(layer|rms)'
done
KF_PIPELINE_STATS=1 $B --backend vulkan --no-unfused --reps 5 --dtypes f32,f16 --ops '^(layer|rms)_norm_backward$' 2>&1 | grep 'pipeline-stats normbwd' | head -8
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
timeout 120 build/tests/test_norm --gtest_brief=1 2>&1 | tail -3
build/tools/kf-conformance --backend vulkan --filter 'norm_backward' --progress none 2>&1 | tail -1
date +%T
} > "$log" 2>&1
cat "$log"
