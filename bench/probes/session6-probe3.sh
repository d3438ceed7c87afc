#!/usr/bin/env bash
# Session 6, third probe (H100): the decode kernel with block-cyclic key splits (attention_decode.comp),
# every decode case in f16 and bf16, a split sweep over 128k keys, and the decode tests on the GPU.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
b=build/tools
bench() { local tag=$1; shift; echo "== $tag"; "$b/kf-bench" --no-unfused --reps 20 "$@" 2>&1 | tee -a "$out/probe.log" | grep -vE '^$|^op '; }
bench dec-vk --backend vulkan --ops '^attention$' --cases decode --dtypes f16,bf16
for s in 8 32 64; do KF_TUNE=attn_decode=2,attn_split=$s bench dec-vk-split$s --backend vulkan --ops '^attention$' --cases 128k --dtypes f16; done
timeout 200 build/tests/test_attention --gtest_filter='AttentionPaths.*Decode*' 2>&1 | tail -6
