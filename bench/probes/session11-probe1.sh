#!/usr/bin/env bash
# Session 11, first probe (H100): (1) the CUDA long-row kernels on thread-block clusters (a helper's
# change, never run on a GPU): test_norm and the norms' / softmax's conformance, then kf-bench over rows
# of 65536 with clusters automatic (P = 8 in f32, 4 in 16-bit), never (rows_cluster=1, the 1024-thread
# block per row) and forced 2 / 8; (2) cuBLASLt's heuristic answers 1-8 (KF_TUNE mm_algo) on linear
# 4096 / 8192 bare, f16 and bf16, then PyTorch eager on the same cases.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 240 build/tests/test_norm --gtest_brief=1 2>&1 | tail -6
timeout 200 build/tools/kf-conformance --backend cuda --filter '^(layer_norm|rms_norm|layer_norm_(relu|gelu|silu)|rms_norm_(gelu|silu)|add_layer_norm|add_rms_norm|softmax|log_softmax)$' --progress none 2>&1 | tail -4
date +%T
ops='^(layer_norm|layer_norm_relu|layer_norm_gelu|layer_norm_silu|rms_norm|rms_norm_gelu|rms_norm_silu|add_layer_norm|add_rms_norm|softmax|log_softmax)$'
for c in 0 1 2 8; do
  echo "== cuda rows_cluster=$c"
  KF_TUNE=$([ $c = 0 ] && echo "" || echo "rows_cluster=$c") $B --backend cuda --no-unfused --reps 15 --dtypes f32,f16,bf16 --ops "$ops" --cases '^rows65536$' --json "$out/cuda-rows-c$c.json" 2>&1 | grep -E '^(layer|rms|add|softmax|log)|bandwidth \(|rror'
done
date +%T
for a in 0 2 3 4 5 6 8; do
  echo "== mm_algo=$a"
  KF_TUNE=$([ $a = 0 ] && echo "" || echo "mm_algo=$a") $B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16 --ops '^linear$' --cases '^(4096_bare|8192_bare)$' --json "$out/kf-lin-a$a.json" 2>&1 | grep -E '^linear|rror'
done
PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^linear$' --cases-from "$out/kf-lin-a0.json" --reps 20 --out-dir "$out/torch" 2>&1 | grep -E '^linear' | head -8
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
