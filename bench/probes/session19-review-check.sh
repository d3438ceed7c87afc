#!/usr/bin/env bash
# Session 19, review check (H100): after the review (the backward's drawn-ahead form removed: no faster, and its
# branch made the dK/dV kernels spill; dkv_keep_word shared by both forms; one test helper for op outputs): the CUDA
# attention tests, and attention / attention_backward with and without dropout against FlashAttention-2's last
# figures.
set -u
out=${OUT:-/tmp/review}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
timeout 150 build/tools/kf-bench --backend cuda --no-unfused --reps 5 --dtypes f16,bf16 --ops '^attention(_backward)?$' --cases '^b4_h32_s(1024_d128_causal|4096_d128_causal|4096_d128_causal_dropout)$' --json "$out/attn.json" 2>&1 | grep -E '^attention'
timeout 400 build/tests/test_attention --gtest_filter='AttentionCuda.*' > "$out/test-attention.txt" 2>&1; echo "test_attention rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)" "$out/test-attention.txt"
grep -A12 "Failure" "$out/test-attention.txt" | head -40
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
