#!/usr/bin/env bash
# Session 15, third probe (H100): as the second, after the per-row 64-bit divisions by G left the staging (FastDiv): dK/dV with one score block
# live at a time (the default here) against both live together (KF_BWD_JOINT=1, probe-only switch), alternated
# twice; then Nsight Compute on the passes (durations; stalls, issue and pipe use of dK/dV and dQ) at B 4,
# H 32, S 4096, D 128, f16.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build
B=build/tools/kf-bench
CU=/usr/local/cuda/bin
run() {  # $1: label
  echo "== $1"
  timeout 150 $B --backend cuda --no-unfused --reps 10 --dtypes f16,bf16 --ops '^attention_backward$' --cases '^b4_h32_s(1024|4096)_d128(_causal)?$' 2>&1 | grep -E '^attention'
}
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for i in 1 2; do KF_BWD_JOINT=1 run joint$i; run split$i; done
date +%T
args=(--backend cuda --no-unfused --reps 2 --warmup 1 --warmup-ms 0 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s4096_d128$')
for v in joint split; do
  if [ $v = joint ]; then export KF_BWD_JOINT=1; else unset KF_BWD_JOINT; fi
  timeout 150 $CU/ncu --kernel-name regex:attn_bwd --metrics gpu__time_duration.sum $B "${args[@]}" 2>&1 | grep -E "attn_bwd|duration" | sed -e 's/(kf::hal::cuda::AttnBwdParams)//' | tail -8
done
unset KF_BWD_JOINT
timeout 200 $CU/ncu --kernel-name regex:attn_bwd_mma --launch-skip 2 --launch-count 2 --section WarpStateStats --section SpeedOfLight \
  --section InstructionStats --section ComputeWorkloadAnalysis --section Occupancy --print-details all $B "${args[@]}" > "$out/ncu-split.txt" 2>&1; echo "ncu rc=$?"
grep -E "attn_bwd_mma|Duration|Issue Slots Busy|Issued Warp|No Eligible|Stall|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers|Warp Cycles Per Issued|Pipe" "$out/ncu-split.txt" | head -80
date +%T
timeout 200 build/tests/test_attention --gtest_filter='AttentionCuda.Backward*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error" | head -40
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
