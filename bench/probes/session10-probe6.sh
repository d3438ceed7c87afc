#!/usr/bin/env bash
# Session 10, sixth probe (H100): the Vulkan tensor-core product with fragments built from 32-bit shared-
# memory words (a helper's mm_coopmat.comp FRAG_WORDS, configurations 15-19 = the shapes of 13, 1, 14,
# 12, 2) against those shapes with coopMatLoadNV, linear f16 at 4096 and 8192, then its conformance.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
{
date +%T
for cfg in 13 15 1 16 2 19; do
  echo "== mm_cfg=$cfg"
  KF_TUNE=mm_cfg=$cfg $B --backend vulkan --no-unfused --reps 10 --size-mib 128 --dtypes f16 --ops '^linear$' --cases '^(4096_bare|8192_bare)$' 2>&1 | grep -E '^linear'
done
KF_TUNE=mm_cfg=15 timeout 200 build/tools/kf-conformance --backend vulkan --filter '^(linear|matmul)$' --dtypes f16 --progress none 2>&1 | tail -3
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
