#!/usr/bin/env bash
# Session 12, fifth probe (H100; run inline from the device tool, kept here as it ran): linear 8192^3
# bare and + bias + gelu, kf and PyTorch eager alternated three times (probe 4 ran only the default
# 4096 cases).
set -u
mkdir -p "$OUT"
for i in 1 2 3; do
  build/tools/kf-bench --backend cuda --no-unfused --reps 20 --size-mib 128 --dtypes f16,bf16 --ops '^linear$' --cases '^8192_(gelu|bare)$' --json "$OUT/kf-lin8192.json" 2>&1 | grep -E '^linear'
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^linear$' --cases-from "$OUT/kf-lin8192.json" --reps 20 --out-dir /tmp/tw 2>&1 | grep -E '^linear' | sed 's/^/torch /'
done 2>&1 | tee "$OUT/lin8192.txt"
