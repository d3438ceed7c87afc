#!/usr/bin/env bash
# Session 18, seventh probe (H100): fewer instructions in the warpgroup backward's tiles. Probe 6 (Nsight) put the
# dK/dV pass at 1118 warp instructions a warp and tile, issue slots 41 % busy, tensor pipe 38 %: (1) the staged
# tiles' cp.async loop unrolled with one swizzled offset a thread (its rows t0 + 8 i share r % 8) instead of a
# division, a swizzle and a row computation per unit; (2) each k step's wgmma descriptor as the tile's plus
# the step's offset (one 64-bit add: wgmma_desc_at) instead of masks and shifts per descriptor. Predicted:
# instructions -10-15 %, time -3-6 % (S 4096 10.1 -> 9.5-9.8 ms). Alternated twice with the previous build
# (old/), Nsight durations and instruction counts of both, then the tests.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
mkdir -p old && xz -dc .gpu/old/libkf.so.0.xz > old/libkf.so.0
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
cases='^b4_h32_s(1024_d128_causal|4096_d128|4096_d128_causal|4096_d128_causal_dropout)$'
for rep in 1 2; do
  for lib in build old; do
    echo "== $lib (round $rep)"
    LD_LIBRARY_PATH=$PWD/$lib timeout 150 build/tools/kf-bench --backend cuda --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention_backward$' --cases "$cases" --json "$out/bwd-$lib-$rep.json" 2>&1 | grep -E '^attention'
  done
done
date +%T
which ncu || ls /usr/local/cuda*/bin | grep -i ncu
for lib in build old; do
  echo "== ncu $lib"
  LD_LIBRARY_PATH=$PWD/$lib timeout 150 ncu --kernel-name regex:attn_bwd --launch-skip 6 --launch-count 6 --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread \
    build/tools/kf-bench --backend cuda --no-unfused --reps 3 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s4096_d128$' 2>&1 | grep -E "attn_bwd|duration|registers|inst_executed" | sed -E 's/\(kf::hal::cuda::[^)]*\)//; s/kf::hal::cuda::\(anonymous namespace\):://' | cut -c1-150
done
date +%T
LD_LIBRARY_PATH=$PWD/build timeout 200 build/tests/test_attention --gtest_filter='AttentionCuda.Backward*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max|relative" | head -40
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
