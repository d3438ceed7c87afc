#!/usr/bin/env bash
# Session 10, third probe (H100): the Vulkan tensor-core attention with K and V fragments built from
# 32-bit shared-memory words (attention_coopmat.comp FRAGW, KF_TUNE attn_cm=5) against the default
# (8 subgroups, coopMatLoadNV, attn_cm=2): correctness first (conformance of the attention ops with the
# variant forced), then the forward at B4 H32 D128.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
{
date +%T
KF_COOPMAT_LAYOUT=1 $B --backend vulkan --no-unfused --reps 1 --dtypes f16 --ops '^attention$' --cases 's1024_d128$' 2>&1 | grep -E "layout_f16 lane  [05]:" | head -4
KF_TUNE=attn_cm=5 timeout 300 build/tools/kf-conformance --backend vulkan --filter '^attention$' --progress none 2>&1 | tail -12
for cm in 2 5 2 5; do
  echo "== attn_cm=$cm"
  KF_TUNE=attn_cm=$cm $B --backend vulkan --no-unfused --reps 10 --size-mib 128 --dtypes f16,bf16 --ops '^attention$' --cases '^b4_h32_s' --json "$out/attn-cm$cm.json" 2>&1 | grep -E '^attention'
done
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
