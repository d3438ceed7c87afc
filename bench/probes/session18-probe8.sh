#!/usr/bin/env bash
# Session 18, eighth probe (H100): the CUDA forward (flash-wgmma) with each k step's wgmma descriptor as the
# tile's plus the step's offset (wgmma_desc_at, as probe 7 did in the backward, where it and the load loop took
# 37 % of the dK/dV pass's instructions). Predicted: -2-6 % (the forward's loads already had one swizzled
# offset a thread). Alternated twice with the previous build (old/), then the CUDA attention tests.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
mkdir -p old && xz -dc .gpu/old/libkf.so.0.xz > old/libkf.so.0
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for rep in 1 2; do
  for lib in build old; do
    echo "== $lib (round $rep)"
    LD_LIBRARY_PATH=$PWD/$lib timeout 150 build/tools/kf-bench --backend cuda --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention$' --cases '^b4_h32_s(1024|4096|16384)_d128(_causal|_causal_dropout)?$' --json "$out/fwd-$lib-$rep.json" 2>&1 | grep -E '^attention'
  done
done
date +%T
LD_LIBRARY_PATH=$PWD/build timeout 200 build/tests/test_attention --gtest_filter='AttentionCuda.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error|max|relative" | head -40
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
