#!/usr/bin/env bash
# Session 6: torch.compile on the final memory-bound cases (the same machine, the call after kf's).
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
date +%T; PYTHONUNBUFFERED=1 timeout 560 python3 bench/torch_bench.py --modes compile --dtypes f32,f16,bf16 --cases-from bench/results/h100/session6/final/kf-vulkan-mb.json --reps 15 --out-dir "$out" > "$out/torch-compile-mb.log" 2>&1; echo "torch compile rc=$?"; tail -2 "$out/torch-compile-mb.log"
date +%T
