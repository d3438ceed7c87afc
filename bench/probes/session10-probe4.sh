#!/usr/bin/env bash
# Session 10, fourth probe (H100): (1) the Vulkan tensor-core attention with only V's fragments from
# 32-bit words (KF_TUNE attn_cm=6) against the default (2) and both (5); (2) the CUDA linear_cross_entropy
# backward at N = 8192 (d 4096, 131072 classes): rows per chunk 1024 (default) / 2048 / 4096, since each
# chunk reads and writes d_W's 2 GiB float accumulator, PyTorch eager in the same call, and the kernels'
# durations under Nsight Compute.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
{
date +%T
for cm in 2 6 5; do
  echo "== attn_cm=$cm"
  KF_TUNE=attn_cm=$cm $B --backend vulkan --no-unfused --reps 10 --size-mib 128 --dtypes f16 --ops '^attention$' --cases '^b4_h32_s(4096|16384)_d128$' 2>&1 | grep -E '^attention'
done
KF_TUNE=attn_cm=6 timeout 300 build/tools/kf-conformance --backend vulkan --filter '^attention$' --progress none 2>&1 | grep -E "kf::Error|FAIL|PASS|pass" | grep -v "RoPE" | tail -5
date +%T
for r in 0 2048 4096; do
  echo "== lce_rows=$r"
  KF_TUNE=$([ $r = 0 ] && echo "" || echo "lce_rows=$r") $B --backend cuda --no-unfused --reps 5 --size-mib 128 --dtypes f16,bf16 --ops '^linear_cross_entropy(_backward)?$' --json "$out/lce-cuda-r$r.json" 2>&1 | grep -E '^linear'
done
PYTHONUNBUFFERED=1 timeout 240 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^linear_cross_entropy(_backward)?$' --cases-from "$out/lce-cuda-r0.json" --reps 5 --out-dir /tmp/tl 2>&1 | grep -E '^linear' | tail -8
date +%T
timeout 200 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv $B --backend cuda --no-unfused --reps 1 --warmup 0 --warmup-ms 0 --size-mib 128 --dtypes f16 --ops '^linear_cross_entropy_backward$' 2>/dev/null | gzip > "$out/ncu-lce.csv.gz"; echo "ncu rc=$?"
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
