#!/usr/bin/env bash
# Session 15, ninth probe (H100): the Vulkan attention backward on the tensor cores (attention_bwd_coopmat.comp,
# branch vk-bwd): its test (with the validation layer), then kf-bench of attention_backward on Vulkan with the
# new passes and with the portable ones (KF_TUNE attn_path=1), and on CUDA, in one call.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 200 build/tests/test_attention --gtest_filter='AttentionPaths.BackwardCooperativeMatrix' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|seed" | head -40
date +%T
for i in 1 2; do
  for be in vulkan cuda; do
    timeout 120 build/tools/kf-bench --backend $be --no-unfused --reps 5 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s(1024|4096)_d128(_causal)?$' 2>&1 | grep -E '^attention'
  done
done
KF_TUNE=attn_path=1 timeout 100 build/tools/kf-bench --backend vulkan --no-unfused --reps 3 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s1024_d128_causal$' 2>&1 | grep -E '^attention'
date +%T
timeout 100 build/tools/kf-conformance --backend vulkan --validation --filter '^attention_backward' 2>&1 | tail -2
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
