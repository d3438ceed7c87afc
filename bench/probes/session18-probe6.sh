#!/usr/bin/env bash
# Session 18, sixth probe (H100): where the warpgroup backward's dK/dV and dQ passes spend their time (Nsight
# Compute sections: warp states, scheduler, compute workload, instruction mix, memory workload), S 4096, f16.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 300 ncu --kernel-name regex:attn_bwd_wg --launch-skip 2 --launch-count 2 --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis --section SpeedOfLight \
  build/tools/kf-bench --backend cuda --no-unfused --reps 1 --dtypes f16 --ops '^attention_backward$' --cases '^b4_h32_s4096_d128$' 2>&1 | grep -vE "^==PROF==|^\s*-+\s*$" | sed -E 's/\(kf::hal::cuda::[^)]*\)//' | grep -vE "^\s*$" | cut -c1-160
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
