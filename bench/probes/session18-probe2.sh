#!/usr/bin/env bash
# Session 18, second probe (H100): the warpgroup backward's dQ pass with Q's and dO's A fragments held in
# registers for the whole pass (S = Q K^T and dP = dO V^T as RS wgmma, only K and V read from shared memory:
# an m64n64k16 product with both operands from shared memory reads 4 KiB per 128 KFLOP, about the SM's
# shared-memory bandwidth at the tensor-core rate). Predicted: the dQ pass 15-25 % faster, the backward at
# S 4096 10.4 -> 9.3-9.8 ms. Alternated twice with probe 1's build (old/), then Nsight Compute's duration of
# each pass of both builds (S 4096, f16), then the tests.
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
  LD_LIBRARY_PATH=$PWD/$lib timeout 150 ncu --kernel-name regex:attn_bwd --launch-skip 6 --launch-count 6 --metrics gpu__time_duration.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
    build/tools/kf-bench --backend cuda --no-unfused --reps 3 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s4096_d128$' 2>&1 | grep -E "attn_bwd|duration|registers|warps_active" | sed -E 's/\(kf::hal::cuda::[^)]*\)//; s/kf::hal::cuda::\(anonymous namespace\):://' | cut -c1-150
done
date +%T
LD_LIBRARY_PATH=$PWD/build timeout 200 build/tests/test_attention --gtest_filter='AttentionCuda.Backward*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max|relative" | head -40
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
