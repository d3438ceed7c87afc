#!/usr/bin/env bash
# Session 12, third probe (H100): (1) linear 8192^3 / 4096^3 + gelu with the new epilogue kernel against
# PyTorch eager in the same call (probe 2 ran only the default cases); (2) the decode kernel's
# reduce-scatter form (default where LK = 4 x heads a block) against the all-reduce form (KF_TUNE
# attn_decode_rs=1), alternated, Vulkan's decode beside them, the decode tests and the attention
# conformance on CUDA, Nsight Compute on the new kernel; (3) Nsight Compute's per-instruction counts of
# eltwise bias_gelu_dropout bf16 (0.69 of copy where gelu_dropout reads 0.87).
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
NCU=/usr/local/cuda/bin/ncu
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for i in 1 2; do
  $B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16 --ops '^linear$' --cases '^(8192|4096)_(gelu|bare)$' --json "$out/kf-lin.json" 2>&1 | grep -E '^linear'
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^linear$' --cases-from "$out/kf-lin.json" --reps 20 --out-dir /tmp/tw 2>&1 | grep -E '^linear' | sed 's/^/torch /'
done
date +%T
for i in 1 2; do
  for t in "" "attn_decode_rs=1"; do
    echo "== KF_TUNE='$t'"
    KF_TUNE=$t $B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16 --ops '^attention$' --cases '^decode_' 2>&1 | grep -E '^attention'
  done
done
echo "== vulkan"
$B --backend vulkan --no-unfused --reps 20 --dtypes f16,bf16 --ops '^attention$' --cases '^decode_' 2>&1 | grep -E '^attention'
timeout 200 build/tools/kf-conformance --backend cuda --filter '^attention$' --progress none 2>&1 | tail -2
timeout 300 build/tests/test_attention 2>&1 | grep -E '^\[  (PASSED|FAILED) |tests ran' | tail -12
echo "== test_attention *Decode* with KF_TUNE attn_decode=2 (session 11 and probe 2 saw failures with it)"
KF_TUNE=attn_decode=2 timeout 200 build/tests/test_attention --gtest_filter='*ecode*' > "$out/decode-forced.log" 2>&1; echo "rc=$?"
grep -E 'Failure|error|Expected|Which is|FAILED|PASSED' "$out/decode-forced.log" | head -30 | cut -c1-250
date +%T
sec="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis"
echo "==== ncu attn_decode bf16 decode_b4_h32_kv8_32k_d128 (reduce-scatter)"
timeout 150 $NCU $sec -k regex:attn_decode --launch-count 1 $B --backend cuda --no-unfused --reps 1 --warmup 1 --warmup-ms 0 --dtypes bf16 --ops '^attention$' --cases '^decode_b4_h32_kv8_32k_d128$' 2>&1 | grep -vE '^(==PROF==|\[)' | grep -E '^ +[A-Z]|^  [a-z_]' | grep -vE '^ +(----|OPT|INF|WRN)' | cut -c1-120 | head -70
echo "==== ncu source counters: eltwise bias_gelu_dropout bf16"
timeout 150 $NCU --section SourceCounters --section InstructionStats --page source --print-source sass --csv -k regex:eltwise_kernel --launch-skip 2 --launch-count 1 $B --backend cuda --no-unfused --reps 1 --warmup 1 --warmup-ms 0 --dtypes bf16 --ops '^bias_gelu_dropout$' > "$out/ncu-bgd-source.csv" 2>&1; echo "ncu source rc=$? $(wc -l < "$out/ncu-bgd-source.csv") lines"
head -5 "$out/ncu-bgd-source.csv" | cut -c1-300
timeout 150 $NCU --section SourceCounters --section InstructionStats --page source --print-source sass --csv -k regex:attn_decode --launch-count 1 $B --backend cuda --no-unfused --reps 1 --warmup 1 --warmup-ms 0 --dtypes bf16 --ops '^attention$' --cases '^decode_b4_h32_kv8_32k_d128$' > "$out/ncu-decode-source.csv" 2>&1; echo "ncu source rc=$? $(wc -l < "$out/ncu-decode-source.csv") lines"
gzip -f "$out"/ncu-*.csv
date +%T
} > "$out/probe.log" 2>&1
tail -50 "$out/probe.log"
