#!/usr/bin/env bash
# Session 11, last call (H100): (1) the CUDA cross_entropy_backward cluster kernel (probe 5's script:
# its test, conformance, timings by P); (2) the CUDA decode kernel's key splits on the GQA cases
# (automatic: one wave, 12 splits at 3 blocks an SM; Vulkan's 16 splits ran 1.2x faster); (3) the final
# memory-bound run again (both backends, PyTorch eager and compile), now with adamw's second moment
# drawn non-negative and the xent clusters in.
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
OUT="$out/xent" bash bench/probes/session11-probe5-xent.sh > /dev/null 2>&1; echo "xent probe rc=$?"; head -12 "$out/xent/probe.log"
B=build/tools/kf-bench
{
for sp in 0 16 24 36 48; do
  echo "== attn_decode=2,attn_split=$sp"
  KF_TUNE=attn_decode=2$([ $sp = 0 ] || echo ",attn_split=$sp") $B --backend cuda --no-unfused --reps 20 --size-mib 128 --dtypes f16,bf16 --ops '^attention$' --cases '^decode_' 2>&1 | grep -E '^attention'
done
} > "$out/decode-splits.txt" 2>&1
cat "$out/decode-splits.txt"
OUT="$out/mb" bash bench/probes/session11-final-mb.sh
