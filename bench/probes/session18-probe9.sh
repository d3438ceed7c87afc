#!/usr/bin/env bash
# Session 18, ninth probe (H100): after the review's refactor of attention_bwd_mma.cu (GroupRows: the row index
# and the rows' lse / D_i / query / slope of both passes, shared by the mma.sync and warpgroup kernels; the
# PTX changed by instruction order only), the CUDA backward tests, the attention_backward conformance on CUDA,
# and the timings (expected as the final run's: flash-wgmma S 4096 8.8-8.9 ms, flash-mma 14.7).
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 200 build/tests/test_attention --gtest_filter='AttentionCuda.Backward*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|variant|relative" | head -30
timeout 120 build/tools/kf-conformance --backend cuda --filter '^attention_backward' 2>&1 | tail -2
cases='^b4_h32_s(1024_d128_causal|4096_d128|4096_d128_causal|4096_d128_causal_dropout)$'
for tune in "" "attn_wmma=mma"; do
  KF_TUNE=$tune timeout 150 build/tools/kf-bench --backend cuda --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention_backward$' --cases "$cases" 2>&1 | grep -E '^attention'
done
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
