#!/usr/bin/env bash
# Session 12, fourth probe (H100): the products' epilogue kernel without the batch norm and dropout code
# where the call has neither (64 registers instead of 68: 4 blocks of 256 an SM instead of 3). Nsight
# Compute's duration on linear 16384 x 8192 x 8192 bf16 + gelu (228 us in the final run, 272 before the
# session), kf against PyTorch eager alternated, and the products' CUDA conformance and test_linalg.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 120 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed -k regex:'epilogue' --launch-count 2 $B --backend cuda --no-unfused --reps 1 --warmup 1 --warmup-ms 0 --dtypes f16,bf16 --ops '^linear$' --cases '^8192_gelu$' 2>&1 | grep -E '^  [a-zA-Z_]|duration|throughput' | cut -c1-150
for i in 1 2; do
  $B --backend cuda --no-unfused --reps 20 --size-mib 128 --dtypes f16,bf16 --ops '^(linear|linear_dropout)$' --json "$out/kf-lin.json" 2>&1 | grep -E '^linear'
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^linear$' --cases-from "$out/kf-lin.json" --reps 20 --out-dir /tmp/tw 2>&1 | grep -E '^linear' | sed 's/^/torch /'
done
date +%T
timeout 200 build/tools/kf-conformance --backend cuda --filter '^(linear|linear_dropout|matmul|ffn|ffn_swiglu|conv2d|conv2d_bn_relu|conv2d_gelu_dropout|depthwise_pointwise)$' --progress none 2>&1 | tail -2
timeout 240 build/tests/test_linalg 2>&1 | tail -2
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
