#!/usr/bin/env bash
# Session 11, seventh probe (H100; the knob was removed after it: no gain): the CUDA decode kernel loading the next step's K and V before this
# step's arithmetic (KF_TUNE attn_decode_prefetch=1; 16-bit registers: 4 heads 168 -> 189, 2 heads 96 -> 128,
# 1 head 64 -> 96, no spills), alone and with 2 query heads a block, twice each in alternation, on the
# decode cases; then the CUDA attention conformance and test_attention's decode tests with it.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
{
date +%T
for rep in 1 2; do
  for k in "" "attn_decode_prefetch=1" "attn_decode_heads=2" "attn_decode_heads=2,attn_decode_prefetch=1"; do
    echo "== KF_TUNE=$k rep $rep"
    KF_TUNE=$k $B --backend cuda --no-unfused --reps 20 --size-mib 128 --dtypes f16,bf16 --ops '^attention$' --cases '^decode_' 2>&1 | grep -E '^attention' | cut -c1-150
  done
done
KF_TUNE=attn_decode_prefetch=1 timeout 200 build/tools/kf-conformance --backend cuda --filter '^attention$' --progress none 2>&1 | tail -2
KF_TUNE=attn_decode_prefetch=1,attn_decode=2 timeout 200 build/tests/test_attention --gtest_filter='*Decode*' --gtest_brief=1 2>&1 | tail -4
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
