#!/usr/bin/env bash
# Session 11, fourth probe (H100): the CUDA optimizers' launch (KF_TUNE optim_items = packs of each tensor a
# thread per tile, optim_blocks = blocks per multiprocessor), since the final memory-bound run had CUDA
# adamw_step at 0.664-0.735 ms against Vulkan's 0.626 and torch.compile's 0.629-0.673 (64M values).
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
{
date +%T
for it in 0 1 4; do
  for bl in 0 4 8 16; do
    k=""; [ $it != 0 ] && k="optim_items=$it"; [ $bl != 0 ] && k="${k:+$k,}optim_blocks=$bl"
    echo "== KF_TUNE=$k"
    KF_TUNE=$k $B --backend cuda --no-unfused --reps 15 --dtypes f32,f16,bf16 --ops '^(adamw_step|sgd_step)$' 2>&1 | grep -E '^(adamw|sgd)|bandwidth \('
  done
done
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
