#!/usr/bin/env bash
# Session 12, first probe (H100): (1) CUDA linear 8192^3 + bias + gelu costs 0.19-0.25 ms over the bare
# product (session 11 final/al), where one pass over y (268 MB read + write) takes about 0.08: kf-bench with
# cuBLASLt's BIAS epilogue (default) against KF_TUNE mm_epilogue=kernel (bias in the epilogue kernel), and
# each kernel's duration under Nsight Compute, and PyTorch's kernels for the same op under its profiler;
# (2) Nsight Compute on the CUDA decode kernel over GQA (B4 H32 KV8 32k, 0.80 of copy) and on flash-mma
# forward (S 4096, 0.93 of FlashAttention-2): what limits them.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
NCU=/usr/local/cuda/bin/ncu
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for i in 1 2; do
  for t in "" "mm_epilogue=kernel"; do
    echo "== KF_TUNE='$t'"
    KF_TUNE=$t $B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16 --ops '^linear$' --cases '^(8192|4096)_(gelu|bare)$' --json "$out/kf-lin.json" 2>&1 | grep -E '^linear'
  done
done
PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^linear$' --cases-from "$out/kf-lin.json" --reps 20 --out-dir /tmp/tw 2>&1 | grep -E '^linear'
date +%T
for t in "" "mm_epilogue=kernel"; do
  echo "==== ncu linear 8192_gelu bf16 KF_TUNE='$t'"
  KF_TUNE=$t timeout 120 $NCU --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed --launch-count 6 $B --backend cuda --no-unfused --reps 1 --warmup 1 --warmup-ms 0 --dtypes bf16 --ops '^linear$' --cases '^8192_gelu$' 2>&1 | grep -E '^  [a-zA-Z_]|duration|throughput' | cut -c1-170
done
echo "==== torch profiler: F.gelu(F.linear(x, w, b)) bf16 8192"
PYTHONUNBUFFERED=1 timeout 120 python3 - <<'PY' 2>&1 | tail -25
import torch, torch.nn.functional as F
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); w = torch.randn_like(x); b = torch.randn(8192, device="cuda", dtype=torch.bfloat16)
for _ in range(30): F.gelu(F.linear(x, w, b))
torch.cuda.synchronize()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    for _ in range(10): F.gelu(F.linear(x, w, b))
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=90))
PY
date +%T
sec="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
echo "==== ncu attn_decode bf16 decode_b4_h32_kv8_32k_d128"
timeout 150 $NCU $sec --section SourceCounters -k regex:attn_decode --launch-count 1 $B --backend cuda --no-unfused --reps 1 --warmup 1 --warmup-ms 0 --dtypes bf16 --ops '^attention$' --cases '^decode_b4_h32_kv8_32k_d128$' 2>&1 | grep -vE '^(==PROF==|\[)' | cut -c1-170 | head -170
echo "==== ncu attn_mma f16 b4_h32_s4096_d128"
timeout 200 $NCU $sec -k regex:attn_mma --launch-count 1 $B --backend cuda --no-unfused --reps 1 --warmup 1 --warmup-ms 0 --dtypes f16 --ops '^attention$' --cases '^b4_h32_s4096_d128$' 2>&1 | grep -vE '^(==PROF==|\[)' | cut -c1-170 | head -130
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log" | tail -60
